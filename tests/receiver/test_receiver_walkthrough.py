"""Found by walking through the receiver as an operator and a client developer: a
database outage answers JSON 503s (not aiohttp's text 500 and a traceback per request)
while SSE streams stay open and resume; any other failure is a JSON 500; a 405 says
which methods a path takes; a damaged generated API keys file is one line, not a
traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import create_app as create_agent_app
from receiver.api import create_app
from receiver.postgres_store import PostgresReceiverStore

from ..conftest import postgres_schema, require_postgres
from ..receiver_support import (
    AGENT_AUTH,
    AGENT_PUBLIC,
    _free_port,
    receiver_settings,
    rig,
    sse_frames,
    until,
)
from ..store.test_store_postgres import TcpProxy, via


async def _read_stream(resp: aiohttp.ClientResponse, into: list[str]) -> None:
    with contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
        async for chunk in resp.content.iter_any():
            into.append(chunk.decode())


def _no_store_tracebacks(records: list[logging.LogRecord]) -> None:
    for record in records:
        assert not record.exc_info, f"a traceback was logged: {record.getMessage()}"


async def test_a_database_outage_is_a_json_503_and_sse_streams_wait_through_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = require_postgres()
    upstream = urlsplit(dsn)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)
    await proxy.start()
    agent_server = TestServer(
        create_agent_app(
            data_dir=tmp_path / "agent",
            allow_webhook_hosts=["127.0.0.1"],
            public_url=AGENT_PUBLIC,
            step_delay=0.05,
            retry_schedule=[0.5] * 40,
        ),
        host="127.0.0.1",
    )
    await agent_server.start_server()
    agent_url = str(agent_server.make_url("/"))
    settings = receiver_settings(tmp_path, agent_url, _free_port())
    store = PostgresReceiverStore(via(dsn, proxy.port), schema=postgres_schema())
    app = create_app(settings, store=store)
    server = TestServer(app, host="127.0.0.1", port=settings.port)
    await server.start_server()
    base = settings.base_url
    auth = {"Authorization": "Bearer alice-api-key-0123456789"}
    caplog.set_level(logging.INFO)
    stream: list[str] = []
    late_stream: list[str] = []
    reader: asyncio.Task[None] | None = None
    late_reader: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as session:

            async def rpc(method: str, params: dict[str, Any]) -> Any:
                body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                headers = {**AGENT_AUTH, "A2A-Version": "1.0"}
                async with session.post(agent_url, json=body, headers=headers) as resp:
                    return (await resp.json())["result"]

            def message(text: str, task_id: str | None = None) -> dict[str, Any]:
                msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER"}
                msg["parts"] = [{"text": text}]  # type: ignore[assignment]
                if task_id is not None:
                    msg["taskId"] = task_id
                return {"message": msg}

            task = (await rpc("SendMessage", message("book a table")))["task"]
            body = {"agentUrl": agent_url, "taskId": task["id"]}
            async with session.post(base + "/subscriptions", json=body, headers=auth) as resp:
                assert resp.status == 201, await resp.text()
            events = await session.get(base + "/events", headers=auth)
            reader = asyncio.create_task(_read_stream(events, stream))

            def states(chunks: list[str] = stream) -> list[str]:
                frames = sse_frames("".join(chunks))
                return [f["data"]["task"]["status"]["state"] for f in frames]

            await until(lambda: "TASK_STATE_INPUT_REQUIRED" in states(), "input-required")

            await proxy.stop()  # the database goes away
            for method, path, kwargs in (
                ("GET", "/subscriptions", {}),
                ("GET", f"/tasks/{task['id']}", {}),
                ("POST", "/subscriptions", {"json": body}),
            ):
                async with session.request(method, base + path, headers=auth, **kwargs) as resp:
                    assert resp.status == 503, (path, await resp.text())
                    assert resp.content_type == "application/json"
                    assert resp.headers["Retry-After"] == "2"
                    assert (await resp.json())["error"] == "unavailable"
            # A webhook that arrives now: 503 (retried by its sender), nothing stored.
            hook = {"statusUpdate": {"taskId": task["id"], "status": {"state": "x"}}}
            async with session.post(
                base + "/webhooks/a2a",
                data=json.dumps(hook),
                headers={"Content-Type": "application/json", "A2A-Notification-Token": "t"},
            ) as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "2"
                assert (await resp.json())["error"] == "unavailable"
            # The task goes on meanwhile: its webhooks get 503 and are retried.
            await rpc("SendMessage", message("friday", task["id"]))
            # A client (re)connecting now: its stream opens, and waits for the database
            # (it used to end at once with a traceback, and the client reconnect in a loop).
            late = await session.get(base + "/events", headers=auth)
            assert late.status == 200
            late_reader = asyncio.create_task(_read_stream(late, late_stream))
            await asyncio.sleep(2.5)  # its reads fail at least twice meanwhile
            assert not reader.done() and not late_reader.done()  # both streams still open

            await proxy.start()  # the database comes back
            # Nothing lost: the same streams (never reconnected) see the task complete.
            await until(lambda: "TASK_STATE_COMPLETED" in states(), "completed", timeout=20)
            await until(
                lambda: "TASK_STATE_COMPLETED" in states(late_stream), "late stream", timeout=20
            )
            # The late one starts from the beginning (no Last-Event-ID): every event.
            assert states(late_stream) == states()
            assert not reader.done() and not late_reader.done()
    finally:
        for task_ in (reader, late_reader):
            if task_ is not None:
                task_.cancel()
                await asyncio.gather(task_, return_exceptions=True)
        await server.close()
        await agent_server.close()
        with contextlib.suppress(AssertionError):
            await proxy.stop()
    ours = [r for r in caplog.records if r.name.startswith("receiver")]
    _no_store_tracebacks(ours)
    messages = [r.getMessage() for r in ours]
    assert any("answered 503: the receiver's database is unavailable" in m for m in messages)
    assert sum("SSE streams wait" in m for m in messages) == 1, messages
    assert not any(r.name == "aiohttp.server" for r in caplog.records)


async def test_any_other_failure_is_a_json_500_and_a_405_names_the_methods(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        async with r.session.put(r.receiver_url + "/subscriptions", headers=r.api()) as resp:
            assert resp.status == 405
            assert resp.content_type == "application/json"
            assert set(resp.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}
        # The store closed under the app (a failure the receiver has no answer for).
        await r.receiver.store.close()
        async with r.session.get(r.receiver_url + "/subscriptions", headers=r.api()) as resp:
            assert resp.status == 500
            assert resp.content_type == "application/json"
            assert (await resp.json())["error"] == "internal"


@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"default": 5}', b"[]", b"{}", b'{"default": ""}', b"\xff\xfe"],
)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_damaged_api_keys_file_is_one_line(tmp_path: Path, content: bytes, workers: int) -> None:
    (tmp_path / "api-keys.json").write_bytes(content)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "receiver",
            "--agent",
            "http://127.0.0.1:9/",
            "--port",
            str(_free_port()),
            "--data-dir",
            str(tmp_path),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # workers started despite the file go down with it
    )
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "error" in line]
    assert lines == [lines[0]] and lines[0].startswith("python -m receiver: error: "), stderr
    assert str(tmp_path / "api-keys.json") in lines[0]
    assert "delete it to have a new key generated" in lines[0]


async def test_a_generated_api_keys_file_is_read_back_after_a_restart(tmp_path: Path) -> None:
    """The checks refuse no file the receiver wrote itself."""
    settings = receiver_settings(tmp_path, "http://127.0.0.1:9/", _free_port())
    settings = settings.model_copy(update={"api_keys": ()})
    for _ in range(2):  # the first start writes the file, the second reads it
        server = TestServer(create_app(settings), host="127.0.0.1", port=settings.port)
        await server.start_server()
        try:
            keys = json.loads((settings.data_dir / "api-keys.json").read_text())
            headers = {"Authorization": f"Bearer {keys['default']}"}
            async with (
                aiohttp.ClientSession() as session,
                session.get(settings.base_url + "/subscriptions", headers=headers) as resp,
            ):
                assert resp.status == 200
        finally:
            await server.close()
