"""examples/starlette_receiver.py works: a real ``PushNotifier`` (SQLite) delivers signed
webhooks over HTTP on 127.0.0.1 to the Starlette app, which accepts them (JWT against
the agent's JWK Set fetched from a real server; Standard Webhooks with a ``whsec_``
secret), drops a repeat, and answers 401 to a tampered body or a wrong signature."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

import aiohttp
from aiohttp import web

from a2a_push import AddressPolicy, PushNotifier
from a2a_push.protocol.types import (
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from examples.a2a_sdk_agent import asgi_handler
from examples.starlette_receiver import (
    WEBHOOK_PATH,
    ReceiverState,
    build_app,
    make_verifier,
)
from receiver.verify import AuthMethod

JWKS_PATH = "/.well-known/jwks.json"


@contextlib.asynccontextmanager
async def serve(setup: Callable[[web.Application], None]) -> AsyncIterator[str]:
    """An aiohttp server on 127.0.0.1 (any free port); yields its base URL."""
    app = web.Application()
    setup(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    bound: Any = site._server
    try:
        yield f"http://127.0.0.1:{bound.sockets[0].getsockname()[1]}"
    finally:
        await runner.cleanup()


def routes_to(handle: Any) -> Callable[[web.Application], None]:
    """Setup sending every request to ``handle``."""

    def setup(server: web.Application) -> None:
        server.router.add_route("*", "/{tail:.*}", handle)

    return setup


@contextlib.asynccontextmanager
async def serve_receiver(app: Any) -> AsyncIterator[str]:
    """The Starlette ``app`` on a real port (through the example's ASGI bridge)."""
    handle = asgi_handler(app)
    async with serve(routes_to(handle)) as url:
        yield url + WEBHOOK_PATH


async def wait_for(state: ReceiverState, count: int) -> None:
    async with asyncio.timeout(15):
        while len(state.received) < count:  # noqa: ASYNC110 - the example has no event
            await asyncio.sleep(0.05)


class Capture:
    """What each delivery carried, recorded by an aiohttp middleware in front of the app."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes, int]] = []

    def setup(self, handle: Any) -> Callable[[web.Application], None]:
        async def recording(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            response: web.StreamResponse = await handle(request)
            self.requests.append((dict(request.headers), body, response.status))
            return response

        return routes_to(recording)


async def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    sent = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
    async with aiohttp.ClientSession() as session, session.post(url, headers=sent, data=body) as r:
        return r.status, await r.json()


async def test_the_example_accepts_signed_webhooks_and_refuses_forged_ones(
    tmp_path: Path,
) -> None:
    whsec = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    notifier_holder: list[PushNotifier] = []

    def jwks_routes(app: web.Application) -> None:
        async def jwks(request: web.Request) -> web.Response:
            return web.json_response(notifier_holder[0].jwks())

        app.router.add_get(JWKS_PATH, jwks)

    async with serve(jwks_routes) as agent_url:
        notifier = PushNotifier.open(
            tmp_path / "outbox.db",
            issuer=agent_url,
            data_dir=tmp_path / "data",
            address_policy=AddressPolicy(allow_loopback=True),
        )
        notifier_holder.append(notifier)

        # Receiver 1: JWT against the agent's JWKS URL (audience: its own webhook URL).
        # The URL is known only once it listens, so the app is built behind a holder.
        capture = Capture()
        holder: dict[str, Any] = {}

        async def late(request: web.Request) -> web.StreamResponse:
            response: web.StreamResponse = await holder["handle"](request)
            return response

        async with (
            serve(capture.setup(late)) as base,
            notifier,
        ):
            jwt_url = base + WEBHOOK_PATH
            jwt_app = build_app(
                make_verifier(issuer=agent_url, audience=jwt_url, jwks_url=agent_url + JWKS_PATH)
            )
            holder["handle"] = asgi_handler(jwt_app)
            jwt_state: ReceiverState = jwt_app.state.receiver

            # Receiver 2: Standard Webhooks only, with the config's whsec_ secret.
            sw_app = build_app(make_verifier(issuer=None, audience=None, whsec=whsec))
            sw_state: ReceiverState = sw_app.state.receiver
            async with serve_receiver(sw_app) as sw_url:
                task = Task(
                    id="t-1", context_id="c-1", status=TaskStatus(state=TaskState.SUBMITTED)
                )
                await notifier.register_config(
                    TaskPushNotificationConfig(url=jwt_url, token="opaque"),
                    owner="client",
                    task_id=task.id,
                    task=task,
                )
                await notifier.register_config(
                    TaskPushNotificationConfig(url=sw_url, token=whsec),
                    owner="client",
                    task_id=task.id,
                    task=task,
                )
                await notifier.publish(
                    task.id,
                    TaskStatusUpdateEvent(
                        task_id=task.id,
                        context_id="c-1",
                        status=TaskStatus(state=TaskState.WORKING),
                    ),
                )
                await wait_for(jwt_state, 2)
                await wait_for(sw_state, 2)

            # Both webhooks verified, by the method each receiver allows.
            assert [r.verified.method for r in jwt_state.received] == [AuthMethod.JWT] * 2
            assert [r.verified.task_id for r in jwt_state.received] == ["t-1", "t-1"]
            assert [r.verified.method for r in sw_state.received] == [
                AuthMethod.STANDARD_WEBHOOKS
            ] * 2
            assert "task" in jwt_state.received[0].body
            assert "statusUpdate" in jwt_state.received[1].body
            assert [status for _, _, status in capture.requests] == [200, 200]
            jwks = jwt_state.verifier.jwks
            assert jwks is not None and jwks.fetches == 1  # from the agent's real server

            headers, body, _ = capture.requests[1]
            # The same delivery again (a retry): accepted, not acted on twice.
            assert await post(jwt_url, headers, body) == (200, {"status": "duplicate"})
            assert len(jwt_state.received) == 2

            # A tampered body: its hash no longer matches the JWT's, even when it still
            # parses to the same JSON (verification is on the raw bytes).
            for tampered in (body.replace(b'"c-1"', b'"c-2"'), body + b" "):
                assert tampered != body
                status, answer = await post(jwt_url, headers, tampered)
                assert status == 401, answer
                assert answer["error"] and answer["message"]

            # A wrong signature: the JWT's signature segment replaced.
            jwt = headers["X-A2A-Signature"]
            head, payload, _sig = jwt.split(".")
            forged = base64.urlsafe_b64encode(os.urandom(64)).rstrip(b"=").decode()
            # (The JWT also rides in Authorization: Bearer; the forged one is used first.)
            bad = {**headers, "X-A2A-Signature": f"{head}.{payload}.{forged}"}
            status, answer = await post(jwt_url, bad, body)
            assert status == 401, answer
            assert answer["error"]

            # No credentials at all.
            bare = {
                k: v for k, v in headers.items() if k not in ("X-A2A-Signature", "Authorization")
            }
            assert (await post(jwt_url, bare, body))[0] == 401
            assert len(jwt_state.received) == 2
