"""Shared setup for the mock agent tests: the agent on a real local server, spoken to
over HTTP (JSON-RPC and REST) with an aiohttp session, and what its webhooks say."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import create_app
from a2a_push.testing import ReceivedWebhook

from .gateway_support import AGENT_KEY

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


def kinds(webhooks: list[ReceivedWebhook]) -> list[str]:
    """Each webhook as 'task:STATE', 'status:STATE' or 'artifact:NAME'."""
    out = []
    for hook in webhooks:
        body = json.loads(hook.body)
        if "task" in body:
            out.append(f"task:{body['task']['status']['state']}")
        elif "statusUpdate" in body:
            out.append(f"status:{body['statusUpdate']['status']['state']}")
        else:
            out.append(f"artifact:{body['artifactUpdate']['artifact']['name']}")
    return out


@asynccontextmanager
async def running_agent(tmp_path: Path, gateway_url: str | None = None) -> AsyncIterator[str]:
    """The mock agent on a real local server (in gateway mode with ``gateway_url``)."""
    server = TestServer(
        create_app(
            data_dir=tmp_path / "agent",
            allow_webhook_hosts=["127.0.0.1"],
            public_url="http://agent.test",
            step_delay=0.02,
            gateway_url=gateway_url,
            gateway_key=AGENT_KEY if gateway_url else None,
        ),
        host="127.0.0.1",
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
