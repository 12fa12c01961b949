"""B8's stream clients: N tasks on the mock agent, from their own process (own core, own GIL).

    python -m benchmarks.streamers --url URL --hook URL --tasks N [--mode stream|send]
                                   [--text report] [--concurrency 50] [--spread 0]
                                   [--max-seconds 60]

``--mode stream``: each task is started by ``SendStreamingMessage`` (with an inline push
config to ``--hook``) and its stream read to the end. ``--mode send``: the same tasks by
``SendMessage`` with ``returnImmediately`` (push only, no stream). At most
``--concurrency`` requests are being opened at a time; with ``--spread S`` task i is
started no sooner than i * S / N seconds in (tasks that step together send their
events in bursts; spread over one step, they send them steadily). Two lines of JSON on
stdout:
``{"open": N, "seconds": S}`` once every task has its stream's first event (or its
``SendMessage`` answer), then the result: ``events`` (stream events read, the first Task
of each included), ``first`` / ``last`` (``time.time()`` of the first and last event),
``completed`` (streams that ended with the task COMPLETED), ``errors`` with a few
``error_samples``, and ``stopped`` (``--max-seconds`` cut the run short).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import aiohttp

from .lifetime import run_until_stopped


class Tally:
    def __init__(self) -> None:
        self.events = 0
        self.first: float | None = None
        self.last: float | None = None
        self.completed = 0
        self.errors: list[str] = []
        self.opened = 0
        self.all_open = asyncio.Event()

    def event(self) -> None:
        now = time.time()
        self.events += 1
        if self.first is None:
            self.first = now
        self.last = now


def request_body(mode: str, text: str, hook: str) -> dict[str, Any]:
    configuration: dict[str, Any] = {"taskPushNotificationConfig": {"url": hook}}
    if mode == "send":
        configuration["returnImmediately"] = True
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage" if mode == "stream" else "SendMessage",
        "params": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            },
            "configuration": configuration,
        },
    }


async def one(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    tally: Tally,
    gate: asyncio.Semaphore,
    delay: float,
) -> None:
    headers = {"A2A-Version": "1.0"}
    opened = False

    def mark_open() -> None:
        nonlocal opened
        if not opened:
            opened = True
            gate.release()
            tally.opened += 1
            if tally.opened == args.tasks:
                tally.all_open.set()

    await asyncio.sleep(delay)
    await gate.acquire()
    try:
        body = request_body(args.mode, args.text, args.hook)
        async with session.post(args.url, json=body, headers=headers) as response:
            if args.mode == "send":
                answer = await response.json()
                if "result" not in answer:
                    raise RuntimeError(str(answer)[:200])
                mark_open()
                return
            state = ""
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                tally.event()
                mark_open()
                result = json.loads(line[6:])["result"]
                if "statusUpdate" in result:
                    state = result["statusUpdate"]["status"]["state"]
            if state == "TASK_STATE_COMPLETED":
                tally.completed += 1
    except (aiohttp.ClientError, TimeoutError, RuntimeError, ValueError) as exc:
        tally.errors.append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        mark_open()  # counted, error or not: the parent must not wait for it


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    gate = asyncio.Semaphore(args.concurrency)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=args.max_seconds)
    started = time.monotonic()
    stopped = False
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        runs = [
            asyncio.create_task(one(session, args, tally, gate, i * args.spread / args.tasks))
            for i in range(args.tasks)
        ]

        async def report_open() -> None:
            await tally.all_open.wait()
            print(json.dumps({"open": tally.opened, "seconds": time.monotonic() - started}))
            sys.stdout.flush()

        reporter = asyncio.create_task(report_open())
        watchdog = asyncio.create_task(run_until_stopped(args.max_seconds))

        async def finish() -> None:
            await asyncio.gather(*runs)

        done = asyncio.create_task(finish())
        finished, _ = await asyncio.wait({done, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        if done not in finished:
            stopped = True
            for run in runs:
                run.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
        watchdog.cancel()
        tally.all_open.set()  # (every run counted itself open by now, even on errors)
        await reporter
    return {
        "events": tally.events,
        "first": tally.first,
        "last": tally.last,
        "completed": tally.completed,
        "errors": len(tally.errors),
        "error_samples": tally.errors[:3],
        "stopped": stopped,
        "cpu_seconds": sum(os.times()[:2]),
        "wall_seconds": time.monotonic() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.streamers")
    parser.add_argument("--url", required=True, help="the agent's JSON-RPC URL")
    parser.add_argument("--hook", required=True, help="the webhook URL of every task")
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--mode", choices=("stream", "send"), default="stream")
    parser.add_argument("--text", default="report")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--spread", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
