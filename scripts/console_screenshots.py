"""Take the screenshots of docs/console.md (``make screenshots``).

Runs an embedded notifier on a temporary SQLite file with a local webhook sink, makes a
little history (delivered webhooks, retries, a dead letter, a disabled config), signs in
to its console in headless Chromium (Debian's chromium package, driven by Playwright) and
saves one PNG per page into the folder given (default: docs/images).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

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
from a2a_push.testing import SinkResponse, WebhookSink

ADMIN_KEY = "screenshots-admin-key-0123456789"
PAGES = {
    "console-overview.png": "/console/",
    "console-deliveries.png": "/console/deliveries",
    "console-dead-letters.png": "/console/dead",
    "console-endpoints.png": "/console/endpoints",
    "console-configs.png": "/console/configs",
}


def event(task_id: str, state: TaskState) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id="ctx-1", status=TaskStatus(state=state)
    )


async def make_history(notifier: PushNotifier, sink: WebhookSink) -> str:
    """Deliveries of several kinds; the id of a dead letter."""
    sink.script("/orders", [SinkResponse(503, body=b'{"error": "busy"}'), 200])
    sink.set_default("/legacy", SinkResponse(400, body=b'{"error": "unknown event"}'))
    ids: list[str] = []
    for n, path in enumerate(["/orders", "/billing", "/legacy", "/orders", "/billing"]):
        task_id = f"task-{n + 1:03d}"
        task = Task(id=task_id, context_id="ctx-1", status=TaskStatus(state=TaskState.SUBMITTED))
        config = await notifier.register_config(
            TaskPushNotificationConfig(url=sink.url(path), token=f"token-{n}"),
            owner="client-1",
            task_id=task_id,
            task=task,
        )
        for state in (TaskState.WORKING, TaskState.COMPLETED):
            ids += (await notifier.publish(task_id, event(task_id, state))).delivery_ids
        if n == 4:
            await notifier.wait_settled(ids, timeout=30)
            await notifier.store.set_config_enabled(config.key, False, "disabled by an operator")
    settled = await notifier.wait_settled(ids, timeout=30)
    return next(d.id for d in settled if d.state.value == "dead")


async def main(out: Path) -> int:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print(
            "screenshots: no chromium on PATH: install Debian's chromium package", file=sys.stderr
        )
        return 1
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        async with WebhookSink() as sink:
            notifier = PushNotifier.open(
                Path(tmp) / "outbox.db",
                issuer="http://127.0.0.1",
                address_policy=AddressPolicy(allow_loopback=True),
                retry=RetryPolicy(quick_attempts=2, schedule=(0.2,)),
            )
            app = web.Application()
            notifier.add_console(app, admin_keys=[ADMIN_KEY])
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with notifier:
                dead = await make_history(notifier, sink)
                async with async_playwright() as p:
                    browser = await p.chromium.launch(
                        executable_path=chromium, args=["--no-sandbox"]
                    )
                    page = await browser.new_page(viewport={"width": 1200, "height": 760})
                    await page.goto(f"{base}/console/login")
                    await page.screenshot(path=str(out / "console-sign-in.png"))
                    await page.fill("#key", ADMIN_KEY)
                    await page.click("button[type=submit]")
                    for name, path in PAGES.items():
                        await page.goto(base + path)
                        await page.screenshot(path=str(out / name), full_page=True)
                        print(f"screenshots: {out / name}")
                    await page.goto(f"{base}/console/deliveries/{dead}")
                    await page.screenshot(path=str(out / "console-delivery.png"), full_page=True)
                    print(f"screenshots: {out / 'console-delivery.png'}")
                    await browser.close()
            await runner.cleanup()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("docs/images"))
    folder = parser.parse_args().out
    folder.mkdir(parents=True, exist_ok=True)
    sys.exit(asyncio.run(main(folder)))
