"""Shared setup for gateway tests: a gateway app on a real local server, a webhook sink."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.gateway.app import GATEWAY, Gateway, create_app
from a2a_push.gateway.settings import GatewaySettings
from a2a_push.protocol.types import TaskState, TaskStatus, TaskStatusUpdateEvent

AGENT_KEY = "agent-a-key-0123456789"
OTHER_KEY = "agent-b-key-0123456789"
ADMIN_KEY = "admin-key-0123456789ab"


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
