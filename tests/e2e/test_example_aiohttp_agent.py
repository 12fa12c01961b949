"""``examples/aiohttp_agent.py`` works: served on 127.0.0.1, a push config registered
through its JSON-RPC and REST methods receives the task's snapshot, WORKING and
COMPLETED in order, each verified against the app's own JWKS."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer, unused_port

from a2a_push.testing import WebhookSink
from examples.aiohttp_agent import create_app
from receiver.verify import JWKSCache, VerifyPolicy, WebhookVerifier

CLIENT = {"Authorization": "Bearer client-42", "A2A-Version": "1.0"}


async def test_the_example_agent_pushes_verified_webhooks_in_order(tmp_path: Path) -> None:
    port = unused_port()
    issuer = f"http://127.0.0.1:{port}"
    app = create_app(tmp_path / "data", issuer, console_admin_key="example-console-key-0123")
    server = TestServer(app, host="127.0.0.1", port=port)
    async with server, WebhookSink() as sink, aiohttp.ClientSession() as session:
        async with session.post(f"{issuer}/tasks", headers=CLIENT) as resp:
            assert resp.status == 201, await resp.text()
            task_id = (await resp.json())["id"]
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": task_id, "url": sink.url("/rpc"), "token": "secret"},
        }
        async with session.post(f"{issuer}/", json=rpc, headers=CLIENT) as resp:
            made = await resp.json()
            assert "result" in made, made
        rest = f"{issuer}/tasks/{task_id}/pushNotificationConfigs"
        async with session.post(rest, json={"url": sink.url("/rest")}, headers=CLIENT) as resp:
            assert resp.status == 200, await resp.text()
        # Another caller neither sees the task nor can run it.
        other = {"Authorization": "Bearer someone-else"}
        async with session.post(f"{issuer}/tasks/{task_id}/work", headers=other) as resp:
            assert resp.status == 404
        async with session.post(f"{issuer}/tasks/{task_id}/work", headers=CLIENT) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["status"]["state"] == "TASK_STATE_COMPLETED"

        async with session.get(f"{issuer}/console/login") as resp:  # the console is there
            assert resp.status == 200 and "Admin key" in await resp.text()

        await sink.wait_for(3, path="/rpc")
        await sink.wait_for(3, path="/rest")
        assert (data := tmp_path / "data" / "a2a-push.db").is_file(), data
        for path in ("/rpc", "/rest"):
            verifier = WebhookVerifier(
                VerifyPolicy(issuer=issuer, audience=sink.url(path)),
                JWKSCache(f"{issuer}/.well-known/jwks.json", session=session),
            )
            states: list[str] = []
            seqs: list[int] = []
            for webhook in sink.on(path):
                verified = await verifier.verify(webhook.headers, webhook.body)
                assert verified.task_id == task_id
                assert verified.seq is not None
                seqs.append(verified.seq)
                body = json.loads(webhook.body)
                status = (
                    body["task"]["status"] if "task" in body else body["statusUpdate"]["status"]
                )
                states.append(status["state"])
            assert states == [
                "TASK_STATE_SUBMITTED",
                "TASK_STATE_WORKING",
                "TASK_STATE_COMPLETED",
            ], (path, states)
            assert seqs == sorted(seqs) and len(set(seqs)) == 3, seqs
