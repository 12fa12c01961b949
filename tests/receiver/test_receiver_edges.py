"""Receiver edge cases found in review, each against real servers on 127.0.0.1: a
scripted JSON-RPC agent whose answers the test controls, and the receiver app."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.protocol.constants import HEADER_SIGNATURE, HEADER_WEBHOOK_ID
from a2a_push.signing import KeySet, WebhookSigner
from receiver.api import RECEIVER, create_app
from receiver.core import Receiver
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState, TaskSnapshot

from ..receiver_support import status_update

ALICE = "alice-api-key-0123456789"
BOB = "bob-api-key-0123456789abc"


@dataclass
class ScriptedAgent:
    """GetTask answers ``state`` at ``timestamp``, or fails with ``get_error`` (an HTTP
    status); DeleteTaskPushNotificationConfig fails with ``delete_error`` when set."""

    state: str = "TASK_STATE_WORKING"
    timestamp: str = "2025-01-01T00:00:00Z"
    get_error: int | None = None
    delete_error: int | None = None
    gets: int = 0
    deletes: int = 0
    created: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        data = await request.json()
        method, params = data["method"], data["params"]
        result: Any = None
        if method == "GetTask":
            self.gets += 1
            if self.get_error is not None:
                return web.json_response({"error": "no"}, status=self.get_error)
            result = {
                "id": params["id"],
                "contextId": "ctx",
                "status": {"state": self.state, "timestamp": self.timestamp},
            }
        elif method == "CreateTaskPushNotificationConfig":
            self.created.append(params)
            result = params
        elif method == "DeleteTaskPushNotificationConfig":
            self.deletes += 1
            if self.delete_error is not None:
                return web.json_response({"error": "no"}, status=self.delete_error)
        return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": result})


@dataclass
class Setup:
    agent: ScriptedAgent
    agent_url: str
    base: str
    receiver: Receiver
    session: aiohttp.ClientSession

    def api(self, key: str = ALICE) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    async def subscribe(self, task_id: str, key: str = ALICE) -> dict[str, Any]:
        async with self.session.post(
            self.base + "/subscriptions",
            json={"agentUrl": self.agent_url, "taskId": task_id},
            headers=self.api(key),
        ) as resp:
            assert resp.status == 201, await resp.text()
            return dict(await resp.json())

    async def unsubscribe(self, sub_id: str, key: str = ALICE) -> dict[str, Any]:
        async with self.session.delete(
            f"{self.base}/subscriptions/{sub_id}", headers=self.api(key)
        ) as resp:
            assert resp.status == 200, await resp.text()
            return dict(await resp.json())

    async def token_webhook(self, task_id: str, n: int) -> int:
        body = {
            "statusUpdate": {
                "taskId": task_id,
                "contextId": "ctx",
                "status": {"state": "TASK_STATE_WORKING"},
                "metadata": {"n": n},
            }
        }
        token = self.agent.created[-1]["token"]
        async with self.session.post(
            self.base + "/webhooks/a2a", json=body, headers={"X-A2A-Notification-Token": token}
        ) as resp:
            return resp.status

    async def task_state(self, task_id: str, key: str = ALICE) -> str | None:
        async with self.session.get(f"{self.base}/tasks/{task_id}", headers=self.api(key)) as r:
            return str((await r.json())["status"]["state"]) if r.status == 200 else None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(tmp_path: Path, agents: list[dict[str, Any]], **extra: Any) -> ReceiverSettings:
    return ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": _port(),
            "data_dir": tmp_path / "receiver",
            "agents": agents,
            "api_keys": [
                {"client_id": "alice", "api_key": ALICE},
                {"client_id": "bob", "api_key": BOB},
            ],
            "fetch_coalesce_seconds": 0.01,
            **extra,
        }
    )


async def _start_receiver(settings: ReceiverSettings) -> TestServer:
    server = TestServer(create_app(settings), host="127.0.0.1", port=settings.port)
    await server.start_server()
    return server


@asynccontextmanager
async def setup(tmp_path: Path, **extra: Any) -> AsyncIterator[Setup]:
    agent = ScriptedAgent()
    app = web.Application()
    app.router.add_post("/", agent.handle)
    agent_server = TestServer(app, host="127.0.0.1")
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/")).rstrip("/")
    settings = _settings(
        tmp_path,
        [{"url": agent_url, "auth": ["token"]}],
        fetch_min_interval_seconds=0,
        fetch_attempts=1,
        **extra,
    )
    receiver_server = await _start_receiver(settings)
    try:
        async with aiohttp.ClientSession() as session:
            yield Setup(agent, agent_url, settings.base_url, receiver_server.app[RECEIVER], session)
    finally:
        await receiver_server.close()
        await agent_server.close()


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_a_new_subscription_shows_the_current_state_not_an_older_stored_one(
    tmp_path: Path,
) -> None:
    async with setup(tmp_path) as s:
        first = await s.subscribe("T1")
        assert await s.token_webhook("T1", 1) == 200

        async def alice_sees_working() -> bool:
            return await s.task_state("T1") == "TASK_STATE_WORKING"

        await _until(alice_sees_working)
        await s.unsubscribe(first["id"])
        # The task finishes while nobody is subscribed: no webhook reaches the receiver.
        s.agent.state, s.agent.timestamp = "TASK_STATE_COMPLETED", "2025-01-01T00:10:00Z"
        await s.subscribe("T1", key=BOB)

        async def bob_sees_completed() -> bool:
            return await s.task_state("T1", key=BOB) == "TASK_STATE_COMPLETED"

        await _until(bob_sees_completed)


async def test_a_refused_get_task_keeps_the_notification_pending(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        await s.subscribe("T2")
        assert s.receiver.fetcher is not None
        await s.receiver.fetcher.idle()
        s.receiver.fetcher._retry_later = 0.2  # not minutes, for the test
        s.agent.get_error = 401  # our credentials are refused
        assert await s.token_webhook("T2", 1) == 200

        async def refused() -> bool:
            return s.agent.gets >= 3

        await _until(refused)
        pending = await s.receiver.store.pending_fetches()
        assert [p.task_id for p in pending] == ["T2"]
        s.agent.get_error = None  # credentials fixed on the agent's side
        s.agent.state = "TASK_STATE_COMPLETED"

        async def fetched() -> bool:
            return await s.task_state("T2") == "TASK_STATE_COMPLETED"

        await _until(fetched)
        assert await s.receiver.store.pending_fetches() == []


async def test_failing_fetches_back_off_and_stop_once_nobody_is_subscribed(
    tmp_path: Path,
) -> None:
    async with setup(tmp_path) as s:
        sub = await s.subscribe("T5")
        assert s.receiver.fetcher is not None
        await s.receiver.fetcher.idle()
        s.receiver.fetcher._retry_later = 0.1  # not 30 s, for the test
        s.agent.get_error = 403
        before = s.agent.gets
        assert await s.token_webhook("T5", 1) == 200
        await asyncio.sleep(1.6)
        # Retried after 0.1, 0.2, 0.4, 0.8 s...: about 5 calls in 1.6 s, not 16.
        assert 3 <= s.agent.gets - before <= 7, s.agent.gets - before
        await s.unsubscribe(sub["id"])

        async def dropped() -> bool:
            return await s.receiver.store.pending_fetches() == []

        await _until(dropped, timeout=5)
        settled = s.agent.gets
        await asyncio.sleep(0.5)
        assert s.agent.gets == settled  # nobody is subscribed: no more GetTask


async def test_subscribing_again_does_not_cut_short_the_wait_after_failed_fetches(
    tmp_path: Path,
) -> None:
    """Repeat POST /subscriptions calls do not fetch a task whose fetches are failing
    and waiting to be tried again: the retry scheduled then fetches it, and no more."""
    async with setup(tmp_path) as s:
        await s.subscribe("T7")
        fetcher = s.receiver.fetcher
        assert fetcher is not None
        await fetcher.idle()
        fetcher._retry_later = 2.0  # not 30 s, for the test
        s.agent.get_error = 401  # refused: tried again in 2 s
        before = s.agent.gets
        assert await s.token_webhook("T7", 1) == 200

        async def failed_once() -> bool:
            return s.agent.gets > before

        await _until(failed_once)
        await fetcher.idle()  # the failed round is over; its retry is scheduled
        failed = s.agent.gets
        for _ in range(10):
            async with s.session.post(
                s.base + "/subscriptions",
                json={"agentUrl": s.agent_url, "taskId": "T7"},
                headers=s.api(),
            ) as resp:
                assert resp.status == 200, await resp.text()
        await asyncio.sleep(0.2)
        assert s.agent.gets == failed
        s.agent.get_error = None
        s.agent.state = "TASK_STATE_COMPLETED"

        async def completed() -> bool:
            return await s.task_state("T7") == "TASK_STATE_COMPLETED"

        await _until(completed)  # by the scheduled retry
        assert s.agent.gets == failed + 1


async def test_deleting_again_asks_the_agent_again(tmp_path: Path) -> None:
    async with setup(tmp_path) as s:
        sub = await s.subscribe("T3")
        s.agent.delete_error = 503
        assert (await s.unsubscribe(sub["id"]))["removedOnAgent"] is False
        assert (await s.unsubscribe(sub["id"]))["removedOnAgent"] is False
        assert s.agent.deletes == 2
        s.agent.delete_error = None
        assert (await s.unsubscribe(sub["id"]))["removedOnAgent"] is True
        assert s.agent.deletes == 3


async def test_a_rate_below_one_per_second_still_lets_webhooks_through(tmp_path: Path) -> None:
    async with setup(tmp_path, webhook_rate_limit=0.5) as s:
        await s.subscribe("T4")
        assert await s.token_webhook("T4", 1) == 200
        token = s.agent.created[-1]["token"]
        body = {"statusUpdate": {"taskId": "T4", "status": {"state": "TASK_STATE_WORKING"}}}
        async with s.session.post(
            s.base + "/webhooks/a2a", json=body, headers={"X-A2A-Notification-Token": token}
        ) as resp:
            assert resp.status == 429
            retry_after = int(resp.headers["Retry-After"])
            assert 1 <= retry_after <= 2
            assert (await resp.json())["error"] == "rate_limited"


async def test_a_deeply_nested_subscription_body_is_a_400(tmp_path: Path) -> None:
    async with (
        setup(tmp_path) as s,
        s.session.post(
            s.base + "/subscriptions",
            data="[" * 50_000,
            headers={**s.api(), "Content-Type": "application/json"},
        ) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["error"] == "malformed"


async def test_agents_sharing_an_issuer_each_get_their_own_webhooks(tmp_path: Path) -> None:
    # Two agents at paths of one host (or behind one gateway) sign with one issuer and
    # one key set; the receiver must match each webhook to the right agent.
    keys = KeySet.generate()
    jwks = keys.jwks()
    created: list[tuple[str, dict[str, Any]]] = []

    def agent_app(name: str) -> web.Application:
        async def rpc(request: web.Request) -> web.Response:
            data = await request.json()
            result: Any = None
            if data["method"] == "CreateTaskPushNotificationConfig":
                created.append((name, data["params"]))
                result = data["params"]
            elif data["method"] == "GetTask":
                result = {
                    "id": data["params"]["id"],
                    "contextId": "ctx",
                    "status": {"state": "TASK_STATE_WORKING"},
                }
            return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": result})

        app = web.Application()
        app.router.add_post("/", rpc)
        return app

    host = web.Application()
    host.add_subapp("/a/", agent_app("a"))
    host.add_subapp("/b/", agent_app("b"))

    async def serve_jwks(request: web.Request) -> web.Response:
        return web.json_response(jwks)

    host.router.add_get("/.well-known/jwks.json", serve_jwks)
    server = TestServer(host, host="127.0.0.1")
    await server.start_server()
    root = str(server.make_url("/")).rstrip("/")
    jwks_url = f"{root}/.well-known/jwks.json"
    settings = _settings(
        tmp_path,
        [{"url": f"{root}/{n}/", "auth": ["jwt"], "jwks_url": jwks_url} for n in ("a", "b")],
    )
    receiver_server = await _start_receiver(settings)
    signer = WebhookSigner(keys, issuer=root)  # the host's issuer, shared by both
    try:
        async with aiohttp.ClientSession() as session:
            for name in ("a", "b"):
                async with session.post(
                    settings.base_url + "/subscriptions",
                    json={"agentUrl": f"{root}/{name}/", "taskId": f"task-{name}"},
                    headers={"Authorization": f"Bearer {ALICE}"},
                ) as resp:
                    assert resp.status == 201, await resp.text()
            for name in ("b", "a"):
                config = next(p for n, p in created if n == name)
                body = status_update(f"task-{name}", "TASK_STATE_WORKING")
                jwt = signer.sign(
                    body=body,
                    audience=settings.webhook_url,
                    webhook_id=f"msg_{name}",
                    task_id=f"task-{name}",
                    config_id=config.get("id") or config["pushNotificationConfig"]["id"],
                    seq=1,
                )
                async with session.post(
                    settings.webhook_url,
                    data=body,
                    headers={
                        "Content-Type": "application/json",
                        HEADER_SIGNATURE: jwt,
                        HEADER_WEBHOOK_ID: f"msg_{name}",
                    },
                ) as resp:
                    assert resp.status == 200, (name, await resp.text())
            # A sender whose JWTs name neither the config nor the task (both optional):
            # the body's task, which the JWT's body hash covers, tells the agents apart.
            for name in ("b", "a"):
                body = status_update(f"task-{name}", "TASK_STATE_COMPLETED")
                jwt = _bare_jwt(keys, root, settings.webhook_url, f"bare_{name}", body)
                async with session.post(
                    settings.webhook_url,
                    data=body,
                    headers={"Content-Type": "application/json", HEADER_SIGNATURE: jwt},
                ) as resp:
                    # 200 only when matched to this agent's subscription (else 404).
                    assert resp.status == 200, (name, await resp.text())
    finally:
        await receiver_server.close()
        await server.close()


def _bare_jwt(keys: KeySet, issuer: str, audience: str, jti: str, body: bytes) -> str:
    """An ES256 JWT with only the required claims (no taskId, configId or seq)."""
    import base64
    import hashlib
    import time

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    key = keys.active
    now = int(time.time())
    header = {"alg": "ES256", "kid": key.kid, "typ": "JWT"}
    claims = {
        "iss": issuer,
        "aud": audience,
        "iat": now,
        "exp": now + 300,
        "jti": jti,
        "request_body_sha256": hashlib.sha256(body).hexdigest(),
    }
    signing_input = b64(json.dumps(header).encode()) + b"." + b64(json.dumps(claims).encode())
    der = key.private_key.sign(signing_input, ec.ECDSA(hashes.SHA256()))  # type: ignore[arg-type, call-arg]
    r, s = decode_dss_signature(der)
    return (signing_input + b"." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))).decode()


# ---- the core's event streams, without HTTP ------------------------------------------------


def _snapshot(task_id: str, state: str, generation: int) -> TaskSnapshot:
    return TaskSnapshot(
        agent_url="http://agent.test",
        task_id=task_id,
        context_id="ctx",
        state=state,
        final=state == "TASK_STATE_COMPLETED",
        status_timestamp=None,
        generation=generation,
        task={"id": task_id, "contextId": "ctx", "status": {"state": state}},
        updated_at=float(generation),
    )


async def test_client_events_streams_a_clients_events_to_an_embedder(tmp_path: Path) -> None:
    """``Receiver.client_events``, what GET /events writes out: the client's events past
    ``after`` (not another client's), None while idle, events stored later as they come;
    counted while open; ``end_streams()`` ends it."""
    settings = _settings(tmp_path, [{"url": "http://agent.test", "auth": ["token"]}])
    async with Receiver(settings) as receiver:
        store = receiver.store
        for n, (client, task_id) in enumerate([("alice", "t1"), ("bob", "t2")]):
            await store.add_subscription(
                Subscription(
                    id=f"sub_{n}",
                    client_id=client,
                    agent_url="http://agent.test",
                    task_id=task_id,
                    token_digest=f"digest-{n}",
                    state=SubscriptionState.ACTIVE,
                    created_at=1.0,
                )
            )
        first = await store.save_snapshot(_snapshot("t1", "TASK_STATE_WORKING", 1))
        assert first is not None
        assert await store.save_snapshot(_snapshot("t2", "TASK_STATE_WORKING", 1))
        assert receiver.streams == 0
        async with receiver.client_events("alice", after=0, idle=0.05) as stream:
            assert receiver.streams == 1
            assert await anext(stream) == first
            assert await anext(stream) is None  # bob's event is not alice's
            last = await store.save_snapshot(_snapshot("t1", "TASK_STATE_COMPLETED", 2))
            assert last is not None
            async with asyncio.timeout(10):
                while (event := await anext(stream)) is None:
                    pass
            assert event == last
            receiver.end_streams()
            async with asyncio.timeout(10):
                assert [e async for e in stream] == []
        assert receiver.streams == 0
