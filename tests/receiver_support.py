"""Shared setup for the receiver tests: a mock agent and a receiver on real local servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import create_app as create_agent_app
from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.server.app import PUSH_SIGNING_EXTENSION_URI
from a2a_push.signing import KeySet, WebhookSigner
from receiver.api import RECEIVER, create_app
from receiver.core import Receiver
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState
from receiver.verify import token_digest

AGENT_PUBLIC = "http://mock-agent.test"
API_KEY = "alice-api-key-0123456789"
BOB_KEY = "bob-api-key-0123456789abc"
AGENT_AUTH = {"Authorization": "Bearer alice-token"}


@dataclass
class Rig:
    agent_url: str
    receiver_url: str
    receiver: Receiver
    session: aiohttp.ClientSession

    def api(self, key: str = API_KEY) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    async def rpc(self, method: str, params: dict[str, Any]) -> Any:
        async with self.session.post(
            self.agent_url,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            headers={**AGENT_AUTH, "A2A-Version": "1.0"},
        ) as resp:
            data = await resp.json()
        if "error" in data:
            raise AssertionError(f"{method}: {data['error']}")
        return data["result"]

    async def send(self, text: str) -> dict[str, Any]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        result = await self.rpc("SendMessage", {"message": message})
        return dict(result["task"])

    async def subscribe(self, task_id: str, key: str = API_KEY) -> dict[str, Any]:
        async with self.session.post(
            self.receiver_url + "/subscriptions",
            json={"agentUrl": self.agent_url, "taskId": task_id},
            headers=self.api(key),
        ) as resp:
            assert resp.status in (200, 201), await resp.text()
            return dict(await resp.json())

    async def task(self, task_id: str, key: str = API_KEY) -> tuple[int, Any]:
        async with self.session.get(
            f"{self.receiver_url}/tasks/{task_id}", headers=self.api(key)
        ) as resp:
            return resp.status, await resp.json()

    async def wait_state(self, task_id: str, state: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        last: Any = None
        while asyncio.get_running_loop().time() < deadline:
            status, last = await self.task(task_id)
            if status == 200 and last["status"]["state"] == state:
                return dict(last)
            await asyncio.sleep(0.05)
        raise AssertionError(f"task {task_id} never reached {state}; last: {last}")


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds (fails the test after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.005)


def receiver_settings(tmp_path: Path, agent_url: str, port: int, **extra: Any) -> ReceiverSettings:
    agent = {
        "url": agent_url,
        "issuer": AGENT_PUBLIC,
        "jwks_url": agent_url.rstrip("/") + "/.well-known/jwks.json",
        "credentials": "Bearer alice-token",
        **extra.pop("agent", {}),
    }
    return ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "data_dir": tmp_path / "receiver",
            "agents": [agent],
            "api_keys": [
                {"client_id": "alice", "api_key": API_KEY},
                {"client_id": "bob", "api_key": BOB_KEY},
            ],
            "fetch_coalesce_seconds": 0.01,
            **extra,
        }
    )


@asynccontextmanager
async def rig(tmp_path: Path, step_delay: float = 0.05, **extra: Any) -> AsyncIterator[Rig]:
    agent_app = create_agent_app(
        data_dir=tmp_path / "agent",
        allow_webhook_hosts=["127.0.0.1"],
        public_url=AGENT_PUBLIC,
        step_delay=step_delay,
    )
    agent_server = TestServer(agent_app, host="127.0.0.1")
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/"))
    receiver_server: TestServer | None = None
    try:
        port = _free_port()
        settings = receiver_settings(tmp_path, agent_url, port, **extra)
        app: web.Application = create_app(settings)
        receiver_server = TestServer(app, host="127.0.0.1", port=port)
        await receiver_server.start_server()
        async with aiohttp.ClientSession() as session:
            yield Rig(agent_url, settings.base_url, app[RECEIVER], session)
    finally:
        if receiver_server is not None:
            await receiver_server.close()
        await agent_server.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sse_frames(text: str) -> list[dict[str, Any]]:
    frames = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("id", "event", "data"):
                fields[name] = json.loads(value) if name == "data" else value
        if "data" in fields:
            frames.append(fields)
    return frames


# ---- a receiver facing fake agents, for the webhook attack, library and fuzz tests ------

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # docs/protocol.md's test vector
WEBHOOK_MAX_BODY = 64 * 1024
# name -> the authentication methods the receiver allows that agent
AGENT_AUTH_METHODS: dict[str, tuple[str, ...]] = {
    "a": ("jwt", "standard-webhooks"),
    "b": ("jwt", "token"),
    "t": ("token",),
}


@dataclass
class FakeAgent:
    """An agent as the receiver sees it: a key set, a JWKS route and a GetTask method."""

    name: str
    url: str
    issuer: str
    keyset: KeySet
    jwks_hits: int = 0
    jwks_status: int = 200
    get_task_hits: int = 0

    @property
    def key(self) -> str:
        return self.url.rstrip("/")

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks.json"

    def signer(self, issuer: str | None = None) -> WebhookSigner:
        return WebhookSigner(self.keyset, issuer or self.issuer)


def agent_task(task_id: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "contextId": "ctx-1",
        "status": {"state": "TASK_STATE_WORKING", "timestamp": "2025-01-01T00:00:00Z"},
    }


def _fake_agents_app(agents: dict[str, FakeAgent]) -> web.Application:
    async def jwks(request: web.Request) -> web.Response:
        agent = agents[request.match_info["name"]]
        agent.jwks_hits += 1
        if agent.jwks_status != 200:
            return web.json_response({"error": "down"}, status=agent.jwks_status)
        return web.json_response(agent.keyset.jwks())

    async def rpc(request: web.Request) -> web.Response:
        agent = agents[request.match_info["name"]]
        data = await request.json()
        if data.get("method") != "GetTask":
            error = {"code": -32601, "message": "method not found"}
            return web.json_response({"jsonrpc": "2.0", "id": data.get("id"), "error": error})
        agent.get_task_hits += 1
        result = agent_task(str(data["params"]["id"]))
        return web.json_response({"jsonrpc": "2.0", "id": data.get("id"), "result": result})

    app = web.Application()
    app.router.add_get("/{name}/jwks.json", jwks)
    app.router.add_post("/{name}", rpc)
    return app


@dataclass
class WebhookRig:
    """A receiver trusting agents ``a`` (jwt, standard-webhooks), ``b`` (jwt, token) and
    ``t`` (token), whose JWKS and GetTask are served by a local server."""

    receiver: Receiver
    webhook_url: str
    db_path: Path
    agents: dict[str, FakeAgent]
    session: aiohttp.ClientSession

    async def subscribe(
        self, agent: str, task_id: str, *, client_id: str = "alice"
    ) -> tuple[Subscription, str]:
        """A subscription stored directly (no agent call); it and its token."""
        token = secrets.token_urlsafe(24)
        sub = Subscription(
            id=f"sub_{uuid.uuid4().hex}",
            client_id=client_id,
            agent_url=self.agents[agent].key,
            task_id=task_id,
            token_digest=token_digest(token),
            state=SubscriptionState.ACTIVE,
            created_at=time.time(),
        )
        stored = await self.receiver.store.add_subscription(sub)
        assert stored.id == sub.id
        return stored, token

    async def unsubscribe(self, sub: Subscription) -> None:
        assert await self.receiver.store.delete_subscription(sub.id, now=time.time())

    def jwt(
        self,
        agent: str,
        body: bytes,
        sub: Subscription | None = None,
        *,
        task_id: str | None = None,
        webhook_id: str | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        now: int | None = None,
        config_id: str | None = None,
        seq: int = 1,
    ) -> str:
        """A webhook JWT as our notifier signs it, with any claim overridable."""
        signer = self.agents[agent].signer(issuer)
        return signer.sign(
            body=body,
            audience=audience or self.webhook_url,
            webhook_id=webhook_id or f"msg_{uuid.uuid4().hex}",
            task_id=task_id or (sub.task_id if sub else "task-x"),
            config_id=config_id or (sub.id if sub else "cfg-x"),
            seq=seq,
            now=now,
        )

    def signed(
        self,
        agent: str,
        body: bytes,
        sub: Subscription | None = None,
        *,
        task_id: str | None = None,
    ) -> dict[str, str]:
        """The headers our notifier sends with a signed webhook."""
        webhook_id = f"msg_{uuid.uuid4().hex}"
        return {
            HEADER_WEBHOOK_ID: webhook_id,
            HEADER_WEBHOOK_TIMESTAMP: str(int(time.time())),
            HEADER_SIGNATURE: self.jwt(agent, body, sub, task_id=task_id, webhook_id=webhook_id),
        }

    async def post(
        self,
        body: bytes | Any,
        headers: dict[str, str] | None = None,
        content_type: str | None = A2A_MEDIA_TYPE,
    ) -> tuple[int, Any]:
        """POST a webhook; (status, JSON body). Every answer must be JSON."""
        sent = dict(headers or {})
        if content_type is not None:
            sent["Content-Type"] = content_type
        async with self.session.post(self.webhook_url, data=body, headers=sent) as resp:
            assert resp.content_type == "application/json", await resp.text()
            return resp.status, await resp.json()

    def stored(self) -> tuple[int, int]:
        """(notification rows, seen dedup keys) in the receiver's SQLite file."""
        with contextlib.closing(sqlite3.connect(self.db_path)) as conn:
            notifications = conn.execute("SELECT COUNT(*) FROM notifications").fetchone()[0]
            seen = conn.execute("SELECT COUNT(*) FROM seen").fetchone()[0]
        return int(notifications), int(seen)


def webhook_settings(
    tmp_path: Path,
    agents: dict[str, FakeAgent],
    port: int,
    configured_issuers: Mapping[str, str] | None = None,
) -> ReceiverSettings:
    """``configured_issuers``: an agent's ``issuer`` setting, when not the one it signs
    with (another spelling of it, say)."""
    configured = []
    for name, agent in agents.items():
        entry: dict[str, Any] = {
            "url": agent.url,
            "issuer": (configured_issuers or {}).get(name, agent.issuer),
            "auth": list(AGENT_AUTH_METHODS[name]),
            "jwks_url": agent.jwks_url,
        }
        if "standard-webhooks" in AGENT_AUTH_METHODS[name]:
            entry["standard_webhooks_secrets"] = [SW_SECRET]
        configured.append(entry)
    return ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "data_dir": tmp_path / "receiver",
            "agents": configured,
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "max_body_bytes": WEBHOOK_MAX_BODY,
            "fetch_coalesce_seconds": 0.01,
        }
    )


@asynccontextmanager
async def webhook_rig(
    tmp_path: Path, configured_issuers: Mapping[str, str] | None = None
) -> AsyncIterator[WebhookRig]:
    agents: dict[str, FakeAgent] = {}
    agent_server = TestServer(_fake_agents_app(agents), host="127.0.0.1")
    await agent_server.start_server()
    base = str(agent_server.make_url("")).rstrip("/")
    for name in AGENT_AUTH_METHODS:
        agents[name] = FakeAgent(
            name, f"{base}/{name}", f"http://agent-{name}.test", KeySet.generate()
        )
    receiver_server: TestServer | None = None
    try:
        port = _free_port()
        settings = webhook_settings(tmp_path, agents, port, configured_issuers)
        app = create_app(settings)
        receiver_server = TestServer(app, host="127.0.0.1", port=port)
        await receiver_server.start_server()
        async with aiohttp.ClientSession() as session:
            yield WebhookRig(
                app[RECEIVER], settings.webhook_url, Path(settings.database_url), agents, session
            )
    finally:
        if receiver_server is not None:
            await receiver_server.close()
        await agent_server.close()


def status_update(task_id: str, state: str = "TASK_STATE_WORKING") -> bytes:
    event = {
        "taskId": task_id,
        "contextId": "ctx-1",
        "status": {"state": state, "timestamp": "2025-01-01T00:00:00Z"},
    }
    return json.dumps({"statusUpdate": event}).encode()


def task_snapshot(task_id: str) -> bytes:
    return json.dumps({"task": agent_task(task_id)}).encode()


def artifact_update(task_id: str) -> bytes:
    artifact = {"artifactId": "art-1", "parts": [{"text": "hello"}]}
    event = {"taskId": task_id, "contextId": "ctx-1", "artifact": artifact, "lastChunk": True}
    return json.dumps({"artifactUpdate": event}).encode()


def v03_task(task_id: str) -> bytes:
    task = {
        "kind": "task",
        "id": task_id,
        "contextId": "ctx-1",
        "status": {"state": "working", "timestamp": "2025-01-01T00:00:00Z"},
    }
    return json.dumps(task).encode()


# ---- a configurable agent: card, keys, GetTask, CreateTaskPushNotificationConfig ---------


AUTH = {"Authorization": f"Bearer {API_KEY}"}


@dataclass
class Agent:
    keyset: KeySet = field(default_factory=KeySet.generate)
    base: str = ""
    card: Any = None
    """The agent card (any JSON); None: one naming ``/keys`` as the JWKS URL."""
    extension_uri: str = PUSH_SIGNING_EXTENSION_URI
    """The push-signing extension's URI in the default card."""
    card_raw: bytes | None = None
    create_gate: asyncio.Event | None = None
    """When set, CreateTaskPushNotificationConfig answers only once this event is set."""
    create_error: dict[str, Any] | None = None
    create_status: int = 200
    """The HTTP status of a ``create_error`` answer."""
    creates: int = 0
    state: str = "TASK_STATE_WORKING"
    """What GetTask says the task's state is."""
    get_tasks: int = 0

    @property
    def url(self) -> str:
        return self.base + "/rpc"

    def app(self) -> web.Application:
        async def card(request: web.Request) -> web.Response:
            if self.card_raw is not None:
                return web.Response(body=self.card_raw, content_type="application/json")
            extension = {
                "uri": self.extension_uri,
                "params": {"jwksUri": self.base + "/keys"},
            }
            default = {"name": "agent", "capabilities": {"extensions": [extension]}}
            return web.json_response(default if self.card is None else self.card)

        async def keys(request: web.Request) -> web.Response:
            return web.json_response(self.keyset.jwks())

        async def rpc(request: web.Request) -> web.Response:
            data = await request.json()
            params = data["params"]
            if data["method"] == "GetTask":
                self.get_tasks += 1
                task = {"id": params["id"], "contextId": "c", "status": {"state": self.state}}
                return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": task})
            self.creates += 1
            if self.create_gate is not None:
                await self.create_gate.wait()
            if self.create_error is not None:
                error = self.create_error
                return web.json_response(
                    {"jsonrpc": "2.0", "id": data["id"], "error": error}, status=self.create_status
                )
            return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": params})

        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", card)
        app.router.add_get("/keys", keys)  # nothing at /.well-known/jwks.json
        app.router.add_post("/rpc", rpc)
        return app


@asynccontextmanager
async def agent_server(agent: Agent, port: int | None = None) -> AsyncIterator[Agent]:
    server = TestServer(agent.app(), host="127.0.0.1", port=port or _free_port())
    await server.start_server()
    agent.base = str(server.make_url("")).rstrip("/")
    try:
        yield agent
    finally:
        await server.close()


def settings_for(tmp_path: Path, agent: dict[str, Any], **extra: Any) -> ReceiverSettings:
    return ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": _free_port(),
            "data_dir": tmp_path / "receiver",
            "agents": [agent],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
            **extra,
        }
    )


@asynccontextmanager
async def receiver_server(settings: ReceiverSettings) -> AsyncIterator[Receiver]:
    app = create_app(settings)
    server = TestServer(app, host="127.0.0.1", port=settings.port)
    await server.start_server()
    try:
        yield app[RECEIVER]
    finally:
        await server.close()


def signed_headers(
    agent: Agent, settings: ReceiverSettings, body: bytes, sub_id: str, task_id: str
) -> dict[str, str]:
    webhook_id = f"msg_{uuid.uuid4().hex}"
    jwt = WebhookSigner(agent.keyset, agent.url).sign(
        body=body,
        audience=settings.webhook_url,
        webhook_id=webhook_id,
        task_id=task_id,
        config_id=sub_id,
        seq=1,
    )
    return {
        "Content-Type": A2A_MEDIA_TYPE,
        HEADER_WEBHOOK_ID: webhook_id,
        HEADER_WEBHOOK_TIMESTAMP: str(int(time.time())),
        HEADER_SIGNATURE: jwt,
    }


async def stored_subscription(receiver: Receiver, agent_url: str, task_id: str) -> Subscription:
    sub = Subscription(
        id=f"sub_{uuid.uuid4().hex}",
        client_id="alice",
        agent_url=agent_url.rstrip("/"),
        task_id=task_id,
        token_digest=token_digest(uuid.uuid4().hex),
        state=SubscriptionState.ACTIVE,
        created_at=time.time() - 3600,
    )
    return await receiver.store.add_subscription(sub)
