"""Shared setup for gateway tests: a gateway app on a real local server, a webhook sink."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.gateway.app import GATEWAY, Gateway, create_app
from a2a_push.gateway.settings import GatewaySettings
from a2a_push.protocol.types import TaskState, TaskStatus, TaskStatusUpdateEvent

AGENT_KEY = "agent-a-key-0123456789"
OTHER_KEY = "agent-b-key-0123456789"
ADMIN_KEY = "admin-key-0123456789ab"
REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway_settings(database: str, port: int = 0, **extra: Any) -> GatewaySettings:
    return GatewaySettings.model_validate(
        {
            "port": port or free_port(),
            "database": database,
            "agents": [
                {"id": "agent-a", "api_key": AGENT_KEY},
                {"id": "agent-b", "api_key": OTHER_KEY},
            ],
            "admin_keys": [ADMIN_KEY],
            "allow_webhook_hosts": ["127.0.0.1"],
            "key_reload_interval": 0.2,
            **extra,
        }
    )


@asynccontextmanager
async def running_gateway(settings: GatewaySettings) -> AsyncIterator[tuple[str, Gateway]]:
    app = create_app(settings)
    server = TestServer(app, host="127.0.0.1", port=settings.port or None)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), app[GATEWAY]
    finally:
        await server.close()


def gateway_command(port: int, database: str, *args: str) -> list[str]:
    """``a2a-push gateway`` on ``port`` and ``database``, for agent-a (AGENT_KEY), webhooks
    allowed to 127.0.0.1; then ``args``."""
    return [
        sys.executable,
        "-m",
        "a2a_push",
        "gateway",
        "--port",
        str(port),
        "--database",
        database,
        "--agent-key",
        f"agent-a:{AGENT_KEY}",
        "--allow-webhook-host",
        "127.0.0.1",
        *args,
    ]


@dataclass
class GatewayProcess:
    url: str
    process: asyncio.subprocess.Process
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


@asynccontextmanager
async def gateway_process(
    database: str, *args: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[GatewayProcess]:
    """``a2a-push gateway`` in its own process on a free port (agent-a with AGENT_KEY,
    ADMIN_KEY, webhooks allowed to 127.0.0.1), once it has announced it serves; every
    line it wrote on stdout and stderr, until it stops (SIGTERM) after the block."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *gateway_command(port, database, "--admin-key", ADMIN_KEY, *args),
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    gateway = GatewayProcess(f"http://127.0.0.1:{port}", process)

    async def collect(stream: asyncio.StreamReader, lines: list[str]) -> None:
        async for line in stream:
            lines.append(line.decode())

    readers = [
        asyncio.create_task(collect(process.stdout, gateway.stdout)),
        asyncio.create_task(collect(process.stderr, gateway.stderr)),
    ]
    try:
        async with asyncio.timeout(60):
            while not gateway.stdout:  # the announcement: it serves
                assert process.returncode is None, "".join(gateway.stderr)
                await asyncio.sleep(0.05)
        yield gateway
    finally:
        if process.returncode is None:
            process.terminate()  # (flushes the spans still batched, when tracing)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.wait_for(asyncio.gather(*readers), 5)


def status(task_id: str, state: TaskState, context: str = "ctx-1") -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id=context, status=TaskStatus(state=state)
    )


async def rpc(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    key: str = AGENT_KEY,
) -> dict[str, Any]:
    async with session.post(
        url + "/v1/rpc",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"},
    ) as resp:
        return dict(await resp.json())
