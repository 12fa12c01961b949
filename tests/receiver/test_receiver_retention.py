"""What the receiver keeps, and for how long: subscriptions to finished tasks end after
the retention period (then the purge drops them, their tasks and events), every purge
works in batches, GET /tasks pages through an index, a task whose GetTask keeps failing
is given up on (also after a restart), dedup keys outlive the sender's retries, and the
maintenance purge drops deleted subscriptions and old events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.protocol.constants import (
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_TIMESTAMP,
)
from receiver.agent_client import AgentClient
from receiver.api import RECEIVER, create_app
from receiver.fetcher import TaskFetcher
from receiver.metrics import ReceiverMetrics
from receiver.settings import AgentSettings, ReceiverSettings, load_settings
from receiver.sqlite_store import SQLiteReceiverStore
from receiver.store import (
    Notification,
    ReceiverStore,
    Subscription,
    SubscriptionState,
    TaskSnapshot,
)

from ..conftest import postgres_schema, require_postgres
from ..receiver_support import API_KEY, rig, status_update, until, webhook_rig
from .test_receiver_store import make_store

AGENT = "http://agent.test"
DAY = 86400.0
SECRET_CREDENTIALS = "Bearer stale-secret-credentials"


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ReceiverStore]:
    async with make_store(request.param, tmp_path) as s:
        yield s


def sub(n: int, task: str, *, created_at: float = 1.0, client: str = "alice") -> Subscription:
    return Subscription(
        id=f"sub_{n}",
        client_id=client,
        agent_url=AGENT,
        task_id=task,
        token_digest=f"digest-{n}",
        state=SubscriptionState.ACTIVE,
        created_at=created_at,
    )


def snap(task: str, state: str, at: float, generation: int = 1) -> TaskSnapshot:
    final = state in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED")
    return TaskSnapshot(
        agent_url=AGENT,
        task_id=task,
        context_id="ctx",
        state=state,
        final=final or state == "TASK_STATE_REJECTED",
        status_timestamp=None,
        generation=generation,
        task={"id": task, "contextId": "ctx", "status": {"state": state}},
        updated_at=at,
    )


def note(key: str, task: str, at: float) -> Notification:
    return Notification(
        agent_url=AGENT,
        task_id=task,
        dedup_key=key,
        subscription_id="sub_x",
        method="jwt",
        kind="statusUpdate",
        body=b"{}",
        received_at=at,
    )


# ---- the store: finished tasks' subscriptions end, in batches ---------------------------


async def test_subscriptions_to_tasks_finished_before_the_cutoff_end_in_batches(
    store: ReceiverStore,
) -> None:
    # Seven tasks finished at 10..16 (every terminal state), two clients on one of them.
    states = ["COMPLETED", "FAILED", "CANCELED", "REJECTED", "COMPLETED", "COMPLETED", "FAILED"]
    for i, state in enumerate(states):
        await store.add_subscription(sub(i, f"done-{i}"))
        assert await store.save_snapshot(snap(f"done-{i}", f"TASK_STATE_{state}", 10.0 + i))
    await store.add_subscription(sub(50, "done-0", client="bob"))
    # Not ended: a task still working (however old), one finished after the cutoff, and a
    # subscription made after the cutoff to a task finished long before.
    await store.add_subscription(sub(60, "working"))
    assert await store.save_snapshot(snap("working", "TASK_STATE_WORKING", 5.0))
    await store.add_subscription(sub(61, "late"))
    assert await store.save_snapshot(snap("late", "TASK_STATE_COMPLETED", 500.0))
    await store.add_subscription(sub(62, "done-6", client="carol", created_at=200.0))

    # Batches of 2 tasks: the walk resumes after the last task of each batch.
    ended = await store.end_finished_subscriptions(before=100.0, now=300.0, batch=2)
    assert ended == 8
    for n in [*range(7), 50]:
        gone = await store.get_subscription(f"sub_{n}")
        assert gone is not None and gone.state is SubscriptionState.DELETED
        assert gone.deleted_at == 300.0
    for n in (60, 61, 62):
        kept = await store.get_subscription(f"sub_{n}")
        assert kept is not None and kept.state is SubscriptionState.ACTIVE
    # What clients see at once: those tasks are no longer theirs.
    assert await store.active_subscriptions_to_task("alice", "done-0") == []
    listed = await store.snapshots_for_client("alice")
    assert {s.task_id for s in listed} == {"working", "late"}
    assert [e.task_id for e in await store.events_for_client("bob", after=0)] == []
    # Nothing more to end: a second run changes nothing.
    assert await store.end_finished_subscriptions(before=100.0, now=301.0, batch=2) == 0

    # The purge, one retention after they ended: the subscriptions, then the tasks (no
    # subscription names them) and their events; done-6 stays (carol's subscription).
    assert await store.purge(
        seen_before=0.0, notifications_before=0.0, history_before=400.0, batch=3
    ) == (8 + 6 + 6)
    assert await store.get_subscription("sub_0") is None
    for i in range(6):
        assert await store.get_snapshot(AGENT, f"done-{i}") is None
    assert await store.get_snapshot(AGENT, "done-6") is not None
    assert await store.get_snapshot(AGENT, "working") is not None
    assert [e.task_id for e in await store.events_for_client("carol", after=0)] == ["done-6"]


async def test_the_purge_deletes_in_batches_until_nothing_is_due(store: ReceiverStore) -> None:
    # Old notifications, fetched or not (a task given up on leaves them unfetched), and
    # their dedup keys: more than one batch of each.
    ids = [await store.record(note(f"m{i}", f"t{i % 3}", at=10.0 + i)) for i in range(7)]
    assert all(n is not None for n in ids)
    await store.record(note("recent", "t0", at=1000.0))
    assert ids[0] is not None
    await store.mark_fetched(AGENT, "t0", ids[0])
    assert await store.purge(seen_before=100.0, notifications_before=100.0, batch=2) == 14
    pending = await store.pending_fetches()
    assert [(p.task_id, p.since) for p in pending] == [("t0", 1000.0)]
    assert await store.seen(AGENT, "recent") and not await store.seen(AGENT, "m3")


async def test_pending_fetches_say_since_when_a_task_has_waited(store: ReceiverStore) -> None:
    for i, at in enumerate((50.0, 20.0, 70.0)):
        await store.record(note(f"k{i}", "t1", at=at))
    (pending,) = await store.pending_fetches()
    assert pending.since == 20.0


def test_get_tasks_and_the_maintenance_walk_indexes_not_the_whole_table(
    tmp_path: Path,
) -> None:
    """SQLite's plans: GET /tasks reads tasks newest first through an index (no sort of
    every task); the finished-task walk and the purges are index range scans."""

    async def plans() -> dict[str, str]:
        async with SQLiteReceiverStore(tmp_path / "r.db", synchronous="NORMAL") as s:
            out = {}
            with contextlib.closing(sqlite3.connect(s.path)) as conn:
                for name, params in (
                    ("snapshots_for_client", {"client_id": "a", "context_id": None, "limit": 9}),
                    (
                        "finished_tasks",
                        {
                            "before": 1.0,
                            "after_updated_at": 0.0,
                            "after_agent_url": "",
                            "after_task_id": "",
                            "limit": 9,
                        },
                    ),
                    ("purge_notifications", (1.0, 9)),
                    ("purge_tasks", (1.0, 9)),
                ):
                    rows = conn.execute("EXPLAIN QUERY PLAN " + s._sql[name], params)
                    out[name] = " | ".join(r[3] for r in rows)
            return out

    found = asyncio.run(plans())
    assert "USING INDEX tasks_by_update" in found["snapshots_for_client"]
    assert "TEMP B-TREE" not in found["snapshots_for_client"]
    assert "USING INDEX tasks_finished" in found["finished_tasks"]
    assert "notifications_by_time (received_at<?)" in found["purge_notifications"]
    assert "tasks_by_update (updated_at<?)" in found["purge_tasks"]


async def test_postgres_get_tasks_reads_the_update_index() -> None:
    """PostgreSQL, with many tasks to a client (the audit's case: every task subscribed
    to): the page is read newest first through the index, not sorted."""
    dsn = require_postgres()
    from receiver.postgres_store import PostgresReceiverStore

    async with PostgresReceiverStore(dsn, schema=postgres_schema()) as s:

        async def fill_and_plan(conn: Any) -> str:
            await conn.executemany(
                "INSERT INTO receiver_subscriptions (id, client_id, agent_url, task_id, "
                "token_digest, state, created_at) VALUES ($1, 'alice', $2, $3, $1, 'active', 1)",
                [(f"sub_{i}", AGENT, f"t{i}") for i in range(5000)],
            )
            await conn.executemany(
                "INSERT INTO receiver_tasks (agent_url, task_id, context_id, state, final, "
                "generation, snapshot, updated_at) VALUES ($1, $2, 'c', 'x', false, 1, '{}', $3)",
                [(AGENT, f"t{i}", float(i)) for i in range(5000)],
            )
            await conn.execute("ANALYZE")
            rows = await conn.fetch("EXPLAIN " + s._sql["snapshots_for_client"], "alice", None, 100)
            return "\n".join(r[0] for r in rows)

        text = await s._run(fill_and_plan)
        page = await s.snapshots_for_client("alice", limit=3)
    assert "receiver_tasks_by_update" in text, text
    assert "Sort" not in text, text
    assert [p.task_id for p in page] == ["t4999", "t4998", "t4997"]


# ---- the receiver: what clients see ---------------------------------------------------


async def test_a_finished_task_is_readable_for_the_retention_period_then_gone(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 2d6")
        await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        receiver = r.receiver
        # Six days on, the maintenance keeps it (retention_days: 7).
        await receiver.purge(now=time.time() + 6 * DAY)
        assert (await r.task(task["id"]))[0] == 200
        # Eight days on, its subscription has ended: 404, and out of GET /tasks.
        await receiver.purge(now=time.time() + 8 * DAY)
        assert (await r.task(task["id"]))[0] == 404
        async with r.session.get(r.receiver_url + "/tasks", headers=r.api()) as resp:
            assert (await resp.json())["tasks"] == []
        async with r.session.get(r.receiver_url + "/subscriptions", headers=r.api()) as resp:
            (listed,) = (await resp.json())["subscriptions"]
        assert listed["state"] == "deleted"
        agent = receiver.settings.agents[0].key
        assert await receiver.store.get_snapshot(agent, task["id"]) is not None
        # Another retention on, the subscription, the task and its events are gone.
        await receiver.purge(now=time.time() + 16 * DAY)
        assert await receiver.store.get_snapshot(agent, task["id"]) is None
        assert await receiver.store.subscriptions_for_task(agent, task["id"]) == []
        assert await receiver.store.events_for_client("alice", after=0) == []
        # Subscribing again reads it from the agent anew.
        await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")


# ---- the fetcher: a task whose GetTask keeps failing is given up on -------------------


async def _refusing_agent() -> tuple[TestServer, str, list[str]]:
    """An agent answering every GetTask with 401 (our credentials went stale)."""
    asked: list[str] = []

    async def rpc(request: web.Request) -> web.Response:
        data = await request.json()
        asked.append(str(data["params"]["id"]))
        return web.json_response({"error": "unauthorized"}, status=401)

    app = web.Application()
    app.router.add_post("/", rpc)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, str(server.make_url("/")), asked


async def test_a_task_failing_longer_than_the_bound_is_given_up_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, url, asked = await _refusing_agent()
    agent = AgentSettings(url=url, credentials=SECRET_CREDENTIALS)  # type: ignore[arg-type]
    metrics = ReceiverMetrics()
    clock = [1_000_000.0]
    try:
        async with (
            SQLiteReceiverStore(tmp_path / "r.db", synchronous="NORMAL") as store,
            aiohttp.ClientSession() as session,
        ):
            n = await store.record(
                Notification(agent.key, "t1", "m1", "sub_1", "jwt", "statusUpdate", b"{}", 0.0)
            )
            assert n is not None

            async def no_snapshot(_event: object) -> None:
                raise AssertionError("nothing is fetched")

            fetcher = TaskFetcher(
                store,
                {agent.key: AgentClient(agent, session, timeout=5)},
                on_snapshot=no_snapshot,
                metrics=metrics,
                coalesce=0,
                retry_later=0.01,
                give_up_after=7 * DAY,
                clock=lambda: clock[0],
            )
            await store.add_subscription(
                Subscription("sub_1", "alice", agent.key, "t1", "d1", SubscriptionState.ACTIVE, 0)
            )
            caplog.set_level(logging.WARNING, logger="receiver.fetcher")
            fetcher.want(agent.key, "t1", n)
            # Failing, but not for long: it is tried again and again.
            await until(lambda: len(asked) >= 3, "GetTask was retried")
            assert (agent.key, "t1") in fetcher._failures
            assert not any("giving up" in r.getMessage() for r in caplog.records)
            # A week and a bit later (by its clock), the next failure gives up.
            clock[0] += 7 * DAY + 1
            await until(
                lambda: metrics.fetch_give_ups._value.get() == 1,  # type: ignore[attr-defined]
                "the task was given up on",
            )
            await fetcher.idle()
            assert fetcher._failures == {}
            assert fetcher._failing_since == {}
            assert fetcher._timers == {}
            assert fetcher._wanted == {}
            calls = len(asked)
            given_up = [r for r in caplog.records if "giving up" in r.getMessage()]
            assert len(given_up) == 1 and given_up[0].levelno == logging.WARNING
            message = given_up[0].getMessage()
            assert "t1" in message and "stale-secret" not in message
            # Its notification stays unfetched until the purge drops it.
            assert [p.task_id for p in await store.pending_fetches()] == ["t1"]
            await fetcher.stop()
            assert len(asked) == calls
            assert await store.purge(seen_before=1.0, notifications_before=1.0) == 2
            assert await store.pending_fetches() == []
    finally:
        await server.close()


async def test_after_a_restart_a_task_pending_for_longer_than_the_retention_is_given_up_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server, url, asked = await _refusing_agent()
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": url, "auth": ["token"], "credentials": SECRET_CREDENTIALS}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
        }
    )
    key = settings.agents[0].key
    eight_days_ago = time.time() - 8 * DAY
    two_days_ago = time.time() - 2 * DAY
    # What a receiver that stopped while the agent refused it left behind.
    async with SQLiteReceiverStore(settings.database_url) as store:
        for task, at in (("stale", eight_days_ago), ("recent", two_days_ago)):
            await store.add_subscription(
                Subscription(
                    f"sub_{task}", "alice", key, task, f"d-{task}", SubscriptionState.ACTIVE, at
                )
            )
            await store.record(
                Notification(key, task, f"m-{task}", f"sub_{task}", "token", "x", b"{}", at)
            )
    caplog.set_level(logging.WARNING, logger="receiver.fetcher")
    app = create_app(settings)
    receiver_server = TestServer(app, host="127.0.0.1")
    try:
        await receiver_server.start_server()
        receiver = app[RECEIVER]
        assert receiver.fetcher is not None
        await until(lambda: sorted(asked) == ["recent", "stale"], "both were tried once")
        await receiver.fetcher.idle()
        gives = receiver.metrics.fetch_give_ups._value.get()  # type: ignore[attr-defined]
        assert gives == 1
        given_up = [r.getMessage() for r in caplog.records if "giving up" in r.getMessage()]
        assert len(given_up) == 1 and "stale" in given_up[0]
        assert SECRET_CREDENTIALS not in given_up[0]
        # The recent one is still being retried; the stale one is not.
        assert (key, "recent") in receiver.fetcher._failures
        assert (key, "stale") not in receiver.fetcher._failures
        assert (key, "stale") not in receiver.fetcher._timers
        metrics = receiver.metrics.render().decode()
        assert "a2a_receiver_fetch_give_ups_total 1.0" in metrics
        # The maintenance drops the stale notification (past retention, unfetched).
        await receiver.purge()
        assert [p.task_id for p in await receiver.store.pending_fetches()] == ["recent"]
    finally:
        await receiver_server.close()
        await server.close()


# ---- dedup keys outlive the sender's retries; the purge drops old history ----------


async def test_retries_hours_later_are_still_duplicates(tmp_path: Path) -> None:
    async with webhook_rig(tmp_path) as rig:
        sub_a, _ = await rig.subscribe("a", "task-1")
        _, token = await rig.subscribe("t", "task-2")
        body_a, body_t = status_update("task-1"), status_update("task-2")
        wid = "msg_stable_delivery_id"

        def jwt_headers() -> dict[str, str]:  # each attempt: the same id, a fresh JWT
            return {
                HEADER_WEBHOOK_ID: wid,
                HEADER_WEBHOOK_TIMESTAMP: str(int(time.time())),
                HEADER_SIGNATURE: rig.jwt("a", body_a, sub_a, webhook_id=wid),
            }

        token_headers = {HEADER_NOTIFICATION_TOKEN: token}  # token-only: the body hash
        assert (await rig.post(body_a, jwt_headers()))[1] == {"status": "accepted"}
        assert (await rig.post(body_t, token_headers))[1] == {"status": "accepted"}
        assert rig.receiver.fetcher is not None
        await rig.receiver.fetcher.idle()
        # The maintenance purge as it runs half an hour later: both still duplicates.
        await rig.receiver.purge(now=time.time() + 1800)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert await rig.post(body_t, token_headers) == (200, {"status": "duplicate"})
        # 2 h and 27 h later (the sender retries ~28 h): the webhook id still holds; an
        # id-less identical body is a new notification after an hour (a status that
        # came back, say WORKING after INPUT_REQUIRED, must not be dropped).
        await rig.receiver.purge(now=time.time() + 2 * 3600)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert await rig.post(body_t, token_headers) == (200, {"status": "accepted"})
        await rig.receiver.fetcher.idle()
        await rig.receiver.purge(now=time.time() + 27 * 3600)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert rig.stored()[1] == 1
        await rig.receiver.purge(now=time.time() + 49 * 3600)
        assert rig.stored()[1] == 0


async def test_how_long_dedup_keys_are_kept_is_a_setting(tmp_path: Path) -> None:
    settings = load_settings(environ={"A2A_RECEIVER_DEDUP_RETENTION_HOURS": "72"})
    assert settings.dedup_retention_hours == 72
    assert load_settings(environ={}).dedup_retention_hours == 48
    async with webhook_rig(tmp_path) as rig:
        rig.receiver.settings = rig.receiver.settings.model_copy(
            update={"dedup_retention_hours": 1.0}
        )
        _, token = await rig.subscribe("t", "task-1")
        body = status_update("task-1")
        assert (await rig.post(body, {HEADER_NOTIFICATION_TOKEN: token}))[0] == 200
        await rig.receiver.purge(now=time.time() + 1800)
        assert rig.stored()[1] == 1
        await rig.receiver.purge(now=time.time() + 3700)
        assert rig.stored()[1] == 0


async def test_the_maintenance_purge_drops_deleted_subscriptions_and_old_events(
    tmp_path: Path,
) -> None:
    async with webhook_rig(tmp_path) as rig:
        kept, token = await rig.subscribe("t", "task-1")
        gone, gone_token = await rig.subscribe("t", "task-2")
        for task_id, tok in (("task-1", token), ("task-2", gone_token)):
            assert (await rig.post(status_update(task_id), {HEADER_NOTIFICATION_TOKEN: tok}))[
                0
            ] == 200
        assert rig.receiver.fetcher is not None
        await rig.receiver.fetcher.idle()
        await rig.unsubscribe(gone)
        store = rig.receiver.store
        # A week and a day later: task-2's subscription, task row and events are history;
        # task-1 (still subscribed) keeps its snapshot and its newest event.
        await rig.receiver.purge(now=time.time() + 8 * 86400)
        assert await store.get_subscription(gone.id) is None
        assert await store.get_snapshot(kept.agent_url, "task-2") is None
        assert await store.get_snapshot(kept.agent_url, "task-1") is not None
        events = await store.events_for_client("alice", after=0)
        assert [e.task_id for e in events] == ["task-1"]
        assert rig.stored() == (0, 0)
