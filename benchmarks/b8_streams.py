"""B8: N concurrent streams on the mock agent while the same tasks push webhooks (default
500 streams; target: B2's webhook p99 with the streams open at most 1.5x its p99 with the
same tasks pushing the same webhooks but no stream open).

Three phases, each on a fresh mock agent (``create_app``: SQLite outbox, ES256) served in
this process on 127.0.0.1, all with B2's paced load (500 events/s round-robin over 50
tasks, one push config each, published through the agent's own notifier to the sink
process; latency = sink receipt - ``publish()`` call, matched by ``webhook-id``):

- A: B2's load alone (once);
- B: B2's load while N ``report`` tasks, started by ``SendMessage`` with an inline push
  config, push their webhooks (every event of theirs is a webhook; no stream);
- C: the same N tasks started by ``SendStreamingMessage``: N streams open, every event
  of every task both on its stream and as a webhook.

B and C run twice, alternately (B1 C1 B2 C2), and the better run of each is compared.

The N clients run in their own process (``benchmarks.streamers``) and start the tasks
spread over one step (``step_delay`` seconds), so that their events come steadily, not
in bursts; each task lasts six steps, so B2's window falls while every stream is open. The
target compares C with B: what the streams cost the webhooks (B against A is what the
tasks' own webhooks cost B2's: they share the sink's per-endpoint in-flight cap, and the
tasks, started together, step together).

Memory: Python allocations of this process (``tracemalloc``, on only while the N tasks
are being opened), from before the first task until every task has its first event (C)
or its answer (B); per task, and the difference C - B: what one open stream costs beyond
its task (its subscriber, handler, request and response). Rates: events/s read by the
stream clients and webhooks/s of the N tasks at the sink, each from its first to its
last, side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from a2a_push.httputil import freeze_startup_objects
from a2a_push.mock_agent import AGENT, MockAgent, serving
from a2a_push.protocol.types import TaskPushNotificationConfig

from .b2_latency import paced_publish
from .common import (
    MAX_STREAMS,
    ROOT,
    Sink,
    defaults_line,
    header,
    machine_line,
    percentile,
    progress,
    say,
    table,
    temp_dir,
    verdict,
)
from .lifetime import stop_process

TAG = "b8"
REPORT_EVENTS: Final = 7  # the Task (the first webhook: the snapshot), WORKING, 4 chunks, COMPLETED


@dataclass
class B8Params:
    streams: int = 500
    step_delay: float = 2.5  # a report task lasts 6 steps: 15 s
    rate: float = 500.0
    warmup: float = 1.0
    seconds: float = 6.0
    tasks: int = 50
    concurrency: int = 50
    target_ratio: float = 1.5


@dataclass
class Phase:
    label: str
    latencies: list[float]
    missing: int
    open_seconds: float | None = None
    traced_kib: float | None = None  # per task
    clients: dict[str, Any] | None = None
    task_webhooks: int = 0
    webhooks_per_s: float | None = None
    cpu_share: float | None = None  # this process's CPU time / wall time, B2's window

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)

    @property
    def events_per_s(self) -> float | None:
        c = self.clients
        if not c or not c.get("events") or c.get("first") is None:
            return None
        span = float(c["last"]) - float(c["first"])
        return c["events"] / span if span > 0 else None


@contextlib.asynccontextmanager
async def served_agent(step_delay: float) -> AsyncIterator[tuple[str, MockAgent]]:
    """A fresh mock agent on 127.0.0.1, its data in a temporary folder; started as
    `a2a-push mock-agent` starts (``freeze_startup_objects`` once it listens)."""
    with temp_dir("a2a-push-b8-") as tmp:
        async with serving(tmp / "agent", step_delay=step_delay) as (url, app):
            freeze_startup_objects()
            yield url, app[AGENT]


async def start_clients(url: str, hook: str, p: B8Params, mode: str) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.streamers",
        "--url",
        url + "/",
        "--hook",
        hook,
        "--tasks",
        str(p.streams),
        "--mode",
        mode,
        "--concurrency",
        str(p.concurrency),
        "--spread",
        str(p.step_delay),
        "--max-seconds",
        str(6 * p.step_delay + 60),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


async def read_json_line(proc: asyncio.subprocess.Process, limit: float) -> dict[str, Any]:
    assert proc.stdout is not None
    async with asyncio.timeout(limit):
        line = await proc.stdout.readline()
    if not line:
        raise RuntimeError("the stream clients exited without a result")
    result: dict[str, Any] = json.loads(line)
    return result


async def run_phase(label: str, sink: Sink, p: B8Params, mode: str | None) -> Phase:
    """B2's load on a fresh agent; with ``mode`` ("send" or "stream"), while N tasks run."""
    progress(TAG, f"{label}: starting")
    starts: dict[str, float] = {}
    warm_starts: dict[str, float] = {}
    phase = Phase(label, [], 0)
    async with served_agent(p.step_delay) as (url, agent):
        notifier = agent.notifier
        b2_tasks = [f"b2-task-{t}" for t in range(p.tasks)]
        for task_id in b2_tasks:
            await notifier.register_config(
                TaskPushNotificationConfig(url=sink.url("/b2"), token="bench-token"),
                owner="bench",
                task_id=task_id,
            )
        await sink.reset()
        clients: asyncio.subprocess.Process | None = None
        try:
            if mode is not None:
                gc.collect()
                tracemalloc.start()
                clients = await start_clients(url, sink.url("/tasks"), p, mode)
                opened = await read_json_line(clients, 120)
                traced, _peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                phase.open_seconds = float(opened["seconds"])
                phase.traced_kib = traced / 1024 / p.streams
                progress(
                    TAG, f"{label}: {opened['open']:,} tasks open in {opened['seconds']:.1f} s"
                )
            cpu_started, wall_started = time.process_time(), time.monotonic()
            warm = await paced_publish(
                notifier,
                b2_tasks,
                rate=p.rate,
                seconds=p.warmup,
                starts=warm_starts,
                publish_ms=[],
                tag=TAG,
                label=f"{label} warm-up",
            )
            sent = await paced_publish(
                notifier,
                b2_tasks,
                rate=p.rate,
                seconds=p.seconds,
                starts=starts,
                publish_ms=[],
                tag=TAG,
                label=f"{label} measured",
                first_n=warm,
            )
            phase.cpu_share = (time.process_time() - cpu_started) / (
                time.monotonic() - wall_started
            )
            if clients is not None:
                phase.clients = await read_json_line(clients, 6 * p.step_delay + 90)
                await clients.wait()
        finally:
            if clients is not None:
                await stop_process(clients)
        expected = warm + sent + (p.streams * REPORT_EVENTS if mode else 0)
        await sink.wait_count(expected, limit=60, tag=TAG, label=f"{label} draining")
        stats = await sink.stats(times=True)
    phase.latencies = sorted(
        (stats.times[i] - t) * 1000 for i, t in starts.items() if i in stats.times
    )
    phase.missing = len(starts) - len(phase.latencies)
    b2_ids = starts.keys() | warm_starts.keys()
    task_times = sorted(t for i, t in stats.times.items() if i not in b2_ids)
    phase.task_webhooks = len(task_times)
    if len(task_times) > 1 and task_times[-1] > task_times[0]:
        phase.webhooks_per_s = len(task_times) / (task_times[-1] - task_times[0])
    return phase


async def run(p: B8Params | None = None) -> dict[str, Any]:
    p = p or B8Params()
    if not 1 <= p.streams <= MAX_STREAMS:
        raise ValueError(f"streams: give 1 to {MAX_STREAMS}")
    header(
        f"B8  {p.streams:,} concurrent streams on the mock agent while its tasks push webhooks",
        [
            machine_line(),
            defaults_line(),
            f"mock agent in this process (SQLite outbox, ES256); {p.streams:,} `report` tasks "
            f"of 6 steps x {p.step_delay:g} s, {REPORT_EVENTS} events each; stream clients "
            "and the sink in their own processes",
            f"B2's load beside them: {p.rate:.0f} events/s over {p.tasks} tasks, "
            f"{p.warmup:.0f} s warm-up then {p.seconds:.0f} s measured",
            f"tasks started spread over {p.step_delay:g} s (their events steady, not in bursts)",
            "A: B2 alone; B: + the tasks pushing webhooks (SendMessage); "
            "C: + the same tasks streamed (SendStreamingMessage) and pushing webhooks; "
            "target: C against B",
        ],
    )
    started = time.monotonic()
    async with Sink() as sink:
        alone = await run_phase("A", sink, p, None)
        # B and C twice, alternately: the better of each pair is compared, so that a
        # passing load elsewhere on the machine does not decide the result.
        runs: list[Phase] = []
        for round_ in (1, 2):
            runs.append(await run_phase(f"B{round_}", sink, p, "send"))
            runs.append(await run_phase(f"C{round_}", sink, p, "stream"))
    pushed = min(runs[0::2], key=lambda phase: phase.p99)
    streamed = min(runs[1::2], key=lambda phase: phase.p99)

    say()
    rows = []
    described = {"A": "B2 alone", "B": f"+ {p.streams:,} tasks pushing"}
    described["C"] = f"+ {p.streams:,} tasks streamed + pushing"
    for phase in (alone, *runs):
        what = described[phase.label[0]]
        if phase is pushed or phase is streamed:
            what += " (compared)"
        streams_open = (phase.clients or {}).get("completed") if phase.label[0] == "C" else None
        rows.append(
            [
                f"{phase.label}: {what}",
                streams_open,
                phase.events_per_s,
                phase.webhooks_per_s,
                percentile(phase.latencies, 50),
                phase.p99,
                phase.latencies[-1] if phase.latencies else None,
                phase.p99 / pushed.p99 if pushed.p99 > 0 else None,
                f"{phase.cpu_share:.0%}" if phase.cpu_share is not None else None,
                phase.missing,
            ]
        )
    say(
        table(
            [
                "phase",
                "streams done",
                "stream events/s",
                "task webhooks/s",
                "B2 p50 ms",
                "B2 p99 ms",
                "B2 max ms",
                "p99 / B",
                "agent CPU",
                "missing",
            ],
            rows,
        )
    )
    say()
    per_stream_traced = (
        streamed.traced_kib - pushed.traced_kib
        if streamed.traced_kib is not None and pushed.traced_kib is not None
        else None
    )
    say(
        table(
            ["memory (KiB)", "per task, push only (B)", "per task + its stream (C)", "per stream"],
            [
                ["Python allocations", pushed.traced_kib, streamed.traced_kib, per_stream_traced],
            ],
        )
    )
    clients = streamed.clients or {}
    load = os.getloadavg()[0]
    say(
        f"  streams: {clients.get('completed', 0):,} of {p.streams:,} ended with the task "
        f"COMPLETED; errors {clients.get('errors', '?')}"
        + (f" ({'; '.join(clients['error_samples'])})" if clients.get("error_samples") else "")
        + f"; task webhooks received {streamed.task_webhooks:,} of "
        f"{p.streams * REPORT_EVENTS:,}; opened in {streamed.open_seconds or 0:.1f} s"
    )
    ratio = streamed.p99 / pushed.p99 if pushed.p99 > 0 else float("inf")
    complete = (
        clients.get("completed") == p.streams
        and streamed.task_webhooks == p.streams * REPORT_EVENTS
        and streamed.missing == 0
        and pushed.missing == 0
    )
    ok = complete and ratio <= p.target_ratio
    say()
    say(
        f"  target: B2 p99 with {p.streams:,} streams open (C) <= {p.target_ratio:g}x without "
        f"them (B), every event delivered both ways: {streamed.p99:.1f} ms vs "
        f"{pushed.p99:.1f} ms = {ratio:.2f}x   {verdict(ok)}"
    )
    say(
        f"  ({time.monotonic() - started:.0f} s; load average {load:.1f} on {os.cpu_count()} "
        "cores at the end: the other processes on the machine count in every latency)"
    )
    say()
    return {
        "streams": p.streams,
        "p99_alone_ms": alone.p99,
        "p99_pushing_ms": pushed.p99,
        "p99_streams_ms": streamed.p99,
        "ratio": ratio,
        "stream_events_per_s": streamed.events_per_s,
        "task_webhooks_per_s": streamed.webhooks_per_s,
        "kib_per_stream": per_stream_traced,
        "pass": ok,
    }
