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
import json
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

try:
    import asyncpg
except ModuleNotFoundError as exc:  # the core package installs without the extra
    raise ModuleNotFoundError(
        "the PostgreSQL backend needs asyncpg, which the 'postgres' extra installs: "
        "pip install 'a2a-push[postgres]'",
        name="asyncpg",
    ) from exc

from ..endpoints import endpoint_of
from ..errors import (
    SecretDecryptionError,
    StoreClosedError,
    StoreUnavailableError,
    StoreUnusableError,
    TooManyConfigsError,
)
from .base import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    InitialDelivery,
    OutboxStats,
    Outcome,
    Renderer,
    Store,
    StoredConfig,
    StoreOptions,
    check_same_version,
    has_config_side_effects,
)
from .paging import check_page_size, decode_page_token, encode_page_token
from .rows import LEASED_UNTIL, RowMapping, corrupt_state_reason
from .secrets import SecretBox
from .sql import migrations, queries

__all__ = [
    "NOTIFY_CHANNEL",
    "UNAVAILABLE_ERRORS",
    "PostgresPoolOptions",
    "PostgresStore",
    "is_unavailable",
]

NOTIFY_CHANNEL = "a2a_push_work"
"""The channel publishes, replays and releases notify; the payload is the schema name."""

# Connections show as these in pg_stat_activity (with ":<schema>" when one is set).
APPLICATION_NAME = "a2a-push"
LISTENER_APPLICATION_NAME = "a2a-push-listener"

_Q = queries("postgres")
# Advisory lock classes (the first key of the two-key form), so these locks never collide
# with another application's: "A2PT" for tasks, "A2PM" for migrations.
_LOCK_TASK = 0x41325054
_LOCK_MIGRATIONS = 0x4132504D
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_LISTEN_RETRY_FIRST = 0.1  # seconds; doubles up to the max while the server is away
_LISTEN_RETRY_MAX = 2.0
_PENDING = DeliveryState.PENDING.value

log = logging.getLogger("a2a_push.store.postgres")

# Errors that mean "the database cannot be reached", as opposed to a bad query or value.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable; TimeoutError (connect or command) is one too
    asyncpg.exceptions.PostgresConnectionError,  # SQLSTATE class 08, connection lost
    asyncpg.exceptions.CannotConnectNowError,  # starting up or shutting down
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means "the database cannot be reached (for now)": one of
    ``UNAVAILABLE_ERRORS``, or SQLSTATE 55000 itself — e.g. a database that does not
    allow connections for now (``ALTER DATABASE … ALLOW_CONNECTIONS false``, during
    maintenance). Not the rest of class 55 (an object in use, a lock not available):
    those are answers about one statement, not an outage."""
    return isinstance(exc, UNAVAILABLE_ERRORS) or (
        type(exc) is asyncpg.exceptions.ObjectNotInPrerequisiteStateError
    )


# What asyncpg raises when a connection is killed under an operation (its protocol
# state machine or the pool's reset on release trips over the closed socket).
_CLIENT_STATE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


@contextlib.asynccontextmanager
async def pooled_connection(
    pool: Any,
    unavailable: Callable[[BaseException], Exception],
    *,
    transaction: bool = False,
) -> AsyncIterator[Any]:
    """A connection from ``pool`` (in a transaction if asked), with connection failures
    raised as ``unavailable(exc)`` (a ``StoreUnavailableError``).

    Released by hand: when the connection dies just after the work committed, the
    pool's reset on release fails, and that failure must not be reported as the work
    failing (callers would dead-letter or redo what is already durable). It is logged.
    """
    try:
        conn = await pool.acquire()
    except Exception as exc:
        if is_unavailable(exc) or isinstance(exc, _CLIENT_STATE_ERRORS):
            raise unavailable(exc) from exc
        raise
    try:
        if transaction:
            async with conn.transaction():
                yield conn
        else:
            yield conn
    except Exception as exc:
        # Whatever failed on a connection that is now closed failed because the
        # connection was lost (asyncpg reports that in several ways). A client-state
        # error on a live connection is a bug (misuse), raised as itself.
        if is_unavailable(exc) or _lost(conn):
            raise unavailable(exc) from exc
        raise
    finally:
        try:
            await pool.release(conn)
        except Exception as exc:  # the pool has closed the connection; nothing to undo
            log.warning("releasing a PostgreSQL connection failed (%s); it was dropped", exc)


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


class PostgresStore(RowMapping, Store):
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
        turned into ``StoreUnavailableError``."""
        async with pooled_connection(
            self._require_pool(), self._unavailable, transaction=transaction
        ) as conn:
            yield conn

    def _transaction(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._connection(transaction=True)

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        reason = str(exc) or type(exc).__name__
        return StoreUnavailableError(
            f"PostgreSQL at {self._where} is unavailable ({reason}); check that the server "
            "is running and reachable with the configured DSN. The store reconnects by "
            "itself: retry once the database is back"
        )

    async def _notify(self, conn: Any) -> None:
        # Sent at commit, so listeners never wake before the work is visible.
        await conn.execute(_Q["notify"], NOTIFY_CHANNEL, self._notify_payload)

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

    # ---- configs ---------------------------------------------------------------------

    async def put_config(
        self, config: StoredConfig, *, initial: InitialDelivery | None = None
    ) -> StoredConfig:
        sealed = self._box.seal(config.token, config.auth_credentials)
        cap = self.options.max_configs_per_task
        endpoint = endpoint_of(config.url)
        async with self._transaction() as conn:
            # Held until commit: a concurrent put for the same task (another process)
            # counts after this one's insert, so the cap holds; and a publish of the task
            # waits for it, so it is ordered entirely before or after ``initial``.
            at = await _lock_tasks(conn, [config.task_id], None if initial is None else initial.now)
            found = await conn.fetchrow(
                _Q["find_config_key"], config.task_id, config.owner, config.id
            )
            if found is None:
                count = await conn.fetchval(_Q["count_task_configs"], config.task_id)
                if count >= cap:
                    raise TooManyConfigsError(config.task_id, cap)
                stored = config
                await conn.execute(
                    _Q["insert_config"],
                    config.key,
                    config.id,
                    config.task_id,
                    config.owner,
                    config.tenant,
                    config.url,
                    endpoint,
                    config.auth_scheme,
                    sealed,
                    config.protocol_version,
                    config.enabled,
                    config.disabled_reason,
                    config.failing_since,
                    config.created_at,
                )
            else:
                check_same_version(config, found["protocol_version"])
                key = found["key"]
                await conn.execute(
                    _Q["replace_config"],
                    key,
                    config.tenant,
                    config.url,
                    endpoint,
                    config.auth_scheme,
                    sealed,
                    config.protocol_version,
                    config.enabled,
                    config.disabled_reason,
                )
                await conn.execute(_Q["set_lanes_endpoint"], endpoint, key)
                if found["url"] != config.url:
                    await conn.execute(_Q["retry_config_afresh"], key, at)
                    await conn.execute(_Q["config_lanes_due_now"], key, at)
                stored = config.with_changes(
                    key=key, created_at=found["created_at"], failing_since=None
                )
            if initial is not None:
                _, ids = await _enqueue_locked(
                    conn,
                    stored.task_id,
                    initial.kind,
                    initial.render,
                    initial.new_id,
                    only_config_key=stored.key,
                    at=at,
                    final=initial.final,
                )
                if ids:
                    await self._notify(conn)
            return stored

    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(_Q["config_by_ids"], task_id, owner, config_id)
        return self._config_from_row(row) if row is not None else None

    async def get_config_by_key(self, key: str) -> StoredConfig | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(_Q["config_by_key"], key)
        return self._config_from_row(row) if row is not None else None

    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        check_page_size(page_size)
        after = decode_page_token(page_token) or ""
        async with self._connection() as conn:
            rows = await conn.fetch(_Q["configs_page"], task_id, owner, after, page_size + 1)
        page = [self._config_from_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return page, encode_page_token(page[-1].id) if more and page else None

    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        async with self._transaction() as conn:
            at = await _lock_tasks(conn, [task_id])
            found = await conn.fetchrow(_Q["find_config_key"], task_id, owner, config_id)
            if found is None:
                return False
            await _dead_letter_config(conn, found["key"], "config deleted", at)
            await conn.execute(_Q["delete_config"], found["key"])
            return True

    async def configs_for_task(self, task_id: str) -> list[StoredConfig]:
        async with self._connection() as conn:
            rows = await conn.fetch(_Q["enabled_task_configs"], task_id)
        return [self._config_from_row(r) for r in rows]

    async def set_config_enabled(self, key: str, enabled: bool, reason: str | None = None) -> bool:
        async with self._transaction() as conn:
            task_id = await conn.fetchval(_Q["config_task"], key)
            if task_id is None:
                return False
            at = await _lock_tasks(conn, [task_id])
            return await _set_enabled(conn, key, enabled, reason, at)

    async def reencrypt_secrets(self, previous_keys: Sequence[str] | None = None) -> int:
        """Re-seal every stored secret with the current primary key.

        ``previous_keys``: the keys the rows are sealed with now (None: in clear), for
        turning encryption on; rotation within ``encryption_keys`` needs no argument.
        """
        old = SecretBox(previous_keys)
        box = self._box
        async with self._transaction() as conn:
            rows = await conn.fetch(_Q["all_config_secrets"])
            updates = []
            for row in rows:
                sealed = row["secrets"]
                try:
                    token, credentials = old.open(sealed)
                except SecretDecryptionError:
                    token, credentials = box.open(sealed)
                updates.append((box.seal(token, credentials), row["key"]))
            await conn.executemany(_Q["set_config_secrets"], updates)
        return len(rows)

    # ---- outbox ----------------------------------------------------------------------

    async def enqueue(
        self,
        task_id: str,
        kind: str,
        render: Renderer,
        *,
        new_id: Callable[[], str],
        only_config_key: str | None = None,
        now: float | None = None,
        idempotency_key: str | None = None,
        idempotency_since: float | None = None,
        final: bool = False,
    ) -> tuple[int, list[str]]:
        since = float("-inf") if idempotency_since is None else idempotency_since
        async with self._transaction() as conn:
            # Publishes of one task take turns (across processes): seq follows commit
            # order, so a lane's FIFO by seq is the order events were accepted in. The
            # event is due from the database's now: claims go by that clock.
            at = await _lock_tasks(conn, [task_id], now)
            if idempotency_key is not None:
                # Under the task's lock: a retry racing the first attempt waits for it.
                row = await conn.fetchrow(_Q["get_idempotency_key"], idempotency_key, since)
                if row is not None:
                    return int(row["seq"]), json.loads(row["ids"])
            seq, ids = await _enqueue_locked(
                conn,
                task_id,
                kind,
                render,
                new_id,
                only_config_key=only_config_key,
                at=at,
                final=final,
            )
            if idempotency_key is not None:
                await conn.execute(
                    _Q["put_idempotency_key"], idempotency_key, seq, json.dumps(ids), at
                )
            if ids:
                await self._notify(conn)
        return seq, ids

    async def purge_final_tasks(self, *, final_before: float, limit: int = 1000) -> int:
        async with self._transaction() as conn:
            rows = await conn.fetch(_Q["final_tasks_to_purge"], final_before, limit)
            candidates = [row["task_id"] for row in rows]
            if not candidates:
                return 0
            # The tasks' locks first, as publishes and registrations take them (then
            # their task_seq row): none is half done, and no deadlock. Checked again
            # under them, in a statement that sees what committed meanwhile.
            await _lock_tasks(conn, candidates)
            rows = await conn.fetch(_Q["forget_tasks_final"], candidates, final_before)
            tasks = [row["task_id"] for row in rows]
            if tasks:
                await conn.execute(_Q["delete_tasks_configs"], tasks)
        return len(tasks)

    async def purge_idempotency_keys(self, *, created_before: float, limit: int = 1000) -> int:
        async with self._transaction() as conn:
            status = await conn.execute(_Q["purge_idempotency_keys"], created_before, limit)
        return int(status.split()[-1])

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
        # None until the first round reads the database server's clock; every later
        # round and every lease of this claim goes by that one time.
        at = now
        cap = per_endpoint or limit
        claimed: list[Delivery] = []
        taken: Counter[str] = Counter()  # lanes taken per endpoint
        excluded = set(exclude_endpoints)
        async with self._transaction() as conn:
            while True:
                want = limit - len(claimed)
                before = len(claimed)
                rows = await conn.fetch(_Q["claim_lanes"], at, sorted(excluded), cap, want)
                if not rows:
                    break
                at = float(rows[0]["now"])
                config_keys: list[str] = []
                task_ids: list[str] = []
                for row in rows:
                    lane = (row["lane_config_key"], row["lane_task_id"])
                    if row["state"] != _PENDING:
                        # A lane whose head is no longer pending: repair it (never
                        # expected). Only if the task is free: a claim must never wait on
                        # a lock while it holds lane rows, or it could deadlock with a
                        # completion.
                        if await conn.fetchval(_Q["try_lock_task"], _LOCK_TASK, lane[1]):
                            # A state that is none of ours: dead, with the reason.
                            await conn.execute(
                                _Q["dead_letter_corrupt_state"],
                                corrupt_state_reason(row["state"]),
                                at,
                                row["id"],
                            )
                            await _advance_lane(conn, *lane)
                        continue
                    claimed.append(self._claimed_from_row(row))
                    taken[row["lane_endpoint"]] += 1
                    config_keys.append(lane[0])
                    task_ids.append(lane[1])
                if config_keys:
                    await conn.execute(
                        _Q["lease_lanes"], at + lease_seconds, worker_id, config_keys, task_ids
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
                excluded |= set(taken)
        return claimed

    async def complete(self, outcomes: Sequence[Outcome], *, now: float | None = None) -> None:
        if not outcomes:
            return
        async with self._transaction() as conn:
            at = await _lock_tasks(conn, [o.task_id for o in outcomes], now)
            shift = _clock_shift(at, now)
            for o in outcomes:
                await _apply_outcome(conn, o, at, shift=shift)

    async def complete_and_claim_next(
        self,
        outcome: Outcome,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
    ) -> Delivery | None:
        async with self._transaction() as conn:
            # The lease runs from the database's now once the lock is held.
            at = await _lock_tasks(conn, [outcome.task_id], now)
            lease = (at, at + lease_seconds, worker_id)
            head_id = await _apply_outcome(
                conn, outcome, at, shift=_clock_shift(at, now), lease_next=lease
            )
            if head_id is None:
                return None
            row = await conn.fetchrow(_Q["delivery_with_config"], head_id)
        return self._claimed_from_row(row)

    async def release(self, delivery_ids: Sequence[str], *, worker_id: str) -> None:
        if not delivery_ids:
            return
        async with self._transaction() as conn:
            status = await conn.execute(_Q["release_lanes"], list(delivery_ids), worker_id)
            if _rowcount(status):
                await self._notify(conn)

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(_Q["delivery_by_id"], delivery_id)
        return self._delivery_from_row(row) if row is not None else None

    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]:
        conditions = (
            ("state = ${}", flt.state.value if flt.state is not None else None),
            ("task_id = ${}", flt.task_id),
            ("config_key = ${}", flt.config_key),
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
        async with self._connection() as conn:
            rows = await conn.fetch(sql, *params)
        return [self._delivery_from_row(r) for r in rows]

    async def replay(self, delivery_ids: Sequence[str], *, now: float | None = None) -> int:
        if not delivery_ids:
            return 0
        ids = list(delivery_ids)
        async with self._transaction() as conn:
            tasks = [r["task_id"] for r in await conn.fetch(_Q["dead_delivery_tasks"], ids)]
            if not tasks:
                return 0
            # Replayed deliveries are due from the database's now (claims go by it).
            at = await _lock_tasks(conn, tasks, now)
            # Re-checked under the locks; only the locked tasks' deliveries are touched.
            rows = await conn.fetch(_Q["replay_deliveries"], at, ids, tasks)
            for config_key, task_id in sorted({(r["config_key"], r["task_id"]) for r in rows}):
                await _advance_lane(conn, config_key, task_id, keep_lease=True)
            if rows:
                await self._notify(conn)
        return len(rows)

    async def purge(self, state: DeliveryState, *, updated_before: float, limit: int = 1000) -> int:
        if state is DeliveryState.PENDING:
            raise ValueError("pending deliveries are never purged")
        async with self._connection() as conn:
            count: int = await conn.fetchval(
                _Q["purge_deliveries"], state.value, updated_before, limit
            )
        return count

    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        """On this process's clock, for its sleep: the lanes' due times are on the
        database server's, so the query answers how far ahead the earliest one is. A
        process whose clock is off then neither claims in a loop before the lane is due
        (clock ahead) nor oversleeps it (clock behind)."""
        async with self._connection() as conn:
            value = await conn.fetchval(_Q["next_due_at"], sorted(exclude_endpoints))
        return time.time() + float(value) if value is not None else None

    async def stats(self, *, now: float | None = None, count_delivered: bool = True) -> OutboxStats:
        async with self._connection() as conn:
            # Due and leased as of ``now``, or else of the database server's clock.
            row = await conn.fetchrow(_Q["stats"], now, count_delivered)
        return OutboxStats(
            pending=row["pending"],
            due=row["due"],
            leased=row["leased"],
            dead=row["dead"],
            delivered=row["delivered"],
            oldest_pending_created_at=row["oldest"],
        )


# ---- helpers run inside a transaction holding the task's lock ------------------------


async def _lock_tasks(conn: Any, task_ids: Sequence[str], now: float | None = None) -> float:
    """Take the tasks' transaction-scoped locks; returns the transaction's time: ``now``,
    or else the database server's clock once every lock is held (in the same statement:
    no extra round trip). Leases and due times written with it agree with every other
    replica's claims, whatever the clock of the host this process runs on says."""
    at: float = await conn.fetchval(_Q["lock_tasks"], _LOCK_TASK, list(task_ids), now)
    return at


def _clock_shift(at: float, now: float | None) -> float:
    """How far the database server's clock (``at``, just read) is ahead of this process's:
    added to the times this process computed (a retry's or deferral's due time) so that
    they are due when meant by the clock claims go by. 0 with an explicit ``now``."""
    return 0.0 if now is not None else at - time.time()


async def _enqueue_locked(
    conn: Any,
    task_id: str,
    kind: str,
    render: Renderer,
    new_id: Callable[[], str],
    *,
    only_config_key: str | None,
    at: float,
    final: bool = False,
) -> tuple[int, list[str]]:
    """Fan an event out to the task's enabled configs (or only ``only_config_key``)."""
    configs = await conn.fetch(_Q["enqueue_targets"], task_id)
    targets = [
        (row["key"], row["protocol_version"], row["endpoint"])
        for row in configs
        if row["enabled"] and (only_config_key is None or row["key"] == only_config_key)
    ]
    if not targets:
        if configs:  # none enabled: no seq used, but the task's end still counts
            await conn.execute(_Q["record_task_final"], task_id, at if final else None)
        return 0, []
    seq: int = await conn.fetchval(_Q["next_task_seq"], task_id, at if final else None)
    bodies: dict[str, bytes] = {}
    rows, lanes, ids = [], [], []
    for key, version, endpoint in targets:
        body = bodies.get(version)
        if body is None:
            body = bodies[version] = render(version)
        delivery_id = new_id()
        ids.append(delivery_id)
        rows.append((delivery_id, key, task_id, seq, kind, body, at))
        lanes.append((key, task_id, delivery_id, at, endpoint))
    await conn.executemany(_Q["insert_delivery"], rows)
    await conn.executemany(_Q["open_lane"], lanes)
    return seq, ids


async def _apply_outcome(
    conn: Any,
    o: Outcome,
    at: float,
    *,
    shift: float = 0.0,
    lease_next: tuple[float, float, str] | None = None,
) -> str | None:
    """Record ``o``; with ``lease_next`` = (now, lease until, worker), also lease the lane's
    next delivery if it is due now and return its id.

    ``at`` is the transaction's time (the database's clock, see ``_lock_tasks``). A retry's
    or deferral's ``o.next_attempt_at`` is on the worker's clock (its retry policy or
    breaker computed it): ``shift`` (see ``_clock_shift``) puts it on the database's, so
    that a pause shorter than the worker's skew is not due at once (a worker behind the
    database would otherwise claim, defer and claim again in a loop)."""
    leased: str | None = None
    status = "UPDATE 0"
    if await _leased_to_another(conn, o):
        pass  # that worker's outcome will count
    elif o.kind == "defer":
        assert o.next_attempt_at is not None
        status = await conn.execute(
            _Q["defer_delivery"], o.next_attempt_at + shift, at, o.delivery_id
        )
    elif o.kind == "retry":
        assert o.next_attempt_at is not None
        status = await conn.execute(
            _Q["retry_delivery"],
            o.attempts,
            o.status,
            o.error,
            o.next_attempt_at + shift,
            at,
            o.delivery_id,
        )
    else:
        state = "delivered" if o.kind == "delivered" else "dead"
        status = await conn.execute(
            _Q["finish_delivery"], state, o.attempts, o.status, o.error, at, o.delivery_id
        )
    if _rowcount(status):
        if lease_next is not None and o.disable_config is None and o.kind != "defer":
            leased = await _advance_lane(
                conn, o.config_key, o.task_id, lease_next=lease_next, now=at
            )
        else:
            await _advance_lane(conn, o.config_key, o.task_id, now=at)
        if o.kind == "dead" and o.disable_config is None:
            await conn.execute(_Q["clear_config_failing_if_idle"], o.config_key)
    if not has_config_side_effects(o):
        return leased
    if o.config_url is not None:
        url = await conn.fetchval(_Q["config_url"], o.config_key)
        if url != o.config_url:
            return leased  # registered again elsewhere since: not about this config now
    if o.config_failing_since is not None:
        await conn.execute(_Q["set_config_failing_since"], o.config_failing_since, o.config_key)
    if o.clear_config_failing:
        await conn.execute(_Q["clear_config_failing"], o.config_key)
    if o.disable_config is not None:
        await _set_enabled(conn, o.config_key, False, o.disable_config, at)
    return leased


async def _leased_to_another(conn: Any, o: Outcome) -> bool:
    """Whether a worker other than ``o.worker_id`` holds the lane's lease now. Locks the
    lane row, so no claim can take the lane over between this check and the outcome."""
    if o.worker_id is None:
        return False
    owner = await conn.fetchval(_Q["lock_lane_lease_owner"], o.config_key, o.task_id)
    return owner is not None and owner != o.worker_id


async def _advance_lane(
    conn: Any,
    config_key: str,
    task_id: str,
    *,
    keep_lease: bool = False,
    lease_next: tuple[float, float, str] | None = None,
    now: float | None = None,
) -> str | None:
    """Point the lane at its lowest-seq pending delivery, or drop it when empty.

    With ``lease_next`` = (now, lease until, worker) and that delivery due now, lease the
    lane to the worker in the same statement and return the delivery's id. Otherwise the
    lane is due at its head's next attempt, but not before ``now``: a lane that keeps
    getting work queues behind the lanes already waiting (round robin between lanes).
    """
    head = await conn.fetchrow(_Q["lane_head"], config_key, task_id)
    if head is None:
        await conn.execute(_Q["delete_lane"], config_key, task_id)
        return None
    if lease_next is not None and head["next_attempt_at"] <= lease_next[0]:
        _, until, worker = lease_next
        status = await conn.execute(
            _Q["lease_lane_head"], head["id"], until, worker, config_key, task_id
        )
        if _rowcount(status):
            return str(head["id"])
    if keep_lease:
        owner = await conn.fetchrow(_Q["lane_lease_owner"], config_key, task_id)
        if owner is not None and owner["lease_owner"] is not None:
            # In flight: the worker's outcome will advance the lane; just fix the head.
            await conn.execute(_Q["set_lane_head_only"], head["id"], config_key, task_id)
            return None
    due = head["next_attempt_at"] if now is None else max(head["next_attempt_at"], now)
    await conn.execute(_Q["set_lane_head"], config_key, task_id, head["id"], due)
    return None


async def _set_enabled(conn: Any, key: str, enabled: bool, reason: str | None, now: float) -> bool:
    status = await conn.execute(_Q["set_config_enabled"], enabled, None if enabled else reason, key)
    changed = bool(_rowcount(status))
    if changed and not enabled:
        await _dead_letter_config(conn, key, f"config disabled: {reason or 'no reason given'}", now)
    return changed


async def _dead_letter_config(conn: Any, key: str, reason: str, now: float) -> None:
    await conn.execute(_Q["dead_letter_config_deliveries"], reason, now, key)
    await conn.execute(_Q["delete_config_lanes"], key)


def _lost(conn: Any) -> bool:
    """Whether a pooled connection has been closed under us."""
    try:
        return bool(conn.is_closed())
    except asyncpg.exceptions.InterfaceError:
        return True  # the pool already took it back: it saw the connection close


def _rowcount(status: str) -> int:
    """Rows affected, from a command status such as ``UPDATE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def describe_dsn(dsn: str) -> str:
    """``host:port/database`` of a DSN, for messages (never the password)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
        database = parts.path.lstrip("/") or parts.username or "postgres"
    except ValueError:
        return "the configured database"
    return f"{host}:{port}/{database}"
