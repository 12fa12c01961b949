"""Small HTTP helpers shared by the services."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import Callable
from typing import Final

import aiohttp
from aiohttp import web, web_protocol, web_server
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    HttpProcessingError,
    LineTooLong,
)


async def read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body from ``stream``, or None when it is over ``limit`` bytes.

    ``StreamReader.read(n)`` returns what has arrived so far (up to ``n``), not the body:
    loop until its end, and never hold more than ``limit + 1`` bytes.
    """
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


# --- Server-Sent Events ---------------------------------------------------------------------

SSE_KEEPALIVE_SECONDS: Final = 15.0
"""An idle SSE stream sends a comment this often: a client that went away is noticed
(its write fails) and proxies keep the connection open."""

_SSE_HEADERS: Final = (
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),  # proxies pass each event on at once
)


def sse_response() -> web.StreamResponse:
    """A response to stream Server-Sent Events on (``prepare`` it first): the receiver's
    ``GET /events`` and the mock agent's streaming methods."""
    return web.StreamResponse(headers=dict(_SSE_HEADERS))


# --- Serving: requests refused before they reach the app ----------------------------------
#
# aiohttp answers a request it cannot parse (a header field or request line over its limit,
# an invalid header) with a text/plain 400 that quotes the offending bytes, and logs an
# ERROR traceback that quotes them again. Those bytes are often a secret: an
# ``Authorization: Bearer <admin key>`` padded past the limit put the key into the answer
# and the log. The services serve through :class:`GuardedAppRunner` / :func:`run_app`
# instead, whose connections answer such requests with the services' JSON error shape
# (``{"error": reason, "message": text}``), quote nothing of the request, and log one line
# without any value from it.

DEFAULT_MAX_FIELD_BYTES: Final = 8190  # aiohttp's default for one header field
DEFAULT_MAX_LINE_BYTES: Final = 8190  # aiohttp's default for the request line


def _refusal(exc: BaseException, limits: tuple[int, int]) -> tuple[int, str, str]:
    """(status, reason, message) for a request the HTTP parser refused; nothing quoted."""
    max_line, max_field = limits
    if isinstance(exc, LineTooLong):
        # The parser says where it stopped only in its frames' names (cb_on_url in the C
        # parser); the value is never looked at.
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if any("url" in name for name in frames):
            return (
                414,
                "uri_too_long",
                f"the request line is over {max_line:,} bytes; nothing was read",
            )
        return (
            431,
            "header_too_large",
            f"a header field is over {max_field:,} bytes; nothing was read",
        )
    if isinstance(exc, BadHttpMessage) and str(exc.message).startswith("Too many headers"):
        return 431, "header_too_large", "the request has too many header fields; nothing was read"
    return 400, "malformed_request", "the request is not valid HTTP/1.1; nothing was read"


class _GuardedRequestHandler(web_protocol.RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # some of an answer went out: as aiohttp does
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, HttpProcessingError) and status < 500:
            status, reason, text = _refusal(exc, (self.max_line_size, self.max_field_size))
            # One line, the kind of error only: the bytes refused may be a secret.
            level = logging.DEBUG if isinstance(exc, BadHttpMethod) else logging.WARNING
            self.logger.log(
                level,
                "refused a request from %s before it was read: %s (%s %d)",
                request.remote,
                text,
                type(exc).__name__,
                status,
            )
        else:
            # An exception where aiohttp ran no handler of ours: the traceback is ours to
            # read (no request bytes in it); the caller gets JSON like every other answer.
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            status, reason, text = 500, "internal", "the request could not be processed"
        response = web.json_response({"error": reason, "message": text}, status=status)
        response.force_close()
        return response


class _GuardedServer(web_server.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _GuardedRequestHandler(self, loop=self._loop, **self._kwargs)


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections refuse unparseable requests with JSON that
    quotes nothing of them (see above). ``max_field_size`` / ``max_line_size`` as aiohttp's
    ``web.run_app`` takes them."""

    async def _make_server(self) -> web_server.Server:
        server = await super()._make_server()
        server.__class__ = _GuardedServer  # same object and state; only __call__ differs
        return server


def freeze_startup_objects() -> None:
    """Once a service has started: collect what start-up left as garbage, move every
    object that lives on (modules, models, the app, its stores) out of the garbage
    collector's reach (``gc.freeze``), and let the youngest generation grow to 10,000
    objects before a collection (700 by default), so that the objects of a request or
    a delivery are mostly gone before one runs and fewer reach the oldest generation,
    whose collections walk everything. With 500 open streams on the mock agent (B8),
    full collections paused the event loop 60-82 ms; with this, at most about 14 ms."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def run_app(
    app: web.Application,
    *,
    sock: list[socket.socket] | None = None,
    host: str | None = None,
    port: int | None = None,
    print: Callable[[str], None] | None = None,
    access_log: logging.Logger | None = None,
    max_field_size: int = DEFAULT_MAX_FIELD_BYTES,
    max_line_size: int = DEFAULT_MAX_LINE_BYTES,
    shutdown_timeout: float = 60.0,
) -> None:
    """Serve ``app`` on the bound sockets ``sock`` (or on ``host``:``port``) until SIGINT or
    SIGTERM, as ``web.run_app`` does, through a :class:`GuardedAppRunner`. ``print`` is
    called once everything listens."""

    async def serve() -> None:
        runner = GuardedAppRunner(
            app,
            handle_signals=True,
            access_log=access_log,
            max_field_size=max_field_size,
            max_line_size=max_line_size,
            shutdown_timeout=shutdown_timeout,
        )
        await runner.setup()
        try:
            for one in sock or ():
                await web.SockSite(runner, one).start()
            if host is not None:
                await web.TCPSite(runner, host, port).start()
            freeze_startup_objects()
            if print is not None:
                print("serving")
            await asyncio.Event().wait()  # until a signal's GracefulExit cancels this
        finally:
            await runner.cleanup()

    # As aiohttp's run_app: GracefulExit (a SystemExit raised by the runner's signal
    # handlers) or Ctrl-C stops the loop; serve() alone is cancelled first, so that its
    # cleanup (the app's, which closes the stores) runs while their tasks still run; then
    # whatever is left.
    loop = asyncio.new_event_loop()
    main = loop.create_task(serve())
    try:
        asyncio.set_event_loop(loop)
        with contextlib.suppress(web.GracefulExit, KeyboardInterrupt):
            loop.run_until_complete(main)
    finally:
        try:
            if not main.done():
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(main)
        finally:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            asyncio.set_event_loop(None)
            loop.close()
