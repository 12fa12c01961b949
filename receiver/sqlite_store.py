"""The receiver's store in one SQLite file (the default)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from a2a_push.database import (
    SQLiteWriter,
    create_private_file,
    enable_wal,
    migrate_sqlite,
    prepare_writer_connection,
    queries,
)

from .store import (
    FIRST_POSITION,
    FinishedTaskPosition,
    Notification,
    PendingFetch,
    ReceiverStore,
    Subscription,
    SubscriptionPosition,
    TaskEvent,
    TaskSnapshot,
    oldest_first,
    snapshot_from_row,
    subscription_from_row,
    supersedes,
)

T = TypeVar("T")
_PACKAGE: Final = "receiver.sql"


class ReceiverStoreClosedError(RuntimeError):
    """The store was used before ``open()`` or after ``close()``."""


class SQLiteReceiverStore(ReceiverStore):
    """Receiver storage in a SQLite file, written in group-committed batches.

    Writes go through the shared group-commit writer (``a2a_push.database.sqlite_writer``):
    statements run on the event loop, concurrent writes share one transaction. With
    ``synchronous="FULL"`` (default) a batch returns only after the WAL is fsynced, on a
    worker thread, so an acknowledged webhook survives power loss; ``"NORMAL"`` survives
    process crashes only.
    """

    def __init__(
        self, path: str | Path, *, synchronous: Literal["FULL", "NORMAL"] = "FULL"
    ) -> None:
        self.path = Path(path)
        self._synchronous = synchronous
        self._sql = queries("sqlite", _PACKAGE)
        self._conn: sqlite3.Connection | None = None
        self._writer: SQLiteWriter | None = None
        self._closed = False
        self._reader: sqlite3.Connection | None = None

    async def open(self) -> None:
        if self._conn is not None:
            return
        create_private_file(self.path)  # subscriptions and the tasks' results
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        enable_wal(conn)
        conn.execute("PRAGMA busy_timeout = 5000")
        migrate_sqlite(conn, _PACKAGE)
        # The writer never waits for a lock held by another process (another worker) nor
        # checkpoints on the event loop (see a2a_push.database.sqlite_writer).
        prepare_writer_connection(conn)
        self._conn = conn
        reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        reader.row_factory = sqlite3.Row
        reader.execute("PRAGMA busy_timeout = 2000")
        self._reader = reader
        self._writer = SQLiteWriter(
            conn, f"{self.path}-wal", durable=self._synchronous == "FULL", name="receiver-sqlite"
        )
        self._writer.start()

    async def close(self) -> None:
        if self._closed or self._conn is None:
            self._closed = True
            return
        self._closed = True
        if self._writer is not None:
            await self._writer.close()
        if self._reader is not None:
            self._reader.close()
        self._conn.close()

    # ---- plumbing --------------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._closed:
            raise ReceiverStoreClosedError("the receiver store is not open")
        return self._conn

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the next group commit (see ``a2a_push.database.sqlite_writer``)."""
        self._db()
        assert self._writer is not None
        return await self._writer.write(fn)

    def _all(self, name: str, params: Any = ()) -> list[sqlite3.Row]:
        # Reads are point lookups of microseconds: run on the loop, on their own connection
        # (WAL readers never wait for the writer).
        self._db()
        assert self._reader is not None
        return list(self._reader.execute(self._sql[name], params).fetchall())

    # ---- subscriptions ---------------------------------------------------------------

    async def add_subscription(self, sub: Subscription) -> Subscription:
        def op(conn: sqlite3.Connection) -> Subscription:
            row = conn.execute(
                self._sql["active_subscription"], (sub.client_id, sub.agent_url, sub.task_id)
            ).fetchone()
            if row is not None:
                return subscription_from_row(row)
            conn.execute(
                self._sql["insert_subscription"],
                {
                    "id": sub.id,
                    "client_id": sub.client_id,
                    "agent_url": sub.agent_url,
                    "task_id": sub.task_id,
                    "token_digest": sub.token_digest,
                    "created_at": sub.created_at,
                    "confirmed_at": sub.confirmed_at,
                },
            )
            return sub

        return await self._write(op)

    async def confirm_subscription(self, subscription_id: str, *, now: float) -> None:
        await self._write(
            lambda conn: conn.execute(self._sql["confirm_subscription"], (now, subscription_id))
        )

    async def get_subscription(self, subscription_id: str) -> Subscription | None:
        rows = self._all("get_subscription", (subscription_id,))
        return subscription_from_row(rows[0]) if rows else None

    async def subscription_by_token(self, token_digest: str) -> Subscription | None:
        rows = self._all("subscription_by_token", (token_digest,))
        return subscription_from_row(rows[0]) if rows else None

    async def subscriptions_for_task(self, agent_url: str, task_id: str) -> list[Subscription]:
        return [
            subscription_from_row(r)
            for r in self._all("subscriptions_for_task", (agent_url, task_id))
        ]

    async def list_subscriptions(
        self,
        client_id: str,
        *,
        after: SubscriptionPosition | None = None,
        limit: int | None = None,
    ) -> list[Subscription]:
        after_created_at, after_id = after or FIRST_POSITION
        rows = self._all(
            "list_subscriptions",
            {
                "client_id": client_id,
                "after_created_at": after_created_at,
                "after_id": after_id,
                "limit": -1 if limit is None else limit,  # SQLite: a negative limit is none
            },
        )
        return [subscription_from_row(r) for r in rows]

    async def active_subscriptions_to_task(
        self, client_id: str, task_id: str, agent_url: str | None = None
    ) -> list[Subscription]:
        rows = self._all(
            "active_subscriptions_to_task",
            {"client_id": client_id, "task_id": task_id, "agent_url": agent_url},
        )
        return oldest_first(subscription_from_row(r) for r in rows)

    async def delete_subscription(self, subscription_id: str, *, now: float) -> Subscription | None:
        def op(conn: sqlite3.Connection) -> Subscription | None:
            conn.execute(self._sql["delete_subscription"], (now, subscription_id))
            row = conn.execute(self._sql["get_subscription"], (subscription_id,)).fetchone()
            return subscription_from_row(row) if row is not None else None

        return await self._write(op)

    async def remove_subscription(self, subscription_id: str) -> None:
        await self._write(
            lambda conn: conn.execute(self._sql["remove_subscription"], (subscription_id,))
        )

    # ---- webhooks --------------------------------------------------------------------

    async def seen(self, agent_url: str, dedup_key: str) -> bool:
        return bool(self._all("is_seen", (agent_url, dedup_key)))

    async def record(self, n: Notification) -> int | None:
        def op(conn: sqlite3.Connection) -> int | None:
            cur = conn.execute(self._sql["insert_seen"], (n.agent_url, n.dedup_key, n.received_at))
            if cur.rowcount == 0:
                return None
            cur = conn.execute(
                self._sql["insert_notification"],
                (
                    n.agent_url,
                    n.task_id,
                    n.subscription_id,
                    n.dedup_key,
                    n.method,
                    n.kind,
                    n.seq,
                    n.received_at,
                    n.body,
                ),
            )
            return cur.lastrowid

        return await self._write(op)

    async def pending_fetches(self, limit: int = 1000) -> list[PendingFetch]:
        return [
            PendingFetch(r["agent_url"], r["task_id"], r["up_to"], r["since"])
            for r in self._all("pending_fetches", (limit,))
        ]

    async def mark_fetched(self, agent_url: str, task_id: str, up_to: int) -> None:
        await self._write(
            lambda conn: conn.execute(self._sql["mark_fetched"], (agent_url, task_id, up_to))
        )

    async def _purge_batch(self, name: str, before: float, limit: int) -> int:
        return await self._write(
            lambda conn: int(conn.execute(self._sql[name], (before, limit)).rowcount)
        )

    async def _end_finished_batch(
        self, *, before: float, now: float, after: FinishedTaskPosition, limit: int
    ) -> tuple[int, FinishedTaskPosition | None]:
        def op(conn: sqlite3.Connection) -> tuple[int, FinishedTaskPosition | None]:
            rows = conn.execute(
                self._sql["finished_tasks"],
                {
                    "before": before,
                    "after_updated_at": after[0],
                    "after_agent_url": after[1],
                    "after_task_id": after[2],
                    "limit": limit,
                },
            ).fetchall()
            ended = conn.executemany(
                self._sql["end_subscriptions_to_task"],
                [{"now": now, "before": before, "agent_url": r[0], "task_id": r[1]} for r in rows],
            ).rowcount
            last = rows[-1] if len(rows) == limit else None
            return int(ended), None if last is None else (last[2], last[0], last[1])

        return await self._write(op)

    # ---- snapshots and events --------------------------------------------------------

    async def is_final(self, agent_url: str, task_id: str) -> bool:
        rows = self._all("task_version", (agent_url, task_id))
        return bool(rows and rows[0]["final"])

    async def save_snapshot(
        self, snap: TaskSnapshot, *, fetched_up_to: int | None = None
    ) -> TaskEvent | None:
        data = json.dumps(snap.task, separators=(",", ":"))

        def op(conn: sqlite3.Connection) -> TaskEvent | None:
            if fetched_up_to is not None:
                conn.execute(
                    self._sql["mark_fetched"], (snap.agent_url, snap.task_id, fetched_up_to)
                )
            key = {"agent_url": snap.agent_url, "task_id": snap.task_id}
            row = conn.execute(self._sql["current_task"], {**key, "snapshot": data}).fetchone()
            if row is not None and not supersedes(snap, _version(row)):
                return None
            if row is not None and row["unchanged"]:
                conn.execute(self._sql["raise_generation"], {**key, "generation": snap.generation})
                return None
            conn.execute(
                self._sql["upsert_task"],
                {
                    "agent_url": snap.agent_url,
                    "task_id": snap.task_id,
                    "context_id": snap.context_id,
                    "state": snap.state,
                    "final": int(snap.final),
                    "status_timestamp": snap.status_timestamp,
                    "generation": snap.generation,
                    "snapshot": data,
                    "updated_at": snap.updated_at,
                },
            )
            cur = conn.execute(
                self._sql["insert_event"],
                (snap.agent_url, snap.task_id, "task", data, snap.updated_at),
            )
            assert cur.lastrowid is not None
            return TaskEvent(
                cur.lastrowid, snap.agent_url, snap.task_id, "task", snap.task, snap.updated_at
            )

        return await self._write(op)

    async def get_snapshot(self, agent_url: str, task_id: str) -> TaskSnapshot | None:
        rows = self._all("get_task", (agent_url, task_id))
        return snapshot_from_row(rows[0]) if rows else None

    async def snapshots_for_client(
        self, client_id: str, *, context_id: str | None = None, limit: int = 100
    ) -> list[TaskSnapshot]:
        rows = self._all(
            "snapshots_for_client",
            {"client_id": client_id, "context_id": context_id, "limit": limit},
        )
        return [snapshot_from_row(r) for r in rows]

    async def events_for_client(
        self, client_id: str, *, after: int, limit: int = 100
    ) -> list[TaskEvent]:
        rows = self._all(
            "events_for_client", {"client_id": client_id, "after": after, "limit": limit}
        )
        return [
            TaskEvent(
                r["id"],
                r["agent_url"],
                r["task_id"],
                r["kind"],
                json.loads(r["data"]),
                r["created_at"],
            )
            for r in rows
        ]

    async def latest_event_id(self) -> int:
        return int(self._all("latest_event_id")[0][0])


def _version(row: sqlite3.Row) -> TaskSnapshot:
    """Just what ``supersedes`` compares, without decoding the stored task."""
    return TaskSnapshot(
        agent_url="",
        task_id="",
        context_id=None,
        state=None,
        final=bool(row["final"]),
        status_timestamp=row["status_timestamp"],
        generation=row["generation"],
        task={},
        updated_at=0.0,
    )
