"""PostgreSQL backend (scale-out): several processes on several machines share one database.

Same lanes model as the SQLite backend. What changes with many processes:

- Claims lock lane rows with ``FOR UPDATE SKIP LOCKED`` and lease them (``lease_owner``,
  with ``due_at`` moved to the lease's expiry): two workers never lease one lane at once,
  and a crashed worker's lanes come back when the lease expires.
- Every transaction that reads and then rewrites a task's configs, lanes or sequence
  number first takes the task's transaction-scoped advisory lock. That keeps the per-task
  config cap, the per-task ``seq`` and each lane's head right across processes, including
  when the lane row does not exist yet (a row lock could not cover that).
- "Now" is the database server's clock, read in the statements that need it (no extra
  round trip), unless the caller passes ``now``: replicas on hosts whose clocks disagree
  still agree on which lanes are due and whose lease is live, so a replica whose clock
  runs ahead never takes a live lease over (a second send, out of order). A retry's or
  deferral's ``next_attempt_at`` (computed by the worker's retry policy or breaker) is
  moved onto the database's clock as it is written. Times the application computes and
  compares itself stay on its clock: a config's ``failing_since``, and the cutoffs of
  purges and of idempotency keys (skew there moves a retention by that much).
- Publishes, replays and releases ``NOTIFY`` a channel; a store given a wake-up callback
  (``set_wakeup``) keeps one connection listening on it and calls the callback, so idle
  dispatchers elsewhere start at once instead of at their next poll.
- Schema migrations are versioned (``schema_migrations``) and applied under a session
  advisory lock, so processes starting together migrate one after the other.

A database that is down raises ``StoreUnavailableError``; the pool reconnects by itself
once the server is back, and so does the listening connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

try:
    import asyncpg
except ModuleNotFoundError as exc:  # the core package installs without the extra
    raise ModuleNotFoundError(
        "the PostgreSQL backend needs asyncpg, which the 'postgres' extra installs: "
        "pip install 'a2a-push[postgres]'",
        name="asyncpg",
    ) from exc

from ..database import migrations, queries
from ..database.postgres import UNAVAILABLE_ERRORS, describe_dsn, is_unavailable, pooled_connection
from ..errors import (
    StoreBusyError,
    StoreClosedError,
    StoreUnavailableError,
    StoreUnusableError,
)
from .base import (
    Delivery,
    DeliveryFilter,
    StoreOptions,
)
from .rows import LEASED_UNTIL
from .secrets import SecretBox
from .sqlstore import SQLStore, Tx

T = TypeVar("T")

__all__ = [
    "NOTIFY_CHANNEL",
    "PostgresPoolOptions",
    "PostgresStore",
]

NOTIFY_CHANNEL = "a2a_push_work"
"""The channel publishes, replays and releases notify; the payload is the schema name."""

# Connections show as these in pg_stat_activity (with ":<schema>" when one is set).
APPLICATION_NAME = "a2a-push"
LISTENER_APPLICATION_NAME = "a2a-push-listener"

_Q = queries("postgres")
# lock_tasks, writing the outcomes' attempts in the same statement (see record_attempts).
_LOCK_TASKS_RECORDING_ATTEMPTS = _Q["record_attempts"] + "\n" + _Q["lock_tasks"]
# Advisory lock classes (the first key of the two-key form), so these locks never collide
# with another application's: "A2PT" for tasks, "A2PM" for migrations.
_LOCK_TASK = 0x41325054
_LOCK_MIGRATIONS = 0x4132504D
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_LISTEN_RETRY_FIRST = 0.1  # seconds; doubles up to the max while the server is away
_LISTEN_RETRY_MAX = 2.0
# SQLSTATEs that say "try again": serialization failure, deadlock, lock not available,
# query canceled (a statement_timeout or lock_timeout).
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57014"})

log = logging.getLogger("a2a_push.store.postgres")


@dataclass(frozen=True, slots=True)
class PostgresPoolOptions:
    """Connection pool sizes and timeouts (seconds)."""

    min_size: int = 1
    # Transactions are short; more connections than this mostly add lock contention.
    max_size: int = 10
    connect_timeout: float = 5.0
    # Any one statement; long enough for a lock wait behind a busy transaction.
    command_timeout: float = 30.0
    close_timeout: float = 5.0
    # How often the idle listening connection is probed: a peer that vanished without
    # closing the socket (a network drop) is otherwise never noticed.
    listen_check_interval: float = 10.0

    def __post_init__(self) -> None:
        if self.min_size < 0 or self.max_size < 1 or self.min_size > self.max_size:
            raise ValueError("pool sizes: need 0 <= min_size <= max_size and max_size >= 1")


class PostgresStore(SQLStore):
    """Config store and outbox in PostgreSQL, shared by any number of processes.

    ``dsn``: ``postgresql://user:password@host:port/database`` (or ``postgres://``).
    ``schema``: keep the tables in this schema (created if missing) instead of the
    connection's default ``search_path``; lower-case letters, digits and ``_``.
    ``migrate=False`` (for tools that inspect an existing outbox): create and change
    nothing; ``open()`` raises ``StoreUnusableError`` where there is no outbox, or one
    older than this version.
    """

    def __init__(
        self,
        dsn: str,
        options: StoreOptions | None = None,
        *,
        schema: str | None = None,
        pool: PostgresPoolOptions | None = None,
        migrate: bool = True,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(
                f"schema: {schema!r} is not a plain schema name "
                "(lower-case letters, digits and _, at most 63, not starting with a digit)"
            )
        self.options = options or StoreOptions()
        self.dsn = dsn
        self.schema = schema
        self.pool_options = pool or PostgresPoolOptions()
        self.migrate = migrate
        self._where = describe_dsn(dsn)
        self._box = SecretBox(self.options.encryption_keys)
        self._pool: Any = None  # asyncpg.Pool
        self._opening = asyncio.Lock()
        self._closed = False
        self._wakeup: Callable[[], None] | None = None
        self._listener: asyncio.Task[None] | None = None
        # Notifications from stores on other schemas of the same database are not ours.
        self._notify_payload = schema or ""
        # One query without parameters (the simple protocol runs both statements in one
        # round trip): the channel is a constant and the payload a schema name checked
        # against _SCHEMA_NAME, so both are safe as literals.
        self._notify_and_commit = (
            f"SELECT pg_notify('{NOTIFY_CHANNEL}', '{self._notify_payload}'); COMMIT;"
        )
        suffix = f":{schema}" if schema else ""
        self._application_name = APPLICATION_NAME + suffix
        self._listener_application_name = LISTENER_APPLICATION_NAME + suffix

    # ---- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        async with self._opening:
            if self._closed:
                raise StoreClosedError("the PostgreSQL store was closed")
            if self._pool is not None:
                return
            opts = self.pool_options
            settings = {"application_name": self._application_name}
            if self.schema is not None:
                settings["search_path"] = self.schema
            try:
                pool = await asyncpg.create_pool(
                    self.dsn,
                    min_size=opts.min_size,
                    max_size=opts.max_size,
                    timeout=opts.connect_timeout,
                    command_timeout=opts.command_timeout,
                    server_settings=settings,
                )
            except Exception as exc:
                if is_unavailable(exc):
                    raise self._unavailable(exc) from exc
                if isinstance(exc, asyncpg.PostgresError):
                    # Not an outage: no such database, role or password. Retrying
                    # won't help.
                    raise StoreUnusableError(
                        f"cannot use PostgreSQL at {self._where}: {exc}; check the DSN"
                    ) from exc
                raise
            try:
                if self.migrate:
                    await self._migrate(pool)
                else:
                    await self._check_schema(pool)
            except BaseException:
                pool.terminate()
                raise
            self._pool = pool
            if self._wakeup is not None:
                self._start_listener()

    async def _check_schema(self, pool: Any) -> None:
        """For ``migrate=False``: an outbox of this version is there (nothing is changed)."""
        where = f"schema {self.schema!r} of {self._where}" if self.schema else self._where
        try:
            async with pool.acquire() as conn:
                if await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
                    raise StoreUnusableError(
                        f"no a2a-push outbox in {where}; pass the database (and "
                        "search_path) your gateway uses"
                    )
                applied = {r["version"] for r in await conn.fetch(_Q["applied_migrations"])}
        except Exception as exc:
            if is_unavailable(exc):
                raise self._unavailable(exc) from exc
            raise
        missing = [v for v, _ in migrations("postgres") if v not in applied]
        if missing:
            raise StoreUnusableError(
                f"the outbox in {where} is older than this a2a-push (migration "
                f"{missing[0]:04d} not applied): start the gateway once to upgrade it"
            )

    async def _migrate(self, pool: Any) -> None:
        """Apply the migrations this database lacks, one process at a time."""
        lock = (_LOCK_MIGRATIONS, self.schema or "")
        try:
            async with pool.acquire() as conn:
                await conn.execute(_Q["lock_migrations"], *lock)
                try:
                    if self.schema is not None:
                        # The name is validated (_SCHEMA_NAME): safe to quote and inline.
                        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                    await conn.execute(_Q["create_migrations_table"])
                    applied = {r["version"] for r in await conn.fetch(_Q["applied_migrations"])}
                    for version, script in migrations("postgres"):
                        if version in applied:
                            continue
                        async with conn.transaction():
                            await conn.execute(script)
                            await conn.execute(_Q["record_migration"], version)
                        log.info("applied PostgreSQL schema migration %04d", version)
                finally:
                    if not conn.is_closed():
                        await conn.execute(_Q["unlock_migrations"], *lock)
        except Exception as exc:
            if is_unavailable(exc):
                raise self._unavailable(exc) from exc
            raise

    @property
    def location(self) -> str:
        return f"PostgreSQL at {self._where}"

    @property
    def command_database(self) -> str | None:
        from . import shown_database

        return shown_database(self.dsn)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.pool_options.close_timeout)
            except UNAVAILABLE_ERRORS:  # TimeoutError (an OSError) included
                # Connections still busy or a server that is gone: drop them.
                pool.terminate()

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever any process publishes, replays or releases work
        (``LISTEN`` on ``NOTIFY_CHANNEL`` over a dedicated connection, reconnected if it
        drops), and once after each (re)connection, since notifications sent while
        nobody listened are lost. None unregisters the callback (the connection stays
        until ``close()``)."""
        self._wakeup = callback
        if callback is not None and self._pool is not None and not self._closed:
            self._start_listener()

    # ---- connections -----------------------------------------------------------------

    def _require_pool(self) -> Any:
        if self._closed:
            raise StoreClosedError("the PostgreSQL store was closed")
        if self._pool is None:
            raise StoreClosedError("the PostgreSQL store is not open (call open() first)")
        return self._pool

    @contextlib.asynccontextmanager
    async def _connection(self, *, transaction: bool = False) -> AsyncIterator[Any]:
        """A pooled connection (in a transaction if asked), with connection failures
        turned into ``StoreUnavailableError`` and "try again" answers (a deadlock, a lock
        or statement timeout, a serialization failure) into ``StoreBusyError``."""
        try:
            async with pooled_connection(
                self._require_pool(), self._unavailable, transaction=transaction
            ) as conn:
                yield conn
        except asyncpg.PostgresError as exc:
            raise busy_error(exc, self._where) or exc from None

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        reason = str(exc) or type(exc).__name__
        return StoreUnavailableError(
            f"PostgreSQL at {self._where} is unavailable ({reason}); check that the server "
            "is running and reachable with the configured DSN. The store reconnects by "
            "itself: retry once the database is back"
        )

    # ---- wake-ups --------------------------------------------------------------------

    def _start_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="a2a-push-postgres-listener"
            )

    async def _listen(self) -> None:
        """Keep one connection listening; reconnect with backoff whenever it is lost."""
        delay = _LISTEN_RETRY_FIRST
        while not self._closed:
            try:
                await self._listen_until_lost()
                delay = _LISTEN_RETRY_FIRST  # it was up: try again promptly
                log.warning(
                    "lost the PostgreSQL connection listening for work at %s; reconnecting",
                    self._where,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "cannot listen for work notifications at %s (%s); retrying in %.1f s",
                    self._where,
                    exc,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LISTEN_RETRY_MAX)

    async def _listen_until_lost(self) -> None:
        opts = self.pool_options
        lost = asyncio.Event()
        conn = await asyncpg.connect(
            self.dsn,
            timeout=opts.connect_timeout,
            command_timeout=opts.command_timeout,
            server_settings={"application_name": self._listener_application_name},
        )
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(NOTIFY_CHANNEL, self._on_notification)
            self._wake()  # anything published while nobody was listening
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), opts.listen_check_interval)
                if not lost.is_set():
                    await conn.execute(_Q["ping"])
        finally:
            conn.terminate()

    def _on_notification(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload == self._notify_payload:
            self._wake()

    def _wake(self) -> None:
        callback = self._wakeup
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("the wake-up callback failed")

    # ---- the algorithm's transactions ---------------------------------------------------

    async def _transaction(self, op: Callable[[Tx], Awaitable[T]], *, sync: bool = True) -> T:
        # Begun by hand, so that a bookkeeping transaction (claims, outcomes, releases,
        # purges) is begun and told not to wait for the WAL flush at commit in one round
        # trip: a database server that crashes may lose the last fraction of a second of
        # it, and then a webhook goes again (the receiver deduplicates it), as SQLite's
        # bookkeeping commits without an fsync. A publish always waits for the flush. A
        # transaction left open by an error is rolled back when the pool takes the
        # connection back.
        async with self._connection() as conn:
            self.round_trips += 2  # BEGIN, COMMIT
            await conn.execute(_Q["begin"] if sync else _Q["begin_without_flush"])
            tx = _PostgresTx(conn, self)
            result = await op(tx)
            if tx.notified:
                # Sent with the commit (delivered once it is), in its round trip.
                await conn.execute(self._notify_and_commit)
            else:
                await conn.execute(_Q["commit"])
            return result

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        self.round_trips += 1
        async with self._connection() as conn:
            return list(await conn.fetch(_Q[query], *args))

    def _array(self, values: Sequence[str]) -> Any:
        return list(values)

    # Every statement is a round trip: outcomes that arrive together share a transaction.
    _outcome_batches = True

    def _stats_now(self, now: float | None) -> float | None:
        return now  # None: the database server's clock, read in the statement

    # ---- what stays PostgreSQL's own ---------------------------------------------------

    async def claim_due(
        self,
        limit: int,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
        per_endpoint: int | None = None,
        exclude_endpoints: Collection[str] = (),
    ) -> list[Delivery]:
        """Many workers: candidates are locked with SKIP LOCKED, then ranked per endpoint
        (see the claim_lanes query), in rounds while a full window may hide endpoints."""
        cap = per_endpoint or limit
        excluded = set(exclude_endpoints)

        async def op(tx: Tx) -> list[Any]:
            # None until the first round reads the database server's clock; every later
            # round and every lease of this claim goes by that one time.
            at = now
            claimed: list[Any] = []
            taken: Counter[str] = Counter()  # lanes taken per endpoint
            while True:
                want = limit - len(claimed)
                before = len(claimed)
                rows = await tx.fetch("claim_lanes", at, sorted(excluded), cap, want)
                if not rows:
                    break
                at = float(rows[0]["now"])
                config_keys: list[str] = []
                task_ids: list[str] = []
                for row in rows:
                    if not self._is_pending(row):
                        await self._repair_lane(tx, row, at)
                        continue
                    claimed.append(row)
                    taken[row["lane_endpoint"]] += 1
                    config_keys.append(row["lane_config_key"])
                    task_ids.append(row["lane_task_id"])
                if config_keys:
                    await tx.execute(
                        "lease_lanes", at + lease_seconds, worker_id, config_keys, task_ids
                    )
                # The ranked window was full: a few backlogged endpoints may have filled
                # it and hidden other endpoints' due lanes. Look past every endpoint that
                # got lanes (so none exceeds its cap), while that finds more.
                # Each further round takes at least one lane (or stops), so a claim runs at
                # most ``limit`` rounds.
                if rows[0]["window_size"] < 4 * want or len(claimed) >= limit:
                    break
                if len(claimed) == before or set(taken) <= excluded:
                    break
                excluded.update(taken)
            return claimed

        return [self._claimed_from_row(r) for r in await self._transaction(op, sync=False)]

    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]:
        conditions = (
            ("state = ${}", flt.state.value if flt.state is not None else None),
            ("task_id = ${}", flt.task_id),
            ("config_key = ${}", flt.config_key),
            ("endpoint = ${}", flt.endpoint),
            ("created_at >= ${}", flt.created_after),
            ("created_at < ${}", flt.created_before),
            ("id > ${}", flt.after_id),
        )
        clauses = ["TRUE"]
        params: list[object] = []
        for clause, value in conditions:
            if value is not None:
                params.append(value)
                clauses.append(clause.format(len(params)))
        params.append(flt.limit)
        # Only fixed clause strings are joined; every value is a bound parameter.
        sql = (
            f"SELECT d.*, {LEASED_UNTIL} FROM deliveries d WHERE {' AND '.join(clauses)} "
            f"ORDER BY id LIMIT ${len(params)}"
        )
        self.round_trips += 1
        async with self._connection() as conn:
            rows = await conn.fetch(sql, *params)
        return [self._delivery_from_row(r) for r in rows]

    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        """On this process's clock, for its sleep: the lanes' due times are on the
        database server's, so the query answers how far ahead the earliest one is. A
        process whose clock is off then neither claims in a loop before the lane is due
        (clock ahead) nor oversleeps it (clock behind)."""
        self.round_trips += 1
        async with self._connection() as conn:
            value = await conn.fetchval(_Q["next_due_at"], sorted(exclude_endpoints))
        return time.time() + float(value) if value is not None else None


class _PostgresTx:
    """A transaction on a pooled connection (see ``sqlstore.Tx``)."""

    __slots__ = ("_conn", "_store", "notified")
    fuses_statements = True

    def __init__(self, conn: Any, store: PostgresStore) -> None:
        self._conn = conn
        self._store = store  # counts the round trips
        self.notified = False

    async def lock_tasks(
        self,
        task_ids: Sequence[str],
        now: float | None = None,
        attempts: Sequence[Sequence[Any]] = (),
    ) -> float:
        """The tasks' transaction-scoped advisory locks; then the transaction's time:
        ``now``, or else the database server's clock once every lock is held (in the same
        statement: no extra round trip). Leases and due times written with it agree with
        every other replica's claims, whatever the clock of this host says. The
        ``attempts`` are written by the same statement, as one array per column."""
        self._store.round_trips += 1
        if attempts:
            columns = [list(column) for column in zip(*attempts, strict=True)]
            at: float = await self._conn.fetchval(
                _LOCK_TASKS_RECORDING_ATTEMPTS, _LOCK_TASK, list(task_ids), now, *columns
            )
        else:
            at = await self._conn.fetchval(_Q["lock_tasks"], _LOCK_TASK, list(task_ids), now)
        return at

    def clock_shift(self, at: float, now: float | None) -> float:
        """How far the database server's clock (``at``, just read) is ahead of this
        process's; 0 with an explicit ``now``."""
        return 0.0 if now is not None else at - time.time()

    async def try_lock_task(self, task_id: str) -> bool:
        self._store.round_trips += 1
        return bool(await self._conn.fetchval(_Q["try_lock_task"], _LOCK_TASK, task_id))

    async def execute(self, query: str, *args: Any) -> int:
        self._store.round_trips += 1
        return _rowcount(await self._conn.execute(_Q[query], *args))

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        self._store.round_trips += 1
        await self._conn.executemany(_Q[query], args)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        self._store.round_trips += 1
        return list(await self._conn.fetch(_Q[query], *args))

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        self._store.round_trips += 1
        return await self._conn.fetchrow(_Q[query], *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        self._store.round_trips += 1
        return await self._conn.fetchval(_Q[query], *args)

    async def lease_next_head(
        self, config_key: str, task_id: str, at: float, until: float, worker: str
    ) -> Any | None:
        # One statement: the lease, and the leased delivery read with its config.
        self._store.round_trips += 1
        return await self._conn.fetchrow(
            _Q["lease_next_head"], config_key, task_id, at, until, worker
        )

    def array(self, values: Sequence[str]) -> Any:
        return list(values)

    def notify(self) -> None:
        self.notified = True


def busy_error(exc: BaseException, where: str) -> StoreBusyError | None:
    """``exc`` as the store's "try again" when its SQLSTATE says so (a deadlock, a lock or
    statement timeout, a serialization failure), else None."""
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate not in _TRANSIENT_SQLSTATES:
        return None
    busy = StoreBusyError(
        f"PostgreSQL at {where} could not do it now ({sqlstate}: {exc}); nothing was "
        "written; try again"
    )
    busy.__cause__ = exc
    return busy


def _rowcount(status: str) -> int:
    """Rows affected, from a command status such as ``UPDATE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
