"""The receiver's store in PostgreSQL: several receiver replicas behind one load balancer
share it. A webhook retried to another replica is still deduplicated (one ``seen`` table),
and every replica's SSE streams hear about every stored snapshot (``LISTEN/NOTIFY``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from a2a_push.database import migrate_postgres, queries
from a2a_push.database.postgres import is_unavailable, pooled_connection
from a2a_push.errors import StoreUnavailableError, StoreUnusableError

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

log = logging.getLogger(__name__)

T = TypeVar("T")
EVENTS_CHANNEL: Final = "a2a_receiver_events"
_PACKAGE: Final = "receiver.sql"
_LOCK_MIGRATIONS: Final = 0x41325252  # "A2RR"
_LOCK_EVENTS: Final = 0x41325245  # "A2RE": event ids commit in id order
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresReceiverStore(ReceiverStore):
    """Receiver storage in PostgreSQL (``postgresql://user@host/db``)."""

    def __init__(self, dsn: str, *, schema: str | None = None, max_connections: int = 10) -> None:
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema: {schema!r} is not a plain schema name")
        self.dsn = dsn
        self.schema = schema
        self._max = max_connections
        self._sql = queries("postgres", _PACKAGE)
        self._pool: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._on_event: Callable[[], None] | None = None

    def set_event_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever any replica stores a snapshot."""
        self._on_event = callback

    async def open(self) -> None:
        import asyncpg

        settings = {"search_path": self.schema} if self.schema else {}
        settings["application_name"] = "a2a-push-receiver"
        pool = None
        try:
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self._max,
                server_settings=settings,
                timeout=5,
                command_timeout=30,
            )
            async with pool.acquire() as conn:
                await migrate_postgres(
                    conn,
                    _PACKAGE,
                    table="receiver_schema_migrations",
                    lock=_LOCK_MIGRATIONS,
                    schema=self.schema,
                )
        except BaseException as exc:
            if pool is not None:
                pool.terminate()
            if is_unavailable(exc):
                raise _unreachable(exc, self.dsn) from exc
            if isinstance(exc, asyncpg.PostgresError):
                # The server answered and refused (no such database or role, a wrong
                # password, no right to create the tables): retrying will not help.
                raise _unusable(exc, self.dsn) from exc
            raise
        self._pool = pool
        self._listener = asyncio.create_task(self._listen(), name="receiver-pg-listen")

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _listen(self) -> None:
        """Keep one connection listening; reconnect after the server restarts."""
        import asyncpg

        delay = 0.1
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
            except Exception:  # any failure to connect: try again, backing off
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.1
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            try:
                await conn.add_listener(EVENTS_CHANNEL, self._notified)
                # Snapshots stored while we were away: wake the streams to re-read.
                self._notified()
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), 10)
                    if not lost.is_set():
                        # Notice a silent network drop (bounded: a dead peer never answers).
                        await conn.execute("SELECT 1", timeout=10)
            except Exception as exc:  # the listener must outlive any connection failure
                log.debug("receiver listener: reconnecting after %s", exc)
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()

    def _notified(self, *_args: object) -> None:
        if self._on_event is not None:
            self._on_event()

    async def _run(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        if self._pool is None:
            raise StoreUnavailableError("the receiver store is not open")
        async with pooled_connection(self._pool, _unreachable) as conn:
            return await fn(conn)

    async def _fetch(self, name: str, *args: Any) -> list[Any]:
        return await self._run(lambda conn: conn.fetch(self._sql[name], *args))

    # ---- subscriptions ---------------------------------------------------------------

    async def add_subscription(self, sub: Subscription) -> Subscription:
        async def op(conn: Any) -> Subscription:
            # The active one that blocked the insert may be deleted before it is read
            # back: then the insert goes through on the next turn.
            for _ in range(3):
                inserted = await conn.fetchval(
                    self._sql["insert_subscription"],
                    sub.id,
                    sub.client_id,
                    sub.agent_url,
                    sub.task_id,
                    sub.token_digest,
                    sub.created_at,
                    sub.confirmed_at,
                )
                if inserted is not None:
                    return sub
                row = await conn.fetchrow(
                    self._sql["active_subscription"], sub.client_id, sub.agent_url, sub.task_id
                )
                if row is not None:
                    return subscription_from_row(row)
            raise StoreUnavailableError("the subscription is being changed concurrently; retry")

        return await self._run(op)

    async def confirm_subscription(self, subscription_id: str, *, now: float) -> None:
        await self._run(
            lambda conn: conn.execute(self._sql["confirm_subscription"], now, subscription_id)
        )

    async def get_subscription(self, subscription_id: str) -> Subscription | None:
        rows = await self._fetch("get_subscription", subscription_id)
        return subscription_from_row(rows[0]) if rows else None

    async def subscription_by_token(self, token_digest: str) -> Subscription | None:
        rows = await self._fetch("subscription_by_token", token_digest)
        return subscription_from_row(rows[0]) if rows else None

    async def subscriptions_for_task(self, agent_url: str, task_id: str) -> list[Subscription]:
        return [
            subscription_from_row(r)
            for r in await self._fetch("subscriptions_for_task", agent_url, task_id)
        ]

    async def list_subscriptions(
        self,
        client_id: str,
        *,
        after: SubscriptionPosition | None = None,
        limit: int | None = None,
    ) -> list[Subscription]:
        after_created_at, after_id = after or FIRST_POSITION
        rows = await self._fetch("list_subscriptions", client_id, after_created_at, after_id, limit)
        return [subscription_from_row(r) for r in rows]

    async def active_subscriptions_to_task(
        self, client_id: str, task_id: str, agent_url: str | None = None
    ) -> list[Subscription]:
        rows = await self._fetch("active_subscriptions_to_task", client_id, task_id, agent_url)
        return oldest_first(subscription_from_row(r) for r in rows)

    async def delete_subscription(self, subscription_id: str, *, now: float) -> Subscription | None:
        async def op(conn: Any) -> Subscription | None:
            await conn.execute(self._sql["delete_subscription"], now, subscription_id)
            row = await conn.fetchrow(self._sql["get_subscription"], subscription_id)
            return subscription_from_row(row) if row is not None else None

        return await self._run(op)

    async def remove_subscription(self, subscription_id: str) -> None:
        await self._run(
            lambda conn: conn.execute(self._sql["remove_subscription"], subscription_id)
        )

    # ---- webhooks --------------------------------------------------------------------

    async def seen(self, agent_url: str, dedup_key: str) -> bool:
        return bool(await self._fetch("is_seen", agent_url, dedup_key))

    async def record(self, n: Notification) -> int | None:
        async def op(conn: Any) -> int | None:
            async with conn.transaction():
                fresh = await conn.fetchval(
                    self._sql["insert_seen"], n.agent_url, n.dedup_key, n.received_at
                )
                if fresh is None:
                    return None
                return int(
                    await conn.fetchval(
                        self._sql["insert_notification"],
                        n.agent_url,
                        n.task_id,
                        n.subscription_id,
                        n.dedup_key,
                        n.method,
                        n.kind,
                        n.seq,
                        n.received_at,
                        n.body,
                    )
                )

        return await self._run(op)

    async def pending_fetches(self, limit: int = 1000) -> list[PendingFetch]:
        rows = await self._fetch("pending_fetches", limit)
        return [
            PendingFetch(r["agent_url"], r["task_id"], int(r["up_to"]), r["since"]) for r in rows
        ]

    async def mark_fetched(self, agent_url: str, task_id: str, up_to: int) -> None:
        await self._run(
            lambda conn: conn.execute(self._sql["mark_fetched"], agent_url, task_id, up_to)
        )

    async def _purge_batch(self, name: str, before: float, limit: int) -> int:
        status = await self._run(lambda conn: conn.execute(self._sql[name], before, limit))
        return int(status.split()[-1])

    async def _end_finished_batch(
        self, *, before: float, now: float, after: FinishedTaskPosition, limit: int
    ) -> tuple[int, FinishedTaskPosition | None]:
        async def op(conn: Any) -> tuple[int, FinishedTaskPosition | None]:
            async with conn.transaction():
                rows = await conn.fetch(
                    self._sql["finished_tasks"], before, after[0], after[1], after[2], limit
                )
                if not rows:
                    return 0, None
                status = await conn.execute(
                    self._sql["end_subscriptions_to_tasks"],
                    now,
                    [r["agent_url"] for r in rows],
                    [r["task_id"] for r in rows],
                    before,
                )
            last = rows[-1] if len(rows) == limit else None
            ended = int(status.split()[-1])
            if last is None:
                return ended, None
            return ended, (float(last["updated_at"]), last["agent_url"], last["task_id"])

        return await self._run(op)

    # ---- snapshots and events --------------------------------------------------------

    async def is_final(self, agent_url: str, task_id: str) -> bool:
        rows = await self._fetch("task_version", agent_url, task_id)
        return bool(rows and rows[0]["final"])

    async def save_snapshot(
        self, snap: TaskSnapshot, *, fetched_up_to: int | None = None
    ) -> TaskEvent | None:
        data = json.dumps(snap.task, separators=(",", ":"))

        async def op(conn: Any) -> TaskEvent | None:
            async with conn.transaction():
                if fetched_up_to is not None:
                    await conn.execute(
                        self._sql["mark_fetched"], snap.agent_url, snap.task_id, fetched_up_to
                    )
                # FOR UPDATE locks nothing while the task has no row yet: serialise the
                # task's writers (other replicas too) with an advisory lock first.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
                    snap.agent_url,
                    snap.task_id,
                )
                row = await conn.fetchrow(
                    self._sql["lock_task"], snap.agent_url, snap.task_id, data
                )
                if row is not None and not supersedes(
                    snap,
                    TaskSnapshot(
                        "",
                        "",
                        None,
                        None,
                        bool(row["final"]),
                        row["status_timestamp"],
                        int(row["generation"]),
                        {},
                        0.0,
                    ),
                ):
                    return None
                if row is not None and row["unchanged"]:
                    await conn.execute(
                        self._sql["raise_generation"],
                        snap.agent_url,
                        snap.task_id,
                        snap.generation,
                    )
                    return None
                await conn.execute(
                    self._sql["upsert_task"],
                    snap.agent_url,
                    snap.task_id,
                    snap.context_id,
                    snap.state,
                    snap.final,
                    snap.status_timestamp,
                    snap.generation,
                    data,
                    snap.updated_at,
                )
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_EVENTS)
                event_id = await conn.fetchval(
                    self._sql["insert_event"],
                    snap.agent_url,
                    snap.task_id,
                    "task",
                    data,
                    snap.updated_at,
                )
                await conn.execute("SELECT pg_notify($1, $2)", EVENTS_CHANNEL, str(event_id))
            return TaskEvent(
                int(event_id), snap.agent_url, snap.task_id, "task", snap.task, snap.updated_at
            )

        return await self._run(op)

    async def get_snapshot(self, agent_url: str, task_id: str) -> TaskSnapshot | None:
        rows = await self._fetch("get_task", agent_url, task_id)
        return snapshot_from_row(rows[0]) if rows else None

    async def snapshots_for_client(
        self, client_id: str, *, context_id: str | None = None, limit: int = 100
    ) -> list[TaskSnapshot]:
        rows = await self._fetch("snapshots_for_client", client_id, context_id, limit)
        return [snapshot_from_row(r) for r in rows]

    async def events_for_client(
        self, client_id: str, *, after: int, limit: int = 100
    ) -> list[TaskEvent]:
        rows = await self._fetch("events_for_client", client_id, after, limit)
        return [
            TaskEvent(
                int(r["id"]),
                r["agent_url"],
                r["task_id"],
                r["kind"],
                json.loads(r["data"]),
                r["created_at"],
            )
            for r in rows
        ]

    async def latest_event_id(self) -> int:
        return int((await self._fetch("latest_event_id"))[0][0])


def _unreachable(exc: BaseException, dsn: str | None = None) -> StoreUnavailableError:
    where = f" at {_shown_dsn(dsn)}" if dsn is not None else ""
    return StoreUnavailableError(f"PostgreSQL{where} is not reachable: {exc}")


def _unusable(exc: BaseException, dsn: str) -> StoreUnusableError:
    """What to fix when the server refuses the DSN itself (it is not an outage)."""
    import asyncpg

    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        todo = "create that database (createdb), or fix the database name in the DSN"
    elif isinstance(exc, asyncpg.InvalidPasswordError):
        todo = "fix the password in the DSN"
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        # A role that does not exist, or no pg_hba.conf entry lets it in.
        todo = "fix the user name in the DSN (or create that role), or the server's pg_hba.conf"
    elif isinstance(exc, asyncpg.InsufficientPrivilegeError):
        todo = "grant the role the right to create tables there, or use another role"
    else:
        todo = "check the DSN and the server's settings"
    return StoreUnusableError(
        f"cannot use PostgreSQL at {_shown_dsn(dsn)}: {exc}; {todo} (the DSN is the "
        "database setting: --database, A2A_RECEIVER_DATABASE or the config file)"
    )


def _shown_dsn(dsn: str) -> str:
    """A DSN for messages: ``postgresql://user@host:port/database``, never the password
    (nor the query string, which may carry one)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        port = parts.port or 5432
    except ValueError:
        return "the configured database"
    user = f"{parts.username}@" if parts.username else ""
    database = parts.path.lstrip("/") or parts.username or "postgres"
    return f"{parts.scheme}://{user}{host}:{port}/{database}"
