"""A console on a real notifier (SQLite) with a real webhook sink, and a signed-in client."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from a2a_push import AddressPolicy, PushNotifier
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.protocol import (
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.store import StoredConfig
from a2a_push.testing import WebhookSink

ADMIN_KEY = "console-admin-key-0123456789"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
LOGIN = re.compile(r'name="login" value="([0-9a-f]+)"')


def status_event(task_id: str, state: TaskState) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id="c-1", status=TaskStatus(state=state))


@dataclass
class Rig:
    notifier: PushNotifier
    sink: WebhookSink
    base: str  # http://127.0.0.1:PORT
    session: aiohttp.ClientSession  # not signed in

    async def register(self, task_id: str, path: str, *, token: str | None = None) -> StoredConfig:
        task = Task(id=task_id, context_id="c-1", status=TaskStatus(state=TaskState.SUBMITTED))
        return await self.notifier.register_config(
            TaskPushNotificationConfig(url=self.sink.url(path), token=token),
            owner="client-1",
            task_id=task_id,
            task=task,
        )

    async def publish(self, task_id: str, state: TaskState = TaskState.WORKING) -> list[str]:
        result = await self.notifier.publish(task_id, status_event(task_id, state))
        await self.notifier.wait_settled(result.delivery_ids, timeout=15)
        return result.delivery_ids

    async def sign_in(self, session: aiohttp.ClientSession, key: str = ADMIN_KEY) -> str:
        """Sign ``session`` in; the CSRF token of its session."""
        async with session.get(self.base + "/console/login") as resp:
            token = LOGIN.search(await resp.text())
        assert token is not None
        async with session.post(
            self.base + "/console/login",
            data={"login": token.group(1), "key": key, "next": "/console/"},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303, await resp.text()
        return await self.csrf(session)

    async def csrf(self, session: aiohttp.ClientSession) -> str:
        async with session.get(self.base + "/console/", allow_redirects=False) as resp:
            assert resp.status == 200
            found = CSRF.search(await resp.text())
        assert found is not None
        return found.group(1)


async def console_rig(tmp_path: Path, *, admin_keys: list[str]) -> AsyncIterator[Rig]:
    async with WebhookSink() as sink:
        notifier = PushNotifier.open(
            tmp_path / "outbox.db",
            issuer="http://127.0.0.1",
            address_policy=AddressPolicy(allow_loopback=True),
            retry=RetryPolicy(quick_attempts=1, schedule=(0.2, 0.2)),
        )
        app = web.Application()
        notifier.add_console(app, admin_keys=admin_keys) if admin_keys else _off(app, notifier)

        async def run(app: web.Application) -> AsyncIterator[None]:
            async with notifier:
                yield

        app.cleanup_ctx.append(run)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with aiohttp.ClientSession(cookie_jar=jar) as session:
            try:
                yield Rig(notifier, sink, f"http://127.0.0.1:{port}", session)
            finally:
                await runner.cleanup()


def _off(app: web.Application, notifier: PushNotifier) -> None:
    from a2a_push.console import Console, ConsoleSource

    Console(ConsoleSource.of_notifier(notifier), []).add_routes(app)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async for r in console_rig(tmp_path, admin_keys=[ADMIN_KEY]):
        yield r
