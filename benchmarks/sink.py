"""The benchmark sink: an aiohttp server run in its own process (own core, own GIL).

    python -m benchmarks.sink --port 0 [--blackholes 20]

Prints one line of JSON on stdout once listening:
``{"port": 41234, "blackholes": [41235, ...]}``. Then:

- ``POST <any path>``: counts the request and records its receipt time (``time.time()``,
  after the body is read) under its ``webhook-id`` (or ``x-bench-id``) header; answers 200.
- ``GET /_stats``: ``{"count", "first", "last"}``; with ``?times=1`` also ``"times"``
  (id -> receipt time).
- ``POST /_reset``: forget everything.

Blackhole ports accept connections, read and discard what arrives, and never answer.
The process exits by itself when its parent goes away or after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from aiohttp import web

from .lifetime import run_until_stopped


class Recorder:
    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.times: dict[str, float] = {}

    def reset(self) -> None:
        self.count = 0
        self.first = self.last = None
        self.times = {}


class _Blackhole(asyncio.Protocol):
    """Accepts, swallows the request, never answers (until the client gives up)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        pass


def make_app(rec: Recorder) -> web.Application:
    async def receive(request: web.Request) -> web.Response:
        try:
            await request.read()
        except ConnectionResetError:
            # The sender gave up mid-body (the SDK's client at its timeout): not received,
            # and not worth a traceback in the benchmark's output.
            return web.Response(status=499)
        now = time.time()
        rec.count += 1
        if rec.first is None:
            rec.first = now
        rec.last = now
        ident = request.headers.get("webhook-id") or request.headers.get("x-bench-id")
        if ident is not None:
            rec.times[ident] = now
        return web.Response(status=200)

    async def stats(request: web.Request) -> web.Response:
        data: dict[str, object] = {"count": rec.count, "first": rec.first, "last": rec.last}
        if request.query.get("times"):
            data["times"] = rec.times
        return web.json_response(data)

    async def reset(request: web.Request) -> web.Response:
        rec.reset()
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_reset", reset)
    app.router.add_post("/{tail:.*}", receive)
    return app


async def serve(port: int, blackholes: int, max_seconds: float) -> None:
    rec = Recorder()
    runner = web.AppRunner(make_app(rec), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    real_port = int(runner.addresses[0][1])

    loop = asyncio.get_running_loop()
    holes: list[asyncio.Server] = []
    for _ in range(blackholes):
        holes.append(await loop.create_server(_Blackhole, "127.0.0.1", 0, backlog=1024))
    hole_ports = [h.sockets[0].getsockname()[1] for h in holes]

    print(json.dumps({"port": real_port, "blackholes": hole_ports}), flush=True)

    try:
        await run_until_stopped(max_seconds)
    finally:
        for h in holes:
            h.close()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sink")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--blackholes", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.port, args.blackholes, args.max_seconds))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
