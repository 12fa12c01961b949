"""A minimal a2a-sdk 1.x agent whose push notifications go through a2a-push.

A dice-rolling ``AgentExecutor`` ("roll 3" rolls three dice, one artifact update each),
served with the SDK's own JSON-RPC and agent card routes. The only push-related lines
are the two constructor arguments of the request handler, ``push_config_store=`` and
``push_sender=`` (see :func:`build_app`), plus the JWKS route receivers verify the
webhooks' JWTs with::

    python -m examples.a2a_sdk_agent --port 9999 --allow-webhook-host 127.0.0.1

then send ``SendMessage`` (header ``A2A-Version: 1.0``) to ``http://127.0.0.1:9999/``
with ``configuration.taskPushNotificationConfig`` set: every task event reaches the
webhook durably queued, signed (``X-A2A-Signature``), retried and in order. Public keys:
``GET /.well-known/jwks.json``.

The app is a Starlette (ASGI) app, as the SDK builds it; any ASGI server can run
``build_app(...)``. No ASGI server ships with a2a-push or the SDK's ``http-server`` extra,
so ``main`` hosts it on aiohttp (a core dependency) through a small ASGI bridge.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import re
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2
from aiohttp import web
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.integrations.a2a_sdk import A2APushConfigStore, A2APushSender
from a2a_push.notifier import JWKS_PATH, PushNotifier

log = logging.getLogger("examples.a2a_sdk_agent")

MAX_DICE = 20


class DiceExecutor(AgentExecutor):
    """Rolls N six-sided dice ("roll N", default 1): one artifact update per die."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        match = re.search(r"\d+", context.get_user_input())
        count = max(1, min(MAX_DICE, int(match.group()) if match else 1))
        artifact_id = f"dice-{task.id}"
        for i in range(count):
            roll = random.randint(1, 6)
            await updater.add_artifact(
                [new_text_part(str(roll))],
                artifact_id=artifact_id,
                name="dice-result",
                append=i > 0,
                last_chunk=i == count - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def agent_card(url: str) -> a2a_pb2.AgentCard:
    return a2a_pb2.AgentCard(
        name="Dice agent (a2a-push)",
        description="Rolls dice; push notifications by a2a-push.",
        version="0.1.0",
        supported_interfaces=[
            a2a_pb2.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            # The SDK's v0.3 compatibility layer (below): v0.3 clients' configs get v0.3
            # webhooks.
            a2a_pb2.AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=a2a_pb2.AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            a2a_pb2.AgentSkill(
                id="roll",
                name="Roll dice",
                description="Rolls N six-sided dice",
                tags=["dice"],
                examples=["roll 3"],
            )
        ],
    )


def build_app(notifier: PushNotifier, url: str) -> tuple[Starlette, DefaultRequestHandler]:
    """The SDK agent app, wired to ``notifier`` for its push notifications."""
    card = agent_card(url)
    tasks = InMemoryTaskStore()
    handler = DefaultRequestHandler(
        agent_executor=DiceExecutor(),
        task_store=tasks,
        agent_card=card,
        # The drop-in: these two arguments are all an a2a-sdk agent changes (the task
        # store lets a new config's first webhook be the task's snapshot, and a restarted
        # sender read a task's status it has not seen).
        push_config_store=A2APushConfigStore(notifier, task_store=tasks),
        push_sender=A2APushSender(notifier, task_store=tasks),
    )

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse(notifier.jwks(), headers={"Cache-Control": "max-age=300"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await notifier.start()  # idempotent: main() starts it before serving anyway
        try:
            yield
        finally:
            await handler.aclose()
            await notifier.stop()

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
        Route(JWKS_PATH, jwks, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan), handler


# ---- hosting: a minimal ASGI-over-aiohttp bridge (HTTP only, no lifespan) -----------------


def asgi_handler(app: Any) -> Any:
    """An aiohttp handler that runs the ASGI ``app`` for each request."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        done = asyncio.Event()
        response = web.StreamResponse()
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": f"{request.version.major}.{request.version.minor}",
            "method": request.method,
            "scheme": request.scheme,
            "path": request.path,
            "raw_path": request.raw_path.split("?", 1)[0].encode(),
            "query_string": request.query_string.encode(),
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
            "client": (request.remote or "", 0),
            "server": (sock[0], sock[1]) if sock else None,
        }
        body_sent = False

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response.set_status(message["status"])
                for name, value in message.get("headers", []):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
                await response.prepare(request)
            elif message["type"] == "http.response.body":
                chunk = message.get("body", b"")
                if chunk:
                    await response.write(chunk)
                if not message.get("more_body", False):
                    await response.write_eof()
                    done.set()

        try:
            await app(scope, receive, send)
        finally:
            done.set()
        return response

    return handle


@dataclass
class RunningAgent:
    url: str
    port: int
    notifier: PushNotifier
    handler: DefaultRequestHandler
    app: Starlette


@contextlib.asynccontextmanager
async def serve_agent(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    allow_webhook_hosts: Sequence[str] = (),
    database: str = "memory://",
    data_dir: str | None = None,
) -> AsyncIterator[RunningAgent]:
    """Run the agent on ``host:port`` (0: any free port) until the block exits."""
    holder: dict[str, Any] = {}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        handle: Any = holder["handle"]
        response: web.StreamResponse = await handle(request)
        return response

    server = web.Application(client_max_size=4 * 1024 * 1024)
    server.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound: Any = site._server
        port = int(bound.sockets[0].getsockname()[1])
        url = f"http://{host}:{port}/"
        notifier = PushNotifier.open(
            database,
            issuer=url.rstrip("/"),
            data_dir=data_dir,
            address_policy=AddressPolicy(allow_webhook_hosts),
        )
        app, handler = build_app(notifier, url)
        holder["handle"] = asgi_handler(app)
        await notifier.start()
        try:
            yield RunningAgent(url, port, notifier, handler, app)
        finally:
            await handler.aclose()
            await notifier.stop()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9999)
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        help="admit webhooks to this host/IP/CIDR despite the SSRF policy (repeatable)",
    )
    parser.add_argument("--database", default="memory://", help="sqlite path or memory://")
    parser.add_argument("--data-dir", default=None, help="keep signing keys in DATA_DIR/keys")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with serve_agent(
            args.host,
            args.port,
            allow_webhook_hosts=args.allow_webhook_host,
            database=args.database,
            data_dir=args.data_dir,
        ) as agent:
            log.info("dice agent on %s (JWKS at %s)", agent.url, JWKS_PATH)
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
