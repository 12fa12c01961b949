"""B5's load generator: posts prepared requests from its own process (own core, own GIL).

    python -m benchmarks.loadgen --requests FILE --url URL [--concurrency 64]
                                 [--max-seconds 30] [--label TEXT]

``FILE`` is JSON: a list of ``[headers, body]`` pairs (body as UTF-8 text), sent in
order by ``--concurrency`` workers, each over one kept-alive HTTP/1.1 connection.
Sending stops by itself after ``--max-seconds`` (requests in flight then finish or
time out). The result is one
line of JSON on stdout; progress goes to stderr every two seconds.

Result: ``sent``, ``replies``, ``statuses`` (HTTP status -> count), ``accepted`` and
``duplicate`` (2xx replies whose JSON ``status`` says so), ``errors`` (no reply) with a
few ``error_samples``, ``seconds`` (first request sent -> last reply read), latency
``p50_ms``/``p99_ms``/``max_ms`` (request sent -> reply body read), ``cpu_seconds`` of
this process over that time, and ``stopped`` (the time limit cut the run short).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _request_bytes(url: str, headers: dict[str, str], body: bytes) -> bytes:
    parts = urlsplit(url)
    path = parts.path or "/"
    lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a kept-alive connection: (status, body)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run(
    requests: list[tuple[dict[str, str], bytes]],
    url: str,
    *,
    concurrency: int,
    max_seconds: float,
    timeout: float,
    label: str,
) -> dict[str, Any]:
    """Each worker keeps one connection and sends HTTP/1.1 requests on it, one at a time.

    A minimal client written on asyncio streams: the load generator shares this machine
    with the server it measures, so it should cost as little CPU per request as it can
    (an aiohttp client spends about as much per request as an aiohttp server does).
    """
    statuses: Counter[int] = Counter()
    outcomes: Counter[str] = Counter()
    latencies: list[float] = []
    error_samples: list[str] = []
    errors = 0
    sent = 0
    stopped = False
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    prepared = [_request_bytes(url, headers, body) for headers, body in requests]
    it = iter(prepared)
    started = time.perf_counter()
    deadline = started + max_seconds
    cpu_started = _cpu()

    async def worker() -> None:
        nonlocal sent, errors, stopped
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            for request in it:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    stopped = True
                    return
                sent += 1
                try:
                    async with asyncio.timeout(timeout):
                        if conn is None:
                            conn = await asyncio.open_connection(host, port)
                        status, reply = await _exchange(conn[0], conn[1], request)
                except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                    errors += 1
                    if len(error_samples) < 5:
                        error_samples.append(f"{type(exc).__name__}: {exc}")
                    if conn is not None:
                        conn[1].close()
                    conn = None
                    continue
                latencies.append(time.perf_counter() - t0)
                statuses[status] += 1
                if 200 <= status < 300:
                    if b'"accepted"' in reply:
                        outcomes["accepted"] += 1
                    elif b'"duplicate"' in reply:
                        outcomes["duplicate"] += 1
        finally:
            if conn is not None:
                conn[1].close()

    async def report() -> None:
        while True:
            await asyncio.sleep(2.0)
            print(
                f"  [loadgen] {label}: {len(latencies) + errors:,}/{len(requests):,} "
                f"replies ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    reporter = asyncio.create_task(report())
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        reporter.cancel()
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu_started
    latencies.sort()
    return {
        "sent": sent,
        "replies": len(latencies),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "accepted": outcomes["accepted"],
        "duplicate": outcomes["duplicate"],
        "errors": errors,
        "error_samples": error_samples,
        "seconds": seconds,
        "p50_ms": _percentile(latencies, 50) * 1000,
        "p99_ms": _percentile(latencies, 99) * 1000,
        "max_ms": latencies[-1] * 1000 if latencies else float("nan"),
        "cpu_seconds": cpu,
        "stopped": stopped,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen")
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=10.0, help="per request, seconds")
    parser.add_argument("--label", default="load")
    args = parser.parse_args(argv)
    raw = json.loads(args.requests.read_text())
    # Everything is encoded before the clock starts.
    requests = [(dict(headers), body.encode()) for headers, body in raw]
    del raw
    result = asyncio.run(
        run(
            requests,
            args.url,
            concurrency=args.concurrency,
            max_seconds=args.max_seconds,
            timeout=args.timeout,
            label=args.label,
        )
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
