"""``a2a-push gateway --log-format json`` as an operator runs it (its own process, on
SQLite and on PostgreSQL): every line it writes, on stderr and stdout, is a JSON object;
the webhook outcome lines name the delivery, task, config, endpoint origin, attempt,
status, latency, verdict and the trace the agent started; and no key, token,
credential, or webhook URL path or query appears anywhere in its output or its spans."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_push.testing import WebhookSink

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import ADMIN_KEY, AGENT_KEY, gateway_process, rpc
from ..tracing.otel_support import collector, require_otel
from .test_gateway_postgres import _create_schema

# The agent's trace: the gateway continues it (W3C traceparent on the event's post).
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TASK = "task-json-1"

# Per config: its id, its endpoint (sink), the URL's secret path and query, its token
# and credentials. None of these may be logged but the id and the URL's origin.
CONFIGS = {
    "flaky": ("/flaky/path-secret-1a2b", "sig=query-secret-1a2b", "token-secret-1a2b"),
    "dead": ("/dead/path-secret-3c4d", "sig=query-secret-3c4d", "token-secret-3c4d"),
    "fine": ("/fine/path-secret-5e6f", "sig=query-secret-5e6f", "token-secret-5e6f"),
}
CREDENTIALS = "credentials-secret-7a8b"


async def _database(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return str(tmp_path / "outbox.db")
    dsn, schema = require_postgres(), postgres_schema()  # dropped by conftest
    await _create_schema(dsn, schema)
    return f"{dsn}?search_path={schema}"


def _lines(text: list[str]) -> list[dict[str, Any]]:
    parsed = []
    for line in text:
        assert line.endswith("\n"), line
        parsed.append(json.loads(line))  # fails the test on a line that is not JSON
        assert isinstance(parsed[-1], dict), line
        assert {"time", "level", "logger", "message"} <= parsed[-1].keys(), line
    return parsed


def _outcomes(lines: list[str]) -> dict[str, dict[str, Any]]:
    """The webhook outcome lines parsed so far, by config id and verdict."""
    found = {}
    for line in lines:
        record = json.loads(line)
        if record.get("logger") == "a2a_push.webhooks":
            found[f"{record['config_id']}/{record['verdict']}"] = record
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_every_line_is_json_with_the_delivery_fields_and_no_secret(
    backend: str, tmp_path: Path
) -> None:
    require_otel()
    database = await _database(backend, tmp_path)
    async with (
        collector() as (found, endpoint),
        WebhookSink() as ok_sink,
        WebhookSink() as failing_sink,
        aiohttp.ClientSession() as session,
    ):
        ok_sink.script(CONFIGS["flaky"][0], [503])  # then 200: delivered after 2 attempts
        failing_sink.set_default(CONFIGS["dead"][0], 500)  # retried, then dead-lettered
        sinks = {"flaky": ok_sink, "dead": failing_sink, "fine": ok_sink}
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "A2A_GATEWAY_QUICK_ATTEMPTS": "2",
        }
        async with gateway_process(
            database,
            "--log-format",
            "json",
            "--log-level",
            "INFO",
            "--access-log",
            "--tracing",
            "--retry-schedule",
            "0.2s",
            env=env,
        ) as gateway:
            for config_id, (path, query, token) in CONFIGS.items():
                made = await rpc(
                    session,
                    gateway.url,
                    "CreateTaskPushNotificationConfig",
                    {
                        "taskId": TASK,
                        "id": config_id,
                        "url": f"{sinks[config_id].url(path)}?{query}",
                        "token": token,
                        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
                    },
                )
                assert "result" in made, made
            event = {
                "statusUpdate": {
                    "taskId": TASK,
                    "contextId": "ctx-1",
                    "status": {"state": "TASK_STATE_WORKING"},
                }
            }
            async with session.post(
                f"{gateway.url}/v1/tasks/{TASK}/events",
                json=event,
                headers={
                    "Authorization": f"Bearer {AGENT_KEY}",
                    "traceparent": f"00-{TRACE_ID}-{AGENT_SPAN}-01",
                },
            ) as resp:
                assert resp.status == 202, await resp.text()
            async with asyncio.timeout(30):
                while (
                    not {"flaky/delivered", "dead/retry", "dead/dead"}
                    <= _outcomes(gateway.stderr).keys()
                ):
                    assert gateway.process.returncode is None, "".join(gateway.stderr)
                    await asyncio.sleep(0.05)
            async with session.get(
                f"{gateway.url}/admin/deliveries?task={TASK}&state=dead",
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            ) as resp:
                dead_letters = (await resp.json())["deliveries"]
        # The gateway has stopped: its output is complete, its spans exported.

    stdout, stderr = _lines(gateway.stdout), _lines(gateway.stderr)
    assert len(stdout) == 1 and "listening on 127.0.0.1" in stdout[0]["message"], stdout
    outcomes = _outcomes(gateway.stderr)
    assert [d["id"] for d in dead_letters] == [outcomes["dead/dead"]["delivery_id"]]
    expected = {
        "flaky/delivered": (ok_sink, 2, 200),
        "dead/retry": (failing_sink, 2, 500),
        "dead/dead": (failing_sink, 3, 500),
    }
    for name, (sink, attempts, status) in expected.items():
        line = outcomes[name]
        assert line["task_id"] == TASK, line
        assert line["delivery_id"].startswith("msg_"), line
        assert line["endpoint"] == f"http://127.0.0.1:{sink.port}", line
        assert (line["attempt"], line["status"]) == (attempts, status), line
        assert isinstance(line["latency_ms"], float) and line["latency_ms"] >= 0, line
        assert line["trace_id"] == TRACE_ID, line  # the agent's trace
    assert outcomes["dead/dead"]["level"] == "WARNING"
    assert outcomes["dead/retry"]["delivery_id"] == outcomes["dead/dead"]["delivery_id"]
    # The access log's lines are JSON too (the requests above, by path).
    access = [line["message"] for line in stderr if line["logger"] == "aiohttp.access"]
    assert any(f"POST /v1/tasks/{TASK}/events" in m for m in access), access
    # Each webhook carried a traceparent of the agent's trace.
    for sink in (ok_sink, failing_sink):
        for webhook in sink.received:
            assert (webhook.header("traceparent") or "").split("-")[1] == TRACE_ID

    # The spans: the gateway's event continues the agent's span; the publish and each
    # attempt follow it, in the agent's trace.
    assert {s["trace_id"] for s in found.spans} == {TRACE_ID}, found.spans
    (event_span,) = found.named("a2a_push gateway event")
    assert event_span["parent_id"] == AGENT_SPAN
    assert event_span["attributes"]["http.response.status_code"] == 202
    assert event_span["attributes"]["a2a_push.agent"] == "agent-a"
    (publish,) = found.named("a2a_push publish")
    assert publish["parent_id"] == event_span["span_id"]
    attempts = found.named("a2a_push deliver")
    assert len(attempts) == 2 + 3 + 1  # flaky, dead, fine
    assert {s["parent_id"] for s in attempts} == {publish["span_id"]}

    everything = "".join(gateway.stdout + gateway.stderr) + json.dumps(found.spans)
    secrets = [AGENT_KEY, ADMIN_KEY, CREDENTIALS]
    for path, query, token in CONFIGS.values():
        secrets += [path, path.split("/")[2], query, query.split("=")[1], token]
    for secret in secrets:
        assert secret not in everything, secret
