"""B2: publish -> sink receipt latency at a steady 500 events/s (target p99 <= 20 ms).

Latency of one event = the sink's receipt time (its ``time.time()`` when the body has
been read) minus the moment ``publish()`` was called, matched by the delivery id the
webhook carries in ``webhook-id``. Both processes read the same system clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import TaskPushNotificationConfig
from a2a_push.signing import KeySet
from a2a_push.store.sqlite import SQLiteStore

from .common import (
    Sink,
    defaults_line,
    deferred_count,
    header,
    machine_line,
    percentile,
    progress,
    say,
    status_event,
    table,
    temp_dir,
    verdict,
)

TAG = "b2"


@dataclass
class B2Params:
    rate: float = 500.0
    seconds: float = 10.0
    warmup: float = 1.0
    tasks: int = 50
    target_p99_ms: float = 20.0


async def paced_publish(
    notifier: PushNotifier,
    task_ids: list[str],
    *,
    rate: float,
    seconds: float,
    starts: dict[str, float],
    publish_ms: list[float],
    tag: str,
    label: str,
    first_n: int = 0,
) -> int:
    """Publish ``rate`` events/s round-robin over ``task_ids`` for ``seconds``.

    Each publish runs as its own task (a slow commit must not delay the next event);
    ``starts`` maps delivery id -> time.time() at the publish call. Returns the count.
    """
    total = int(rate * seconds)
    pending: set[asyncio.Task[None]] = set()

    async def one(task_id: str, n: int) -> None:
        event = status_event(task_id, n)
        called = time.time()
        t0 = time.perf_counter()
        result = await notifier.publish(task_id, event)
        publish_ms.append((time.perf_counter() - t0) * 1000)
        for delivery_id in result.delivery_ids:
            starts[delivery_id] = called

    origin = time.perf_counter()
    next_report = origin + 2.0
    try:
        for i in range(total):
            due = origin + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task_id = task_ids[i % len(task_ids)]
            t = asyncio.create_task(one(task_id, first_n + i))
            pending.add(t)
            t.add_done_callback(pending.discard)
            now = time.perf_counter()
            if now >= next_report:
                progress(tag, f"{label}: {i + 1:,}/{total:,} published ({now - origin:.0f} s)")
                next_report = now + 2.0
    except asyncio.CancelledError:
        # Stopped early (B7 stops its load when it has measured): the publishes already
        # started finish first, so none runs on against a notifier being stopped.
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        raise
    if pending:
        await asyncio.gather(*pending)
    return total


async def run(p: B2Params | None = None) -> dict[str, Any]:
    p = p or B2Params()
    header(
        f"B2  publish -> sink receipt latency at a steady {p.rate:.0f} events/s",
        [
            machine_line(),
            defaults_line(),
            f"a2a-push defaults: SQLite FULL, ES256, one sink endpoint (separate process); "
            f"{p.tasks} tasks round-robin, 1 config each",
            f"{p.warmup:.0f} s warm-up (not counted), then {p.seconds:.0f} s measured "
            f"({int(p.rate * p.seconds):,} events)",
            "latency = sink receipt time - publish() call time, matched by webhook-id",
        ],
    )
    starts: dict[str, float] = {}
    warm_starts: dict[str, float] = {}
    publish_ms: list[float] = []
    task_ids = [f"task-{t}" for t in range(p.tasks)]
    async with Sink() as sink:
        with temp_dir("a2a-push-b2-") as tmp:
            policy = AddressPolicy(allow_loopback=True)
            async with PushNotifier(
                SQLiteStore(tmp / "b2.db"),
                issuer="http://bench.local",
                keyset=KeySet.generate(),
                address_policy=policy,
            ) as notifier:
                for task_id in task_ids:
                    await notifier.register_config(
                        TaskPushNotificationConfig(url=sink.url("/b2"), token="bench-token"),
                        owner="bench",
                        task_id=task_id,
                    )
                await sink.reset()
                progress(TAG, f"warm-up: {p.warmup:.0f} s")
                warm = await paced_publish(
                    notifier,
                    task_ids,
                    rate=p.rate,
                    seconds=p.warmup,
                    starts=warm_starts,
                    publish_ms=[],
                    tag=TAG,
                    label="warm-up",
                )
                deferred_before = deferred_count(notifier)
                started = time.perf_counter()
                sent = await paced_publish(
                    notifier,
                    task_ids,
                    rate=p.rate,
                    seconds=p.seconds,
                    starts=starts,
                    publish_ms=publish_ms,
                    tag=TAG,
                    label="measured",
                    first_n=warm,
                )
                achieved = sent / (time.perf_counter() - started)
                stats = await sink.wait_count(warm + sent, limit=20, tag=TAG, label="draining")
                stats = await sink.stats(times=True)
                deferred = deferred_count(notifier) - deferred_before

    latencies = sorted((stats.times[i] - t) * 1000 for i, t in starts.items() if i in stats.times)
    missing = len(starts) - len(latencies)
    publish_ms.sort()
    p50, p90, p99 = (percentile(latencies, q) for q in (50, 90, 99))
    worst = latencies[-1] if latencies else float("nan")
    say()
    say(
        table(
            ["measure", "events", "rate/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "missing"],
            [
                [
                    "publish -> sink receipt",
                    len(latencies),
                    achieved,
                    p50,
                    p90,
                    p99,
                    worst,
                    missing,
                ],
                [
                    "publish() call (durable)",
                    len(publish_ms),
                    achieved,
                    percentile(publish_ms, 50),
                    percentile(publish_ms, 90),
                    percentile(publish_ms, 99),
                    publish_ms[-1] if publish_ms else None,
                    None,
                ],
            ],
        )
    )
    ok = missing == 0 and p99 <= p.target_p99_ms
    say(
        f"  deliveries deferred without an attempt while measured: {deferred} "
        "(endpoint at its in-flight cap: handed back to the outbox, claimed again later)"
    )
    say()
    say(
        f"  target: p99 <= {p.target_p99_ms:.0f} ms at {p.rate:.0f} events/s: "
        f"p99 = {p99:.1f} ms   {verdict(ok)}"
    )
    say()
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": worst,
        "missing": missing,
        "deferred": deferred,
        "pass": ok,
    }
