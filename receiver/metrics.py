"""The receiver's Prometheus metrics, all prefixed ``a2a_receiver_``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15)


class ReceiverMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.webhooks = Counter(
            "a2a_receiver_webhooks_total",
            "Webhooks received, by result (accepted, duplicate, or the refusal reason)",
            ["result"],
            registry=r,
        )
        self.webhook_latency = Histogram(
            "a2a_receiver_webhook_duration_seconds",
            "Time from a webhook's arrival to its reply",
            buckets=_BUCKETS,
            registry=r,
        )
        self.fetches = Counter(
            "a2a_receiver_fetches_total", "GetTask calls, by result", ["result"], registry=r
        )
        self.fetch_latency = Histogram(
            "a2a_receiver_fetch_duration_seconds",
            "GetTask time including retries",
            buckets=_BUCKETS,
            registry=r,
        )
        self.snapshots = Counter(
            "a2a_receiver_snapshots_stored_total", "Task snapshots stored", registry=r
        )
        self.sse_clients = Gauge("a2a_receiver_sse_clients", "Open /events streams", registry=r)
        self.fetches_in_progress = Gauge(
            "a2a_receiver_fetches_in_progress", "Tasks being fetched or waiting to be", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
