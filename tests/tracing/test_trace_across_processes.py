"""One trace across real processes: the mock agent publishes (its embedded notifier)
and sends each webhook to the receiver, which fetches the task with GetTask. Both
export their spans with OTLP over HTTP to a collector in this test; both log JSON lines,
parsed here: the fields are there, and no token or webhook URL path/query is."""

from __future__ import annotations

import asyncio
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
from ..mock_agent_support import ALICE, mock_agent_process, result
from .otel_support import require_otel

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "alice-api-key-0123456789"


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
async def receiver_process(tmp_path: Path, agent_url: str) -> AsyncIterator[tuple[str, list[str]]]:
    port = free_port()
    config = tmp_path / "receiver.json"
    config.write_text(
        json.dumps(
            {
                "agents": [{"url": agent_url + "/", "credentials": "Bearer alice-token"}],
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


async def test_one_trace_from_the_publish_through_the_webhook_to_get_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_otel()
    dead_port = free_port()  # nothing listens: a second config's webhooks are retried
    secret_path = "/hooks/path-secret-0f3a"
    secret_query = "token=query-secret-9c1b"
    secret_token = "config-token-secret-77aa"
    async with collector() as (found, endpoint):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("A2A_PUSH_LOG_FORMAT", "json")
        async with (
            mock_agent_process(
                tmp_path, "--tracing", "--log-level", "INFO", "--step-delay", "0.3"
            ) as agent,
            receiver_process(tmp_path, agent.url) as (receiver_url, receiver_lines),
            aiohttp.ClientSession() as session,
        ):
            message = {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": "report"}],
            }
            task = (
                await result(
                    session,
                    agent.url,
                    "SendMessage",
                    {"message": message, "configuration": {"returnImmediately": True}},
                )
            )["task"]
            await result(
                session,
                agent.url,
                "CreateTaskPushNotificationConfig",
                {
                    "taskId": task["id"],
                    "id": "dead-one",
                    "url": f"http://127.0.0.1:{dead_port}{secret_path}?{secret_query}",
                    "token": secret_token,
                },
                ALICE,
            )
            async with session.post(
                receiver_url + "/subscriptions",
                json={"agentUrl": agent.url + "/", "taskId": task["id"]},
                headers={"Authorization": f"Bearer {API_KEY}"},
            ) as resp:
                assert resp.status in (200, 201), await resp.text()
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                async with session.get(
                    f"{receiver_url}/tasks/{task['id']}",
                    headers={"Authorization": f"Bearer {API_KEY}"},
                ) as resp:
                    body = await resp.json()
                if resp.status == 200 and body["status"]["state"] == "TASK_STATE_COMPLETED":
                    break
                assert asyncio.get_running_loop().time() < deadline, body
                await asyncio.sleep(0.1)
            await agent.wait_for_stderr('"verdict": "retry"')
            configs = await result(
                session, agent.url, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}
            )
        # Both processes have exited: their spans are flushed.
    receiver_config = next(c for c in configs["configs"] if c["id"] != "dead-one")

    publishes = {s["span_id"]: s for s in found.named("a2a_push publish")}
    delivers = {s["span_id"]: s for s in found.named("a2a_push deliver")}
    webhooks = {s["span_id"]: s for s in found.named("a2a_receiver webhook")}
    fetches = found.named("a2a_receiver GetTask")
    assert publishes and delivers and webhooks and fetches, found.spans
    assert {s["service"] for s in publishes.values()} == {"a2a-push-mock-agent"}
    assert {s["service"] for s in webhooks.values()} == {"a2a-push-receiver"}
    # A chain publish -> attempt -> the receiver's webhook -> its GetTask, one trace id.
    chains = []
    for fetch in fetches:
        webhook = webhooks.get(fetch["parent_id"])
        attempt = delivers.get(webhook["parent_id"]) if webhook else None
        publish = publishes.get(attempt["parent_id"]) if attempt else None
        if publish is not None:
            assert webhook is not None and attempt is not None
            assert (
                publish["trace_id"]
                == attempt["trace_id"]
                == webhook["trace_id"]
                == fetch["trace_id"]
            )
            assert attempt["attributes"]["a2a_push.verdict"] == "delivered"
            assert attempt["attributes"]["http.response.status_code"] == 200
            chains.append(fetch)
    assert chains, found.spans
    # The dead endpoint's attempts (its lane's head: the snapshot queued when its config
    # was created, which no publish traced): verdict retry, no HTTP answer.
    dead = [s for s in delivers.values() if s["attributes"]["server.port"] == dead_port]
    assert dead
    assert {s["attributes"]["a2a_push.verdict"] for s in dead} == {"retry"}
    assert all(s["attributes"]["error.type"] == "refused" for s in dead)

    # JSON lines: every line of both processes parses; the retry lines carry the fields.
    agent_lines = [json.loads(line) for line in agent.stderr if line.strip()]
    receiver_json = [json.loads(line) for line in receiver_lines if line.strip()]
    for line in agent_lines + receiver_json:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    retries = [line for line in agent_lines if line.get("verdict") == "retry"]
    assert retries, agent_lines
    retry = retries[0]
    assert retry["logger"] == "a2a_push.webhooks" and retry["level"] == "INFO"
    assert retry["endpoint"] == f"http://127.0.0.1:{dead_port}"
    assert retry["task_id"] == task["id"] and retry["config_id"] == "dead-one"
    assert retry["delivery_id"] and retry["attempt"] >= 1
    assert retry["error_class"] == "refused" and isinstance(retry["latency_ms"], float)
    assert "trace_id" not in retry  # (the snapshot was queued untraced)
    # No secret in any line: tokens, the URLs' paths and queries.
    everything = "".join(agent.stderr) + "".join(receiver_lines)
    receiver_url_path = receiver_config["url"].split("://", 1)[1].partition("/")[2]
    for secret in (
        secret_path,
        secret_query,
        secret_token,
        receiver_config.get("token") or "no-token",
        "alice-token",
        API_KEY,
    ):
        assert secret not in everything, secret
    if receiver_url_path.strip("/"):
        assert receiver_url_path not in everything
    assert os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == endpoint
