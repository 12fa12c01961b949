"""The receiver's client API: API keys, subscriptions, tasks, SSE, health, metrics,
notifications that survive a restart, ids that follow the webhook rule, Last-Event-ID
within int64, concurrent and repeated subscriptions (also from other processes), and what
a failed subscribe says."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from receiver.api import RECEIVER, create_app
from receiver.core import Receiver
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState, TaskEvent
from receiver.verify import token_digest

from ..receiver_support import (
    API_KEY,
    AUTH,
    BOB_KEY,
    Agent,
    WebhookRig,
    agent_server,
    receiver_server,
    rig,
    settings_for,
    sse_frames,
    status_update,
    stored_subscription,
    until,
    webhook_rig,
)


async def _post(r: Any, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with r.session.post(r.receiver_url + path, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_client_api_needs_a_valid_api_key(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-key-wrong-key"},
            {"Authorization": "Basic x"},
        ):
            async with r.session.get(r.receiver_url + "/subscriptions", headers=headers) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"] == "unauthorized"


async def test_subscription_requests_are_validated(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        json_headers = {**r.api(), "Content-Type": "application/json"}
        status, body = await _post(r, "/subscriptions", b"{not json", json_headers)
        assert status == 400 and body["error"] == "malformed"
        status, body = await _post(
            r, "/subscriptions", b"{}", {**r.api(), "Content-Type": "text/plain"}
        )
        assert status == 415
        status, body = await _post(
            r, "/subscriptions", json.dumps({"agentUrl": r.agent_url}), json_headers
        )
        assert status == 400 and "taskId" in body["message"]
        unknown = json.dumps({"agentUrl": "http://127.0.0.1:1/", "taskId": "t"})
        status, body = await _post(r, "/subscriptions", unknown, json_headers)
        assert status == 400 and body["error"] == "unknown_agent"
        missing = json.dumps({"agentUrl": r.agent_url, "taskId": "no-such-task"})
        status, body = await _post(r, "/subscriptions", missing, json_headers)
        assert status == 404 and body["error"] == "task_not_found"
        async with r.session.get(r.receiver_url + "/subscriptions", headers=r.api()) as resp:
            assert (await resp.json())["subscriptions"] == []  # nothing kept from failures


async def test_subscribing_twice_returns_the_same_subscription(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("book a room")
        first = await r.subscribe(task["id"])
        second = await r.subscribe(task["id"])
        assert first["id"] == second["id"]
        configs = await r.rpc("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
        assert [c["id"] for c in configs["configs"]] == [first["id"]]


async def test_clients_only_see_their_own_subscriptions(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("book a room")
        sub = await r.subscribe(task["id"])
        async with r.session.get(
            f"{r.receiver_url}/subscriptions/{sub['id']}", headers=r.api(BOB_KEY)
        ) as resp:
            assert resp.status == 404
        async with r.session.delete(
            f"{r.receiver_url}/subscriptions/{sub['id']}", headers=r.api(BOB_KEY)
        ) as resp:
            assert resp.status == 404
        async with r.session.get(r.receiver_url + "/subscriptions", headers=r.api(BOB_KEY)) as resp:
            assert (await resp.json())["subscriptions"] == []
        async with r.session.get(r.receiver_url + "/subscriptions", headers=r.api()) as resp:
            assert [s["id"] for s in (await resp.json())["subscriptions"]] == [sub["id"]]


async def test_deleting_a_subscription_removes_the_config_on_the_agent(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("book a room")
        sub = await r.subscribe(task["id"])
        async with r.session.delete(
            f"{r.receiver_url}/subscriptions/{sub['id']}", headers=r.api()
        ) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["state"] == "deleted" and body["removedOnAgent"] is True
        configs = await r.rpc("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
        assert configs["configs"] == []


async def test_tasks_are_listed_by_context(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        one = await r.send("roll 1d6")
        two = await r.send("roll 1d20")
        for t in (one, two):
            await r.subscribe(t["id"])
        for t in (one, two):
            await r.wait_state(t["id"], "TASK_STATE_COMPLETED")
        async with r.session.get(
            r.receiver_url + "/tasks", params={"contextId": one["contextId"]}, headers=r.api()
        ) as resp:
            tasks = (await resp.json())["tasks"]
        assert [t["id"] for t in tasks] == [one["id"]]
        async with r.session.get(r.receiver_url + "/tasks", headers=r.api()) as resp:
            assert {t["id"] for t in (await resp.json())["tasks"]} == {one["id"], two["id"]}
        async with r.session.get(
            r.receiver_url + "/tasks", params={"limit": "x"}, headers=r.api()
        ) as resp:
            assert resp.status == 400


async def _read_events(r: Any, headers: dict[str, str], until: str) -> list[dict[str, Any]]:
    text = ""
    async with r.session.get(r.receiver_url + "/events", headers=headers) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        while until not in text:
            text += (await asyncio.wait_for(resp.content.readany(), 5)).decode()
    return sse_frames(text)


async def test_sse_resumes_after_last_event_id(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 3d6")
        await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        frames = await _read_events(r, r.api(), "TASK_STATE_COMPLETED")
        assert frames[-1]["data"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        ids = [int(f["id"]) for f in frames]
        assert ids == sorted(set(ids))
        later = await r.send("roll 1d4")
        await r.subscribe(later["id"])
        await r.wait_state(later["id"], "TASK_STATE_COMPLETED")
        resumed = await _read_events(r, {**r.api(), "Last-Event-ID": str(ids[-1])}, later["id"])
        assert all(int(f["id"]) > ids[-1] for f in resumed)
        assert {f["data"]["taskId"] for f in resumed} == {later["id"]}
        async with r.session.get(
            r.receiver_url + "/events", headers={**r.api(), "Last-Event-ID": "abc"}
        ) as resp:
            assert resp.status == 400


async def test_health_metrics_and_callbacks(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        seen: list[TaskEvent] = []
        r.receiver.on_update(seen.append)
        task = await r.send("roll 1d6")
        await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        assert seen and seen[-1].task_id == task["id"]
        async with r.session.get(r.receiver_url + "/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["status"] == "ok"
        async with r.session.get(r.receiver_url + "/metrics") as resp:
            text = await resp.text()
        assert 'a2a_receiver_webhooks_total{result="accepted"}' in text
        assert 'a2a_receiver_fetches_total{result="ok"}' in text


# ---- durability across a restart --------------------------------------------------------


class _Agent:
    """An agent that answers GetTask, or 503 while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.calls = 0
        self.state = "TASK_STATE_COMPLETED"

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        rpc = await request.json()
        if self.down:
            return web.json_response({"error": "busy"}, status=503)
        task = {
            "id": rpc["params"]["id"],
            "contextId": "ctx",
            "status": {"state": self.state},
        }
        return web.json_response({"jsonrpc": "2.0", "id": rpc["id"], "result": task})


async def test_accepted_notifications_are_fetched_after_a_restart(tmp_path: Path) -> None:
    agent = _Agent()
    app = web.Application()
    app.router.add_post("/", agent.handle)
    agent_server = TestServer(app, host="127.0.0.1")
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/"))
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_attempts": 1,
            "fetch_coalesce_seconds": 0,
        }
    )
    body = {
        "statusUpdate": {
            "taskId": "t1",
            "contextId": "ctx",
            "status": {"state": "TASK_STATE_WORKING"},
        }
    }
    try:
        first = TestServer(create_app(settings), host="127.0.0.1")
        await first.start_server()
        await first.app[RECEIVER].store.add_subscription(
            Subscription(
                "sub_1",
                "alice",
                agent_url.rstrip("/"),
                "t1",
                token_digest("secret-token"),
                SubscriptionState.ACTIVE,
                time.time(),
            )
        )
        async with aiohttp.ClientSession() as session:
            async with session.post(
                first.make_url("/webhooks/a2a"),
                json=body,
                headers={"X-A2A-Notification-Token": "secret-token"},
            ) as resp:
                assert resp.status == 200, await resp.text()
            await until(lambda: agent.calls >= 1, "the receiver asked the agent")
            fetcher = first.app[RECEIVER].fetcher
            assert fetcher is not None
            await fetcher.idle()  # the fetch is over: tried, and failed (the agent is down)
            assert fetcher.busy == 0
            assert await first.app[RECEIVER].store.pending_fetches() != []
            await first.close()

            agent.down = False
            second = TestServer(create_app(settings), host="127.0.0.1")
            await second.start_server()
            try:
                core = second.app[RECEIVER]
                assert core.fetcher is not None
                await core.fetcher.idle()
                snap = await core.store.get_snapshot(agent_url.rstrip("/"), "t1")
                assert snap is not None and snap.state == "TASK_STATE_COMPLETED"
                assert await core.store.pending_fetches() == []
            finally:
                await second.close()
    finally:
        await agent_server.close()


async def test_fetches_are_spaced_per_task_but_a_final_state_is_fetched_at_once(
    tmp_path: Path,
) -> None:
    agent = _Agent()
    agent.down = False
    agent.state = "TASK_STATE_WORKING"
    app = web.Application()
    app.router.add_post("/", agent.handle)
    agent_server = TestServer(app, host="127.0.0.1")
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/"))
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
            "fetch_min_interval_seconds": 30,
        }
    )
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    try:
        core = server.app[RECEIVER]
        await core.store.add_subscription(
            Subscription(
                "sub_1",
                "alice",
                agent_url.rstrip("/"),
                "t1",
                token_digest("secret-token"),
                SubscriptionState.ACTIVE,
                time.time(),
            )
        )
        headers = {"X-A2A-Notification-Token": "secret-token"}

        def update(state: str, n: int) -> dict[str, Any]:
            return {
                "statusUpdate": {
                    "taskId": "t1",
                    "contextId": "ctx",
                    "status": {"state": state},
                    "metadata": {"n": n},
                }
            }

        fetcher = core.fetcher
        assert fetcher is not None
        key = (agent_url.rstrip("/"), "t1")
        async with aiohttp.ClientSession() as session:
            for n in range(5):
                async with session.post(
                    server.make_url("/webhooks/a2a"),
                    json=update("TASK_STATE_WORKING", n),
                    headers=headers,
                ) as resp:
                    assert resp.status == 200
                if n == 0:
                    await until(lambda: agent.calls >= 1, "the first was fetched at once")
            # The rest wait 30 s: the fetcher has gone to wait out the interval (it makes
            # the task's wake-up event only then) and has not asked the agent again.
            await until(lambda: fetcher.waiting(*key), "the fetcher waits out the interval")
            assert fetcher.busy == 1
            assert agent.calls == 1
            agent.state = "TASK_STATE_COMPLETED"
            async with session.post(
                server.make_url("/webhooks/a2a"),
                json=update("TASK_STATE_COMPLETED", 9),
                headers=headers,
            ) as resp:
                assert resp.status == 200
            await fetcher.idle()
            assert fetcher.busy == 0
        assert agent.calls == 2  # the final state skipped the wait and covered the rest
        assert await core.store.pending_fetches() == []
        snap = await core.store.get_snapshot(agent_url.rstrip("/"), "t1")
        assert snap is not None and snap.final
    finally:
        await server.close()
        await agent_server.close()


async def test_a_large_get_task_answer_is_read_whole(tmp_path: Path) -> None:
    big = "x" * 400_000  # arrives in many TCP segments

    async def get_task(request: web.Request) -> web.Response:
        rpc = await request.json()
        task = {
            "id": rpc["params"]["id"],
            "contextId": "ctx",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": big}]}],
        }
        return web.json_response({"jsonrpc": "2.0", "id": rpc["id"], "result": task})

    app = web.Application()
    app.router.add_post("/", get_task)
    agent_server = TestServer(app, host="127.0.0.1")
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/"))
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
        }
    )
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    try:
        core = server.app[RECEIVER]
        assert core.fetcher is not None
        core.fetcher.want(agent_url.rstrip("/"), "t-big", 0, urgent=True)
        await core.fetcher.idle(10)
        snap = await core.store.get_snapshot(agent_url.rstrip("/"), "t-big")
        assert snap is not None and snap.task["artifacts"][0]["parts"][0]["text"] == big
    finally:
        await server.close()
        await agent_server.close()


async def test_a_deleted_subscription_no_longer_shows_its_task(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 1d6")
        sub = await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        async with r.session.delete(
            f"{r.receiver_url}/subscriptions/{sub['id']}", headers=r.api()
        ) as resp:
            assert resp.status == 200
        status, _ = await r.task(task["id"])
        assert status == 404
        async with r.session.get(r.receiver_url + "/tasks", headers=r.api()) as resp:
            assert (await resp.json())["tasks"] == []


# ---- client API ids follow the webhook rule; Last-Event-ID fits int64 --------------


def _base(rig: WebhookRig) -> str:
    return rig.webhook_url.rsplit("/webhooks/", 1)[0]


@pytest.mark.parametrize(
    "task_id_json",
    ['"\\ud800"', '"a\\u0000b"', '"tab\\there"', '""', '"' + "t" * 257 + '"', "5", "null"],
)
async def test_subscribing_to_a_task_id_no_webhook_could_name_is_400(
    tmp_path: Path, task_id_json: str
) -> None:
    async with webhook_rig(tmp_path) as rig:
        raw = f'{{"agentUrl": "{rig.agents["a"].url}", "taskId": {task_id_json}}}'
        headers = {**AUTH, "Content-Type": "application/json"}
        async with rig.session.post(_base(rig) + "/subscriptions", data=raw, headers=headers) as r:
            assert r.status == 400 and r.content_type == "application/json"
            answer = await r.json()
        assert answer["error"] == "invalid" and "taskId" in answer["message"]
        assert await rig.receiver.store.list_subscriptions("alice") == []


async def test_a_256_character_task_id_passes_both_the_api_and_the_webhook(
    tmp_path: Path,
) -> None:
    task_id = "t" * 256
    async with webhook_rig(tmp_path) as rig:
        body = {"agentUrl": rig.agents["a"].url, "taskId": task_id}
        async with rig.session.post(_base(rig) + "/subscriptions", json=body, headers=AUTH) as r:
            # Valid: it reached the agent (whose fake refuses the method).
            assert (r.status, (await r.json())["error"]) == (502, "agent_error")
        sub, _ = await rig.subscribe("a", task_id)
        webhook = status_update(task_id)
        assert await rig.post(webhook, rig.signed("a", webhook, sub)) == (
            200,
            {"status": "accepted"},
        )


@pytest.mark.parametrize(
    "path", ["/tasks?contextId=a%00b", "/tasks?contextId=", "/tasks/a%00b", "/tasks/" + "t" * 257]
)
async def test_task_queries_with_invalid_ids_are_400(tmp_path: Path, path: str) -> None:
    async with (
        webhook_rig(tmp_path) as rig,
        rig.session.get(_base(rig) + path, headers=AUTH) as r,
    ):
        assert r.status == 400 and r.content_type == "application/json"
        assert (await r.json())["error"] == "invalid"


@pytest.mark.parametrize("last", ["9999999999999999999", str(2**63)])
async def test_a_last_event_id_past_int64_is_400_before_the_stream_starts(
    tmp_path: Path, last: str
) -> None:
    async with webhook_rig(tmp_path) as rig:
        for headers, query in (({"Last-Event-ID": last}, ""), ({}, f"?lastEventId={last}")):
            async with rig.session.get(
                _base(rig) + "/events" + query, headers={**AUTH, **headers}
            ) as r:
                assert r.status == 400 and r.content_type == "application/json"
                assert "Last-Event-ID" in (await r.json())["message"]


async def test_the_largest_int64_last_event_id_streams(tmp_path: Path) -> None:
    async with webhook_rig(tmp_path) as rig:
        headers = {**AUTH, "Last-Event-ID": str(2**63 - 1)}
        async with rig.session.get(_base(rig) + "/events", headers=headers) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            assert (await asyncio.wait_for(r.content.readline(), 5)) == b"retry: 2000\n"


# ---- concurrent duplicate subscriptions -------------------------------------------------


async def _subscribe(
    session: aiohttp.ClientSession, settings: ReceiverSettings, agent: Agent
) -> tuple[int, Any]:
    body = {"agentUrl": agent.url, "taskId": "t1"}
    async with session.post(settings.base_url + "/subscriptions", json=body, headers=AUTH) as r:
        return r.status, await r.json()


async def _duplicate_while_creating(
    session: aiohttp.ClientSession,
    settings: ReceiverSettings,
    agent: Agent,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """Subscribe twice, the second while the agent holds the first's create; (first's
    answer, second's answer)."""
    gate = agent.create_gate = asyncio.Event()
    entered = 0  # subscribe() calls that reached the receiver
    real_subscribe = receiver.subscribe

    async def subscribe(*args: Any, **kwargs: Any) -> tuple[Subscription, bool]:
        nonlocal entered
        entered += 1
        return await real_subscribe(*args, **kwargs)

    monkeypatch.setattr(receiver, "subscribe", subscribe)
    try:
        first = asyncio.create_task(_subscribe(session, settings, agent))
        await until(lambda: agent.creates == 1, "the agent has the first create")
        second = asyncio.create_task(_subscribe(session, settings, agent))
        # subscribe() runs without yielding until it waits (for the first's outcome, or
        # for its own create): once it has been entered, the second has made its choice.
        await until(lambda: entered == 2, "the second request reached the receiver")
        assert not first.done()
    finally:
        gate.set()
    return await first, await second


async def test_a_duplicate_during_a_failing_create_gets_the_same_error_not_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(create_error={"code": -32602, "message": "bad params"})
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            first, second = await _duplicate_while_creating(
                session, settings, agent, receiver, monkeypatch
            )
            assert second[0] == 502 and second[1]["error"] == "agent_error"
            assert first == second
            assert agent.creates == 1
            assert await receiver.store.list_subscriptions("alice") == []


async def test_a_duplicate_during_a_successful_create_gets_the_confirmed_subscription(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            (status, created), second = await _duplicate_while_creating(
                session, settings, agent, receiver, monkeypatch
            )
            assert (status, second[0]) == (201, 200)
            assert second[1]["id"] == created["id"] and second[1]["state"] == "active"
            assert agent.creates == 1
            # Asked again later: the same one, at once.
            assert await _subscribe(session, settings, agent) == (200, second[1])


async def test_a_young_subscription_from_another_process_is_409_until_it_can_be_trusted(
    tmp_path: Path,
) -> None:
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            # Another worker has just stored its row and is still asking the agent.
            young = Subscription(
                id="sub_other_process",
                client_id="alice",
                agent_url=agent.url,
                task_id="t1",
                token_digest=token_digest("other"),
                state=SubscriptionState.ACTIVE,
                created_at=time.time(),
            )
            await receiver.store.add_subscription(young)
            body = {"agentUrl": agent.url, "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as r:
                assert r.status == 409 and r.headers["Retry-After"] == "2"
                assert (await r.json())["error"] == "subscription_pending"
            assert agent.creates == 0
            # Past the time an agent call can take, the row is what the other worker left.
            await receiver.store.remove_subscription(young.id)
            old = await stored_subscription(receiver, agent.url, "t1")
            assert await _subscribe(session, settings, agent) == (200, old.to_json())


async def test_a_confirmed_subscription_is_200_at_once_in_another_process_and_after_restart(
    tmp_path: Path,
) -> None:
    """The confirmation is in the store: a repeat that reaches another worker (here a
    second receiver on the same SQLite file), or this one restarted, gets the
    subscription at once, not 409 for the creation window."""
    agent = Agent()
    async with agent_server(agent):
        entry = {"url": agent.url, "jwks_url": agent.base + "/keys"}
        first, second = settings_for(tmp_path, entry), settings_for(tmp_path, entry)
        assert first.database_url == second.database_url and first.port != second.port
        async with aiohttp.ClientSession() as session:
            async with receiver_server(first), receiver_server(second) as other:
                status, created = await _subscribe(session, first, agent)
                assert status == 201
                assert await _subscribe(session, second, agent) == (200, created)
                stored = await other.store.get_subscription(created["id"])
                assert stored is not None and stored.confirmed_at is not None
            async with receiver_server(first):  # restarted
                assert await _subscribe(session, first, agent) == (200, created)
            assert agent.creates == 1


async def test_subscribing_again_fetches_the_task_again(tmp_path: Path) -> None:
    """After the webhooks were lost (refused while the agent's entry was wrong, and the
    sender gave up), subscribing again brings the current state, without a DELETE."""
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            assert (await _subscribe(session, settings, agent))[0] == 201
            await _task_state(session, settings, "TASK_STATE_WORKING")
            fetched = agent.get_tasks
            agent.state = "TASK_STATE_COMPLETED"  # no webhook tells the receiver
            status, _ = await _subscribe(session, settings, agent)
            assert status == 200
            await _task_state(session, settings, "TASK_STATE_COMPLETED")
            assert agent.get_tasks == fetched + 1 and agent.creates == 1
            assert receiver.fetcher is not None
            await receiver.fetcher.idle()


async def test_subscribing_again_and_again_fetches_at_most_once_per_min_interval(
    tmp_path: Path,
) -> None:
    """A client repeating POST /subscriptions as fast as it can does not make the
    receiver call GetTask as fast: repeats wait out the task's minimum interval (and
    coalesce meanwhile), yet the task is still fetched again."""
    agent = Agent()
    interval = 0.5
    async with agent_server(agent):
        settings = settings_for(
            tmp_path,
            {"url": agent.url, "jwks_url": agent.base + "/keys"},
            fetch_min_interval_seconds=interval,
        )
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            assert (await _subscribe(session, settings, agent))[0] == 201
            await _task_state(session, settings, "TASK_STATE_WORKING")
            assert receiver.fetcher is not None
            await receiver.fetcher.idle()
            fetched = agent.get_tasks
            # Not final: a final task is never fetched again, whatever is asked.
            agent.state = "TASK_STATE_INPUT_REQUIRED"  # no webhook tells the receiver
            started = time.monotonic()
            repeats = 0
            while time.monotonic() - started < 3 * interval:
                answers = await asyncio.gather(
                    *(_subscribe(session, settings, agent) for _ in range(5))
                )
                assert {status for status, _ in answers} == {200}
                repeats += len(answers)
            elapsed = time.monotonic() - started
            await _task_state(session, settings, "TASK_STATE_INPUT_REQUIRED")
            await receiver.fetcher.idle()
            extra = agent.get_tasks - fetched
            # One fetch per interval at most, whatever the number of repeats: those that
            # started during the repeats, and one asked for by the last repeats that was
            # still waiting out its interval when they ended.
            assert repeats >= 10
            assert 1 <= extra <= elapsed / interval + 2, (extra, repeats, elapsed)
            assert agent.creates == 1


async def _task_state(
    session: aiohttp.ClientSession, settings: ReceiverSettings, state: str
) -> None:
    """Wait until the receiver serves task t1 in ``state``."""
    deadline = time.monotonic() + 10
    last: Any = None
    while time.monotonic() < deadline:
        async with session.get(settings.base_url + "/tasks/t1", headers=AUTH) as r:
            last = (r.status, await r.json())
        if last[0] == 200 and last[1]["status"]["state"] == state:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"task t1 never reached {state}; last: {last}")


# ---- what a failed subscribe says --------------------------------------------------------


async def test_an_agent_url_that_is_not_a_json_rpc_endpoint_is_named_in_the_error(
    tmp_path: Path,
) -> None:
    agent = Agent()
    async with agent_server(agent):
        wrong = agent.base + "/nowhere"  # the agent server answers 404, text/plain
        settings = settings_for(tmp_path, {"url": wrong, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            body = {"agentUrl": wrong, "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as r:
                assert r.status == 502
                answer = await r.json()
        assert answer["error"] == "agent_error"
        assert answer["message"] == (
            f"CreateTaskPushNotificationConfig to {wrong}: the agent answered HTTP 404 "
            f"without a JSON-RPC body; is {wrong} the agent's JSON-RPC endpoint?"
        )


def test_agent_urls_in_messages_drop_their_user_and_password() -> None:
    from receiver.agent_client import shown_url

    assert shown_url("http://user:s3cret@agent.test:8/rpc?x=1") == "http://agent.test:8/rpc?x=1"
    assert shown_url("https://agent.test/rpc") == "https://agent.test/rpc"


@pytest.mark.parametrize("credentials", [None, "Bearer the-receivers-secret-0123"])
async def test_task_not_found_on_subscribe_names_credentials_only_when_some_are_sent(
    tmp_path: Path, credentials: str | None
) -> None:
    agent = Agent(create_error={"code": -32001, "message": "Task not found"})
    async with agent_server(agent):
        entry: dict[str, Any] = {"url": agent.url, "jwks_url": agent.base + "/keys"}
        if credentials is not None:
            entry["credentials"] = credentials
        settings = settings_for(tmp_path, entry)
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            status, answer = await _subscribe(session, settings, agent)
    assert (status, answer["error"]) == (404, "task_not_found")
    message = answer["message"]
    assert message.startswith(
        f"the agent at {agent.url} answered that task 't1' does not exist "
        "(CreateTaskPushNotificationConfig: agent error -32001: Task not found); check the "
        "taskId, and that agentUrl is the agent that runs the task"
    )
    if credentials is None:
        assert "credentials" not in message  # none are sent: they cannot be the cause
    else:
        assert "calls this agent with its configured `credentials`" in message
        assert "set `credentials` in this agent's [[agents]] entry" in message
    assert "the-receivers-secret" not in message


async def test_task_not_found_with_credentials_refused_says_to_check_them(
    tmp_path: Path,
) -> None:
    agent = Agent(create_error={"code": -32001, "message": "Task not found"}, create_status=401)
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            status, answer = await _subscribe(session, settings, agent)
    assert (status, answer["error"]) == (404, "task_not_found")
    assert answer["message"] == (
        f"the agent at {agent.url} refused the receiver's credentials (HTTP 401) and "
        "answered that task 't1' does not exist: check this agent's `credentials` (the "
        "Authorization value sent), then the taskId"
    )


async def test_an_unknown_agent_url_lists_the_agents_and_the_one_meant(tmp_path: Path) -> None:
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        written_otherwise = agent.url.replace("127.0.0.1", "localhost")
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            body = {"agentUrl": written_otherwise, "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as resp:
                status, answer = resp.status, await resp.json()
            body = {"agentUrl": "https://elsewhere.example/a2a", "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as resp:
                far = await resp.json()
    assert (status, answer["error"]) == (400, "unknown_agent")
    assert answer["message"] == (
        f"agentUrl {written_otherwise!r} is not one of this receiver's agents (configured: "
        f"{agent.url}); give one of those URLs, as configured; did you mean {agent.url}?"
    )
    assert far["message"] == (
        "agentUrl 'https://elsewhere.example/a2a' is not one of this receiver's agents "
        f"(configured: {agent.url}); give one of those URLs, as configured"
    )
