"""For the tracing tests: OpenTelemetry is a dev dependency (the otel extra). Without it
the tests skip, saying why; under CI=true they fail instead (CI installs the extra).
An OTLP/HTTP collector to export spans to, and a receiver process that logs JSON lines
and traces."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ..gateway_support import free_port
from ..mock_agent_support import result

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "alice-api-key-0123456789"


def require_otel() -> None:
    missing = [
        name
        for name in (
            "opentelemetry.sdk",
            "opentelemetry.exporter.otlp.proto.http",
            "opentelemetry.proto",
        )
        if importlib.util.find_spec(name.split(".")[0]) is None or _missing(name)
    ]
    if not missing:
        return
    reason = f"OpenTelemetry is not installed ({', '.join(missing)}): pip install -e '.[dev,otel]'"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True


class Collector:
    """An OTLP/HTTP trace endpoint: every span it is sent, by service."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    async def traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "service": service,
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_id": span.parent_span_id.hex(),
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                        }
                    )
        return web.Response(status=200, content_type="application/x-protobuf")

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@asynccontextmanager
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield found, str(server.make_url("/v1/traces"))
    finally:
        await server.close()


@asynccontextmanager
async def receiver_process(
    tmp_path: Path, agent_url: str, **agent: str
) -> AsyncIterator[tuple[str, list[str]]]:
    """A receiver (JSON logs, tracing) for the agent at ``agent_url`` (``agent``: more of
    its entry's settings); its URL and its stderr lines."""
    port = free_port()
    config = tmp_path / "receiver.json"
    config.write_text(
        json.dumps(
            {
                "agents": [{"url": agent_url + "/", "credentials": "Bearer alice-token", **agent}],
                "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
                "fetch_coalesce_seconds": 0.01,
            }
        )
    )
    config.chmod(0o600)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "receiver",
        "--config",
        str(config),
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "receiver"),
        "--log-format",
        "json",
        "--log-level",
        "INFO",
        "--tracing",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    lines: list[str] = []

    async def collect(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            lines.append(line.decode())

    reader = asyncio.create_task(collect(process.stderr))
    try:
        banner = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert "receiver: webhooks at" in banner, (banner, lines)
        yield f"http://127.0.0.1:{port}", lines
    finally:
        if process.returncode is None:
            process.terminate()  # flushes the spans still batched (atexit)
            await asyncio.wait_for(process.wait(), 15)
        await asyncio.wait_for(reader, 5)


async def start_report(session: aiohttp.ClientSession, agent_url: str) -> dict[str, Any]:
    """Ask the mock agent for a report (its task runs on after the answer); the task."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "report"}]}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    return dict((await result(session, agent_url, "SendMessage", params))["task"])


async def follow_until_completed(
    session: aiohttp.ClientSession, receiver_url: str, agent_url: str, task_id: str
) -> None:
    """Subscribe the receiver to the task, and wait until it has seen it completed."""
    auth = {"Authorization": f"Bearer {API_KEY}"}
    async with session.post(
        receiver_url + "/subscriptions",
        json={"agentUrl": agent_url + "/", "taskId": task_id},
        headers=auth,
    ) as resp:
        assert resp.status in (200, 201), await resp.text()
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        async with session.get(f"{receiver_url}/tasks/{task_id}", headers=auth) as resp:
            body = await resp.json()
        if resp.status == 200 and body["status"]["state"] == "TASK_STATE_COMPLETED":
            return
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)
