"""SQLite backend (the embedded default): WAL, group commit, fsync off the event loop.

All writes (publishes, claims, outcomes) go through the group-commit writer of
``a2a_push.database.sqlite_writer``: concurrent writes share one transaction, run on the
event loop, and the fsync of the WAL that makes a commit durable runs on a worker thread,
awaited only by batches that need it (publishes and config changes; not claims or
outcomes). Checkpoints run on their own connection and thread. Reads use an aiosqlite
connection of their own, each statement run to its end in one call on its thread (see
``_read``): a read sees every write acknowledged before it began.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiosqlite

from ..database import (
    SQLiteWriter,
    create_private_file,
    enable_wal,
    migrate_sqlite,
    prepare_writer_connection,
    queries,
)
from ..errors import StoreBusyError, StoreClosedError
from .base import Delivery, DeliveryFilter, FsyncCounts, StoreOptions
from .rows import LEASED_UNTIL
from .secrets import SecretBox
from .sqlstore import SQLStore, Tx, run_sync

T = TypeVar("T")
_Q = queries("sqlite")
# The writer's page cache, in KiB (SQLite's default is 2 MiB): enough for the hot index
# pages of a large backlog, so claims and outcomes do not read them back from the file.
_CACHE_KIB = 32 * 1024

log = logging.getLogger("a2a_push.store.sqlite")

Synchronous = Literal["FULL", "NORMAL"]


class SQLiteStore(SQLStore):
    """Config store and outbox in one SQLite file.

    ``synchronous="FULL"`` (default) fsyncs every commit, so an acknowledged publish
    survives power loss; ``"NORMAL"`` survives process crashes (kill -9) but may lose the
    last commits on power loss, for more throughput.
    """

    def __init__(
        self,
        path: str | Path,
        options: StoreOptions | None = None,
        *,
        synchronous: Synchronous = "FULL",
    ) -> None:
        if str(path) in ("", ":memory:"):
            raise ValueError(
                f"SQLiteStore({str(path)!r}): give the path of a database file (the outbox "
                "must survive a restart, and WAL mode needs a file); for a store kept in "
                "memory use MemoryStore()"
            )
        self.options = options or StoreOptions()
        self.path = Path(path)
        # Made absolute once, when the file is named: messages name that file even if
        # the working directory changes later, and cost no system call.
        self._location = f"the SQLite file {self.path.resolve()}"
        self._synchronous = synchronous
        self._box = SecretBox(self.options.encryption_keys)
        self._executor: ThreadPoolExecutor | None = None  # connect, close
        self._conn: sqlite3.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._writer: SQLiteWriter | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                "the SQLite store was closed and cannot be opened again: make a new one"
            )
        if self._writer is not None:
            return
        create_private_file(self.path)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="a2a-push-sqlite")
        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._executor, self._connect_writer)
        self._reader = await aiosqlite.connect(self.path, isolation_level=None)
        self._reader.row_factory = aiosqlite.Row
        await self._reader.execute_fetchall("PRAGMA busy_timeout = 5000")
        self._writer = SQLiteWriter(
            self._conn,
            f"{self.path}-wal",
            durable=self._synchronous == "FULL",
            name="a2a-push-sqlite",
        )
        self._writer.start()

    def _connect_writer(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        enable_wal(conn)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate_sqlite(conn)  # with the default synchronous=FULL: the schema is durable
        prepare_writer_connection(conn)
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        return conn

    @property
    def location(self) -> str:
        return self._location

    @property
    def command_database(self) -> str | None:
        return str(self.path)  # as it was given: relative to where the notifier runs

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            await self._writer.close()
        if self._reader is not None:
            await self._reader.close()
        if self._executor is not None:
            conn = self._conn
            if conn is not None:
                # Closing the last connection checkpoints the WAL: off the event loop.
                await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
            self._executor.shutdown(wait=True)

    def _not_open(self) -> str:
        if self._closed:
            return "the SQLite store was closed"
        return "the SQLite store is not open (call open() first)"

    def fsync_counts(self) -> FsyncCounts:
        """The WAL's fsyncs since the store was opened (none under ``NORMAL``)."""
        writer = self._writer
        if writer is None:
            return FsyncCounts()
        return FsyncCounts(
            writer.fsyncs, writer.fsync_seconds, writer.slow_fsyncs, writer.fsync_max_seconds
        )

    def debug_state(self) -> dict[str, object]:
        """Internals, for diagnosing a stuck writer."""
        if self._writer is None:
            return {"writer_running": False}
        return self._writer.debug_state()

    # ---- the writer ------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, sync: bool = True) -> T:
        """Run ``fn`` in the next group-committed transaction.

        ``sync=False`` marks bookkeeping (claims, outcomes, releases) whose loss on power
        failure only means a webhook is sent again: a batch of nothing but such writes
        commits without an fsync even under ``synchronous="FULL"``. Publishes and config
        changes always get the configured durability.
        """
        if self._closed or self._writer is None:
            raise StoreClosedError(self._not_open())
        try:
            return await self._writer.write(fn, sync=sync)
        except sqlite3.OperationalError as exc:
            raise busy_error(exc) or exc from None

    async def _read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        if self._closed or self._reader is None:
            raise StoreClosedError(self._not_open())
        # One call on the reader's thread runs the statement and fetches every row, so
        # the statement ends (and with it its read transaction) before any other read
        # starts. Executing and fetching as two calls would let another coroutine's read
        # run between them, inside this one's transaction: it would see the database as
        # it was when this one began, missing writes acknowledged since (read-your-writes
        # would fail). It is also one thread hand-off per read instead of three.
        try:
            return list(await self._reader.execute_fetchall(sql, params))
        except sqlite3.OperationalError as exc:
            raise busy_error(exc) or exc from None

    async def _transaction(self, op: Callable[[Tx], Awaitable[T]], *, sync: bool = True) -> T:
        def run(conn: sqlite3.Connection) -> T:
            return run_sync(op(_SQLiteTx(conn)))  # type: ignore[arg-type]

        return await self._write(run, sync=sync)

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        return await self._read(_Q[query], args)

    def _array(self, values: Sequence[str]) -> Any:
        return json.dumps(list(values))

    # Outcomes are not gathered into shared ops here, as they are on PostgreSQL: the
    # writer already commits together the ops that arrive together, and B1 measured the
    # gathering's own futures and tasks costing more than the statements it saves.

    # ---- what stays SQLite's own ------------------------------------------------------

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
        """One writer: the due lanes in one query, leased in the same transaction."""
        exclude = json.dumps(sorted(exclude_endpoints))

        async def op(tx: Tx) -> list[Any]:
            at = await tx.lock_tasks((), now)
            rows = await tx.fetch("due_lanes", at, exclude, per_endpoint or limit, limit)
            claimed, leases = [], []
            for row in rows:
                if not self._is_pending(row):
                    await self._repair_lane(tx, row, at)
                    continue
                claimed.append(row)
                leases.append(
                    (at + lease_seconds, worker_id, row["lane_config_key"], row["lane_task_id"])
                )
            await tx.executemany("lease_lane", leases)
            return claimed

        return [self._claimed_from_row(r) for r in await self._transaction(op, sync=False)]

    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]:
        conditions = (
            ("state = ?", flt.state.value if flt.state is not None else None),
            ("task_id = ?", flt.task_id),
            # A config belongs to one task: a listing by config walks that task's index
            # entries (there is no index by config; a deleted config's are scanned for).
            ("task_id = ?", await self._task_of_config(flt) if flt.task_id is None else None),
            ("config_key = ?", flt.config_key),
            ("endpoint = ?", flt.endpoint),
            ("created_at >= ?", flt.created_after),
            ("created_at < ?", flt.created_before),
            ("id > ?", flt.after_id),
        )
        clauses = ["1 = 1"] + [c for c, value in conditions if value is not None]
        params: list[object] = [value for _, value in conditions if value is not None]
        # Only fixed clause strings are joined; every value is a bound parameter.
        sql = (
            f"SELECT d.*, {LEASED_UNTIL} FROM deliveries d WHERE {' AND '.join(clauses)} "
            "ORDER BY id LIMIT ?"
        )
        rows = await self._read(sql, [*params, flt.limit])
        return [self._delivery_from_row(r) for r in rows]

    async def _task_of_config(self, flt: DeliveryFilter) -> str | None:
        if flt.config_key is None:
            return None
        row = await self._fetchrow("config_task", flt.config_key)
        return str(row[0]) if row is not None else None

    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        row = await self._fetchrow("next_due_at", json.dumps(sorted(exclude_endpoints)))
        value = row[0] if row is not None else None
        return float(value) if value is not None else None


def busy_error(exc: sqlite3.OperationalError) -> StoreBusyError | None:
    """A locked or busy file (another process holds it past the busy timeout) as the
    store's "try again"; not "no such table" or a read-only database, which would fail
    the same way every time."""
    text = str(exc).lower()
    if "lock" in text or "busy" in text:
        busy = StoreBusyError(f"the SQLite file is busy ({exc}); nothing was written; try again")
        busy.__cause__ = exc
        return busy
    return None


class _SQLiteTx:
    """A transaction on the SQLite writer's connection (see ``sqlstore.Tx``): a single
    writer, so locks are not needed and the transaction's time is this process's."""

    __slots__ = ("_conn",)
    fuses_statements = False  # statements cost no round trip here

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def lock_tasks(
        self,
        task_ids: Sequence[str],
        now: float | None = None,
        attempts: Sequence[Sequence[Any]] = (),
    ) -> float:
        if attempts:
            self._conn.executemany(_Q["insert_attempt"], attempts)
        return time.time() if now is None else now

    def clock_shift(self, at: float, now: float | None) -> float:
        return 0.0

    async def try_lock_task(self, task_id: str) -> bool:
        return True

    async def execute(self, query: str, *args: Any) -> int:
        return self._conn.execute(_Q[query], args).rowcount

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None:
        self._conn.executemany(_Q[query], args)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        return self._conn.execute(_Q[query], args).fetchall()

    async def fetchrow(self, query: str, *args: Any) -> Any | None:
        return self._conn.execute(_Q[query], args).fetchone()

    async def fetchval(self, query: str, *args: Any) -> Any:
        row = self._conn.execute(_Q[query], args).fetchone()
        return None if row is None else row[0]

    async def lease_next_head(
        self, config_key: str, task_id: str, at: float, until: float, worker: str
    ) -> Any | None:
        # Two statements, no round trips: the head read with its config, then leased.
        row = self._conn.execute(_Q["next_head"], (config_key, task_id)).fetchone()
        if row is None or row["next_attempt_at"] > at:
            return None
        lease = (config_key, task_id, row["id"], until, worker)
        return row if self._conn.execute(_Q["lease_head"], lease).rowcount else None

    def array(self, values: Sequence[str]) -> Any:
        return json.dumps(list(values))

    def notify(self) -> None:
        return None  # one process: its own dispatcher is woken by the notifier
