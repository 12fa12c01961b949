"""Regression tests for review findings on the example mock agent: REST push configs in
gateway mode, deeply nested messages, and inline configs on follow-ups in gateway mode.
Real aiohttp servers on 127.0.0.1, the real gateway, a real webhook sink."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import MAX_MESSAGE_DEPTH, create_app
from a2a_push.testing import WebhookSink

from ..gateway_support import AGENT_KEY, gateway_settings, running_gateway
from .test_mock_agent import kinds, message

ALICE = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
BOB = {"Authorization": "Bearer bob-token", "A2A-Version": "1.0"}
ALICE_V03 = {"Authorization": "Bearer alice-token", "A2A-Version": "0.3"}


@asynccontextmanager
async def running_agent(tmp_path: Path, gateway_url: str | None = None) -> AsyncIterator[str]:
    """The mock agent on a real local server (in gateway mode with ``gateway_url``)."""
    server = TestServer(
        create_app(
            data_dir=tmp_path / "agent",
            allow_webhook_hosts=["127.0.0.1"],
            public_url="http://agent.test",
            step_delay=0.02,
            gateway_url=gateway_url,
            gateway_key=AGENT_KEY if gateway_url else None,
        ),
        host="127.0.0.1",
    )
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def rpc(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] = ALICE,
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with session.post(url + "/", json=body, headers=headers) as resp:
        assert resp.status == 200
        return dict(await resp.json())


async def result(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] = ALICE,
) -> Any:
    answer = await rpc(session, url, method, params, headers)
    assert "result" in answer, answer
    return answer["result"]


async def rest(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: dict[str, str] = ALICE,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    async with session.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


# ---- 1. REST push configs in gateway mode ----------------------------------------------


async def test_in_gateway_mode_rest_push_configs_go_through_the_gateway(tmp_path: Path) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway_url, _gw),
        running_agent(tmp_path, gateway_url) as agent,
        aiohttp.ClientSession() as session,
    ):
        # The gateway signs the webhooks: the card names its keys, and the agent serves
        # no JWKS of its own (its local notifier signs nothing).
        async with session.get(f"{agent}/.well-known/agent-card.json") as resp:
            card = json.dumps(await resp.json())
        assert f'"jwksUri": "{gateway_url}/.well-known/jwks.json"' in card
        async with session.get(f"{agent}/.well-known/jwks.json") as resp:
            assert resp.status == 404
        sent = await result(session, agent, "SendMessage", {"message": message("book a table")})
        task = sent["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task_id = task["id"]
        configs_url = f"{agent}/tasks/{task_id}/pushNotificationConfigs"

        # Bob may not put a webhook on Alice's task over REST either.
        status, body = await rest(
            session, "POST", configs_url, BOB, {"url": sink.url("/bob"), "id": "bob"}
        )
        assert status == 404, body
        assert body["error"]["status"] == "NOT_FOUND"

        status, created = await rest(
            session, "POST", configs_url, body={"url": sink.url(), "id": "rest-cfg"}
        )
        assert status == 200, created
        assert created["id"] == "rest-cfg" and created["taskId"] == task_id

        # The config lives at the gateway: JSON-RPC (answered there) and REST agree.
        listed = await result(
            session, agent, "ListTaskPushNotificationConfigs", {"taskId": task_id}
        )
        assert [c["id"] for c in listed["configs"]] == ["rest-cfg"]
        status, rest_listed = await rest(session, "GET", configs_url)
        assert status == 200, rest_listed
        assert [c["id"] for c in rest_listed["configs"]] == ["rest-cfg"]
        status, got = await rest(session, "GET", configs_url + "/rest-cfg")
        assert status == 200 and got["url"] == sink.url(), got
        status, body = await rest(session, "GET", configs_url, BOB)
        assert status == 404, body

        # It receives the webhooks: the snapshot, then the rest of the task.
        follow_up = message("tomorrow", taskId=task_id)
        await result(session, agent, "SendMessage", {"message": follow_up})
        await sink.wait_for(4, path="/hook")
        assert kinds(sink.on("/hook")) == [
            "task:TASK_STATE_INPUT_REQUIRED",
            "status:TASK_STATE_WORKING",
            "artifact:order",
            "status:TASK_STATE_COMPLETED",
        ]
        assert sink.on("/bob") == []

        # A REST delete removes it at the gateway too.
        status, _ = await rest(session, "DELETE", configs_url + "/rest-cfg")
        assert status == 200
        listed = await result(
            session, agent, "ListTaskPushNotificationConfigs", {"taskId": task_id}
        )
        assert listed["configs"] == []


async def test_in_gateway_mode_v03_rest_push_configs_go_through_the_gateway(
    tmp_path: Path,
) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway_url, _gw),
        running_agent(tmp_path, gateway_url) as agent,
        aiohttp.ClientSession() as session,
    ):
        sent = await result(session, agent, "SendMessage", {"message": message("login")})
        task_id = sent["task"]["id"]
        configs_url = f"{agent}/tasks/{task_id}/pushNotificationConfigs"
        body = {"taskId": task_id, "pushNotificationConfig": {"id": "v03", "url": sink.url()}}
        status, created = await rest(session, "POST", configs_url, ALICE_V03, body)
        assert status == 200, created
        listed = await result(
            session, agent, "tasks/pushNotificationConfig/list", {"id": task_id}, ALICE_V03
        )
        assert [c["pushNotificationConfig"]["id"] for c in listed] == ["v03"]
        await result(session, agent, "SendMessage", {"message": message("ok", taskId=task_id)})
        await sink.wait_for(3, path="/hook")
        hooks = sink.on("/hook")
        assert all(h.header("A2A-Version") == "0.3" for h in hooks)


# ---- 2. deeply nested messages ---------------------------------------------------------


async def test_a_deeply_nested_message_is_invalid_params_and_leaves_no_task(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path) as agent, aiohttp.ClientSession() as session:
        # The message object is one level, its metadata 64 more: one too many.
        deep = message("hi", metadata=nested(MAX_MESSAGE_DEPTH))
        answer = await rpc(session, agent, "SendMessage", {"message": deep})
        assert answer["error"]["code"] == -32602, answer
        assert "nested too deeply" in answer["error"]["message"]

        # The reviewer's case (serialisation failed after the task ran), and v0.3 shapes.
        raw_meta = '{"a":' * 600 + "1" + "}" * 600
        raw = (
            '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
            '{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}],"metadata":'
            + raw_meta
            + "}}}"
        )
        headers = {**ALICE, "Content-Type": "application/json"}
        async with session.post(agent + "/", data=raw, headers=headers) as resp:
            answer = await resp.json()
        assert answer["error"]["code"] == -32602, answer
        v03 = {
            "kind": "message",
            "messageId": str(uuid.uuid4()),
            "role": "user",
            "parts": [{"kind": "data", "data": nested(600)}],
        }
        answer = await rpc(session, agent, "message/send", {"message": v03}, ALICE_V03)
        assert answer["error"]["code"] == -32602, answer

        # Nothing was created, and ListTasks keeps working.
        listed = await result(session, agent, "ListTasks", {})
        assert listed["tasks"] == [] and listed["totalSize"] == 0

        # A follow-up that nests too deeply is refused too and leaves the task as it was.
        sent = await result(session, agent, "SendMessage", {"message": message("book a table")})
        task_id = sent["task"]["id"]
        deep_follow_up = message("tomorrow", taskId=task_id, metadata=nested(600))
        answer = await rpc(session, agent, "SendMessage", {"message": deep_follow_up})
        assert answer["error"]["code"] == -32602, answer
        task = await result(session, agent, "GetTask", {"id": task_id})
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert len(task["history"]) == 2  # the request and the question

        # Reasonable nesting is still fine, and ListTasks lists every task.
        fine = message("hi", metadata=nested(MAX_MESSAGE_DEPTH - 1))
        ok = await result(session, agent, "SendMessage", {"message": fine})
        assert ok["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await result(session, agent, "ListTasks", {"historyLength": 10})
        assert listed["totalSize"] == 2


# ---- 3. inline configs on follow-ups in gateway mode -----------------------------------


async def test_in_gateway_mode_a_follow_up_inline_config_sends_no_extra_task_event(
    tmp_path: Path,
) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway_url, _gw),
        running_agent(tmp_path, gateway_url) as agent,
        aiohttp.ClientSession() as session,
    ):
        first = {"taskPushNotificationConfig": {"url": sink.url("/first")}}
        sent = await result(
            session,
            agent,
            "SendMessage",
            {"message": message("book a table"), "configuration": first},
        )
        task_id = sent["task"]["id"]
        assert sent["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        await sink.wait_for(3, path="/first")  # snapshot, working, input-required

        second = {"taskPushNotificationConfig": {"url": sink.url("/second")}}
        done = await result(
            session,
            agent,
            "SendMessage",
            {"message": message("tomorrow", taskId=task_id), "configuration": second},
        )
        assert done["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        await sink.wait_for(6, path="/first")
        await sink.wait_for(4, path="/second")
        await asyncio.sleep(0.3)  # anything extra would have arrived by now
        assert kinds(sink.on("/first")) == [
            "task:TASK_STATE_SUBMITTED",
            "status:TASK_STATE_WORKING",
            "status:TASK_STATE_INPUT_REQUIRED",
            "status:TASK_STATE_WORKING",
            "artifact:order",
            "status:TASK_STATE_COMPLETED",
        ]
        # The new subscriber starts with a snapshot of the task, then follows it.
        assert kinds(sink.on("/second")) == [
            "task:TASK_STATE_INPUT_REQUIRED",
            "status:TASK_STATE_WORKING",
            "artifact:order",
            "status:TASK_STATE_COMPLETED",
        ]
