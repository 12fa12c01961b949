"""The console in a real browser (headless Chromium): on a gateway on PostgreSQL and on an
embedded notifier on SQLite, each delivering to a real webhook sink.

Sign in, find the dead-lettered delivery, read its attempts, replay it and watch it turn
delivered; disable its config; the XSS payloads show as text and run nothing; a POST
without the CSRF token changes nothing; the pages read with JavaScript off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio

from a2a_push.testing import SinkResponse, WebhookSink

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import ADMIN_KEY, AGENT_KEY, gateway_settings, running_gateway
from .browser import chromium, launched, require_chromium
from .conftest import ADMIN_KEY as NOTIFIER_ADMIN_KEY
from .conftest import console_rig, status_event

XSS_BODY = b"<script>window.__xss = 1</script><img src=x onerror='window.__xss = 2'>"
XSS_LINK = "javascript:window.__xss=3"

# One browser for the module's tests (each in contexts of its own), so one event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(autouse=True)
def _chromium() -> None:
    require_chromium()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    async with launched() as launched_browser:
        yield launched_browser


@asynccontextmanager
async def gateway_on_postgres(sink: WebhookSink) -> AsyncIterator[tuple[str, str]]:
    """A gateway on a fresh PostgreSQL schema with one dead-lettered delivery:
    (base URL, delivery id)."""
    dsn, schema = require_postgres(), postgres_schema()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    finally:
        await conn.close()
    settings = gateway_settings(f"{dsn}?search_path={schema}")
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        agent = {"Authorization": f"Bearer {AGENT_KEY}"}
        async with session.post(
            f"{url}/v1/tasks/t-browser/pushNotificationConfigs",
            json={"id": "cfg-browser", "url": sink.url("/hook"), "token": "token-secret-9"},
            headers=agent,
        ) as resp:
            assert resp.status == 200, await resp.text()
        event = status_event("t-browser", _working()).model_dump(by_alias=True, exclude_none=True)
        event["metadata"] = {"link": XSS_LINK}
        async with session.post(
            f"{url}/v1/tasks/t-browser/events", json={"statusUpdate": event}, headers=agent
        ) as resp:
            assert resp.status == 202, await resp.text()
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        delivery_id = await _wait_dead(session, url, admin)
        yield url, delivery_id


async def _wait_dead(session: aiohttp.ClientSession, url: str, admin: dict[str, str]) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        async with session.get(f"{url}/admin/deliveries?state=dead", headers=admin) as resp:
            found = (await resp.json())["deliveries"]
        if found:
            return str(found[0]["id"])
        await asyncio.sleep(0.1)
    raise AssertionError("the delivery was not dead-lettered")


def _working() -> Any:
    from a2a_push.protocol import TaskState

    return TaskState.WORKING


async def walk_through(
    ctx: Any, base: str, key: str, delivery_id: str, sink: WebhookSink, shots: Path
) -> None:
    """Everything an operator does about one dead letter, in the browser."""
    page = await ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    # Signed out: the console sends the browser to the sign-in form.
    await page.goto(f"{base}/console/")
    assert "/console/login" in page.url
    await page.fill("#key", "not-the-admin-key-0000")
    await page.click("button[type=submit]")
    assert "That is not an admin key" in await page.inner_text("main")
    await page.fill("#key", key)
    await page.click("button[type=submit]")
    assert page.url.endswith("/console/")
    errors.clear()  # the refused sign-in's 401 above was expected
    assert await page.inner_text("h1") == "Overview"
    assert await page.inner_text('[data-field="dead"]') == "1"
    await page.screenshot(path=str(shots / "overview.png"), full_page=True)

    # Find the dead letter and read its attempts.
    await page.click("nav >> text=Dead letters")
    await page.wait_for_selector(f"a:text('{delivery_id}')")
    await page.screenshot(path=str(shots / "dead-letters.png"), full_page=True)
    await page.click(f"a:text('{delivery_id}')")
    assert delivery_id in await page.inner_text("h1")
    attempts = await page.inner_text("table >> nth=0")
    assert "400" in attempts and "dead" in attempts
    # The receiver's answer and the payload show as text, and ran nothing.
    assert "<script>window.__xss = 1</script>" in attempts
    assert XSS_LINK in await page.inner_text("pre.body")
    assert await page.locator('a[href^="javascript:"]').count() == 0
    assert await page.evaluate("window.__xss") is None
    headers = await page.inner_text("pre.headers")
    assert "[redacted]" in headers and "token-secret-9" not in headers
    await page.screenshot(path=str(shots / "delivery.png"), full_page=True)

    # A POST without the CSRF token (same browser, same session) changes nothing.
    refused = await page.request.post(f"{base}/console/dead/replay", form={"id": delivery_id})
    assert refused.status == 403 and "nothing was changed" in await refused.text()
    assert "dead" in await page.inner_text("dl.facts")

    # Replay it and watch it turn delivered.
    sink.set_default("/hook", 200)
    await page.click("button:text('Replay this delivery')")
    deadline = time.monotonic() + 20
    while "delivered" not in await page.inner_text("dl.facts"):
        assert time.monotonic() < deadline, await page.inner_text("dl.facts")
        await asyncio.sleep(0.3)
        await page.reload()
    attempts = await page.inner_text("table >> nth=0")
    assert "200" in attempts and "delivered" in attempts

    # Disable the config.
    await page.click("nav >> text=Configs")
    await page.click("button:text('Disable')")
    assert "disabled by an operator (console)" in await page.inner_text("main")
    await page.screenshot(path=str(shots / "configs.png"), full_page=True)

    await page.click("nav >> text=Endpoints")
    assert sink.url("/x").rsplit("/", 1)[0] in await page.inner_text("main")
    await page.screenshot(path=str(shots / "endpoints.png"), full_page=True)

    await page.click("button:text('Sign out')")
    assert "/console/login" in page.url
    assert not errors, errors  # no CSP violation, no script error


async def read_without_javascript(browser: Any, base: str, key: str, delivery_id: str) -> None:
    async with chromium(browser, java_script_enabled=False) as ctx:
        page = await ctx.new_page()
        await page.goto(f"{base}/console/deliveries")
        await page.fill("#key", key)
        await page.click("button[type=submit]")
        await page.wait_for_selector(f"a:text('{delivery_id}')")
        await page.click(f"a:text('{delivery_id}')")
        assert "Attempts" in await page.inner_text("main")


async def test_console_on_a_gateway_on_postgresql(tmp_path: Path, browser: Any) -> None:
    async with WebhookSink() as sink:
        sink.set_default("/hook", SinkResponse(400, body=XSS_BODY))
        async with gateway_on_postgres(sink) as (base, delivery_id):
            async with chromium(browser) as ctx:
                await walk_through(ctx, base, ADMIN_KEY, delivery_id, sink, tmp_path)
            await read_without_javascript(browser, base, ADMIN_KEY, delivery_id)


async def test_console_on_an_embedded_notifier_on_sqlite(tmp_path: Path, browser: Any) -> None:
    async for rig in console_rig(tmp_path, admin_keys=[NOTIFIER_ADMIN_KEY]):
        rig.sink.set_default("/hook", SinkResponse(400, body=XSS_BODY))
        await rig.notifier.register_config(
            _config(rig.sink.url("/hook")), owner="client-1", task_id="t-browser"
        )
        event = status_event("t-browser", _working()).model_copy(
            update={"metadata": {"link": XSS_LINK}}
        )
        [delivery_id] = (await rig.notifier.publish("t-browser", event)).delivery_ids
        await rig.notifier.wait_settled([delivery_id], timeout=15)
        async with chromium(browser) as ctx:
            await walk_through(ctx, rig.base, NOTIFIER_ADMIN_KEY, delivery_id, rig.sink, tmp_path)
        await read_without_javascript(browser, rig.base, NOTIFIER_ADMIN_KEY, delivery_id)


def _config(url: str) -> Any:
    from a2a_push.protocol import TaskPushNotificationConfig

    return TaskPushNotificationConfig(url=url, token="token-secret-9")
