"""The receiver's client API: API keys, subscriptions, tasks, SSE, health, metrics, and
notifications that survive a restart."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from receiver.api import RECEIVER, create_app
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState, TaskEvent
from receiver.verify import token_digest

from ..receiver_support import API_KEY, BOB_KEY, rig, sse_frames, until


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
