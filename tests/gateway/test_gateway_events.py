"""Operational events from gateway replicas (`a2a-push gateway` processes) sharing one
PostgreSQL database: each event reaches the operator endpoint once, signed."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from standardwebhooks.webhooks import Webhook

from a2a_push.events import OPERATOR_TASK
from a2a_push.gateway.cli import rotate_in_database
from a2a_push.gateway.settings import GatewaySettingsError, load_gateway_settings
from a2a_push.signing import verify_webhook_jwt
from a2a_push.testing import WebhookSink

from ..gateway_support import gateway_settings, running_gateway
from .test_gateway_postgres import _create_configs, _publish, cluster

pytestmark = pytest.mark.timeout(180)

WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


async def _jwks(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(url + "/.well-known/jwks.json") as r:
        return dict(await r.json())


async def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


async def test_replicas_send_each_event_once_signed_and_the_rotation_command_too() -> None:
    async with WebhookSink() as ops, WebhookSink() as sink:
        sink.set_default("/t-gone", 410)
        env = {"A2A_GATEWAY_OPERATOR_URL": ops.url("/ops"), "A2A_GATEWAY_OPERATOR_TOKEN": WHSEC}
        async with cluster(**env) as (database, replicas):
            a = await replicas.add()
            b = await replicas.add()
            await _create_configs(a.url, sink, ["t-gone"])
            await _publish([a.url, b.url], ["t-gone"], 1)
            await _until(lambda: len(ops.on("/ops")) >= 2)
            # The rotation command queues key.rotated itself; both replicas adopt the key
            # and queue the same event: the operator gets it once.
            # (What `a2a-push keys rotate --database DB` runs.)
            kid, _ = await asyncio.to_thread(rotate_in_database, database, None)
            await _until(lambda: len(ops.on("/ops")) >= 3)

            async def adopted() -> bool:
                kids = [(await _jwks(r.url))["keys"][0]["kid"] for r in (a, b)]
                return kids == [kid, kid]

            deadline = time.monotonic() + 15
            while not await adopted():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # time for a duplicate to arrive, were there one
            jwks = await _jwks(a.url)
            hooks = ops.on("/ops")
            issuers = {a.url, b.url}
    bodies = []
    for hook in hooks:
        jwt = hook.header("X-A2A-Signature") or ""
        claims = verify_webhook_jwt(
            jwt, jwks=jwks, body=hook.body, audience=ops.url("/ops"), issuer=None
        )
        assert claims["iss"] in issuers and claims["taskId"] == OPERATOR_TASK
        Webhook(WHSEC).verify(hook.body, {k.lower(): v for k, v in hook.headers.items()})
        bodies.append(json.loads(hook.body))
    assert [b["type"] for b in bodies] == ["delivery.dead", "config.disabled", "key.rotated"]
    assert bodies[1]["data"]["reason"] == "gone"
    assert bodies[1]["data"]["owner"].startswith("agent-a/")
    assert bodies[1]["data"]["endpoint"] == sink.url("/")[:-1]
    assert bodies[2]["data"]["kid"] == kid


def test_operator_settings_are_checked_at_start() -> None:
    with pytest.raises(GatewaySettingsError, match="operator_url") as bad:
        load_gateway_settings(environ={"A2A_GATEWAY_OPERATOR_URL": "http://127.0.0.1:9/ops"})
    assert "A2A_GATEWAY_OPERATOR_URL" in str(bad.value)
    with pytest.raises(GatewaySettingsError, match="operator_token"):
        load_gateway_settings(
            environ={
                "A2A_GATEWAY_OPERATOR_URL": "https://ops.example.com/events",
                "A2A_GATEWAY_OPERATOR_TOKEN": "whsec_!!!",
            }
        )
    with pytest.raises(GatewaySettingsError, match="operator_token"):
        load_gateway_settings(environ={"A2A_GATEWAY_OPERATOR_TOKEN": WHSEC})
    ok = load_gateway_settings(
        environ={
            "A2A_GATEWAY_OPERATOR_URL": "http://127.0.0.1:9/ops",
            "A2A_GATEWAY_ALLOW_WEBHOOK_HOSTS": "127.0.0.1",
        }
    )
    assert ok.operator_url == "http://127.0.0.1:9/ops"


async def test_a_gateway_reports_its_key_rotated_then_retired(tmp_path: Path) -> None:
    async with WebhookSink() as ops:
        settings = gateway_settings(str(tmp_path / "outbox.db"), operator_url=ops.url("/ops"))
        async with running_gateway(settings) as (url, gw):
            old = gw.notifier.keyset.active.kid
            new = (await gw.state.rotate_key()).kid
            await gw.reload_keys()
            grace = gw.notifier.keyset.grace_period
            assert await gw.prune_keys(now=time.time() + grace + 1) == [old]
            await _until(lambda: len(ops.on("/ops")) == 2)
            jwks = await _jwks(url)
            bodies = []
            for hook in ops.on("/ops"):
                jwt = hook.header("X-A2A-Signature") or ""
                verify_webhook_jwt(
                    jwt, jwks=jwks, body=hook.body, audience=ops.url("/ops"), issuer=url
                )
                bodies.append(json.loads(hook.body))
    assert [(b["type"], b["data"]["kid"]) for b in bodies] == [
        ("key.rotated", new),
        ("key.retired", old),
    ]
    assert bodies[0]["data"]["previousKid"] == old
