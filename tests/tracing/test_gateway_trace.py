"""One trace across four real processes: the mock agent in gateway mode posts each
event to the gateway (GatewayClient, with its span's traceparent); the gateway's
publish continues that trace, and its attempts carry it to the receiver, which fetches
the task with GetTask. All export their spans with OTLP over HTTP to a collector here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ..gateway_support import AGENT_KEY, gateway_process
from ..mock_agent_support import mock_agent_process
from .otel_support import (
    collector,
    follow_until_completed,
    receiver_process,
    require_otel,
    start_report,
)


async def test_one_trace_from_the_agent_through_the_gateway_to_get_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_otel()
    async with collector() as (found, endpoint):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        async with (
            gateway_process(str(tmp_path / "gateway.db"), "--tracing") as gateway,
            mock_agent_process(
                tmp_path,
                "--tracing",
                "--step-delay",
                "0.3",
                "--gateway",
                gateway.url,
                "--gateway-key",
                AGENT_KEY,
            ) as agent,
            # The gateway signs the webhooks (the agent's card names its JWKS).
            receiver_process(tmp_path, agent.url, issuer=gateway.url) as (receiver_url, _),
            aiohttp.ClientSession() as session,
        ):
            task = await start_report(session, agent.url)
            await follow_until_completed(session, receiver_url, agent.url, task["id"])
        # All three have exited (the gateway last): their spans are flushed.

    def by_id(name: str, service: str) -> dict[str, dict[str, Any]]:
        spans = found.named(name)
        assert spans and {s["service"] for s in spans} == {service}, (name, found.spans)
        return {s["span_id"]: s for s in spans}

    posts = by_id("a2a_push post event", "a2a-push-mock-agent")
    events = by_id("a2a_push gateway event", "a2a-push-gateway")
    publishes = by_id("a2a_push publish", "a2a-push-gateway")
    attempts = by_id("a2a_push deliver", "a2a-push-gateway")
    webhooks = by_id("a2a_receiver webhook", "a2a-push-receiver")
    fetches = found.named("a2a_receiver GetTask")
    # The mock agent publishes nothing itself in gateway mode: every event is a post.
    assert not [s for s in found.named("a2a_push publish") if s["service"] != "a2a-push-gateway"]
    for post in posts.values():
        assert post["parent_id"] == ""  # a root: no request of the agent's was traced
        assert post["attributes"]["a2a_push.task_id"] == task["id"]
        assert post["attributes"]["a2a_push.tries"] == 1
    # Each post's trace continues at the gateway: post -> event -> publish.
    for event in events.values():
        assert event["parent_id"] in posts, event
        assert event["trace_id"] == posts[event["parent_id"]]["trace_id"]
        assert event["attributes"]["http.response.status_code"] == 202
    for publish in publishes.values():
        assert publish["parent_id"] in events, publish
    # ... and on to the receiver: a chain agent post -> gateway event -> publish ->
    # attempt -> webhook -> GetTask, all one trace.
    chains = 0
    for fetch in fetches:
        webhook = webhooks.get(fetch["parent_id"])
        attempt = attempts.get(webhook["parent_id"]) if webhook else None
        publish = publishes.get(attempt["parent_id"]) if attempt else None
        if publish is None:
            continue  # (a snapshot's webhook: no publish traced it)
        assert webhook is not None and attempt is not None
        event = events[publish["parent_id"]]
        post = posts[event["parent_id"]]
        assert len({s["trace_id"] for s in (post, event, publish, attempt, webhook, fetch)}) == 1
        assert attempt["attributes"]["a2a_push.verdict"] == "delivered"
        chains += 1
    assert chains, found.spans
