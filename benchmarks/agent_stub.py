"""B5's agent stub: a minimal A2A agent in its own process, for the receiver to call.

    python -m benchmarks.agent_stub --jwks FILE [--port 0] [--delay-ms 0]

Prints one line of JSON on stdout once listening: ``{"port": 41234}``. Then:

- ``POST /`` (JSON-RPC ``GetTask``): answers with a small v1.0 Task (state WORKING, the
  current time as its status timestamp) after ``--delay-ms``; counts the call, the
  distinct task ids, and the most calls for one task that were ever in flight at once
  (1 = the receiver never fetched a task twice concurrently).
- ``GET /.well-known/jwks.json``: the JWK Set read from ``--jwks`` (the signer's public
  keys), counted too.
- ``GET /_stats``: ``{"calls", "tasks", "max_in_flight_per_task", "jwks_fetches"}``.
- ``POST /_reset``: forget everything.

The process exits by itself when its parent goes away or after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from .lifetime import run_until_stopped


class Counts:
    def __init__(self) -> None:
        self.calls = 0
        self.per_task: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.max_in_flight = 0
        self.jwks_fetches = 0

    def reset(self) -> None:
        self.calls = self.max_in_flight = self.jwks_fetches = 0
        self.per_task = {}
        self.in_flight = {}


def _task(task_id: str, call: int) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "id": task_id,
        "contextId": f"ctx-{task_id}",
        "status": {
            "state": "TASK_STATE_WORKING",
            "timestamp": now,
            "message": {
                "messageId": f"{task_id}-status-{call}",
                "role": "ROLE_AGENT",
                "parts": [{"text": f"working on {task_id} (snapshot {call})"}],
            },
        },
        "history": [
            {
                "messageId": f"{task_id}-user",
                "role": "ROLE_USER",
                "parts": [{"text": "please process the request"}],
            }
        ],
    }


def make_app(counts: Counts, jwks: dict[str, Any], delay: float) -> web.Application:
    async def rpc(request: web.Request) -> web.Response:
        data = await request.json()
        rpc_id = data.get("id")
        if data.get("method") != "GetTask":
            error = {"code": -32601, "message": f"method {data.get('method')!r} not found"}
            return web.json_response({"jsonrpc": "2.0", "id": rpc_id, "error": error})
        task_id = str(data.get("params", {}).get("id"))
        counts.calls += 1
        n = counts.per_task[task_id] = counts.per_task.get(task_id, 0) + 1
        now_in_flight = counts.in_flight[task_id] = counts.in_flight.get(task_id, 0) + 1
        counts.max_in_flight = max(counts.max_in_flight, now_in_flight)
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            result = _task(task_id, n)
        finally:
            counts.in_flight[task_id] -= 1
        return web.json_response({"jsonrpc": "2.0", "id": rpc_id, "result": result})

    async def jwks_route(request: web.Request) -> web.Response:
        counts.jwks_fetches += 1
        return web.json_response(jwks)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "calls": counts.calls,
                "tasks": len(counts.per_task),
                "max_in_flight_per_task": counts.max_in_flight,
                "jwks_fetches": counts.jwks_fetches,
            }
        )

    async def reset(request: web.Request) -> web.Response:
        counts.reset()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/", rpc)
    app.router.add_get("/.well-known/jwks.json", jwks_route)
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_reset", reset)
    return app


async def serve(port: int, jwks: dict[str, Any], delay: float, max_seconds: float) -> None:
    counts = Counts()
    runner = web.AppRunner(make_app(counts, jwks, delay), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    print(json.dumps({"port": int(runner.addresses[0][1])}), flush=True)

    try:
        await run_until_stopped(max_seconds)
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_stub")
    parser.add_argument("--jwks", type=Path, required=True, help="a JWK Set (JSON file)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="GetTask answer delay")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    jwks = json.loads(args.jwks.read_text())
    try:
        asyncio.run(serve(args.port, jwks, args.delay_ms / 1000, args.max_seconds))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
