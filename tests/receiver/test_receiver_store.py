"""The receiver store contract (SQLite; PostgreSQL joins with the gateway issue)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from a2a_push.database import migrations
from receiver.sqlite_store import SQLiteReceiverStore
from receiver.store import (
    Notification,
    ReceiverStore,
    Subscription,
    SubscriptionState,
    TaskSnapshot,
)

from ..conftest import postgres_schema, require_postgres

AGENT = "http://agent.test"


def make_store(kind: str, tmp_path: Path) -> ReceiverStore:
    if kind == "sqlite":
        return SQLiteReceiverStore(tmp_path / "r.db", synchronous="NORMAL")
    from receiver.postgres_store import PostgresReceiverStore

    return PostgresReceiverStore(require_postgres(), schema=postgres_schema())


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ReceiverStore]:
    async with make_store(request.param, tmp_path) as s:
        yield s


def sub(
    id: str = "sub_1", client: str = "alice", task: str = "t1", digest: str = "d1"
) -> Subscription:
    return Subscription(
        id=id,
        client_id=client,
        agent_url=AGENT,
        task_id=task,
        token_digest=digest,
        state=SubscriptionState.ACTIVE,
        created_at=1.0,
    )


def note(key: str, task: str = "t1") -> Notification:
    return Notification(
        agent_url=AGENT,
        task_id=task,
        dedup_key=key,
        subscription_id="sub_1",
        method="jwt",
        kind="statusUpdate",
        body=b"{}",
        received_at=100.0,
    )


def snap(
    generation: int, state: str = "TASK_STATE_WORKING", ts: str | None = None, task: str = "t1"
) -> TaskSnapshot:
    return TaskSnapshot(
        agent_url=AGENT,
        task_id=task,
        context_id="ctx",
        state=state,
        final=state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"),
        status_timestamp=ts,
        generation=generation,
        task={"id": task, "contextId": "ctx", "status": {"state": state, "timestamp": ts}},
        updated_at=float(generation),
    )


def at(second: int) -> str:
    """A status timestamp: snapshots that differ only by when they were fetched are one."""
    return f"2026-01-01T00:00:{second:02d}Z"


async def test_adding_the_same_clients_subscription_twice_returns_the_first(
    store: ReceiverStore,
) -> None:
    first = await store.add_subscription(sub("sub_1", digest="a"))
    again = await store.add_subscription(sub("sub_2", digest="b"))
    assert again.id == first.id == "sub_1"
    other = await store.add_subscription(sub("sub_3", client="bob", digest="c"))
    assert other.id == "sub_3"
    assert [s.id for s in await store.subscriptions_for_task(AGENT, "t1")] == ["sub_1", "sub_3"]


async def test_a_subscription_is_confirmed_once_and_every_reader_sees_it(
    store: ReceiverStore,
) -> None:
    first = await store.add_subscription(sub("sub_1", digest="a"))
    assert first.confirmed_at is None
    await store.confirm_subscription("sub_1", now=7.0)
    await store.confirm_subscription("sub_1", now=9.0)  # the first time counts
    found = await store.get_subscription("sub_1")
    assert found is not None and found.confirmed_at == 7.0
    again = await store.add_subscription(sub("sub_2", digest="b"))  # the repeat's view
    assert (again.id, again.confirmed_at) == ("sub_1", 7.0)
    assert "confirmedAt" not in again.to_json()
    # A row stored confirmed (an embedder's, or a test's) keeps it.
    other = await store.add_subscription(
        replace(sub("sub_3", client="bob", digest="c"), confirmed_at=3.0)
    )
    assert (await store.get_subscription(other.id)) == other


async def _old_schema(kind: str, tmp_path: Path) -> ReceiverStore:
    """A store over a database made by the receiver before ``confirmed_at`` (migrations
    0001 and 0002 only), holding one subscription."""
    row = ("sub_old", "alice", AGENT, "t1", "d-old", "active", 1.0)
    old = [(v, script) for v, script in migrations(kind, "receiver.sql") if v <= 2]
    assert [v for v, _ in old] == [1, 2]
    if kind == "sqlite":
        path = tmp_path / "old.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            for version, script in old:
                conn.executescript(script)
                conn.execute(f"PRAGMA user_version = {version}")
            conn.execute(
                "INSERT INTO subscriptions (id, client_id, agent_url, task_id, token_digest, "
                "state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return SQLiteReceiverStore(path, synchronous="NORMAL")
    import asyncpg

    from receiver.postgres_store import PostgresReceiverStore

    dsn, schema = require_postgres(), postgres_schema()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'SET search_path = "{schema}"')
        await conn.execute(
            "CREATE TABLE receiver_schema_migrations "
            "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        for version, script in old:
            await conn.execute(script)
            await conn.execute(
                "INSERT INTO receiver_schema_migrations (version) VALUES ($1)", version
            )
        await conn.execute(
            "INSERT INTO receiver_subscriptions (id, client_id, agent_url, task_id, "
            "token_digest, state, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            *row,
        )
    finally:
        await conn.close()
    return PostgresReceiverStore(dsn, schema=schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_database_from_before_confirmations_is_upgraded_in_place(
    kind: str, tmp_path: Path
) -> None:
    store = await _old_schema(kind, tmp_path)
    async with store:
        kept = await store.get_subscription("sub_old")
        # Not known to be confirmed; being old, a repeat gets it anyway (see app.py).
        assert kept is not None and kept.confirmed_at is None and kept.created_at == 1.0
        assert (await store.add_subscription(sub("sub_new", digest="d-new"))).id == "sub_old"
        await store.confirm_subscription("sub_old", now=5.0)
        confirmed = await store.get_subscription("sub_old")
        assert confirmed is not None and confirmed.confirmed_at == 5.0
    async with make_store_again(store) as reopened:  # the upgrade is applied once
        again = await reopened.get_subscription("sub_old")
        assert again is not None and again.confirmed_at == 5.0


def make_store_again(store: ReceiverStore) -> ReceiverStore:
    """Another store over the same database as ``store``."""
    from receiver.postgres_store import PostgresReceiverStore

    if isinstance(store, SQLiteReceiverStore):
        return SQLiteReceiverStore(store.path, synchronous="NORMAL")
    assert isinstance(store, PostgresReceiverStore)
    return PostgresReceiverStore(store.dsn, schema=store.schema)


async def test_subscription_lookup_by_token_digest_and_deletion(store: ReceiverStore) -> None:
    await store.add_subscription(sub(digest="abc"))
    found = await store.subscription_by_token("abc")
    assert found is not None and found.id == "sub_1"
    deleted = await store.delete_subscription("sub_1", now=5.0)
    assert deleted is not None and deleted.state is SubscriptionState.DELETED
    assert deleted.deleted_at == 5.0
    # After deletion the client may subscribe again.
    again = await store.add_subscription(sub("sub_2", digest="xyz"))
    assert again.id == "sub_2"
    assert await store.delete_subscription("nope", now=1.0) is None


async def test_record_deduplicates_per_agent_and_key(store: ReceiverStore) -> None:
    first = await store.record(note("msg_1"))
    assert first is not None
    assert await store.record(note("msg_1")) is None
    assert await store.seen(AGENT, "msg_1")
    assert not await store.seen(AGENT, "msg_2")
    second = await store.record(note("msg_2"))
    assert second is not None and second > first


async def test_pending_fetches_group_by_task_until_marked(store: ReceiverStore) -> None:
    a = await store.record(note("m1", task="t1"))
    b = await store.record(note("m2", task="t1"))
    c = await store.record(note("m3", task="t2"))
    pending = {(p.task_id, p.up_to) for p in await store.pending_fetches()}
    assert pending == {("t1", b), ("t2", c)}
    await store.mark_fetched(AGENT, "t1", a)  # covers only the first
    assert {(p.task_id, p.up_to) for p in await store.pending_fetches()} == {("t1", b), ("t2", c)}
    await store.mark_fetched(AGENT, "t1", b)
    assert [p.task_id for p in await store.pending_fetches()] == ["t2"]


async def test_snapshots_never_go_backwards(store: ReceiverStore) -> None:
    assert await store.save_snapshot(snap(5, ts="2026-01-01T00:00:05Z")) is not None
    assert await store.save_snapshot(snap(3)) is None  # an older fetch finishing late
    assert await store.save_snapshot(snap(6, ts="2026-01-01T00:00:01Z")) is None  # older status
    assert await store.save_snapshot(snap(6, "TASK_STATE_COMPLETED")) is not None
    assert await store.save_snapshot(snap(9, "TASK_STATE_WORKING")) is None  # final is final
    current = await store.get_snapshot(AGENT, "t1")
    assert current is not None and current.state == "TASK_STATE_COMPLETED" and current.final


async def test_an_unchanged_snapshot_is_not_a_new_event(store: ReceiverStore) -> None:
    await store.add_subscription(sub())
    first = await store.save_snapshot(snap(1))
    assert first is not None
    assert await store.save_snapshot(snap(1)) is None  # the same fetch result twice
    # A later fetch seeing the same task: still no event, but the stored generation
    # moves on, so a fetch that started before it cannot overwrite it.
    assert await store.save_snapshot(snap(4)) is None
    stored = await store.get_snapshot(AGENT, "t1")
    assert stored is not None and stored.generation == 4 and stored.updated_at == 1.0
    assert await store.save_snapshot(snap(3, "TASK_STATE_INPUT_REQUIRED")) is None
    assert [e.id for e in await store.events_for_client("alice", after=0)] == [first.id]
    changed = await store.save_snapshot(snap(5, "TASK_STATE_COMPLETED"))
    assert changed is not None and changed.id > first.id


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_workers_storing_one_snapshot_at_once_log_one_event(
    kind: str, tmp_path: Path
) -> None:
    # Two workers (two stores on one database) fetched the same task and stored it at
    # once: the SSE stream sent it twice, with consecutive event ids.
    if kind == "postgres":
        from receiver.postgres_store import PostgresReceiverStore

        schema = postgres_schema()
        workers: list[ReceiverStore] = [
            PostgresReceiverStore(require_postgres(), schema=schema) for _ in range(2)
        ]
    else:
        workers = [make_store("sqlite", tmp_path) for _ in range(2)]
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(worker)
        await workers[0].add_subscription(sub())
        for generation, state in ((1, "TASK_STATE_WORKING"), (2, "TASK_STATE_COMPLETED")):
            saved = await asyncio.gather(
                *(workers[i % 2].save_snapshot(snap(generation, state)) for i in range(8))
            )
            assert len([e for e in saved if e is not None]) == 1, saved
        for worker in workers:
            events = await worker.events_for_client("alice", after=0)
            assert [e.data["status"]["state"] for e in events] == [
                "TASK_STATE_WORKING",
                "TASK_STATE_COMPLETED",
            ]


async def test_clients_see_only_their_tasks_and_events(store: ReceiverStore) -> None:
    await store.add_subscription(sub("s1", client="alice", task="t1", digest="1"))
    await store.add_subscription(sub("s2", client="bob", task="t2", digest="2"))
    e1 = await store.save_snapshot(snap(1, task="t1"))
    e2 = await store.save_snapshot(snap(1, task="t2"))
    assert e1 is not None and e2 is not None and e2.id > e1.id
    alice = await store.events_for_client("alice", after=0)
    assert [e.task_id for e in alice] == ["t1"]
    assert await store.events_for_client("alice", after=e1.id) == []
    assert [s.task_id for s in await store.snapshots_for_client("bob")] == ["t2"]
    assert await store.snapshots_for_client("bob", context_id="other") == []
    assert await store.latest_event_id() == e2.id


async def test_data_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    async with SQLiteReceiverStore(path) as s:
        await s.add_subscription(sub())
        await s.record(note("m1"))
    async with SQLiteReceiverStore(path) as s:
        assert await s.get_subscription("sub_1") is not None
        assert await s.seen(AGENT, "m1")
        assert len(await s.pending_fetches()) == 1


async def test_purge_drops_old_dedup_keys_and_fetched_notifications(store: ReceiverStore) -> None:
    n = await store.record(note("m1"))
    assert n is not None
    await store.mark_fetched(AGENT, "t1", n)
    assert await store.purge(seen_before=200.0, notifications_before=200.0) == 2
    assert not await store.seen(AGENT, "m1")


async def test_purge_drops_old_history_but_keeps_each_tasks_newest_event(
    store: ReceiverStore,
) -> None:
    await store.add_subscription(sub("sub_1", task="t1", digest="d1"))
    await store.add_subscription(sub("sub_2", task="t2", digest="d2"))
    await store.add_subscription(sub("sub_3", task="t3", digest="d3"))
    for generation in (1, 2, 3):  # events (and task rows) at times 1.0, 2.0, 3.0
        assert await store.save_snapshot(snap(generation, ts=at(generation), task="t1"))
    for generation in (1, 2):
        assert await store.save_snapshot(snap(generation, ts=at(generation), task="t2"))
    assert await store.save_snapshot(snap(1, task="t3")) is not None
    await store.delete_subscription("sub_2", now=50.0)  # t2's only subscription
    await store.delete_subscription("sub_3", now=500.0)  # deleted lately: kept
    # Without history_before, only dedup keys and notifications go.
    assert await store.purge(seen_before=1e9, notifications_before=1e9) == 0
    # Superseded events before 1.5 go; nothing else is that old.
    assert await store.purge(seen_before=0.0, notifications_before=0.0, history_before=1.5) == 2
    ids = [(e.task_id, e.data["id"]) for e in await store.events_for_client("alice", after=0)]
    assert ids == [("t1", "t1"), ("t1", "t1")]
    # Later: sub_2 (deleted at 50), then t2's task row (no subscription names it) and
    # its last event, and t1's superseded one; t3 (a deleted subscription) keeps its row.
    assert await store.purge(seen_before=0.0, notifications_before=0.0, history_before=100.0) == 4
    assert await store.get_subscription("sub_2") is None
    kept = await store.get_subscription("sub_3")
    assert kept is not None and kept.state is SubscriptionState.DELETED
    assert await store.get_snapshot(AGENT, "t2") is None
    t1 = await store.get_snapshot(AGENT, "t1")
    assert t1 is not None and t1.generation == 3
    assert await store.get_snapshot(AGENT, "t3") is not None
    # A client resuming from an id older than the purge still gets each task's latest
    # state (t2's events are gone from the log, not just hidden).
    await store.add_subscription(sub("sub_4", task="t2", digest="d4"))
    events = await store.events_for_client("alice", after=0)
    assert [(e.task_id, e.created_at) for e in events] == [("t1", 3.0)]


def test_status_timestamps_compare_as_instants_whatever_their_precision() -> None:
    from receiver.store import supersedes

    old = snap(1, ts="2026-01-01T12:00:01Z")
    assert supersedes(snap(2, ts="2026-01-01T12:00:01.250Z"), old)  # later, more digits
    assert not supersedes(snap(2, ts="2026-01-01T12:00:00.999999Z"), old)
    assert supersedes(snap(2, ts="2026-01-01T13:00:01+01:00"), old)  # the same instant
    assert supersedes(snap(2, ts="not a time"), old)  # unparseable: generation decides


async def test_after_a_failed_fsync_the_sqlite_store_refuses_writes(tmp_path: Path) -> None:
    from a2a_push.errors import StoreUnavailableError

    async with SQLiteReceiverStore(tmp_path / "r.db", synchronous="FULL") as store:
        await store.add_subscription(sub())
        writer = store._writer
        assert writer is not None
        real_fd = writer._wal_fd
        writer._wal_fd = 1 << 20  # no such descriptor: os.fsync raises OSError (EBADF)
        try:
            with pytest.raises(StoreUnavailableError, match="fsync"):
                await store.record(note("k1"))
            writer._wal_fd = real_fd  # the disk "recovers": writes stay refused
            with pytest.raises(StoreUnavailableError, match="restarts"):
                await store.record(note("k2"))
        finally:
            writer._wal_fd = real_fd


async def test_a_new_sqlite_database_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    import stat

    folder = tmp_path / "receiver-data"
    async with SQLiteReceiverStore(folder / "r.db") as store:
        await store.add_subscription(sub())
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for name in ("r.db", "r.db-wal"):
            assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
