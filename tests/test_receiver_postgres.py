"""Receiver replicas on one PostgreSQL database: shared dedup, every replica's SSE sees
every update (LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from receiver.app import RECEIVER, create_app
from receiver.postgres_store import PostgresReceiverStore
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState
from receiver.verify import token_digest

from .conftest import postgres_schema, require_postgres
from .receiver_support import API_KEY, sse_frames

TOKEN = "replica-token-0123456789"


async def _agent() -> tuple[TestServer, str]:
    async def get_task(request: web.Request) -> web.Response:
        rpc = await request.json()
        task = {
            "id": rpc["params"]["id"],
            "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"},
        }
        return web.json_response({"jsonrpc": "2.0", "id": rpc["id"], "result": task})

    app = web.Application()
    app.router.add_post("/", get_task)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, str(server.make_url("/"))


async def test_two_replicas_share_dedup_and_every_sse_stream_sees_every_update(
    tmp_path: Path,
) -> None:
    dsn = require_postgres()
    schema = postgres_schema()
    agent_server, agent_url = await _agent()
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
        }
    )
    servers = []
    try:
        for _ in range(2):
            app = create_app(settings, store=PostgresReceiverStore(dsn, schema=schema))
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            servers.append(server)
        a, b = servers
        await a.app[RECEIVER].store.add_subscription(
            Subscription(
                "sub_1",
                "alice",
                agent_url.rstrip("/"),
                "t1",
                token_digest(TOKEN),
                SubscriptionState.ACTIVE,
                time.time(),
            )
        )
        body = {
            "statusUpdate": {
                "taskId": "t1",
                "contextId": "c",
                "status": {"state": "TASK_STATE_WORKING"},
            }
        }
        headers = {"X-A2A-Notification-Token": TOKEN, "webhook-id": "msg_retry_1"}
        async with aiohttp.ClientSession() as session:
            # An SSE client on replica B, before anything happens.
            stream = await session.get(
                b.make_url("/events"), headers={"Authorization": f"Bearer {API_KEY}"}
            )
            assert stream.status == 200
            async with session.post(
                a.make_url("/webhooks/a2a"), json=body, headers=headers
            ) as resp:
                assert (await resp.json())["status"] == "accepted"
            # The sender retries to the other replica: deduplicated there too.
            async with session.post(
                b.make_url("/webhooks/a2a"), json=body, headers=headers
            ) as resp:
                assert resp.status == 200 and (await resp.json())["status"] == "duplicate"
            text = ""
            while "TASK_STATE_COMPLETED" not in text:
                text += (await asyncio.wait_for(stream.content.readany(), 5)).decode()
            stream.close()
        frames: list[dict[str, Any]] = sse_frames(text)
        assert frames[-1]["data"]["taskId"] == "t1"
        notes = await a.app[RECEIVER].store.pending_fetches()
        assert notes == []  # fetched once, by replica A
    finally:
        for server in servers:
            await server.close()
        await agent_server.close()


async def test_ids_postgresql_cannot_store_are_400_not_500(tmp_path: Path) -> None:
    # NUL is the one character PostgreSQL text refuses (SQLite stores it): the client API
    # holds ids to the webhook rule first, and Last-Event-ID to int64 (BIGINT).
    dsn = require_postgres()
    agent_server, agent_url = await _agent()
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
        }
    )
    app = create_app(settings, store=PostgresReceiverStore(dsn, schema=postgres_schema()))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    auth = {"Authorization": f"Bearer {API_KEY}"}
    try:
        async with aiohttp.ClientSession() as session:
            for task_id in ("a\x00b", "\ud800", "t" * 257):
                raw = json.dumps({"agentUrl": agent_url, "taskId": task_id})
                async with session.post(
                    server.make_url("/subscriptions"),
                    data=raw,
                    headers={**auth, "Content-Type": "application/json"},
                ) as resp:
                    assert resp.status == 400 and (await resp.json())["error"] == "invalid"
            for path in ("/tasks?contextId=a%00b", "/tasks/a%00b"):
                async with session.get(server.make_url(path), headers=auth) as resp:
                    assert resp.status == 400 and (await resp.json())["error"] == "invalid"
            headers = {**auth, "Last-Event-ID": "9999999999999999999"}
            async with session.get(server.make_url("/events"), headers=headers) as resp:
                assert resp.status == 400 and resp.content_type == "application/json"
            async with session.get(server.make_url("/healthz")) as resp:
                assert resp.status == 200
    finally:
        await server.close()
        await agent_server.close()


async def test_workers_opening_a_new_schema_together_all_start() -> None:
    """CREATE SCHEMA IF NOT EXISTS is not safe concurrently: workers take turns."""
    dsn = require_postgres()
    schema = postgres_schema()  # dropped after the test by conftest
    stores = [PostgresReceiverStore(dsn, schema=schema) for _ in range(6)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
