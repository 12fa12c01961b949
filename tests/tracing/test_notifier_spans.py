"""Spans of a publish and of each delivery attempt, in one process: the SDK's in-memory
exporter; the webhook sink is a real HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tenacity import wait_fixed

from a2a_push import PushNotifier, tracing
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from .otel_support import require_otel


@pytest.fixture
def exporter() -> Iterator[Any]:
    require_otel()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.enable(provider)
    try:
        yield memory
    finally:
        tracing.disable()
        provider.shutdown()


def _ids(traceparent: str | None) -> tuple[int, int]:
    """The trace id and parent span id a W3C traceparent names."""
    assert traceparent is not None
    version, trace_id, span_id, _flags = traceparent.split("-")
    assert version == "00"
    return int(trace_id, 16), int(span_id, 16)


class Sink:
    """Answers 503 to the first ``fail`` requests, then 200; keeps each traceparent."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.traceparents: list[str | None] = []

    async def hook(self, request: web.Request) -> web.Response:
        self.traceparents.append(request.headers.get("traceparent"))
        if len(self.traceparents) <= self.fail:
            return web.Response(status=503)
        return web.Response(status=200)


@pytest.fixture
async def sink_url() -> AsyncIterator[tuple[Sink, str]]:
    sink = Sink(fail=1)
    app = web.Application()
    app.router.add_post("/hooks/secret-path", sink.hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield sink, str(server.make_url("/hooks/secret-path?token=secret-query"))
    finally:
        await server.close()


async def test_a_publish_and_its_attempts_are_one_trace(
    exporter: Any, sink_url: tuple[Sink, str]
) -> None:
    from opentelemetry.trace import SpanKind, StatusCode

    sink, url = sink_url
    notifier = PushNotifier.open(
        "memory://",
        issuer="http://agent.test",
        address_policy=AddressPolicy(["127.0.0.1"]),
        retry=RetryPolicy(quick_attempts=2, quick_wait=wait_fixed(0.01)),
    )
    async with notifier:
        await notifier.register_config(
            TaskPushNotificationConfig(task_id="t-1", id="c-1", url=url), owner="alice"
        )
        result = await notifier.publish(
            "t-1",
            TaskStatusUpdateEvent(
                task_id="t-1", context_id="x", status=TaskStatus(state=TaskState.WORKING)
            ),
        )
        await notifier.wait_settled(result.delivery_ids, timeout=10)
        stored = await notifier.store.get_delivery(result.delivery_ids[0])
    spans = exporter.get_finished_spans()
    publish = [s for s in spans if s.name == "a2a_push publish"]
    attempts = sorted(
        (s for s in spans if s.name == "a2a_push deliver"), key=lambda s: s.start_time
    )
    assert len(publish) == 1 and len(attempts) == 2, [s.name for s in spans]
    (pub,) = publish
    assert pub.kind is SpanKind.PRODUCER
    assert pub.attributes["a2a_push.task_id"] == "t-1"
    assert pub.attributes["a2a_push.deliveries"] == 1
    trace_id = pub.context.trace_id
    # Stored with the delivery: the publish's own context.
    assert stored is not None
    assert _ids(stored.traceparent) == (trace_id, pub.context.span_id)
    for number, (span, status, verdict) in enumerate(
        zip(attempts, (503, 200), ("retry", "delivered"), strict=True), start=1
    ):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and span.parent.span_id == pub.context.span_id
        assert span.context.trace_id == trace_id
        assert span.attributes["http.response.status_code"] == status
        assert span.attributes["a2a_push.verdict"] == verdict
        assert span.attributes["a2a_push.attempt"] == number
        assert span.attributes["server.address"] == "127.0.0.1"
        # Each request carried its own attempt's context.
        assert _ids(sink.traceparents[number - 1]) == (trace_id, span.context.span_id)
    assert attempts[0].status.status_code is StatusCode.ERROR
    assert attempts[1].status.status_code is StatusCode.UNSET
    # No attribute holds the URL's path or query.
    for span in spans:
        for value in span.attributes.values():
            assert "secret" not in str(value), span.attributes


async def test_a_delivery_carries_its_stored_traceparent_from_a_process_that_does_not_trace(
    exporter: Any, sink_url: tuple[Sink, str]
) -> None:
    """Published traced, sent by a dispatcher with tracing off (a replica without it):
    the webhook still names the publish, so the receiver continues its trace."""
    sink, url = sink_url
    sink.fail = 0
    notifier = PushNotifier.open(
        "memory://", issuer="http://agent.test", address_policy=AddressPolicy(["127.0.0.1"])
    )
    async with notifier:
        await notifier.register_config(
            TaskPushNotificationConfig(task_id="t-2", id="c-1", url=url), owner="alice"
        )
        await notifier.dispatcher.stop()
        published = await notifier.publish(
            "t-2",
            TaskStatusUpdateEvent(
                task_id="t-2", context_id="x", status=TaskStatus(state=TaskState.WORKING)
            ),
        )
        tracing.disable()
        notifier.dispatcher.start()
        await notifier.wait_settled(published.delivery_ids, timeout=10)
    (pub,) = [s for s in exporter.get_finished_spans() if s.name == "a2a_push publish"]
    assert len(sink.traceparents) == 1
    assert _ids(sink.traceparents[0]) == (pub.context.trace_id, pub.context.span_id)
