"""A local webhook sink for tests, demos and benchmarks: records what arrives and answers
as scripted (status codes, Retry-After, delays). Listens on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class SinkResponse:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b""


@dataclass(frozen=True)
class ReceivedWebhook:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float  # time.time()
    status: int  # what the sink answered

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None


class WebhookSink:
    """``async with WebhookSink() as sink: sink.url("/hook")`` … ``await sink.wait_for(3)``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, record_bodies: bool = True):
        self.host = host
        self.port = port
        self.record_bodies = record_bodies
        self.received: list[ReceivedWebhook] = []
        self.count = 0
        self._scripts: dict[str, deque[SinkResponse]] = defaultdict(deque)
        self._default: dict[str, SinkResponse] = {}
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self) -> WebhookSink:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server: Any = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> WebhookSink:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, path: str, responses: Iterable[int | SinkResponse]) -> None:
        """Answer the next requests to ``path`` with these, then fall back to the default."""
        for r in responses:
            self._scripts[path].append(r if isinstance(r, SinkResponse) else SinkResponse(r))

    def set_default(self, path: str, response: int | SinkResponse) -> None:
        self._default[path] = (
            response if isinstance(response, SinkResponse) else SinkResponse(response)
        )

    def on(self, path: str) -> list[ReceivedWebhook]:
        return [r for r in self.received if r.path == path]

    async def wait_for(self, count: int, timeout: float = 10.0, path: str | None = None) -> None:
        """Wait until ``count`` requests (to ``path``, if given) have arrived."""

        def enough() -> bool:
            if path is None:
                return self.count >= count
            return len(self.on(path)) >= count

        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(enough)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        script = self._scripts.get(request.path)
        response = script.popleft() if script else self._default.get(request.path, SinkResponse())
        if response.delay:
            await asyncio.sleep(response.delay)
        self.count += 1
        self.received.append(
            ReceivedWebhook(
                path=request.path,
                headers=dict(request.headers) if self.record_bodies else {},
                body=body if self.record_bodies else b"",
                received_at=time.time(),
                status=response.status,
            )
        )
        async with self._arrived:
            self._arrived.notify_all()
        return web.Response(status=response.status, headers=response.headers, body=response.body)
