"""``a2a-push console --database DB``: the console on an outbox file, as its own process."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp

from a2a_push import AddressPolicy, PushNotifier
from a2a_push.testing import WebhookSink

from ..gateway_support import free_port
from .conftest import ADMIN_KEY, status_event

COMMAND = [sys.executable, "-m", "a2a_push"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_without_an_admin_key_it_says_how_to_give_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "A2A_PUSH_CONSOLE_ADMIN_KEY"}
    done = run("console", "--database", str(tmp_path / "x.db"), env=env)
    assert done.returncode == 2
    assert done.stderr.startswith("a2a-push: error: the console needs an admin key")
    assert "--admin-key KEY or A2A_PUSH_CONSOLE_ADMIN_KEY" in done.stderr
    done = run("console", "--database", str(tmp_path / "x.db"), "--admin-key", "short")
    assert done.returncode == 2 and "at least 16 characters" in done.stderr


def test_a_database_that_is_not_there_is_named(tmp_path: Path) -> None:
    done = run("console", "--database", str(tmp_path / "absent.db"), "--admin-key", ADMIN_KEY)
    assert done.returncode != 0
    assert "absent.db" in done.stderr and "Traceback" not in done.stderr


async def test_it_serves_the_outbox_of_a_notifier(tmp_path: Path) -> None:
    database = tmp_path / "outbox.db"
    async with WebhookSink() as sink:
        notifier = PushNotifier.open(
            database, issuer="http://127.0.0.1", address_policy=AddressPolicy(allow_loopback=True)
        )
        async with notifier:
            from a2a_push.protocol import TaskPushNotificationConfig, TaskState

            await notifier.register_config(
                TaskPushNotificationConfig(url=sink.url("/h")), owner="o", task_id="t-cli"
            )
            result = await notifier.publish("t-cli", status_event("t-cli", TaskState.WORKING))
            await notifier.wait_settled(result.delivery_ids)
    port = free_port()
    env = {**os.environ, "A2A_PUSH_CONSOLE_ADMIN_KEY": ADMIN_KEY}
    proc = await asyncio.create_subprocess_exec(
        *COMMAND,
        "console",
        "--database",
        str(database),
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert f"http://127.0.0.1:{port}/console/" in line and ADMIN_KEY not in line
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar) as session:
            base = f"http://127.0.0.1:{port}/console"
            async with session.get(base + "/login") as resp:
                token = re.search(r'name="login" value="([0-9a-f]+)"', await resp.text())
            assert token is not None
            async with session.post(
                base + "/login", data={"login": token.group(1), "key": ADMIN_KEY}
            ) as resp:
                assert resp.status == 200 and "Overview" in await resp.text()
            async with session.get(base + "/deliveries?task=t-cli") as resp:
                text = await resp.text()
            assert result.delivery_ids[0] in text and "delivered" in text
            async with session.get(base + "/endpoints") as resp:
                assert "unknown" in await resp.text()  # no dispatcher in this process
    finally:
        proc.terminate()
        await proc.wait()
