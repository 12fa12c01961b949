"""The example mock agent (a2a_push/mock_agent/) on a real aiohttp test server, with
webhooks to a real local sink: skills, task rules, inline push configs, v0.3 shapes, and
how deeply a message may nest."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from a2a_push.cli import main as cli_main
from a2a_push.mock_agent import MAX_MESSAGE_DEPTH, create_app
from a2a_push.protocol.constants import HEADER_AUTHORIZATION, HEADER_SIGNATURE
from a2a_push.server import PUSH_SIGNING_EXTENSION_URI
from a2a_push.signing import verify_webhook_jwt
from a2a_push.testing import ReceivedWebhook, WebhookSink

from ..mock_agent_support import (
    ALICE,
    ALICE_V03,
    BOB,
    kinds,
    message,
    nested,
    running_agent,
)
from ..mock_agent_support import result as http_result
from ..mock_agent_support import rpc as http_rpc

PUBLIC = "http://mock-agent.test"
FAST = 0.05

Client = TestClient[web.Request, web.Application]
MakeAgent = Callable[..., Awaitable[Client]]


@pytest.fixture
async def make_agent(aiohttp_client: Any, tmp_path: Path) -> MakeAgent:
    count = 0

    async def make(step_delay: float = FAST) -> Client:
        nonlocal count
        count += 1
        app = create_app(
            data_dir=tmp_path / f"agent-{count}",
            allow_webhook_hosts=["127.0.0.1"],
            public_url=PUBLIC,
            step_delay=step_delay,
        )
        client: Client = await aiohttp_client(app)
        return client

    return make


@pytest.fixture
async def agent(make_agent: MakeAgent) -> Client:
    return await make_agent()


# ---- helpers -------------------------------------------------------------------------


async def rpc(
    client: Client, method: str, params: dict[str, Any], headers: dict[str, str] = ALICE
) -> dict[str, Any]:
    response = await client.post(
        "/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=headers
    )
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


async def call(
    client: Client, method: str, params: dict[str, Any], headers: dict[str, str] = ALICE
) -> Any:
    body = await rpc(client, method, params, headers)
    assert "error" not in body, body
    return body["result"]


async def error(
    client: Client, method: str, params: dict[str, Any], headers: dict[str, str] = ALICE
) -> dict[str, Any]:
    body = await rpc(client, method, params, headers)
    assert "result" not in body, body
    err: dict[str, Any] = body["error"]
    return err


async def send(client: Client, text: str, **configuration: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": message(text)}
    if configuration:
        params["configuration"] = configuration
    result = await call(client, "SendMessage", params)
    task: dict[str, Any] = result["task"]
    return task


async def wait_state(client: Client, task_id: str, state: str, timeout: float = 5.0) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            task = await call(client, "GetTask", {"id": task_id})
            if task["status"]["state"] == state:
                return task
            await asyncio.sleep(0.02)


def jwt_of(hook: ReceivedWebhook) -> str:
    token = hook.header(HEADER_SIGNATURE)
    if token is None:
        token = (hook.header(HEADER_AUTHORIZATION) or "").removeprefix("Bearer ")
    return token


# ---- skills and webhooks -------------------------------------------------------------


async def test_roll_with_an_inline_config_sends_signed_webhooks_in_order(
    agent: Client, sink: WebhookSink
) -> None:
    url = sink.url("/hook")
    task = await send(agent, "roll 3d6", taskPushNotificationConfig={"url": url, "token": "t-1"})

    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [artifact] = task["artifacts"]
    assert artifact["name"] == "dice-result"
    assert len(artifact["parts"][1]["data"]["rolls"]) == 3

    await sink.wait_for(4, path="/hook")
    hooks = sink.on("/hook")
    assert kinds(hooks) == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "artifact:dice-result",
        "status:TASK_STATE_COMPLETED",
    ]
    jwks = await (await agent.get("/.well-known/jwks.json")).json()
    seqs = []
    for hook in hooks:
        claims = verify_webhook_jwt(
            jwt_of(hook), jwks=jwks, body=hook.body, audience=url, issuer=PUBLIC
        )
        assert claims["taskId"] == task["id"]
        assert hook.header("X-A2A-Notification-Token") == "t-1"
        seqs.append(claims["seq"])
    assert seqs == sorted(seqs) and len(set(seqs)) == 4


async def test_return_immediately_returns_the_submitted_task_at_once(agent: Client) -> None:
    task = await send(agent, "hello", returnImmediately=True)
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert "artifacts" not in task
    done = await wait_state(agent, task["id"], "TASK_STATE_COMPLETED")
    assert done["artifacts"][0]["name"] == "echo"
    assert done["artifacts"][0]["parts"][0]["text"] == "hello"


async def test_a_blocking_send_waits_for_the_terminal_state(agent: Client) -> None:
    task = await send(agent, "hello there", returnImmediately=False)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "hello there"


async def test_the_booking_flow_asks_for_a_date_then_completes_with_an_order(
    agent: Client,
) -> None:
    task = await send(agent, "book a table for two")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "date" in task["status"]["message"]["parts"][0]["text"]

    result = await call(
        agent,
        "SendMessage",
        {"message": message("next Friday", taskId=task["id"], contextId=task["contextId"])},
    )
    done = result["task"]
    assert done["id"] == task["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    [order] = done["artifacts"]
    assert order["name"] == "order"
    assert order["parts"][1]["data"]["date"] == "next Friday"
    assert order["parts"][1]["data"]["item"] == "a table for two"


async def test_get_task_honours_history_length(agent: Client) -> None:
    task = await send(agent, "book a car")
    await call(agent, "SendMessage", {"message": message("tomorrow", taskId=task["id"])})

    full = await call(agent, "GetTask", {"id": task["id"]})
    assert [m["role"] for m in full["history"]] == [
        "ROLE_USER",
        "ROLE_AGENT",
        "ROLE_USER",
        "ROLE_AGENT",
    ]
    none = await call(agent, "GetTask", {"id": task["id"], "historyLength": 0})
    assert "history" not in none
    two = await call(agent, "GetTask", {"id": task["id"], "historyLength": 2})
    assert two["history"] == full["history"][-2:]
    assert two["history"][0]["parts"][0]["text"] == "tomorrow"


async def test_report_sends_chunked_artifact_updates(agent: Client, sink: WebhookSink) -> None:
    url = sink.url("/report")
    task = await send(agent, "report", taskPushNotificationConfig={"url": url})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    [report] = task["artifacts"]
    assert len(report["parts"]) >= 3

    expected = 2 + len(report["parts"]) + 1  # snapshot, working, chunks, completed
    await sink.wait_for(expected, path="/report")
    bodies = [json.loads(h.body) for h in sink.on("/report")]
    chunks = [b["artifactUpdate"] for b in bodies if "artifactUpdate" in b]
    assert len(chunks) == len(report["parts"])
    assert {c["artifact"]["artifactId"] for c in chunks} == {report["artifactId"]}
    assert "append" not in chunks[0]
    assert all(c["append"] is True for c in chunks[1:])
    assert [c.get("lastChunk", False) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "statusUpdate" in bodies[-1]
    assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("fail", "TASK_STATE_FAILED"),
        ("reject", "TASK_STATE_REJECTED"),
        ("login", "TASK_STATE_AUTH_REQUIRED"),
    ],
)
async def test_fail_reject_and_login_end_in_their_states(
    agent: Client, text: str, state: str
) -> None:
    task = await send(agent, text)
    assert task["status"]["state"] == state
    assert task["status"]["message"]["role"] == "ROLE_AGENT"


async def test_cancel_stops_an_echo_at_once_and_notifies(
    make_agent: MakeAgent, sink: WebhookSink
) -> None:
    agent = await make_agent(step_delay=0.5)
    url = sink.url("/cancel")
    task = await send(
        agent, "take your time", returnImmediately=True, taskPushNotificationConfig={"url": url}
    )
    canceled = await call(agent, "CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"

    await sink.wait_for(2, path="/cancel")
    await asyncio.sleep(0.7)  # past the next step: nothing more may happen
    assert kinds(sink.on("/cancel")) == ["task:TASK_STATE_SUBMITTED", "status:TASK_STATE_CANCELED"]
    after = await call(agent, "GetTask", {"id": task["id"]})
    assert after["status"]["state"] == "TASK_STATE_CANCELED"
    assert "artifacts" not in after


# ---- the spec's rules on task ids ----------------------------------------------------


async def test_cancel_of_a_terminal_task_is_task_not_cancelable(agent: Client) -> None:
    task = await send(agent, "fail")
    err = await error(agent, "CancelTask", {"id": task["id"]})
    assert err["code"] == -32002


async def test_a_message_to_a_terminal_task_is_unsupported_operation(agent: Client) -> None:
    task = await send(agent, "roll 1d6")
    err = await error(agent, "SendMessage", {"message": message("again", taskId=task["id"])})
    assert err["code"] == -32004


async def test_an_unknown_task_id_is_task_not_found(agent: Client) -> None:
    err = await error(agent, "SendMessage", {"message": message("hi", taskId="no-such-task")})
    assert err["code"] == -32001
    err = await error(agent, "GetTask", {"id": "no-such-task"})
    assert err["code"] == -32001


async def test_a_mismatched_context_id_is_refused(agent: Client) -> None:
    task = await send(agent, "book a room")
    err = await error(
        agent,
        "SendMessage",
        {"message": message("Monday", taskId=task["id"], contextId="another-context")},
    )
    assert err["code"] == -32602
    assert "contextId" in err["message"]
    still = await call(agent, "GetTask", {"id": task["id"]})
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_another_owners_task_is_not_found(agent: Client) -> None:
    task = await send(agent, "roll 1d6")
    err = await error(agent, "GetTask", {"id": task["id"]}, headers=BOB)
    assert err["code"] == -32001
    err = await error(agent, "CancelTask", {"id": task["id"]}, headers=BOB)
    assert err["code"] == -32001


async def test_list_tasks_filters_by_context_and_pages(agent: Client) -> None:
    first = await call(agent, "SendMessage", {"message": message("a", contextId="ctx-a")})
    second = await call(agent, "SendMessage", {"message": message("b", contextId="ctx-a")})
    await call(agent, "SendMessage", {"message": message("c", contextId="ctx-b")})
    await call(agent, "SendMessage", {"message": message("d", contextId="ctx-a")}, headers=BOB)

    listed = await call(agent, "ListTasks", {"contextId": "ctx-a"})
    ids = [t["id"] for t in listed["tasks"]]
    assert ids == [second["task"]["id"], first["task"]["id"]]  # most recently updated first
    assert listed["nextPageToken"] == ""
    assert listed["totalSize"] == 2
    assert all("artifacts" not in t for t in listed["tasks"])

    page1 = await call(agent, "ListTasks", {"contextId": "ctx-a", "pageSize": 1})
    assert page1["nextPageToken"]
    page2 = await call(
        agent,
        "ListTasks",
        {"contextId": "ctx-a", "pageSize": 1, "pageToken": page1["nextPageToken"]},
    )
    assert [t["id"] for t in page1["tasks"] + page2["tasks"]] == ids
    assert page2["nextPageToken"] == ""


# ---- inline configs and v0.3 ---------------------------------------------------------


async def test_a_bad_inline_config_names_the_field_and_creates_no_task(agent: Client) -> None:
    err = await error(
        agent,
        "SendMessage",
        {
            "message": message("roll 1d6"),
            "configuration": {"taskPushNotificationConfig": {"url": "ftp://example.com/hook"}},
        },
    )
    assert err["code"] == -32602
    assert "configuration.taskPushNotificationConfig.url" in err["message"]
    listed = await call(agent, "ListTasks", {})
    assert listed["tasks"] == [] and listed["totalSize"] == 0


async def test_an_inline_config_is_read_in_snake_case_too(agent: Client, sink: WebhookSink) -> None:
    url = sink.url("/snake")
    result = await call(
        agent,
        "SendMessage",
        {
            "message": message("fail"),
            "configuration": {
                "task_push_notification_config": {"url": url},
                "return_immediately": False,
            },
        },
    )
    assert result["task"]["status"]["state"] == "TASK_STATE_FAILED"
    await sink.wait_for(3, path="/snake")
    assert kinds(sink.on("/snake")) == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "status:TASK_STATE_FAILED",
    ]


async def test_an_inline_config_naming_a_task_is_refused(agent: Client) -> None:
    config = {"url": "http://127.0.0.1:9/hook", "taskId": "chosen-by-client"}
    err = await error(
        agent,
        "SendMessage",
        {"message": message("hi"), "configuration": {"taskPushNotificationConfig": config}},
    )
    assert err["code"] == -32602
    assert err["data"][0]["metadata"]["field"] == "configuration.taskPushNotificationConfig.taskId"
    assert (await call(agent, "ListTasks", {}))["totalSize"] == 0


async def test_v03_message_send_with_an_inline_config_and_blocking(
    agent: Client, sink: WebhookSink
) -> None:
    url = sink.url("/v03")
    v03_message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": "roll 2d4"}],
    }
    task = await call(
        agent,
        "message/send",
        {
            "message": v03_message,
            "configuration": {"pushNotificationConfig": {"url": url}, "blocking": True},
        },
        headers=ALICE_V03,
    )
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["name"] == "dice-result"

    await sink.wait_for(4, path="/v03")
    hooks = sink.on("/v03")
    bodies = [json.loads(h.body) for h in hooks]
    assert all(b["kind"] == "task" and b["id"] == task["id"] for b in bodies)
    assert bodies[0]["status"]["state"] == "submitted"
    assert bodies[-1]["status"]["state"] == "completed"
    assert all(h.header("A2A-Version") == "0.3" for h in hooks)

    got = await call(agent, "tasks/get", {"id": task["id"], "historyLength": 1}, ALICE_V03)
    assert got["kind"] == "task" and len(got["history"]) == 1
    listed = await call(
        agent, "tasks/pushNotificationConfig/list", {"id": task["id"]}, headers=ALICE_V03
    )
    assert listed[0]["pushNotificationConfig"]["url"] == url


async def test_v03_non_blocking_send_returns_the_submitted_task(agent: Client) -> None:
    v03_message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": "hello"}],
    }
    task = await call(
        agent,
        "message/send",
        {"message": v03_message, "configuration": {"blocking": False}},
        headers=ALICE_V03,
    )
    assert task["status"]["state"] == "submitted"
    canceled = await call(agent, "tasks/cancel", {"id": task["id"]}, headers=ALICE_V03)
    assert canceled["status"]["state"] == "canceled"


async def test_push_config_methods_work_on_the_agents_tasks(
    agent: Client, sink: WebhookSink
) -> None:
    task = await send(agent, "login")
    url = sink.url("/later")
    created = await call(
        agent, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": url}
    )
    assert created["taskId"] == task["id"] and created["id"]
    await sink.wait_for(1, path="/later")
    assert kinds(sink.on("/later")) == ["task:TASK_STATE_AUTH_REQUIRED"]
    err = await error(
        agent, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": created["id"]}, BOB
    )
    assert err["code"] == -32001


# ---- the card and the command --------------------------------------------------------


async def test_the_agent_card_declares_push_notifications_and_the_jwks(agent: Client) -> None:
    response = await agent.get("/.well-known/agent-card.json")
    card = await response.json()
    assert card["capabilities"]["pushNotifications"] is True
    [extension] = [
        e for e in card["capabilities"]["extensions"] if e["uri"] == PUSH_SIGNING_EXTENSION_URI
    ]
    assert extension["params"]["jwksUri"] == f"{PUBLIC}/.well-known/jwks.json"
    assert {"roll", "book", "report", "echo"} <= {s["id"] for s in card["skills"]}
    assert card["supportedInterfaces"][0]["url"] == f"{PUBLIC}/"
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"


def test_the_cli_mock_agent_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["mock-agent", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--allow-webhook-host" in out
    assert "--data-dir" in out


# ---- 2. deeply nested messages ---------------------------------------------------------


async def test_a_deeply_nested_message_is_invalid_params_and_leaves_no_task(
    tmp_path: Path,
) -> None:
    async with running_agent(tmp_path) as agent, aiohttp.ClientSession() as session:
        # The message object is one level, its metadata 64 more: one too many.
        deep = message("hi", metadata=nested(MAX_MESSAGE_DEPTH))
        answer = await http_rpc(session, agent, "SendMessage", {"message": deep})
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
        answer = await http_rpc(session, agent, "message/send", {"message": v03}, ALICE_V03)
        assert answer["error"]["code"] == -32602, answer

        # Nothing was created, and ListTasks keeps working.
        listed = await http_result(session, agent, "ListTasks", {})
        assert listed["tasks"] == [] and listed["totalSize"] == 0

        # A follow-up that nests too deeply is refused too and leaves the task as it was.
        sent = await http_result(
            session, agent, "SendMessage", {"message": message("book a table")}
        )
        task_id = sent["task"]["id"]
        deep_follow_up = message("tomorrow", taskId=task_id, metadata=nested(600))
        answer = await http_rpc(session, agent, "SendMessage", {"message": deep_follow_up})
        assert answer["error"]["code"] == -32602, answer
        task = await http_result(session, agent, "GetTask", {"id": task_id})
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert len(task["history"]) == 2  # the request and the question

        # Reasonable nesting is still fine, and ListTasks lists every task.
        fine = message("hi", metadata=nested(MAX_MESSAGE_DEPTH - 1))
        ok = await http_result(session, agent, "SendMessage", {"message": fine})
        assert ok["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await http_result(session, agent, "ListTasks", {"historyLength": 10})
        assert listed["totalSize"] == 2
