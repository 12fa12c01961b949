"""Without tracing enabled, nothing from OpenTelemetry is imported, installed or not:
a publish and its delivery, through a real HTTP sink, load no opentelemetry module."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from aiohttp import web
    import a2a_push, receiver, receiver.core
    from a2a_push import PushNotifier
    from a2a_push.delivery.ssrf import AddressPolicy
    from a2a_push.protocol.types import (
        TaskPushNotificationConfig, TaskState, TaskStatus, TaskStatusUpdateEvent,
    )

    async def main():
        got = []
        async def hook(request):
            got.append(request.headers.get("traceparent"))
            return web.Response(status=204)
        app = web.Application()
        app.router.add_post("/hook", hook)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        notifier = PushNotifier.open(
            "memory://", issuer="http://agent.test", address_policy=AddressPolicy(["127.0.0.1"])
        )
        async with notifier:
            await notifier.register_config(
                TaskPushNotificationConfig(
                    task_id="t-1", id="c-1", url=f"http://127.0.0.1:{port}/hook"
                ),
                owner="alice",
            )
            await notifier.publish(
                "t-1",
                TaskStatusUpdateEvent(
                    task_id="t-1", context_id="x", status=TaskStatus(state=TaskState.WORKING)
                ),
            )
            for _ in range(500):
                if got:
                    break
                await asyncio.sleep(0.01)
        await runner.cleanup()
        assert got == [None], got  # delivered, and no traceparent sent
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        print("loaded:", loaded)

    asyncio.run(main())
    """
)


def test_a_delivery_without_tracing_imports_no_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "loaded: []", done.stdout
