"""Shared setup for the mock agent tests: the agent on a real local server, spoken to
over HTTP (JSON-RPC and REST) with an aiohttp session, and what its webhooks say."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import create_app
from a2a_push.testing import ReceivedWebhook

from .gateway_support import AGENT_KEY, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

ALICE = {"Authorization": "Bearer alice-token", "A2A-Version": "1.0"}
BOB = {"Authorization": "Bearer bob-token", "A2A-Version": "1.0"}
ALICE_V03 = {"Authorization": "Bearer alice-token", "A2A-Version": "0.3"}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **fields,
    }


def describe_event(event: dict[str, Any]) -> str:
    """A v1.0 StreamResponse (a webhook's body, a stream's event) as 'task:STATE',
    'status:STATE' or 'artifact:NAME'."""
    [(kind, body)] = event.items()
    if kind == "task":
        return f"task:{body['status']['state']}"
    if kind == "statusUpdate":
        return f"status:{body['status']['state']}"
    assert kind == "artifactUpdate", kind
    return f"artifact:{body['artifact']['name']}"


def kinds(webhooks: list[ReceivedWebhook]) -> list[str]:
    """Each webhook as 'task:STATE', 'status:STATE' or 'artifact:NAME'."""
    return [describe_event(json.loads(hook.body)) for hook in webhooks]


@asynccontextmanager
async def running_agent(
    tmp_path: Path, gateway_url: str | None = None, *, own_url: bool = False
) -> AsyncIterator[str]:
    """The mock agent on a real local server (in gateway mode with ``gateway_url``).
    ``own_url``: its card and JWT issuer name the URL it serves at (its JWK Set can be
    fetched from the card), not ``http://agent.test``."""
    port = free_port() if own_url else None
    server = TestServer(
        create_app(
            data_dir=tmp_path / "agent",
            allow_webhook_hosts=["127.0.0.1"],
            public_url=f"http://127.0.0.1:{port}" if own_url else "http://agent.test",
            step_delay=0.02,
            gateway_url=gateway_url,
            gateway_key=AGENT_KEY if gateway_url else None,
        ),
        host="127.0.0.1",
        port=port,
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


@dataclass
class Agent:
    url: str
    process: asyncio.subprocess.Process
    stderr: list[str] = field(default_factory=list)

    async def wait_for_stderr(self, pattern: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.stderr:
                if re.search(pattern, line):
                    return line
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.05)
        raise AssertionError(f"no stderr line matches {pattern!r}:\n" + "".join(self.stderr))


@asynccontextmanager
async def mock_agent_process(tmp_path: Path, *extra: str) -> AsyncIterator[Agent]:
    """``python -m a2a_push.mock_agent`` on a free port, webhooks allowed to 127.0.0.1."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2a_push.mock_agent",
        "--port",
        str(port),
        "--allow-webhook-host",
        "127.0.0.1",
        "--data-dir",
        str(tmp_path / "agent"),
        "--step-delay",
        "0.01",
        *extra,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    agent = Agent(f"http://127.0.0.1:{port}", process)

    async def collect(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            agent.stderr.append(line.decode())

    reader = asyncio.create_task(collect(process.stderr))
    try:
        banner = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert f"listening on 127.0.0.1:{port}" in banner, (banner, agent.stderr)
        # The banner means the port is bound: the agent answers at once.
        async with (
            aiohttp.ClientSession() as session,
            session.get(agent.url + "/.well-known/agent-card.json") as response,
        ):
            assert response.status == 200
        yield agent
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.wait_for(reader, 5)
