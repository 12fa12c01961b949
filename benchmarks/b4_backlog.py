"""B4: 100,000 pending deliveries: RSS <= 200 MB, drain rate within 20 % of B1's.

Enqueue with no dispatcher running (``run_dispatcher=False``), read the RSS, then open a
second notifier with a dispatcher on the same database file and time the drain to the
sink. This benchmark runs in a process of its own, so the RSS is B4's alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import TaskPushNotificationConfig, TaskStatusUpdateEvent
from a2a_push.signing import KeySet
from a2a_push.store.sqlite import SQLiteStore

from .common import (
    Sink,
    bounded,
    defaults_line,
    deferred_count,
    header,
    machine_line,
    progress,
    rss_mb,
    say,
    status_event,
    table,
    temp_dir,
    verdict,
)

TAG = "b4"


@dataclass
class B4Params:
    tasks: int = 1000
    events_per_task: int = 100
    concurrency: int = 256
    drain_limit: float = 60.0
    max_rss_mb: float = 200.0
    max_drain_gap: float = 0.20

    @property
    def deliveries(self) -> int:
        return self.tasks * self.events_per_task


async def run(p: B4Params | None = None, *, b1_rate: float | None = None) -> dict[str, Any]:
    p = p or B4Params()
    basis = (
        f"B1 a2a-push defaults from this run: {b1_rate:,.0f} deliveries/s"
        if b1_rate
        else "no B1 rate given (run through `python -m benchmarks b4` to compare)"
    )
    header(
        f"B4  {p.deliveries:,} pending deliveries: memory, enqueue rate, drain rate",
        [
            machine_line(),
            defaults_line(),
            f"{p.tasks:,} tasks x {p.events_per_task} events, 1 config each, one sink "
            "endpoint (separate process); SQLite FULL, ES256; this process runs B4 only",
            f"enqueue: PushNotifier(run_dispatcher=False), {p.concurrency} concurrent "
            "publishers; drain: a new PushNotifier with a dispatcher on the same file, "
            f"timed to the sink (at most {p.drain_limit:.0f} s)",
            f"drain compared with {basis}",
        ],
    )
    policy = AddressPolicy(allow_loopback=True)
    keyset = KeySet.generate()
    rss_start, _ = rss_mb()
    async with Sink() as sink:
        with temp_dir("a2a-push-b4-") as tmp:
            db = tmp / "b4.db"
            async with PushNotifier(
                SQLiteStore(db),
                issuer="http://bench.local",
                keyset=keyset,
                address_policy=policy,
                run_dispatcher=False,
            ) as notifier:
                for t in range(p.tasks):
                    await notifier.register_config(
                        TaskPushNotificationConfig(url=sink.url("/b4"), token="bench-token"),
                        owner="bench",
                        task_id=f"task-{t}",
                    )
                published = 0
                started = time.perf_counter()
                next_report = started + 2.0

                def events() -> Iterator[tuple[str, int]]:
                    for n in range(p.events_per_task):
                        for t in range(p.tasks):
                            yield f"task-{t}", n

                async def publish(item: tuple[str, int]) -> None:
                    nonlocal published, next_report
                    event: TaskStatusUpdateEvent = status_event(item[0], item[1])
                    await notifier.publish(item[0], event)
                    published += 1
                    now = time.perf_counter()
                    if now >= next_report:
                        next_report = now + 2.0
                        progress(
                            TAG,
                            f"enqueued {published:,}/{p.deliveries:,} ({now - started:.0f} s, "
                            f"RSS {rss_mb()[0]:.0f} MB)",
                        )

                await bounded(events(), p.concurrency, publish)
                enqueue_seconds = time.perf_counter() - started
                rss_enqueued, _ = rss_mb()
                pending = (await notifier.store.stats()).pending
            progress(TAG, f"{pending:,} pending; RSS {rss_enqueued:.0f} MB; starting a dispatcher")

            await sink.reset()
            async with PushNotifier(
                SQLiteStore(db),
                issuer="http://bench.local",
                keyset=keyset,
                address_policy=policy,
            ) as drainer:
                drain_start = time.time()
                stats = await sink.wait_count(
                    pending, limit=p.drain_limit, tag=TAG, label="draining", every=5.0
                )
                complete = stats.count >= pending
                drain_end = stats.last if complete and stats.last else time.time()
                rss_drained, _ = rss_mb()
                deferred = deferred_count(drainer)
                progress(TAG, "stopping the dispatcher")
                left = (await drainer.store.stats()).pending
    rss_end, hwm = rss_mb()

    drain_seconds = drain_end - drain_start
    drain_rate = stats.count / drain_seconds if drain_seconds > 0 else 0.0
    enqueue_rate = p.deliveries / enqueue_seconds
    say()
    say(
        table(
            ["measure", "value", "unit", "note"],
            [
                ["RSS before (sink process not counted)", rss_start, "MB", ""],
                ["enqueued", p.deliveries, "deliveries", f"{enqueue_seconds:.1f} s"],
                ["enqueue rate", enqueue_rate, "deliveries/s", "publish() durable"],
                ["RSS after enqueueing", rss_enqueued, "MB", f"{pending:,} pending"],
                [
                    "drained",
                    stats.count,
                    "deliveries",
                    f"{drain_seconds:.1f} s"
                    + ("" if complete else f" (stopped at the {p.drain_limit:.0f} s limit)"),
                ],
                ["drain rate", drain_rate, "deliveries/s", ""],
                ["deferred while draining", deferred, "deliveries", "endpoint at in-flight cap"],
                ["B1 rate (same run)", b1_rate, "deliveries/s", "a2a-push defaults"],
                ["drain / B1", drain_rate / b1_rate if b1_rate else None, "x", ""],
                ["RSS at the end of the drain", rss_drained, "MB", f"{left:,} still pending"],
                ["peak RSS (VmHWM)", hwm, "MB", "whole B4 process"],
                ["RSS after closing", rss_end, "MB", ""],
            ],
        )
    )
    ok_rss = hwm <= p.max_rss_mb
    say()
    say(
        f"  target: RSS <= {p.max_rss_mb:.0f} MB with {pending:,} pending: "
        f"peak {hwm:.0f} MB   {verdict(ok_rss)}"
    )
    result: dict[str, Any] = {
        "rss_enqueued_mb": rss_enqueued,
        "peak_rss_mb": hwm,
        "enqueue_rate": enqueue_rate,
        "drain_rate": drain_rate,
    }
    if b1_rate:
        # A backlog must not slow delivery down: at most 20 % below B1 (faster is fine).
        ok_drain = drain_rate >= (1 - p.max_drain_gap) * b1_rate
        say(
            f"  target: drain rate >= {1 - p.max_drain_gap:.0%} of B1: "
            f"{drain_rate:,.0f}/s vs {b1_rate:,.0f}/s = {drain_rate / b1_rate:.2f}x   "
            f"{verdict(ok_drain)}"
        )
        if drain_rate > (1 + p.max_drain_gap) * b1_rate:
            say(
                "  note: the drain is more than 20 % faster than B1: B1's rate is held back "
                "by something a full backlog hides (e.g. claim-loop wake-ups)"
            )
        result["pass"] = ok_rss and ok_drain
    else:
        say("  target: drain rate within 20 % of B1: not compared (no B1 rate)")
        result["pass"] = ok_rss
    say()
    return result
