"""Receiver replicas on one PostgreSQL database: shared dedup, every replica's SSE sees
every update (LISTEN/NOTIFY), a repeated subscribe on another replica; and a DSN the
server refuses, explained in one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.errors import StoreUnusableError
from receiver.api import RECEIVER, create_app
from receiver.postgres_store import PostgresReceiverStore
from receiver.settings import ReceiverSettings
from receiver.store import Subscription, SubscriptionState
from receiver.verify import token_digest

from ..conftest import postgres_schema, require_postgres
from ..receiver_support import API_KEY, sse_frames

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


async def _replicas(
    settings: ReceiverSettings, dsn: str, schema: str, servers: list[TestServer]
) -> list[TestServer]:
    """Two receivers on one PostgreSQL schema, appended to ``servers`` (for the caller
    to close) as they start."""
    for _ in range(2):
        app = create_app(settings, store=PostgresReceiverStore(dsn, schema=schema))
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
    return servers


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
    servers: list[TestServer] = []
    try:
        a, b = await _replicas(settings, dsn, schema, servers)
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


async def test_a_confirmed_subscription_is_200_at_once_on_another_replica(
    tmp_path: Path,
) -> None:
    dsn = require_postgres()
    schema = postgres_schema()
    agent_server, agent_url = await _agent()  # accepts any push config
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": agent_url, "auth": ["token"]}],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
        }
    )
    auth = {"Authorization": f"Bearer {API_KEY}"}
    body = {"agentUrl": agent_url, "taskId": "t1"}
    servers: list[TestServer] = []
    try:
        a, b = await _replicas(settings, dsn, schema, servers)
        async with aiohttp.ClientSession() as session:
            async with session.post(a.make_url("/subscriptions"), json=body, headers=auth) as r:
                assert r.status == 201
                created = await r.json()
            # Not 409 for the creation window: replica A confirmed it in the database.
            async with session.post(b.make_url("/subscriptions"), json=body, headers=auth) as r:
                assert (r.status, await r.json()) == (200, created)
    finally:
        for server in servers:
            await server.close()
        await agent_server.close()


def _missing_database_dsn() -> tuple[str, str, str]:
    """(DSN of a database that does not exist, its name, the password in the DSN)."""
    parts = urlsplit(require_postgres())
    name = f"a2a_push_missing_{uuid.uuid4().hex[:12]}"
    password = parts.password or "s3cret-password"  # trust auth: any password will do
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{parts.username or 'postgres'}:{password}@{host}"
    return urlunsplit(parts._replace(netloc=netloc, path="/" + name)), name, password


async def test_the_store_says_what_to_fix_when_the_server_refuses_the_dsn() -> None:
    dsn, name, password = _missing_database_dsn()
    with pytest.raises(StoreUnusableError) as caught:
        await PostgresReceiverStore(dsn).open()
    message = str(caught.value)
    assert f'database "{name}" does not exist' in message
    assert "create that database" in message and password not in message
    parts = urlsplit(dsn)
    # A role that does not exist: the same kind of error, another thing to fix.
    no_role = urlunsplit(
        parts._replace(
            netloc=f"no_such_role_{uuid.uuid4().hex[:8]}@{parts.hostname}:{parts.port or 5432}"
        )
    )
    with pytest.raises(StoreUnusableError, match="fix the user name in the DSN"):
        await PostgresReceiverStore(no_role).open()


@pytest.mark.parametrize("command", [["a2a_push", "receiver"], ["receiver"]])
def test_a_database_that_does_not_exist_stops_the_command_with_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    dsn, name, password = _missing_database_dsn()
    parts = urlsplit(dsn)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            *command,
            "--database",
            dsn,
            "--agent",
            "http://127.0.0.1:9/",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    where = f"{parts.scheme}://{parts.username}@{parts.hostname}:{parts.port or 5432}/{name}"
    prog = "a2a-push" if command[0] == "a2a_push" else "python -m receiver"
    assert proc.stderr.startswith(f"{prog}: error: cannot use PostgreSQL at {where}: ")
    assert f'database "{name}" does not exist' in proc.stderr
    assert "create that database" in proc.stderr
    assert password not in proc.stderr and password not in proc.stdout
