"""Shared setup for the receiver tests: a mock agent and a receiver on real local servers."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from examples.mock_agent import create_app as create_agent_app
from receiver.app import RECEIVER, Receiver, create_app
from receiver.settings import ReceiverSettings

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
