"""The outbox under abuse, on every backend where it applies: rows another tool
corrupted, a config re-enabled after an auto-disable, the same idempotency key on two
tasks, a transport whose timeouts outlast the lease, backlogged endpoints filling a
claim window, and CLI commands pointed at the wrong file."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.cli import main as cli_main
from a2a_push.delivery.dispatcher import DispatcherOptions
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts, Transport
from a2a_push.errors import NotifierNotStartedError
from a2a_push.ids import new_delivery_id
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.store import (
    DeliveryFilter,
    DeliveryState,
    MemoryStore,
    Outcome,
    Store,
    StoredConfig,
)
from a2a_push.store.sqlite import SQLiteStore
from a2a_push.testing import WebhookSink

from ..conftest import make_store

ISSUER = "http://agent.test"
LOOPBACK = AddressPolicy(allow_loopback=True)


def status(task_id: str) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id="c", status=TaskStatus(state=TaskState.WORKING)
    )


def _config(task_id: str, url: str, created_at: float) -> StoredConfig:
    return StoredConfig(
        key=f"k-{task_id}", id="c", task_id=task_id, owner="o", url=url, created_at=created_at
    )


async def _until_dead(db: Path, delivery_id: str) -> None:
    """Read with SQL: the row stays corrupt, so the store would refuse to read it."""
    for _ in range(200):
        conn = sqlite3.connect(db)
        try:
            state, error = conn.execute(
                "SELECT state, last_error FROM deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
        finally:
            conn.close()
        if state == "dead":
            assert "corrupt" in error, error
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{delivery_id} was not dead-lettered")


async def test_corrupt_rows_are_dead_lettered_and_other_lanes_go_on(
    tmp_path: Path, sink: WebhookSink
) -> None:
    db = tmp_path / "push.db"
    notifier = PushNotifier(SQLiteStore(db), issuer=ISSUER, address_policy=LOOPBACK)
    async with notifier:
        await notifier.dispatcher.stop()  # queue first, then corrupt, then send
        for task in ("bad-secrets", "bad-body", "good"):
            await notifier.register_config(
                TaskPushNotificationConfig(url=sink.url(f"/{task}"), token="tok"),
                owner="o",
                task_id=task,
            )
        ids = {
            task: (await notifier.publish(task, status(task))).delivery_ids[0]
            for task in ("bad-secrets", "bad-body", "good")
        }
        # What another tool (or a bad hand edit) might leave behind.
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(
                "UPDATE configs SET secrets = CAST(secrets AS BLOB) WHERE task_id = 'bad-secrets'"
            )
            conn.execute("UPDATE deliveries SET body = 12345 WHERE task_id = 'bad-body'")
        conn.close()
        notifier.dispatcher.start()
        await sink.wait_for(1, path="/good")
        for task in ("bad-secrets", "bad-body"):
            await _until_dead(db, ids[task])
    assert sink.on("/bad-secrets") == [] and sink.on("/bad-body") == []


def test_the_cli_lists_a_corrupt_row_with_its_reason_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "push.db"

    async def fill() -> None:
        async with SQLiteStore(db) as store:
            await store.put_config(
                StoredConfig(
                    key="k", id="c", task_id="t", owner="o", url="http://h/", created_at=1.0
                )
            )
            await store.enqueue("t", "statusUpdate", lambda v: b"{}", new_id=new_delivery_id)

    asyncio.run(fill())
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE deliveries SET state = 'weird'")
    conn.close()
    # Listed (once, the whole listing failed on it), with what is wrong with it.
    assert cli_main(["deliveries", "list", "--database", str(db)]) == 0
    out = capsys.readouterr()
    assert "the stored delivery is corrupt" in out.out and "Traceback" not in out.err


async def test_corrupt_rows_are_listed_with_their_reasons_and_a_foreign_state_is_dead_lettered(
    tmp_path: Path,
) -> None:
    db = tmp_path / "push.db"
    async with SQLiteStore(db) as store:
        for task in ("bad-body", "bad-state", "bad-seq", "good"):
            await store.put_config(_config(task, "http://h/", 1.0))
            await store.enqueue(
                task, "statusUpdate", lambda v: b"{}", new_id=lambda t=task: f"d-{t}", now=1.0
            )
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE deliveries SET body = 42 WHERE id = 'd-bad-body'")
        conn.execute("UPDATE deliveries SET state = 'PENDING' WHERE id = 'd-bad-state'")
        conn.execute("UPDATE deliveries SET seq = 'abc' WHERE id = 'd-bad-seq'")
    conn.close()
    async with SQLiteStore(db) as store:
        listed = {d.id: d for d in await store.list_deliveries(DeliveryFilter())}
        assert set(listed) == {"d-bad-body", "d-bad-state", "d-bad-seq", "d-good"}
        assert "its body is int" in (listed["d-bad-body"].last_error or "")
        assert "its seq is str" in (listed["d-bad-seq"].last_error or "")
        claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=10.0)
        # The foreign state is never sent: dead, with the reason (it was dropped unseen).
        assert sorted(d.id for d in claimed) == ["d-bad-body", "d-bad-seq", "d-good"]
        bad = {d.id: d.config_error for d in claimed if d.id != "d-good"}
        assert all("corrupt" in (reason or "") for reason in bad.values())
        got = await store.get_delivery("d-bad-state")
        assert got is not None and got.state is DeliveryState.DEAD
        assert "its state is 'PENDING'" in (got.last_error or "")
        assert (await store.stats(now=11.0)).dead == 1


def test_read_only_cli_commands_refuse_a_file_that_is_not_an_outbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-app.db"
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.close()
    before = other.read_bytes()
    assert cli_main(["deliveries", "list", "--database", str(other)]) != 0
    assert "not an a2a-push outbox" in capsys.readouterr().err
    assert other.read_bytes() == before  # not migrated, not switched to WAL


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_enabling_a_config_starts_its_failure_clock_afresh(
    backend: str, tmp_path: Path
) -> None:
    async with make_store(backend, tmp_path) as store:
        config = await store.put_config(
            StoredConfig(key="k", id="c", task_id="t", owner="o", url="http://h/", created_at=1.0)
        )
        await store.enqueue("t", "statusUpdate", lambda v: b"{}", new_id=new_delivery_id)
        (d,) = await store.claim_due(1, lease_seconds=30, worker_id="w")
        await store.complete(
            [
                Outcome(
                    d.id,
                    config.key,
                    "t",
                    "retry",
                    attempts=1,
                    status=503,
                    error="HTTP 503",
                    next_attempt_at=time.time() + 60,
                    config_failing_since=1000.0,
                )
            ]
        )
        failing = await store.get_config_by_key(config.key)
        assert failing is not None and failing.failing_since == 1000.0
        assert await store.set_config_enabled(config.key, False, "failing without a success")
        assert await store.set_config_enabled(config.key, True)
        enabled = await store.get_config_by_key(config.key)
        assert enabled is not None and enabled.enabled and enabled.failing_since is None


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_the_same_idempotency_key_on_two_tasks_is_two_events(
    backend: str, tmp_path: Path, sink: WebhookSink
) -> None:
    notifier = PushNotifier(make_store(backend, tmp_path), issuer=ISSUER, address_policy=LOOPBACK)
    async with notifier:
        for task in ("task-a", "task-b"):
            await notifier.register_config(
                TaskPushNotificationConfig(url=sink.url(f"/{task}")), owner="o", task_id=task
            )
        a = await notifier.publish("task-a", status("task-a"), idempotency_key="evt-1")
        b = await notifier.publish("task-b", status("task-b"), idempotency_key="evt-1")
        again = await notifier.publish("task-b", status("task-b"), idempotency_key="evt-1")
        assert a.delivery_ids != b.delivery_ids and len(b.delivery_ids) == 1
        assert again == b  # the same task and key: the first result, nothing queued
        await sink.wait_for(1, path="/task-b")


def test_the_lease_check_uses_a_given_transports_timeouts() -> None:
    transport = Transport(LOOPBACK, Timeouts(total=60))
    with pytest.raises(ValueError, match="lease_seconds"):
        PushNotifier(
            MemoryStore(),
            issuer=ISSUER,
            transport=transport,
            dispatcher=DispatcherOptions(lease_seconds=70),
        )
    with pytest.raises(ValueError, match="disagree"):
        PushNotifier(
            MemoryStore(),
            issuer=ISSUER,
            transport=transport,
            timeouts=Timeouts(total=5),
        )


def test_registrations_are_checked_with_a_given_transports_address_policy() -> None:
    # Without address_policy=, registrations were checked with the strict default while
    # the transport dialled with its own policy (and two different policies passed).
    transport = Transport(LOOPBACK, Timeouts())
    notifier = PushNotifier(MemoryStore(), issuer=ISSUER, transport=transport)
    assert notifier.address_policy is transport.policy
    same = AddressPolicy(allow_loopback=True)
    assert (
        PushNotifier(
            MemoryStore(), issuer=ISSUER, transport=transport, address_policy=same
        ).address_policy
        is same
    )
    with pytest.raises(ValueError, match=r"address_policy= .* disagree"):
        PushNotifier(
            MemoryStore(),
            issuer=ISSUER,
            transport=transport,
            address_policy=AddressPolicy(allow=["10.0.0.0/8"]),
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_backlogged_endpoints_filling_the_claim_window_do_not_delay_others(
    backend: str, tmp_path: Path
) -> None:
    """Slow endpoints' older lanes fill the window a claim ranks (on PostgreSQL, four
    times the batch); a healthy endpoint's lane must still be claimed at once, not a
    poll interval per slow endpoint later."""
    release = asyncio.Event()
    got = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    async def fast(request: web.Request) -> web.Response:
        got.set()
        return web.Response()

    servers = []
    for handler in [hang] * 4 + [fast]:
        app = web.Application()
        app.router.add_post("/h", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
    options = DispatcherOptions(
        claim_batch=4, per_endpoint=2, poll_interval=30.0, drain_timeout=0.5
    )
    store = make_store(backend, tmp_path)
    now = time.time()
    async with store:
        for e, server in enumerate(servers[:4]):
            for i in range(20):
                task = f"slow{e}-{i}"
                await store.put_config(_config(task, str(server.make_url("/h")), now))
                await store.enqueue(
                    task,
                    "statusUpdate",
                    lambda v: b"{}",
                    new_id=new_delivery_id,
                    now=now - 1000 + e * 100 + i,
                )
    # The same database, reopened by the notifier (PostgreSQL: the same schema).
    notifier = PushNotifier(
        _reopen(store),
        issuer=ISSUER,
        address_policy=LOOPBACK,
        dispatcher=options,
        resolve_on_register=False,
    )
    try:
        async with notifier:
            await notifier.register_config(
                TaskPushNotificationConfig(url=str(servers[4].make_url("/h"))),
                owner="o",
                task_id="fast",
            )
            await notifier.publish("fast", status("fast"))
            await asyncio.wait_for(got.wait(), 10)
            release.set()
    finally:
        release.set()
        for server in servers:
            await server.close()


def _reopen(store: Store) -> Store:
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    from a2a_push.store.postgres import PostgresStore

    assert isinstance(store, PostgresStore)
    return PostgresStore(store.dsn, schema=store.schema)


async def test_a_given_transport_must_be_started_and_have_room_for_the_dispatcher(
    tmp_path: Path,
) -> None:
    # Not started: every delivery was dead-lettered "after 0 attempts" (RuntimeError).
    transport = Transport(LOOPBACK, Timeouts())
    notifier = PushNotifier(SQLiteStore(tmp_path / "a.db"), issuer=ISSUER, transport=transport)
    with pytest.raises(NotifierNotStartedError, match=r"await transport\.start\(\)"):
        await notifier.start()
    # A pool smaller than the dispatcher's caps: requests waited for a connection until
    # they timed out, and opened a healthy endpoint's breaker.
    with pytest.raises(ValueError, match=r"limit_per_host=16"):
        PushNotifier(
            MemoryStore(),
            issuer=ISSUER,
            transport=Transport(LOOPBACK, Timeouts(), limit_per_host=8),
        )
    # aiohttp's 0 means no limit: room enough.
    PushNotifier(
        MemoryStore(), issuer=ISSUER, transport=Transport(LOOPBACK, limit=0, limit_per_host=0)
    )
    started = Transport(LOOPBACK, Timeouts())
    async with (
        started,
        PushNotifier(SQLiteStore(tmp_path / "b.db"), issuer=ISSUER, transport=started),
    ):
        pass
