"""OpenTelemetry tracing, only when asked for (the ``a2a-push[otel]`` extra).

Nothing here imports ``opentelemetry`` until :func:`enable` (or
:func:`configure_service`) runs: without it every helper is a cheap no-op, and a
process that never enables tracing never loads the package, installed or not.

Enabled, the spans are:

- ``a2a_push publish`` (PRODUCER): a publish, up to its durable enqueue; its W3C
  ``traceparent`` is stored with each delivery it queued.
- ``a2a_push deliver`` (CLIENT): each HTTP attempt of a delivery, a child of the
  publish that queued it; its ``traceparent`` goes on the webhook's request. Its
  attributes: the endpoint's origin (never the URL's path or query), the HTTP status
  or the error class, and the attempt's verdict as the attempt history records it.
- ``a2a_receiver webhook`` (SERVER) and ``a2a_receiver GetTask`` (CLIENT): the
  receiver continuing the trace the webhook's ``traceparent`` names.

A delivery queued with a ``traceparent`` carries it on its webhooks even from a
process that does not trace (a gateway replica with tracing off): the receiver's span
is then a child of the publish.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

TRACEPARENT: Final = "traceparent"
INSTRUMENTATION: Final = "a2a_push"
OTEL_EXTRA_HINT: Final = "install the otel extra: pip install 'a2a-push[otel]'"

_tracer: Any = None  # an opentelemetry Tracer while tracing is enabled


class TracingUnavailableError(RuntimeError):
    """Tracing was asked for, and the OpenTelemetry packages are not installed."""


def enabled() -> bool:
    return _tracer is not None


def enable(tracer_provider: Any = None) -> None:
    """Trace publishes, deliveries and the receiver's work with ``tracer_provider``
    (default: OpenTelemetry's global one, as the application configured it)."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        raise TracingUnavailableError(f"tracing needs OpenTelemetry: {OTEL_EXTRA_HINT}") from None
    from importlib.metadata import version

    _tracer = trace.get_tracer(
        INSTRUMENTATION, version("a2a-push"), tracer_provider=tracer_provider
    )


def disable() -> None:
    global _tracer
    _tracer = None


def configure_service(service_name: str) -> None:
    """For the services (gateway, receiver, mock agent): export spans with OTLP over
    HTTP, where the standard ``OTEL_EXPORTER_OTLP_*`` variables say (default
    ``http://localhost:4318``), as ``OTEL_SERVICE_NAME`` or ``service_name``; unless
    the process already has an SDK provider (run under ``opentelemetry-instrument``),
    which is used as it is. Raises :class:`TracingUnavailableError` without the extra."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TracingUnavailableError(
            f"tracing needs OpenTelemetry's SDK and OTLP exporter: {OTEL_EXTRA_HINT}"
        ) from None
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    enable()


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a W3C ``traceparent`` names (for log lines); None if it is not one."""
    if traceparent is None:
        return None
    parts = traceparent.split("-")
    if len(parts) < 4 or len(parts[1]) != 32:
        return None
    return parts[1]


def current_trace_id() -> str | None:
    """The trace id of the span current here, when tracing is on and there is one."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


@functools.cache
def _propagator() -> Any:
    """OpenTelemetry's W3C trace-context propagator, imported and built on first use."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def _inject(context: Any) -> str | None:
    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context)
    return carrier.get(TRACEPARENT)


def _extract(headers: Mapping[str, str] | None) -> Any:
    if not headers:
        return None
    value = headers.get(TRACEPARENT)
    if not value:
        return None
    return _propagator().extract({TRACEPARENT: value})


@contextlib.contextmanager
def publish_span(task_id: str, kind: str) -> Iterator[str | None]:
    """A publish's span, current inside; yields its ``traceparent`` (None: not traced)."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attributes = {"a2a_push.task_id": task_id, "a2a_push.event": kind}
    with _tracer.start_as_current_span(
        "a2a_push publish", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield _inject(None)
        del span


def annotate(**attributes: str | int | float | bool) -> None:
    """Attributes for the current span (nothing when not tracing)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(attributes)


def start_attempt(
    traceparent: str | None,
    *,
    url: Any,
    delivery_id: str,
    task_id: str,
    config_id: str,
    attempt: int,
) -> tuple[Any, str | None]:
    """Start a delivery attempt's span (a child of the publish ``traceparent`` names, or
    of nothing); the span (None when not tracing) and the ``traceparent`` header to send
    (the publish's own when not tracing). ``url``: the webhook's ``yarl.URL``; only its
    origin is recorded."""
    if _tracer is None:
        return None, traceparent
    from opentelemetry.trace import SpanKind

    span = _tracer.start_span(
        "a2a_push deliver",
        context=_extract({TRACEPARENT: traceparent} if traceparent else None),
        kind=SpanKind.CLIENT,
        attributes={
            "http.request.method": "POST",
            "url.scheme": url.scheme,
            "server.address": url.host or "",
            "server.port": url.port or 0,
            "a2a_push.delivery_id": delivery_id,
            "a2a_push.task_id": task_id,
            "a2a_push.config_id": config_id,
            "a2a_push.attempt": attempt,
        },
    )
    from opentelemetry import trace

    return span, _inject(trace.set_span_in_context(span))


def end_attempt(
    span: Any, *, status: int | None, error_class: str | None, verdict: str, ended_at: float
) -> None:
    """End an attempt's span once its verdict is known (``ended_at``: Unix seconds)."""
    from opentelemetry.trace import Status, StatusCode

    if status is not None:
        span.set_attribute("http.response.status_code", status)
    if error_class is not None:
        span.set_attribute("error.type", error_class)
    elif status is not None and status >= 400:
        span.set_attribute("error.type", str(status))
    span.set_attribute("a2a_push.verdict", verdict)
    if verdict != "delivered":
        span.set_status(Status(StatusCode.ERROR, verdict))
    span.end(end_time=int(ended_at * 1e9))


@contextlib.contextmanager
def server_span(name: str, headers: Mapping[str, str], **attributes: str | int) -> Iterator[Any]:
    """A SERVER span continuing the trace of the request's ``traceparent`` (a new trace
    without one), current inside; yields it (None when not tracing)."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span(
        name, context=_extract(headers), kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def current_context() -> Any:
    """The trace context here, to continue later (None when not tracing)."""
    if _tracer is None:
        return None
    from opentelemetry import context

    return context.get_current()


@contextlib.contextmanager
def client_span(name: str, parent: Any, **attributes: str | int) -> Iterator[Any]:
    """A CLIENT span, a child of ``parent`` (from :func:`current_context`), current
    inside; yields it (None when not tracing)."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span(
        name, context=parent, kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        yield span


def outgoing_headers() -> dict[str, str]:
    """The ``traceparent`` header for a request made in the current span ({} when not
    tracing)."""
    if _tracer is None:
        return {}
    value = _inject(None)
    return {TRACEPARENT: value} if value else {}
