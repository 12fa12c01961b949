"""Shared pieces: the sink subprocess, progress lines, tables, percentiles, RSS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from a2a_push.delivery.dispatcher import DispatcherOptions
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    Message,
    Part,
    Role,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from .lifetime import stop_process

ROOT = Path(__file__).resolve().parent.parent

MAX_STREAMS = 5000
"""B8's bound on its concurrent streams (``--streams``)."""


# ---- output ----------------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


def progress(tag: str, text: str) -> None:
    say(f"  [{tag}] {text}")


def header(title: str, lines: Iterable[str]) -> None:
    bar = "=" * 100
    say(bar)
    say(title)
    for line in lines:
        say(f"  {line}")
    say(bar)


def machine_line() -> str:
    return (
        f"machine: nproc={os.cpu_count()}, python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()}"
    )


def defaults_line() -> str:
    """The dispatcher defaults in effect (the numbers depend on them)."""
    o = DispatcherOptions()
    return (
        f"defaults in effect: DispatcherOptions(concurrency={o.concurrency}, "
        f"per_endpoint={o.per_endpoint}, claim_batch={o.claim_batch}, "
        f"poll_interval={o.poll_interval:g} s)"
    )


def revision_line() -> str:
    """The commit the library was measured at (read-only; the work tree may differ)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
        commit = out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return f"a2a-push: commit {commit} (plus any uncommitted changes in the work tree)"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width text table; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) if rows else False
        for i in range(len(headers))
    ]

    def fmt(values: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(values):
            out.append(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]))
        return " | ".join(out).rstrip()

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([fmt(headers), sep, *(fmt(r) for r in cells)])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ---- statistics and process facts ------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 100])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB (MiB), from /proc/self/status."""
    rss = hwm = float("nan")
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        yield Path(d)


def metric_samples(notifier: PushNotifier, name: str, label: str) -> dict[str, float]:
    """A notifier's Prometheus counter ``name``, by the value of ``label``."""
    out: dict[str, float] = {}
    for metric in notifier.metrics.registry.collect():
        for s in metric.samples:
            if s.name == name:
                out[s.labels.get(label, "?")] = s.value
    return out


def deferred_count(notifier: PushNotifier) -> int:
    """Deliveries pushed back without an attempt (endpoint busy or breaker open)."""
    return int(metric_samples(notifier, "a2a_push_deliveries_total", "outcome").get("deferred", 0))


def fmt_counts(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={int(v):,}" for k, v in sorted(values.items())) or "-"


# ---- events ----------------------------------------------------------------------------


def status_event(task_id: str, n: int) -> TaskStatusUpdateEvent:
    """A realistic small status update (about 300 bytes of JSON)."""
    return TaskStatusUpdateEvent(
        task_id=task_id,
        context_id=f"ctx-{task_id}",
        status=TaskStatus(
            state=TaskState.WORKING,
            timestamp="2025-01-01T00:00:00Z",
            message=Message(
                message_id=f"{task_id}-m{n}",
                role=Role.AGENT,
                parts=[Part(text=f"step {n} of {task_id}: processing the request")],
            ),
        ),
    )


async def bounded(
    items: Iterable[Any], concurrency: int, fn: Callable[[Any], Awaitable[None]]
) -> None:
    """Run ``fn`` over ``items`` with at most ``concurrency`` calls in flight."""
    it = iter(items)

    async def worker() -> None:
        for item in it:
            await fn(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


# ---- the sink subprocess ---------------------------------------------------------------


@dataclass
class SinkStats:
    count: int
    first: float | None
    last: float | None
    times: dict[str, float]


class Sink:
    """``benchmarks.sink`` in its own process, and a client for its stats."""

    def __init__(self, blackholes: int = 0) -> None:
        self.blackholes = blackholes
        self.port = 0
        self.blackhole_ports: list[int] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Sink:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.sink",
            "--port",
            "0",
            "--blackholes",
            str(self.blackholes),
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        assert self._proc.stdout is not None
        try:
            async with asyncio.timeout(20):
                line = await self._proc.stdout.readline()
            if not line:
                raise RuntimeError("the sink process exited before listening")
            info = json.loads(line)
        except BaseException:
            await self._kill()
            raise
        self.port = int(info["port"])
        self.blackhole_ports = [int(p) for p in info["blackholes"]]
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=30),
            connector=aiohttp.TCPConnector(limit=2),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        await self._kill()

    async def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            await stop_process(proc)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def blackhole_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.blackhole_ports[i]}/hook"

    async def reset(self) -> None:
        assert self._session is not None
        async with self._session.post(self.url("/_reset")) as r:
            r.raise_for_status()

    async def stats(self, *, times: bool = False) -> SinkStats:
        assert self._session is not None
        url = self.url("/_stats") + ("?times=1" if times else "")
        async with self._session.get(url) as r:
            r.raise_for_status()
            data = await r.json()
        return SinkStats(data["count"], data["first"], data["last"], data.get("times", {}))

    async def wait_count(
        self, target: int, *, limit: float, tag: str, label: str, every: float = 2.0
    ) -> SinkStats:
        """Poll until the sink has ``target`` requests or ``limit`` seconds have passed."""
        started = time.monotonic()
        next_report = started + every
        while True:
            stats = await self.stats()
            now = time.monotonic()
            if stats.count >= target or now - started >= limit:
                return stats
            if now >= next_report:
                progress(
                    tag, f"{label}: {stats.count:,}/{target:,} received ({now - started:.0f} s)"
                )
                next_report = now + every
            await asyncio.sleep(0.1)
