"""Run the benchmarks: ``python -m benchmarks [b1 ... b8] [--quick] [--strict] [--streams N]``.

Each benchmark runs in a child process of its own (so B4's RSS is B4's alone), under a
hard time limit; the child starts its sink process and kills it when done. B4 compares
its drain rate with B1's from the same run; run alone, it runs a short B1 first.

Targets are reported (PASS/FAIL), not asserted: the exit status is 0 unless a benchmark
crashed or hit its time limit (2), or ``--strict`` is given and a target was missed (1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import MAX_STREAMS, ROOT, defaults_line, machine_line, revision_line, say, table

NAMES = ("b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8")

# Hard limits per child process, in seconds (the benchmarks stop well before these).
LIMITS = {
    "b1": 300.0,
    "b1-quick": 120.0,
    "b2": 60.0,
    "b3": 600.0,
    "b4": 200.0,
    "b5": 300.0,
    "b6": 300.0,
    "b7": 600.0,
    "b8": 300.0,
}

DESCRIPTIONS = {
    "b1": "signed + durable deliveries/s vs a2a-sdk and raw aiohttp",
    "b2": "publish -> receipt latency at 500 events/s",
    "b3": "healthy endpoint p99 with 20 blackholed endpoints (and rate-limited)",
    "b4": "100,000 pending deliveries: RSS and drain rate",
    "b5": "receiver: verified notifications/s, GetTask coalescing",
    "b6": "gateway on PostgreSQL, 1 and 2 workers, beside SQLite",
    "b7": "console: filtered page of 50 of 1M deliveries, under load",
    "b8": "mock agent: 500 streams + their webhooks beside B2's load",
}


async def _child(
    name: str, quick: bool, b1_rate: float | None, streams: int | None = None
) -> dict[str, Any]:
    if name == "b1":
        from . import b1_throughput

        return await b1_throughput.run(quick=quick)
    if name == "b2":
        from . import b2_latency

        return await b2_latency.run()
    if name == "b3":
        from . import b3_isolation

        return await b3_isolation.run()
    if name == "b4":
        from . import b4_backlog

        return await b4_backlog.run(b1_rate=b1_rate)
    if name == "b5":
        from . import b5_receiver

        return await b5_receiver.run()
    if name == "b6":
        from . import b6_gateway

        return await b6_gateway.run()
    if name == "b7":
        from . import b7_console

        return await b7_console.run()
    if name == "b8":
        from . import b8_streams

        params = b8_streams.B8Params()
        if streams is not None:
            params.streams = streams
        return await b8_streams.run(params)
    raise SystemExit(f"unknown benchmark {name!r}")


def _run_child(
    name: str, *, quick: bool = False, b1_rate: float | None = None, streams: int | None = None
) -> dict[str, Any]:
    """Run one benchmark in a child process (own session, killed as a group on timeout)."""
    limit = LIMITS["b1-quick" if quick and name == "b1" else name]
    with tempfile.TemporaryDirectory(prefix="a2a-push-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks", "--child", name, "--result", str(result_file)]
        if quick:
            cmd.append("--quick")
        if b1_rate is not None:
            cmd += ["--b1-rate", repr(b1_rate)]
        if streams is not None:
            cmd += ["--streams", str(streams)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            say(f"!! {name}: hard time limit of {limit:.0f} s reached; killing it")
            _kill_group(proc)
            return {"error": f"timed out after {limit:.0f} s"}
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            _kill_group(proc)  # whatever the child left behind (its sink process)
        elapsed = time.monotonic() - started
        if code != 0 or not result_file.exists():
            return {"error": f"exit code {code}", "seconds": elapsed}
        result: dict[str, Any] = json.loads(result_file.read_text())
        result["seconds"] = elapsed
        return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="bN", help=f"any of {', '.join(NAMES)}")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="B1 only a2a-push defaults (attempt history on and off), 5,000 deliveries",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 if a target is missed (default: report)"
    )
    parser.add_argument(
        "--streams",
        type=int,
        metavar="N",
        help=f"B8 only: concurrent streams, 1 to {MAX_STREAMS:,} (default 500)",
    )
    parser.add_argument("--child", choices=NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--b1-rate", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.streams is not None and not 1 <= args.streams <= MAX_STREAMS:
        parser.error(f"--streams {args.streams}: give 1 to {MAX_STREAMS:,}")
    if args.child:
        result = asyncio.run(_child(args.child, args.quick, args.b1_rate, args.streams))
        if args.result:
            Path(args.result).write_text(json.dumps(result))
        return 0

    unknown = [n for n in args.names if n not in NAMES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    names = [n for n in NAMES if n in args.names] or list(NAMES)
    say(f"a2a-push benchmarks: {', '.join(names)}")
    say(machine_line())
    say(revision_line())
    say(defaults_line())
    say()
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "b4" and "ours" not in results.get("b1", {}):
            say("B4 compares with B1: running a short B1 (a2a-push defaults only) first")
            results["b1"] = _run_child("b1", quick=True)
        b1_rate = results.get("b1", {}).get("ours") if name == "b4" else None
        results[name] = _run_child(
            name,
            quick=args.quick and name == "b1",
            b1_rate=b1_rate,
            streams=args.streams if name == "b8" else None,
        )
    total = time.monotonic() - started
    _summary(names, results, total)
    if any("error" in results.get(n, {"error": "not run"}) for n in names):
        return 2  # a benchmark crashed or hit its hard time limit
    if args.strict and not all(results[n].get("pass", True) for n in names):
        return 1
    return 0


def _summary(names: list[str], results: dict[str, dict[str, Any]], total: float) -> None:
    rows = []
    for name in names:
        r = results.get(name, {})
        if "error" in r:
            outcome = f"ERROR: {r['error']}"
        elif "pass" in r:
            outcome = "PASS" if r["pass"] else "FAIL"
        else:
            outcome = "-"
        rows.append([name.upper(), DESCRIPTIONS[name], outcome, r.get("seconds")])
    say("=" * 100)
    say(f"summary ({total:.0f} s in all)")
    say(table(["id", "what", "result", "seconds"], rows))


if __name__ == "__main__":
    sys.exit(main())
