"""Prometheus metrics (docs/operations.md "Metrics") and the aiohttp route that exposes them.

Each notifier owns a registry (its own ``Metrics``), so several notifiers (or tests) in
one process never collide; serve each on a path of its own. One ``Metrics`` must not be
shared by two notifiers: their queue gauges would overwrite each other's.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from .openapi import Body, Operation, route
from .store.base import ATTEMPT_ERROR_CLASSES, ATTEMPT_VERDICTS

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15)
# Enqueue to 2xx, retries included: the default schedule waits about 5 s, 5 min, 30 min,
# 2 h, 5 h, 10 h and 10 h, so the buckets follow it out to a day.
_DELIVERY_BUCKETS = (*_LATENCY_BUCKETS, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 86400)

# Every value each label can take, so that every series exists (at 0) from the start: an
# alert on the rate of dead letters sees 0 before the first one, not "no data".
DELIVERY_OUTCOMES = ("delivered", "retry", "dead", "gone", "deferred")
ATTEMPT_RESULTS = ("2xx", "3xx", "4xx", "5xx", "timeout", "connect_error", "refused")
DISABLE_REASONS = ("gone", "failing")
EVENT_KINDS = ("task", "statusUpdate", "artifactUpdate")
BREAKER_STATES = ("open", "half_open")


class Metrics:
    """The notifier's metrics, all prefixed ``a2a_push_``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # The running PushNotifier these metrics serve (one at a time), if any.
        self.serving: weakref.ref[Any] | None = None
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events_published = Counter(
            "a2a_push_events_published_total", "Task events published", ["kind"], registry=r
        )
        self.deliveries_enqueued = Counter(
            "a2a_push_deliveries_enqueued_total", "Deliveries written to the outbox", registry=r
        )
        self.publish_latency = Histogram(
            "a2a_push_publish_duration_seconds",
            "Time for publish() to make deliveries durable",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.deliveries = Counter(
            "a2a_push_deliveries_total",
            "Delivery outcomes per claim: delivered, retry, dead, gone, deferred",
            ["outcome"],
            registry=r,
        )
        self.attempts = Counter(
            "a2a_push_attempts_total",
            "HTTP attempts by result class: 2xx, 3xx, 4xx, 5xx, timeout, connect_error, refused",
            ["result"],
            registry=r,
        )
        self.attempt_verdicts = Counter(
            "a2a_push_attempt_verdicts_total",
            "HTTP attempts by what they meant for the delivery: delivered, retry, dead, gone",
            ["verdict"],
            registry=r,
        )
        self.attempt_errors = Counter(
            "a2a_push_attempt_errors_total",
            "HTTP attempts without an answer, by error class: " + ", ".join(ATTEMPT_ERROR_CLASSES),
            ["error_class"],
            registry=r,
        )
        self.attempt_latency = Histogram(
            "a2a_push_attempt_duration_seconds",
            "Duration of one webhook HTTP attempt",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.end_to_end_latency = Histogram(
            "a2a_push_delivery_latency_seconds",
            "From enqueue to a 2xx from the receiver",
            buckets=_DELIVERY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "a2a_push_queue_depth", "Pending deliveries in the outbox", registry=r
        )
        self.queue_due = Gauge(
            "a2a_push_queue_due_lanes", "Lanes (config, task) with work due now", registry=r
        )
        self.dead_letters = Gauge(
            "a2a_push_dead_letters", "Dead-lettered deliveries in the outbox", registry=r
        )
        self.oldest_pending_age = Gauge(
            "a2a_push_oldest_pending_age_seconds",
            "Age of the oldest pending delivery",
            registry=r,
        )
        self.in_flight = Gauge(
            "a2a_push_in_flight", "Deliveries being sent by this process", registry=r
        )
        self.breakers = Gauge(
            "a2a_push_endpoint_breakers",
            "Endpoints by breaker state (closed ones are not tracked)",
            ["state"],
            registry=r,
        )
        self.store_round_trips = Counter(
            "a2a_push_store_round_trips_total",
            "Network round trips to the database server (statements, BEGIN and COMMIT; "
            "0 for SQLite), counted at each scrape",
            registry=r,
        )
        self.store_fsyncs = Counter(
            "a2a_push_store_fsyncs_total",
            "fsyncs that made SQLite commits durable (0 under synchronous NORMAL and on "
            "PostgreSQL), counted at each scrape",
            registry=r,
        )
        self.store_fsync_seconds = Counter(
            "a2a_push_store_fsync_seconds_total",
            "Time those fsyncs took in all, counted at each scrape",
            registry=r,
        )
        self.store_slow_fsyncs = Counter(
            "a2a_push_store_slow_fsyncs_total",
            "Those fsyncs that took 20 ms or longer (each holds up every publish of its "
            "commit), counted at each scrape",
            registry=r,
        )
        self.configs_disabled = Counter(
            "a2a_push_configs_disabled_total",
            "Configs disabled by delivery (410 Gone, failure window)",
            ["reason"],
            registry=r,
        )
        for labelled, values in (
            (self.events_published, EVENT_KINDS),
            (self.deliveries, DELIVERY_OUTCOMES),
            (self.attempts, ATTEMPT_RESULTS),
            (self.attempt_verdicts, ATTEMPT_VERDICTS),
            (self.attempt_errors, ATTEMPT_ERROR_CLASSES),
            (self.configs_disabled, DISABLE_REASONS),
            (self.breakers, BREAKER_STATES),
        ):
            for value in values:
                labelled.labels(value)

        # Labelled children looked up so far: labels() takes microseconds, and the hot
        # path counts several per delivery.
        self._children: dict[tuple[int, str], Any] = {}

    def child(self, metric: Any, value: str) -> Any:
        """``metric.labels(value)``, looked up once per value."""
        key = (id(metric), value)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(value)
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)


def metrics_handler(
    metrics: Metrics, before_scrape: Callable[[], Awaitable[None]] | None = None
) -> Handler:
    """An aiohttp handler serving ``metrics`` in the Prometheus text format.

    ``before_scrape`` (e.g. ``notifier.refresh_metrics``) runs first, so gauges read
    from the store (queue depth, oldest pending age) are current at each scrape.
    """

    async def handler(request: web.Request) -> web.Response:
        if before_scrape is not None:
            try:
                await before_scrape()
            except Exception as exc:  # the store is down or closed: the counters still count
                logging.getLogger("a2a_push").warning(
                    "metrics: the queue gauges could not be refreshed (%s); serving their "
                    "last values",
                    exc,
                )
        body = metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handler


def add_metrics_route(
    app: web.Application,
    metrics: Metrics,
    path: str = "/metrics",
    *,
    before_scrape: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Mount ``GET path`` on ``app`` (documented for its OpenAPI document)."""
    route(app, "GET", path, metrics_handler(metrics, before_scrape), METRICS_OPERATION)


METRICS_OPERATION: Final = Operation(
    summary="Prometheus metrics (text exposition format)",
    tags=("meta",),
    security=(),
    responses={200: Body(description="the metrics", media_types=("text/plain",))},
)
"""The OpenAPI operation of a ``GET /metrics`` route."""
