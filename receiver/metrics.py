"""The receiver's Prometheus metrics, all prefixed ``a2a_receiver_``.

With ``--workers N`` every worker counts its own requests; a scrape reaches one of them.
So the supervisor gives the workers a private directory (``PROMETHEUS_MULTIPROC_DIR``,
set before they import prometheus_client, which picks its value class then), each
worker's values go to files there, and every scrape reads them all: counters and
histograms are summed over the workers (those that exited too), gauges over the live
ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15)


class ReceiverMetrics:
    """The metrics of one receiver. ``multiprocess_dir``: this process is one of several
    workers whose values are kept there (see the module docstring); a scrape then
    shows the sum over all of them."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        multiprocess_dir: str | Path | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.multiprocess_dir = multiprocess_dir
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
        self.fetch_give_ups = Counter(
            "a2a_receiver_fetch_give_ups_total",
            "Tasks given up on: their GetTask kept failing for longer than retention_days",
            registry=r,
        )
        self.snapshots = Counter(
            "a2a_receiver_snapshots_stored_total", "Task snapshots stored", registry=r
        )
        # Across workers: the sum over the live ones (a worker that exited has none open).
        self.sse_clients = Gauge(
            "a2a_receiver_sse_clients",
            "Open /events streams",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.fetches_in_progress = Gauge(
            "a2a_receiver_fetches_in_progress",
            "Tasks being fetched or waiting to be",
            registry=r,
            multiprocess_mode="livesum",
        )

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        # Every worker's files, read now: a fresh registry each time (the collector
        # keeps no state worth reusing, and this one must not hold our own metrics).
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
        return generate_latest(registry)
