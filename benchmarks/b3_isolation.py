"""B3: one healthy endpoint's p99 while 20 blackholed endpoints have work (<= 1.5x alone).

Phase 1 measures the healthy endpoint alone; phase 2 adds configs pointing at 20
blackholes (each its own port: the sink process accepts there and never answers) and
keeps publishing to them while the healthy endpoint is measured again, same rate. The
pair runs three times, independently; the median run's ratio is judged. Then the same
three runs again with a rate limit on each blackholed endpoint (``hole_rate_limit``
requests/s, the dispatcher's shared token bucket): the healthy endpoint must hold there
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from dataclasses import dataclass, field
from typing import Any

from a2a_push.database.sqlite_writer import SLOW_FSYNC
from a2a_push.delivery.dispatcher import DispatcherOptions
from a2a_push.delivery.ratelimit import RateLimits
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import TaskPushNotificationConfig
from a2a_push.signing import KeySet
from a2a_push.store.sqlite import SQLiteStore

from .b2_latency import paced_publish
from .common import (
    Sink,
    defaults_line,
    deferred_count,
    fmt_counts,
    header,
    machine_line,
    metric_samples,
    percentile,
    progress,
    say,
    status_event,
    table,
    temp_dir,
    verdict,
)

TAG = "b3"


@dataclass
class B3Params:
    rate: float = 200.0
    seconds: float = 10.0
    warmup: float = 1.0
    healthy_tasks: int = 20
    blackholes: int = 20
    tasks_per_blackhole: int = 5
    blackhole_rate: float = 20.0  # events/s spread over all blackholed tasks
    settle: float = 3.0  # blackhole load before the loaded measurement starts
    timeouts: Timeouts = field(default_factory=lambda: Timeouts(connect=1.0, total=2.0))
    max_ratio: float = 1.5
    runs: int = 3
    hole_rate_limit: float | None = 1.0  # requests/s per blackhole; None: no such runs


@dataclass
class Phase:
    name: str
    latencies: list[float]
    missing: int
    deferred: int
    slow_fsyncs: int  # WAL fsyncs of SLOW_FSYNC or longer during the phase

    def row(self) -> list[object]:
        lat = self.latencies
        return [
            self.name,
            len(lat),
            percentile(lat, 50),
            percentile(lat, 90),
            percentile(lat, 99),
            lat[-1] if lat else None,
            self.missing,
            self.deferred,
            self.slow_fsyncs,
        ]


async def _measure(
    notifier: PushNotifier,
    sink: Sink,
    task_ids: list[str],
    p: B3Params,
    name: str,
    first_n: int,
    expected_before: int,
) -> Phase:
    """One paced phase; ``expected_before``: healthy deliveries the sink must have first."""
    starts: dict[str, float] = {}
    deferred_before = deferred_count(notifier)
    slow_before = notifier.store.fsync_counts().slow
    sent = await paced_publish(
        notifier,
        task_ids,
        rate=p.rate,
        seconds=p.seconds,
        starts=starts,
        publish_ms=[],
        tag=TAG,
        label=name,
        first_n=first_n,
    )
    await sink.wait_count(expected_before + sent, limit=15, tag=TAG, label=f"{name} draining")
    stats = await sink.stats(times=True)
    lat = sorted((stats.times[i] - t) * 1000 for i, t in starts.items() if i in stats.times)
    return Phase(
        name,
        lat,
        len(starts) - len(lat),
        deferred_count(notifier) - deferred_before,
        notifier.store.fsync_counts().slow - slow_before,
    )


@dataclass
class B3Run:
    alone: Phase
    loaded: Phase
    hole_events: int
    in_flight: tuple[int, int]
    attempts: dict[str, float]
    outcomes: dict[str, float]
    open_breakers: int
    longest_fsync: float  # seconds: the run's longest WAL fsync (warm-up included)

    @property
    def ratio(self) -> float:
        return percentile(self.loaded.latencies, 99) / percentile(self.alone.latencies, 99)

    @property
    def complete(self) -> bool:
        return self.alone.missing == 0 and self.loaded.missing == 0


async def _one_run(p: B3Params, n: int, hole_limit: float | None = None) -> B3Run:
    """One independent measurement: a fresh sink process, SQLite file and notifier;
    ``hole_limit``: a rate limit (requests/s) on each blackholed endpoint."""
    healthy = [f"ok-{t}" for t in range(p.healthy_tasks)]
    holes = [f"bh-{b}-{k}" for b in range(p.blackholes) for k in range(p.tasks_per_blackhole)]
    async with Sink(blackholes=p.blackholes) as sink:
        with temp_dir("a2a-push-b3-") as tmp:
            async with PushNotifier(
                SQLiteStore(tmp / "b3.db"),
                issuer="http://bench.local",
                keyset=KeySet.generate(),
                address_policy=AddressPolicy(allow_loopback=True),
                timeouts=p.timeouts,
                dispatcher=DispatcherOptions(
                    drain_timeout=1.0,
                    rate_limits=RateLimits(
                        endpoints={sink.blackhole_url(b): hole_limit for b in range(p.blackholes)}
                        if hole_limit is not None
                        else {}
                    ),
                ),
            ) as notifier:
                for task_id in healthy:
                    await notifier.register_config(
                        TaskPushNotificationConfig(url=sink.url("/b3"), token="bench-token"),
                        owner="bench",
                        task_id=task_id,
                    )
                for b in range(p.blackholes):
                    for k in range(p.tasks_per_blackhole):
                        await notifier.register_config(
                            TaskPushNotificationConfig(url=sink.blackhole_url(b), token="t"),
                            owner="bench",
                            task_id=f"bh-{b}-{k}",
                        )
                await sink.reset()
                progress(TAG, f"run {n}: warm-up {p.warmup:.0f} s")
                warm = await paced_publish(
                    notifier,
                    healthy,
                    rate=p.rate,
                    seconds=p.warmup,
                    starts={},
                    publish_ms=[],
                    tag=TAG,
                    label="warm-up",
                )
                await sink.wait_count(warm, limit=15, tag=TAG, label="warm-up draining")
                alone = await _measure(notifier, sink, healthy, p, f"run {n}: alone", 10_000, warm)
                expected = warm + len(alone.latencies) + alone.missing

                stop = asyncio.Event()
                hole_events = 0

                async def load_blackholes() -> None:
                    nonlocal hole_events
                    origin = time.perf_counter()
                    i = 0
                    while not stop.is_set():
                        due = origin + i / p.blackhole_rate
                        delay = due - time.perf_counter()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        task_id = holes[i % len(holes)]
                        await notifier.publish(task_id, status_event(task_id, i))
                        hole_events += 1
                        i += 1

                loader = asyncio.create_task(load_blackholes())
                try:
                    progress(TAG, f"run {n}: blackhole load on; settling {p.settle:.0f} s")
                    await asyncio.sleep(p.settle)
                    in_flight_start = notifier.dispatcher.in_flight
                    loaded = await _measure(
                        notifier, sink, healthy, p, f"run {n}: with blackholes", 20_000, expected
                    )
                    in_flight_end = notifier.dispatcher.in_flight
                finally:
                    stop.set()
                    loader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await loader
                breakers = {str(k): v.value for k, v in notifier.dispatcher.health.states().items()}
                run = B3Run(
                    alone=alone,
                    loaded=loaded,
                    hole_events=hole_events,
                    in_flight=(in_flight_start, in_flight_end),
                    attempts=metric_samples(notifier, "a2a_push_attempts_total", "result"),
                    outcomes=metric_samples(notifier, "a2a_push_deliveries_total", "outcome"),
                    open_breakers=sum(1 for v in breakers.values() if v != "closed"),
                    longest_fsync=notifier.store.fsync_counts().longest,
                )
                progress(TAG, f"run {n}: p99 ratio {run.ratio:.2f}x; stopping the notifier")
    return run


async def run(p: B3Params | None = None) -> dict[str, Any]:
    p = p or B3Params()
    lanes = p.blackholes * p.tasks_per_blackhole
    header(
        "B3  healthy endpoint p99 alone vs while 20 blackholed endpoints have work",
        [
            machine_line(),
            defaults_line(),
            f"healthy: {p.rate:.0f} events/s for {p.seconds:.0f} s over {p.healthy_tasks} tasks "
            "to one sink endpoint (separate process); latency = publish() call -> receipt",
            f"blackholes: {p.blackholes} endpoints (own ports; accept, never answer) x "
            f"{p.tasks_per_blackhole} tasks = {lanes} lanes, {p.blackhole_rate:.0f} events/s "
            f"published to them throughout phase 2 (after {p.settle:.0f} s of load first)",
            f"timeouts: connect {p.timeouts.connect:g} s, total {p.timeouts.total:g} s "
            "(shorter than the 5 s / 15 s defaults, so timeouts, quick retries and breakers "
            "all happen inside the window)",
            "a2a-push: SQLite FULL, ES256, DispatcherOptions defaults "
            "(drain_timeout=1 s, for shutdown only)",
            f"{p.runs} runs in this process (each: fresh sink process, SQLite file and "
            "notifier, a full garbage collection before it; alone, then loaded); the target "
            "is judged on the median run's ratio, since a "
            "p99 of a few ms on 2 shared cores moves with whatever else the machine does",
            *(
                [
                    f"then {p.runs} more runs with each blackholed endpoint rate-limited to "
                    f"{p.hole_rate_limit:g} request/s (DispatcherOptions.rate_limits), judged "
                    "the same way"
                ]
                if p.hole_rate_limit is not None
                else []
            ),
        ],
    )
    variants: list[float | None] = [None]
    if p.hole_rate_limit is not None:
        variants.append(p.hole_rate_limit)
    results = [await _runs(p, limit) for limit in variants]
    say()
    rows: list[list[object]] = []
    for limit, runs in zip(variants, results, strict=True):
        for n, r in enumerate(runs, 1):
            for phase in (r.alone, r.loaded):
                row = phase.row()
                row[0] = f"{_label(n, limit)}: {phase.name.split(': ', 1)[-1]}"
                rows.append(row)
    say(
        table(
            [
                "phase",
                "events",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                "missing",
                "deferred",
                "slow fsyncs",
            ],
            rows,
        )
    )
    say(
        f"  slow fsyncs: fsyncs of the SQLite WAL that took {SLOW_FSYNC * 1000:.0f} ms or "
        "longer during the phase; each holds up every publish of its commit, so a few of "
        "them move a p99 of a few ms (the disk's doing, not the dispatcher's)"
    )
    say()
    ok = True
    for limit, runs in zip(variants, results, strict=True):
        ok = _report(p, limit, runs) and ok
    say()
    return {
        "ratios": [r.ratio for r in results[0]],
        "ratio": _median(results[0]),
        "rate_limited_ratio": _median(results[1]) if len(results) > 1 else None,
        "pass": ok,
    }


def _label(n: int, limit: float | None) -> str:
    return f"run {n}" if limit is None else f"run {n}, holes at {limit:g}/s"


def _median(runs: list[B3Run]) -> float:
    ratios = sorted(r.ratio for r in runs)
    return ratios[len(ratios) // 2]


async def _runs(p: B3Params, limit: float | None) -> list[B3Run]:
    runs = []
    for n in range(p.runs):
        gc.collect()  # no garbage from the previous run's blackholes in this one's phases
        runs.append(await _one_run(p, n + 1, limit))
    return runs


def _report(p: B3Params, limit: float | None, runs: list[B3Run]) -> bool:
    """The runs' details and their verdict line; whether they pass."""
    lanes = p.blackholes * p.tasks_per_blackhole
    median = _median(runs)
    for n, r in enumerate(runs, 1):
        say(
            f"  {_label(n, limit)}: loaded p99 / alone p99 = "
            f"{percentile(r.loaded.latencies, 99):.1f} / "
            f"{percentile(r.alone.latencies, 99):.1f} ms = {r.ratio:.2f}x; blackhole side: "
            f"{r.hole_events:,} events to {lanes} lanes, in flight at start/end of phase 2 "
            f"{r.in_flight[0]}/{r.in_flight[1]}, breakers not closed "
            f"{r.open_breakers}/{p.blackholes}"
        )
        say(f"    longest WAL fsync of the run: {r.longest_fsync * 1000:.1f} ms")
        say(f"    attempts by result: {fmt_counts(r.attempts)}")
        say(f"    delivery outcomes:  {fmt_counts(r.outcomes)}")
        if r.alone.deferred:
            say(
                f"    note: {r.alone.deferred} healthy deliveries were deferred in the 'alone' "
                "phase, which inflates its p99 and flatters the ratio"
            )
    say(
        "  deferred: deliveries pushed back without an attempt during the phase (endpoint at "
        "its in-flight cap: handed back; breaker open; no rate-limit token); phase 2 counts "
        "blackhole ones too"
    )
    ok = all(r.complete for r in runs) and median <= p.max_ratio
    limited = "" if limit is None else f", blackholes rate-limited to {limit:g}/s each"
    say(
        f"  target{limited}: loaded p99 <= {p.max_ratio}x alone (median of {p.runs} runs): "
        f"{median:.2f}x (runs: {', '.join(f'{r.ratio:.2f}x' for r in runs)})   {verdict(ok)}"
    )
    return ok
