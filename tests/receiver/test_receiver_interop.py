"""The receiver against other senders and agents, all on real servers on 127.0.0.1.

* our notifier (JWT), the JWK Set found through the agent card's push-signing extension
  (no ``jwks_url`` configured, the issuer defaulted from the agent URL);
* an agent built only on the official a2a-sdk with its stock ``BasePushNotificationSender``
  (token only, no signature): the receiver registers its push config over the SDK's
  JSON-RPC binding, accepts the token-only webhooks when its policy allows them (401 when
  it does not) and fetches the task with the SDK's ``GetTask``;
* Standard Webhooks signatures made by the ``standardwebhooks`` package and by
  ``a2a_push.signing.standard_webhooks``;
* an agent spoken to in A2A v0.3 (``tasks/pushNotificationConfig/set``, ``tasks/get``),
  whose tasks the receiver stores v1.0-shaped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

pytest.importorskip("a2a.server.request_handlers")
pytest.importorskip("starlette")

import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import a2a_pb2
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette

from a2a_push.mock_agent import agent_card as mock_agent_card
from a2a_push.mock_agent import create_app as create_mock_agent_app
from a2a_push.notifier import JWKS_PATH
from a2a_push.server.app import PUSH_SIGNING_EXTENSION_URI
from a2a_push.signing import standard_webhooks
from examples.a2a_sdk_agent import asgi_handler
from receiver.api import RECEIVER, create_app
from receiver.core import Receiver
from receiver.settings import WEBHOOK_PATH, ReceiverSettings

from ..receiver_support import API_KEY, sse_frames

TIMEOUT = 10.0
STEP_DELAY = 0.02
AGENT_CREDENTIALS = "Bearer alice-token"
WHSEC = "whsec_" + base64.b64encode(b"interop-test-secret-0123456789ab").decode()
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"


# ---- servers -------------------------------------------------------------------------


def _bound_socket() -> socket.socket:
    """A socket bound to a free port: the server's URL is known before its app is built."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def _url_of(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def _serve(app: web.Application, sock: socket.socket) -> AsyncIterator[str]:
    """``app`` on ``sock`` until the block exits; yields its origin URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield _url_of(sock)
    finally:
        await runner.cleanup()


@dataclass
class RpcLog:
    """The JSON-RPC calls an agent received: (method, A2A-Version header, params)."""

    calls: list[tuple[str, str | None, Any]] = field(default_factory=list)

    async def record(self, request: web.Request) -> None:
        if request.method == "POST" and request.content_type == "application/json":
            body = json.loads(await request.read())  # aiohttp keeps the body for the handler
            if isinstance(body, dict) and "method" in body:
                version = request.headers.get("A2A-Version")
                self.calls.append((body["method"], version, body.get("params")))

    def methods(self) -> list[tuple[str, str | None]]:
        return [(m, v) for m, v, _ in self.calls]

    def middleware(self) -> Any:
        @web.middleware
        async def log_rpc(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            await self.record(request)
            return await handler(request)

        return log_rpc


@dataclass
class RunningReceiver:
    url: str
    receiver: Receiver
    session: aiohttp.ClientSession

    @property
    def webhook_url(self) -> str:
        return self.url + WEBHOOK_PATH

    @property
    def api(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {API_KEY}"}

    def count(self, result: str) -> float:
        value = self.receiver.metrics.registry.get_sample_value(
            "a2a_receiver_webhooks_total", {"result": result}
        )
        return value or 0.0

    async def subscribe(self, agent_url: str, task_id: str) -> dict[str, Any]:
        async with self.session.post(
            self.url + "/subscriptions",
            json={"agentUrl": agent_url, "taskId": task_id},
            headers=self.api,
        ) as resp:
            assert resp.status == 201, await resp.text()
            return dict(await resp.json())

    async def task(self, task_id: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.url}/tasks/{task_id}", headers=self.api) as resp:
            return resp.status, await resp.json()

    async def wait_state(self, task_id: str, state: str) -> dict[str, Any]:
        last: Any = None
        try:
            async with asyncio.timeout(TIMEOUT):
                while True:
                    status, last = await self.task(task_id)
                    if status == 200 and last["status"]["state"] == state:
                        return dict(last)
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise AssertionError(f"task {task_id} never reached {state}; last: {last}") from None

    async def post_webhook(self, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.session.post(
            self.webhook_url, data=body, headers={"Content-Type": "application/json", **headers}
        ) as resp:
            return resp.status, await resp.json()


@asynccontextmanager
async def serve_receiver(tmp_path: Path, agent: dict[str, Any]) -> AsyncIterator[RunningReceiver]:
    """A receiver trusting one agent (``agent``: its AgentSettings fields)."""
    sock = _bound_socket()
    settings = ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": sock.getsockname()[1],
            "data_dir": tmp_path / f"receiver-{uuid.uuid4().hex[:8]}",
            "agents": [agent],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0.01,
        }
    )
    app = create_app(settings)
    async with _serve(app, sock) as url, aiohttp.ClientSession() as session:
        yield RunningReceiver(url, app[RECEIVER], session)


@dataclass
class MockAgent:
    url: str  # the JSON-RPC endpoint: public URL + "/"
    origin: str
    rpc_log: RpcLog
    session: aiohttp.ClientSession

    async def rpc(self, method: str, params: dict[str, Any]) -> Any:
        async with self.session.post(
            self.url,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            headers={"Authorization": AGENT_CREDENTIALS, "A2A-Version": "1.0"},
        ) as resp:
            data = await resp.json()
        assert "error" not in data, data
        return data["result"]

    async def send(
        self, text: str, task_id: str | None = None, *, wait: bool = False
    ) -> dict[str, Any]:
        """SendMessage; with ``wait`` it returns once the task ends or asks for input."""
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if task_id is not None:
            message["taskId"] = task_id
        result = await self.rpc(
            "SendMessage", {"message": message, "configuration": {"returnImmediately": not wait}}
        )
        return dict(result["task"])


@asynccontextmanager
async def serve_mock_agent(tmp_path: Path, prefix: str = "") -> AsyncIterator[MockAgent]:
    """a2a_push/mock_agent/ on a free port, its public URL its real URL (+ ``prefix``).

    Under a ``prefix`` the agent app is mounted at that path and the origin serves only
    its agent card, so ``<origin>/.well-known/jwks.json`` does not exist.
    """
    sock = _bound_socket()
    public_url = _url_of(sock) + prefix
    rpc_log = RpcLog()
    agent_app = create_mock_agent_app(
        data_dir=tmp_path / f"agent-{uuid.uuid4().hex[:8]}",
        allow_webhook_hosts=["127.0.0.1"],
        public_url=public_url,
        step_delay=STEP_DELAY,
    )
    app = agent_app
    if prefix:
        card = mock_agent_card(public_url)

        async def card_route(request: web.Request) -> web.Response:
            return web.json_response(card)

        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", card_route)
        app.add_subapp(prefix + "/", agent_app)
    app.middlewares.append(rpc_log.middleware())
    async with _serve(app, sock) as origin, aiohttp.ClientSession() as session:
        yield MockAgent(public_url + "/", origin, rpc_log, session)


# ---- 1. our notifier, JWKS found through the agent card ------------------------------


@pytest.mark.parametrize("prefix", ["", "/agent"], ids=["at-origin", "under-a-path"])
async def test_jwt_webhooks_verify_with_the_jwks_the_agent_card_declares(
    tmp_path: Path, prefix: str
) -> None:
    async with (
        serve_mock_agent(tmp_path, prefix) as agent,
        serve_receiver(tmp_path, {"url": agent.url, "credentials": AGENT_CREDENTIALS}) as r,
    ):
        jwks_url = agent.url.rstrip("/") + JWKS_PATH
        async with agent.session.get(agent.origin + "/.well-known/agent-card.json") as resp:
            card = await resp.json()
        [signing] = [
            e for e in card["capabilities"]["extensions"] if e["uri"] == PUSH_SIGNING_EXTENSION_URI
        ]
        assert signing["params"]["jwksUri"] == jwks_url
        if prefix:  # the fallback location would not do
            async with agent.session.get(agent.origin + JWKS_PATH) as resp:
                assert resp.status == 404

        task = await agent.send("book a table")
        await r.subscribe(agent.url, task["id"])
        await r.wait_state(task["id"], INPUT_REQUIRED)
        await agent.send("tomorrow at eight", task_id=task["id"])
        done = await r.wait_state(task["id"], COMPLETED)

        assert done["artifacts"][0]["name"] == "order"
        assert r.count("accepted") >= 2  # JWT-signed webhooks: the only method allowed
        assert r.count("unknown_issuer") == r.count("jwks_unavailable") == 0
        verifier = r.receiver._verifiers[agent.url.rstrip("/")]
        assert verifier.jwks is not None and verifier.jwks.url == jwks_url


# ---- 2. an agent built only on the official a2a-sdk ----------------------------------


class GatedExecutor(AgentExecutor):
    """Starts work, waits for ``release``, then answers with one artifact and completes."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await self.release.wait()
        await updater.add_artifact(
            [new_text_part("forty-two")], name="answer", metadata={"source": "sdk"}
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@dataclass
class SdkAgent:
    url: str
    executor: GatedExecutor
    rpc_log: RpcLog
    session: aiohttp.ClientSession
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    """(webhook URL, HTTP status) of every notification the SDK's sender made."""
    delivered: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def on_response(self, response: httpx.Response) -> None:
        async with self.delivered:
            self.deliveries.append((str(response.request.url), response.status_code))
            self.delivered.notify_all()

    def statuses(self, url: str) -> list[int]:
        return [status for to, status in self.deliveries if to == url]

    async def wait_deliveries(self, url: str, count: int) -> list[int]:
        async with self.delivered:
            await asyncio.wait_for(
                self.delivered.wait_for(lambda: len(self.statuses(url)) >= count), TIMEOUT
            )
        return self.statuses(url)

    async def rpc(self, method: str, params: dict[str, Any]) -> Any:
        async with self.session.post(
            self.url,
            json={"jsonrpc": "2.0", "id": "t1", "method": method, "params": params},
            headers={"A2A-Version": "1.0"},
        ) as resp:
            data = await resp.json()
        assert "error" not in data, data
        return data["result"]

    async def send(self, text: str) -> dict[str, Any]:
        """SendMessage returning at once; the task is WORKING (until released) on return."""
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        result = await self.rpc(
            "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}
        )
        task = dict(result["task"])
        async with asyncio.timeout(TIMEOUT):
            while task["status"]["state"] != WORKING:
                await asyncio.sleep(0.01)
                task = await self.rpc("GetTask", {"id": task["id"]})
        return task


@asynccontextmanager
async def serve_sdk_agent() -> AsyncIterator[SdkAgent]:
    """An a2a-sdk agent with the SDK's stock handler, config store and push sender.

    Its JSON-RPC endpoint serves v1.0 and (compatibility enabled) v0.3 method names.
    """
    sock = _bound_socket()
    url = _url_of(sock) + "/"
    card = a2a_pb2.AgentCard(
        name="SDK-only agent",
        description="Answers when released; push notifications by the SDK itself.",
        version="1.0.0",
        supported_interfaces=[
            a2a_pb2.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=a2a_pb2.AgentCapabilities(streaming=False, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[a2a_pb2.AgentSkill(id="answer", name="Answer", description="Answers", tags=["x"])],
    )
    executor = GatedExecutor()
    async with aiohttp.ClientSession() as session:
        agent = SdkAgent(url, executor, RpcLog(), session)
        async with httpx.AsyncClient(
            timeout=5, event_hooks={"response": [agent.on_response]}
        ) as http:
            config_store = InMemoryPushNotificationConfigStore()
            handler = DefaultRequestHandler(
                agent_executor=executor,
                task_store=InMemoryTaskStore(),
                agent_card=card,
                push_config_store=config_store,
                push_sender=BasePushNotificationSender(http, config_store),
            )
            routes = [
                *create_agent_card_routes(card),
                *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
            ]
            asgi = asgi_handler(Starlette(routes=routes))

            async def dispatch(request: web.Request) -> web.StreamResponse:
                await agent.rpc_log.record(request)
                response: web.StreamResponse = await asgi(request)
                return response

            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", dispatch)
            try:
                async with _serve(app, sock):
                    yield agent
            finally:
                executor.release.set()
                await handler.aclose()


async def _sse_until(
    r: RunningReceiver,
    done: Callable[[list[dict[str, Any]]], bool],
    start: Callable[[], Awaitable[None]],
) -> list[dict[str, Any]]:
    """Open GET /events, await ``start()``, read frames until ``done(frames)``."""
    async with r.session.get(r.url + "/events", headers=r.api, timeout=None) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await start()
        text = ""
        async with asyncio.timeout(TIMEOUT):
            while not done(sse_frames(text)):
                text += (await resp.content.readany()).decode()
    return sse_frames(text)


SDK_METHODS = {
    "1.0": ("CreateTaskPushNotificationConfig", "GetTask", "DeleteTaskPushNotificationConfig"),
    "0.3": (
        "tasks/pushNotificationConfig/set",
        "tasks/get",
        "tasks/pushNotificationConfig/delete",
    ),
}


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_sdk_agent_token_webhooks_reach_the_receiver_which_fetches_with_get_task(
    tmp_path: Path, version: str
) -> None:
    create, get, delete = SDK_METHODS[version]
    policy = {"url": "", "auth": ["token"], "protocol_version": version}
    async with (
        serve_sdk_agent() as agent,
        serve_receiver(tmp_path, {**policy, "url": agent.url}) as r,
    ):
        task = await agent.send("what is six times seven?")
        sub = await r.subscribe(agent.url, task["id"])

        # The receiver registered its webhook on the agent with a fresh token.
        [(_, sent_version, params)] = [c for c in agent.rpc_log.calls if c[0] == create]
        assert sent_version == version
        config = params if version == "1.0" else params["pushNotificationConfig"]
        assert params["taskId"] == task["id"] and config["id"] == sub["id"]
        assert config["url"] == r.webhook_url and len(config["token"]) >= 32
        listed = await agent.rpc("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
        assert [(c["id"], c["url"]) for c in listed["configs"]] == [(sub["id"], r.webhook_url)]

        def completed(frames: list[dict[str, Any]]) -> bool:
            return any(f["data"]["task"]["status"]["state"] == COMPLETED for f in frames)

        async def release() -> None:
            agent.executor.release.set()

        frames = await _sse_until(r, completed, release)
        stored = await r.wait_state(task["id"], COMPLETED)

        # The receiver serves the task as the SDK agent returns it (v0.3: converted).
        from_agent = await agent.rpc("GetTask", {"id": task["id"]})
        assert stored == from_agent
        [artifact] = stored["artifacts"]
        assert artifact["name"] == "answer" and artifact["parts"] == [{"text": "forty-two"}]
        assert artifact["metadata"] == {"source": "sdk"}
        last = frames[-1]["data"]
        assert last["taskId"] == task["id"] and last["agentUrl"] == agent.url.rstrip("/")
        assert last["task"] == stored
        statuses = agent.statuses(r.webhook_url)
        assert len(statuses) >= 2 and set(statuses) == {200}, statuses  # artifact, completed
        assert (get, version) in agent.rpc_log.methods()

        async with r.session.delete(f"{r.url}/subscriptions/{sub['id']}", headers=r.api) as resp:
            assert resp.status == 200
            assert (await resp.json())["removedOnAgent"] is True
        assert (delete, version) in agent.rpc_log.methods()
        listed = await agent.rpc("ListTaskPushNotificationConfigs", {"taskId": task["id"]})
        assert listed.get("configs", []) == []


async def test_unknown_task_on_the_sdk_agent_is_a_404_for_the_subscriber(
    tmp_path: Path,
) -> None:
    async with (
        serve_sdk_agent() as agent,
        serve_receiver(tmp_path, {"url": agent.url, "auth": ["token"]}) as r,
        r.session.post(
            r.url + "/subscriptions",
            json={"agentUrl": agent.url, "taskId": "no-such-task"},
            headers=r.api,
        ) as resp,
    ):
        assert resp.status == 404
        assert (await resp.json())["error"] == "task_not_found"


async def test_receiver_refuses_sdk_token_webhooks_when_its_policy_wants_signatures(
    tmp_path: Path,
) -> None:
    policy = {
        "url": "",
        "auth": ["jwt", "standard-webhooks"],
        "standard_webhooks_secrets": [WHSEC],
    }
    async with (
        serve_sdk_agent() as agent,
        serve_receiver(tmp_path, {**policy, "url": agent.url}) as r,
    ):
        task = await agent.send("what is six times seven?")
        await r.subscribe(agent.url, task["id"])
        await r.wait_state(task["id"], WORKING)  # fetched once, at subscription
        agent.executor.release.set()
        statuses = await agent.wait_deliveries(r.webhook_url, 2)  # artifact, completed
        assert set(statuses) == {401}, statuses
        assert r.count("auth_method_not_allowed") == len(statuses)
        assert r.count("accepted") == 0
        status, stored = await r.task(task["id"])
        assert status == 200 and stored["status"]["state"] == WORKING


# ---- 3. Standard Webhooks ------------------------------------------------------------


def _status_update(task: dict[str, Any], state: str) -> bytes:
    event = {
        "statusUpdate": {
            "taskId": task["id"],
            "contextId": task["contextId"],
            "status": {"state": state, "timestamp": datetime.now(UTC).isoformat()},
        }
    }
    return json.dumps(event).encode()


async def test_standard_webhooks_signed_by_either_library_are_accepted_and_fetched(
    tmp_path: Path,
) -> None:
    policy = {
        "url": "",
        "auth": ["standard-webhooks"],
        "standard_webhooks_secrets": [WHSEC],
        "credentials": AGENT_CREDENTIALS,
    }
    async with (
        serve_mock_agent(tmp_path) as agent,
        serve_receiver(tmp_path, {**policy, "url": agent.url}) as r,
    ):
        task = await agent.send("book a table", wait=True)  # returns at INPUT_REQUIRED
        await r.subscribe(agent.url, task["id"])
        await r.wait_state(task["id"], INPUT_REQUIRED)
        fetcher = r.receiver.fetcher
        assert fetcher is not None
        await fetcher.idle()
        fetched = fetcher.calls

        body = _status_update(task, INPUT_REQUIRED)
        now = int(time.time())
        by_package = Webhook(WHSEC).sign("msg_pkg", datetime.fromtimestamp(now, UTC), body.decode())
        by_us = standard_webhooks.sign(WHSEC, "msg_ours", now, body)
        for msg_id, signature in (("msg_pkg", by_package), ("msg_ours", by_us)):
            headers = {
                "webhook-id": msg_id,
                "webhook-timestamp": str(now),
                "webhook-signature": signature,
            }
            assert await r.post_webhook(body, headers) == (200, {"status": "accepted"})
            assert await r.post_webhook(body, headers) == (200, {"status": "duplicate"})
            await fetcher.idle()
        assert fetcher.calls == fetched + 2  # each accepted notification led to a GetTask

        tampered = body.replace(b"INPUT_REQUIRED", b"COMPLETED")
        headers = {"webhook-id": "msg_tampered", "webhook-timestamp": str(now)}
        status, error = await r.post_webhook(tampered, {**headers, "webhook-signature": by_us})
        assert status == 401 and error["error"] == "bad_signature"
        status, _ = await r.post_webhook(body, {**headers, "webhook-signature": "v1,bm90LWEtc2ln"})
        assert status == 401
        _, stored = await r.task(task["id"])
        assert stored["status"]["state"] == INPUT_REQUIRED


# ---- 4. an agent spoken to in v0.3 ---------------------------------------------------


async def test_v03_agent_subscription_and_fetch_store_v10_shaped_tasks(tmp_path: Path) -> None:
    async with serve_mock_agent(tmp_path) as agent:
        policy = {"url": agent.url, "credentials": AGENT_CREDENTIALS, "protocol_version": "0.3"}
        async with serve_receiver(tmp_path, policy) as r:
            task = await agent.send("book a table")
            sub = await r.subscribe(agent.url, task["id"])
            await r.wait_state(task["id"], INPUT_REQUIRED)
            await agent.send("tomorrow at eight", task_id=task["id"])
            done = await r.wait_state(task["id"], COMPLETED)

        receiver_calls = [c for c in agent.rpc_log.calls if c[0] not in ("SendMessage",)]
        [(_, version, params)] = [
            c for c in receiver_calls if c[0] == "tasks/pushNotificationConfig/set"
        ]
        assert version == "0.3"
        assert params == {
            "taskId": task["id"],
            "pushNotificationConfig": {
                "id": sub["id"],
                "url": r.webhook_url,
                "token": params["pushNotificationConfig"]["token"],
            },
        }
        assert {m for m, _, _ in receiver_calls} == {
            "tasks/pushNotificationConfig/set",
            "tasks/get",
        }
        assert r.count("accepted") >= 2  # v0.3 webhook bodies (kind: task / status-update)

        # v1.0 shape: enum states, no "kind" discriminators, parts without "kind".
        assert done["id"] == task["id"] and done["contextId"] == task["contextId"]
        assert "kind" not in done and "kind" not in done["status"]
        [order] = done["artifacts"]
        assert order["name"] == "order" and "artifactId" in order
        assert all("kind" not in part for part in order["parts"])
        assert {"text", "data"} <= {key for part in order["parts"] for key in part}
        assert all(m["role"] in ("ROLE_USER", "ROLE_AGENT") for m in done.get("history", []))
