"""The mock agent in gateway mode: its events and push configs go to a gateway, which
signs and sends the webhooks (the agent runs no notifier of its own)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import create_app as create_agent_app
from a2a_push.signing import verify_webhook_jwt
from a2a_push.testing import WebhookSink

from ..gateway_support import AGENT_KEY, gateway_settings, running_gateway
from ..mock_agent_support import ALICE_V03, BOB, kinds, message, rest, result, running_agent


async def _agent_in_gateway_mode(tmp_path: Path, gateway_url: str) -> TestServer:
    agent = TestServer(
        create_agent_app(
            data_dir=tmp_path / "agent",
            allow_webhook_hosts=["127.0.0.1"],
            public_url="http://agent.test",
            step_delay=0.02,
            gateway_url=gateway_url,
            gateway_key=AGENT_KEY,
        ),
        host="127.0.0.1",
    )
    await agent.start_server()
    return agent


async def test_mock_agent_posts_events_and_configs_through_the_gateway(tmp_path: Path) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway_url, _gw),
    ):
        agent = await _agent_in_gateway_mode(tmp_path, gateway_url)
        try:
            async with aiohttp.ClientSession() as session:
                message = {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "parts": [{"text": "roll 2d6"}],
                }
                params = {
                    "message": message,
                    "configuration": {
                        "taskPushNotificationConfig": {"url": sink.url(), "token": "tok-1"}
                    },
                }
                headers = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
                async with session.post(
                    agent.make_url("/"),
                    json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params},
                    headers=headers,
                ) as resp:
                    answer = await resp.json()
                    assert "result" in answer, answer
                    task = answer["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_COMPLETED"
                # The push-config methods on the agent are answered by the gateway.
                async with session.post(
                    agent.make_url("/"),
                    json={
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "ListTaskPushNotificationConfigs",
                        "params": {"taskId": task["id"]},
                    },
                    headers=headers,
                ) as resp:
                    configs = (await resp.json())["result"]["configs"]
                assert [c["url"] for c in configs] == [sink.url()]
                async with session.get(gateway_url + "/.well-known/jwks.json") as resp:
                    jwks = await resp.json()
            await sink.wait_for(4)  # snapshot, working, artifact, completed
            hooks = sink.on("/hook")
            bodies = [json.loads(h.body) for h in hooks]
            assert "task" in bodies[0]
            assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            assert any("artifactUpdate" in b for b in bodies)
            seqs = [
                verify_webhook_jwt(
                    h.header("X-A2A-Signature") or "",
                    jwks=jwks,
                    body=h.body,
                    audience=sink.url(),
                    issuer=gateway_url,
                )["seq"]
                for h in hooks
            ]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
            assert all(h.header("X-A2A-Notification-Token") == "tok-1" for h in hooks)
        finally:
            await agent.close()


async def test_in_gateway_mode_only_a_tasks_caller_manages_its_configs_and_v03_stays_v03(
    tmp_path: Path,
) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway_url, _gw),
    ):
        agent = await _agent_in_gateway_mode(tmp_path, gateway_url)
        alice = {"Authorization": "Bearer alice-token"}
        bob = {"Authorization": "Bearer bob-token", "A2A-Version": "1.0"}
        try:
            async with aiohttp.ClientSession() as session:

                async def call(method: str, params: dict[str, object], headers: dict[str, str]):  # type: ignore[no-untyped-def]
                    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                    async with session.post(agent.make_url("/"), json=body, headers=headers) as r:
                        return await r.json()

                # Alice, a v0.3 client, sends a message with an inline push config.
                message = {
                    "kind": "message",
                    "messageId": str(uuid.uuid4()),
                    "role": "user",
                    "parts": [{"kind": "text", "text": "roll 1d6"}],
                }
                answer = await call(
                    "message/send",
                    {
                        "message": message,
                        "configuration": {"pushNotificationConfig": {"url": sink.url()}},
                    },
                    {**alice, "A2A-Version": "0.3"},
                )
                task_id = answer["result"]["id"]
                # Bob cannot put a webhook on Alice's task, nor see hers.
                created = await call(
                    "CreateTaskPushNotificationConfig",
                    {"taskId": task_id, "url": sink.url("/bob")},
                    bob,
                )
                assert created["error"]["code"] == -32001, created
                listed = await call("ListTaskPushNotificationConfigs", {"taskId": task_id}, bob)
                assert listed["error"]["code"] == -32001, listed
            await sink.wait_for(4, path="/hook")  # submitted, working, artifact, completed
            hooks = sink.on("/hook")
            # Registered by a v0.3 request: v0.3 webhooks, every one the whole Task (with
            # "kind": "task"), as v0.3 receivers expect, never an event's own shape.
            assert all(h.header("A2A-Version") == "0.3" for h in hooks)
            bodies = [json.loads(h.body) for h in hooks]
            assert [b.get("kind") for b in bodies] == ["task"] * 4, bodies
            assert all(b["id"] == task_id and b["contextId"] for b in bodies)
            assert bodies[-1]["status"]["state"] == "completed"
            assert any(b.get("artifacts") for b in bodies)
            assert sink.on("/bob") == []
        finally:
            await agent.close()


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
