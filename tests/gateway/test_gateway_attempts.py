"""The gateway's attempt history: GET /admin/deliveries/{id}/attempts, listings by
endpoint, and the attempt_history setting."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import aiohttp

from a2a_push.gateway.client import GatewayClient
from a2a_push.gateway.settings import load_gateway_settings
from a2a_push.protocol.types import TaskState
from a2a_push.testing import SinkResponse, WebhookSink

from ..gateway_support import ADMIN_KEY, AGENT_KEY, gateway_settings, rpc, running_gateway, status

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def _one_delivered(session: aiohttp.ClientSession, url: str, sink: WebhookSink) -> str:
    created = await rpc(
        session,
        url,
        "CreateTaskPushNotificationConfig",
        {"taskId": "t-1", "id": "c", "url": sink.url("/hook/SECRET?token=SECRET")},
    )
    assert "result" in created, created
    async with GatewayClient(url, AGENT_KEY) as client:
        await client.publish("t-1", status("t-1", TaskState.WORKING))
    for _ in range(200):
        async with session.get(f"{url}/admin/deliveries?state=delivered", headers=ADMIN) as r:
            found = (await r.json())["deliveries"]
        if found:
            return str(found[0]["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("not delivered")


async def _get(session: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with session.get(url, headers=kw.pop("headers", ADMIN), **kw) as resp:
        return resp.status, await resp.json()


async def test_the_admin_api_shows_a_deliverys_attempts(tmp_path: Path) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (url, _gw),
        aiohttp.ClientSession() as session,
    ):
        sink.script("/hook/SECRET", [SinkResponse(503, body=b'{"retry":"soon"}'), 204])
        delivery_id = await _one_delivered(session, url, sink)
        code, answer = await _get(session, f"{url}/admin/deliveries/{delivery_id}/attempts")
        assert code == 200 and answer["recording"] is True
        first, second = answer["attempts"]
        endpoint = f"http://127.0.0.1:{sink.port}"
        assert first["number"] == 1 and second["number"] == 2
        assert (first["verdict"], first["status"], first["errorClass"]) == ("retry", 503, None)
        assert first["retryAt"] == second["startedAt"]
        assert base64.b64decode(first["response"]) == b'{"retry":"soon"}'
        assert first["responseBytes"] == 16
        assert (second["verdict"], second["status"], second["response"]) == ("delivered", 204, "")
        assert first["endpoint"] == second["endpoint"] == endpoint
        assert "SECRET" not in str(answer)
        assert set(first) == {
            "number",
            "startedAt",
            "duration",
            "endpoint",
            "verdict",
            "status",
            "errorClass",
            "error",
            "retryAt",
            "response",
            "responseBytes",
        }

        # Listings by endpoint: an origin or a URL, the default port optional.
        for given in (endpoint, f"{endpoint}/any/path?q=1"):
            code, listed = await _get(
                session, f"{url}/admin/deliveries", params={"endpoint": given}
            )
            assert code == 200 and [d["id"] for d in listed["deliveries"]] == [delivery_id]
            assert listed["deliveries"][0]["endpoint"] == endpoint
        code, listed = await _get(
            session, f"{url}/admin/deliveries", params={"endpoint": "http://127.0.0.1:1"}
        )
        assert code == 200 and listed["deliveries"] == []
        code, refused = await _get(
            session, f"{url}/admin/deliveries", params={"endpoint": "ftp://x"}
        )
        assert code == 400 and "endpoint" in refused["message"]

        code, missing = await _get(session, f"{url}/admin/deliveries/msg_none/attempts")
        assert code == 404 and missing["error"] == "not_found"
        code, _ = await _get(
            session,
            f"{url}/admin/deliveries/{delivery_id}/attempts",
            headers={"Authorization": f"Bearer {AGENT_KEY}"},
        )
        assert code == 401


async def test_a_gateway_with_the_history_off_records_none(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"), attempt_history=False)
    async with (
        WebhookSink() as sink,
        running_gateway(settings) as (url, _gw),
        aiohttp.ClientSession() as session,
    ):
        delivery_id = await _one_delivered(session, url, sink)
        code, answer = await _get(session, f"{url}/admin/deliveries/{delivery_id}/attempts")
        assert code == 200 and answer == {"attempts": [], "recording": False}


def test_the_history_setting_is_read_from_the_environment() -> None:
    assert load_gateway_settings(environ={}).attempt_history is True
    off = load_gateway_settings(environ={"A2A_GATEWAY_ATTEMPT_HISTORY": "false"})
    assert off.attempt_history is False
