"""The gateway on SQLite: ingest, push-config API, signing, admin API, bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from a2a_push.cli import main as cli_main
from a2a_push.endpoints import endpoint_of
from a2a_push.gateway.client import GatewayClient, GatewayError, GatewayUnreachableError
from a2a_push.protocol.types import TaskState
from a2a_push.signing import verify_webhook_jwt
from a2a_push.store import DeliveryFilter
from a2a_push.testing import SinkResponse, WebhookSink

from ..gateway_support import (
    ADMIN_KEY,
    AGENT_KEY,
    OTHER_KEY,
    gateway_settings,
    rpc,
    running_gateway,
    status,
)

STATES = [TaskState.SUBMITTED, TaskState.WORKING, TaskState.COMPLETED]


async def test_events_posted_by_an_agent_reach_the_webhook_signed_and_in_order(
    tmp_path: Path,
) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (url, _gw),
        aiohttp.ClientSession() as session,
    ):
        created = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "t-1", "id": "cfg", "url": sink.url(), "token": "tok-123"},
        )
        assert "result" in created, created
        async with GatewayClient(url, AGENT_KEY) as client:
            for state in STATES:
                answer = await client.publish("t-1", status("t-1", state))
                assert answer["deliveries"] == 1
        # The gateway had no event for t-1 when the config was created: no made-up
        # snapshot (it knows no contextId), the task's events from the first one.
        await sink.wait_for(len(STATES))
        await asyncio.sleep(0.2)
        assert len(sink.on("/hook")) == len(STATES)
        assert "statusUpdate" in json.loads(sink.on("/hook")[0].body)
        async with session.get(url + "/.well-known/jwks.json") as resp:
            jwks = await resp.json()
        seqs = []
        for hook in sink.on("/hook"):
            claims = verify_webhook_jwt(
                hook.header("X-A2A-Signature") or "",
                jwks=jwks,
                body=hook.body,
                audience=sink.url(),
                issuer=url,
            )
            seqs.append(claims["seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        last = json.loads(sink.on("/hook")[-1].body)
        assert last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_bad_requests_get_clear_json_errors(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"), max_body_bytes=2048)
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        events = url + "/v1/tasks/t-1/events"
        good = json.dumps(
            {
                "statusUpdate": {
                    "taskId": "t-1",
                    "contextId": "c",
                    "status": {"state": "TASK_STATE_WORKING"},
                }
            }
        )
        cases = [
            ({"Authorization": "Bearer nope-nope-nope-nope"}, good, "application/json", 401),
            ({}, good, "application/json", 401),
            ({"Authorization": f"Bearer {AGENT_KEY}"}, "{bad", "application/json", 400),
            ({"Authorization": f"Bearer {AGENT_KEY}"}, good, "text/plain", 415),
            ({"Authorization": f"Bearer {AGENT_KEY}"}, "x" * 5000, "application/json", 413),
            (
                {"Authorization": f"Bearer {AGENT_KEY}"},
                good.replace("t-1", "t-2"),
                "application/json",
                400,
            ),
            ({"Authorization": f"Bearer {AGENT_KEY}"}, '{"message": {}}', "application/json", 400),
        ]
        for headers, body, ctype, expected in cases:
            async with session.post(
                events, data=body, headers={**headers, "Content-Type": ctype}
            ) as resp:
                assert resp.status == expected, (body[:40], await resp.text())
                assert "message" in await resp.json()
        # agent-a owns t-1 now; agent-b cannot post to it nor see its configs.
        async with session.post(
            events,
            data=good,
            headers={"Authorization": f"Bearer {AGENT_KEY}", "Content-Type": "application/json"},
        ) as resp:
            assert resp.status == 202
        async with session.post(
            events,
            data=good,
            headers={"Authorization": f"Bearer {OTHER_KEY}", "Content-Type": "application/json"},
        ) as resp:
            assert resp.status == 404
        listed = await rpc(
            session, url, "ListTaskPushNotificationConfigs", {"taskId": "t-1"}, OTHER_KEY
        )
        assert listed["error"]["code"] == -32001  # TaskNotFound, never "forbidden"


async def test_admin_api_lists_replays_and_disables(tmp_path: Path) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (url, gw),
        aiohttp.ClientSession() as session,
    ):
        sink.set_default("/hook", 400)  # every delivery is dead-lettered at once
        created = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "t-9", "id": "c", "url": sink.url()},
        )
        assert "result" in created
        async with GatewayClient(url, AGENT_KEY) as client:
            await client.publish("t-9", status("t-9", TaskState.WORKING))
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        dead: list[dict[str, object]] = []
        for _ in range(100):
            async with session.get(
                url + "/admin/deliveries?state=dead&task=t-9", headers=admin
            ) as resp:
                dead = (await resp.json())["deliveries"]
            if dead:
                break
            await asyncio.sleep(0.05)
        assert len(dead) == 1  # the event (no snapshot: no event was known at Create)
        async with session.get(
            url + "/admin/deliveries", headers={"Authorization": f"Bearer {AGENT_KEY}"}
        ) as resp:
            assert resp.status == 401
        sink.set_default("/hook", 200)
        async with session.post(
            url + "/admin/deliveries/replay", json={"ids": [dead[0]["id"]]}, headers=admin
        ) as resp:
            assert (await resp.json())["replayed"] == 1
        await sink.wait_for(2)
        # The endpoint answered every time (a 400 is an answer): no breaker is open.
        async with session.get(url + "/admin/endpoints", headers=admin) as resp:
            assert resp.status == 200 and await resp.json() == {"open": []}
        # Failures enough to open its breaker: the endpoint is listed (scheme://host:port).
        health = gw.notifier.dispatcher.health
        endpoint = endpoint_of(sink.url())
        for _ in range(health.failure_threshold):
            health.record_failure(endpoint)
        async with session.get(url + "/admin/endpoints", headers=admin) as resp:
            assert resp.status == 200 and await resp.json() == {"open": [endpoint]}
        key = dead[0]["configKey"]
        async with session.post(f"{url}/admin/configs/{key}/disable", headers=admin) as resp:
            assert (await resp.json())["enabled"] is False
        async with session.post(f"{url}/admin/configs/nope/disable", headers=admin) as resp:
            assert resp.status == 404
        async with session.get(url + "/healthz") as resp:
            assert resp.status == 200
        async with session.get(url + "/metrics") as resp:
            assert "a2a_push_events_published_total" in await resp.text()


async def test_rotating_the_key_in_the_database_switches_the_signer(tmp_path: Path) -> None:
    database = str(tmp_path / "outbox.db")
    async with (
        running_gateway(gateway_settings(database)) as (url, gw),
        aiohttp.ClientSession() as session,
    ):
        before = gw.notifier.keyset.active.kid
        assert await asyncio.to_thread(cli_main, ["keys", "rotate", "--database", database]) == 0
        for _ in range(100):
            if gw.notifier.keyset.active.kid != before:
                break
            await asyncio.sleep(0.05)
        after = gw.notifier.keyset.active.kid
        assert after != before
        async with session.get(url + "/.well-known/jwks.json") as resp:
            kids = [k["kid"] for k in (await resp.json())["keys"]]
        assert kids == [after, before]  # the retired key stays published


async def test_the_jwks_publishes_a_key_rotated_in_before_the_next_periodic_reload(
    tmp_path: Path,
) -> None:
    # Another replica may already sign with the new key: a receiver fetching the JWKS
    # from this one (which would only reload in an hour) must find it.
    database = str(tmp_path / "outbox.db")
    async with (
        running_gateway(gateway_settings(database, key_reload_interval=3600)) as (url, gw),
        aiohttp.ClientSession() as session,
    ):
        before = gw.notifier.keyset.active.kid
        await asyncio.sleep(1.1)  # past the route's one-second reuse of its last look
        assert await asyncio.to_thread(cli_main, ["keys", "rotate", "--database", database]) == 0
        async with session.get(url + "/.well-known/jwks.json") as resp:
            kids = [k["kid"] for k in (await resp.json())["keys"]]
        assert len(kids) == 2 and kids[1] == before and kids[0] != before
        assert gw.notifier.keyset.active.kid == kids[0]


async def test_client_gives_up_on_refusals_and_retries_unavailability(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with (
        running_gateway(settings) as (url, _gw),
        GatewayClient(url, "wrong-key-wrong-key") as c,
    ):
        with pytest.raises(GatewayError) as err:
            await c.publish("t", status("t", TaskState.WORKING))
        assert err.value.status == 401 and not err.value.retryable
    async with GatewayClient("http://127.0.0.1:9", AGENT_KEY, attempts=2, deadline=2) as client:
        with pytest.raises(GatewayError) as err:
            await client.publish("t", status("t", TaskState.WORKING))
        assert err.value.retryable
    # Any 5xx is worth another try (a proxy's 501 or 505 included), then the answer counts.
    async with WebhookSink() as fake:
        path = "/v1/tasks/t/events"
        fake.script(path, [SinkResponse(501), SinkResponse(200, body=b'{"seq": 1}')])
        async with GatewayClient(fake.url(""), AGENT_KEY, attempts=3, deadline=10) as client:
            answer = await client.publish("t", status("t", TaskState.WORKING))
        assert answer == {"seq": 1} and [r.status for r in fake.on(path)] == [501, 200]


async def test_whoami_names_the_keys_agent_and_tells_refused_from_unreachable(
    tmp_path: Path,
) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with running_gateway(settings) as (url, _gw):
        async with GatewayClient(url, AGENT_KEY) as client:
            assert await client.whoami() == "agent-a"
        async with GatewayClient(url, OTHER_KEY) as client:
            assert await client.whoami() == "agent-b"
        for key in ("wrong-key-wrong-key", ADMIN_KEY):  # an admin key is no agent's
            async with GatewayClient(url, key) as client:
                with pytest.raises(GatewayError) as err:
                    await client.whoami()
            assert err.value.status == 401 and not isinstance(err.value, GatewayUnreachableError)
            assert "not an agent API key of this gateway" in str(err.value)
    # Gone: nothing listens on its port any more.
    async with GatewayClient(url, AGENT_KEY) as client:
        with pytest.raises(GatewayUnreachableError) as gone:
            await client.whoami()
    assert gone.value.cause == "connection refused" and gone.value.status is None
    assert str(gone.value) == f"cannot reach the gateway at {url} (connection refused)"
    # Something else answers there: not a gateway (and not "unreachable").
    async with WebhookSink() as other, GatewayClient(other.url(""), AGENT_KEY) as client:
        other.set_default("/v1/agent", SinkResponse(200, body=b"<html>hello</html>"))
        with pytest.raises(GatewayError, match="did not answer like an a2a-push gateway"):
            await client.whoami()


async def test_cli_lists_by_config_and_disables_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = str(tmp_path / "outbox.db")
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(database)) as (
            url,
            gw,
        ),
        aiohttp.ClientSession() as session,
    ):
        for task in ("t-a", "t-b"):
            created = await rpc(
                session,
                url,
                "CreateTaskPushNotificationConfig",
                {"taskId": task, "id": "c", "url": sink.url(f"/{task}")},
            )
            assert "result" in created
        async with GatewayClient(url, AGENT_KEY) as client:
            for task in ("t-a", "t-b"):
                await client.publish(task, status(task, TaskState.WORKING))
        await sink.wait_for(2)
        config = (await gw.notifier.store.configs_for_task("t-a"))[0]
        argv = ["deliveries", "list", "--database", database, "--config", config.key, "--json"]
        assert await asyncio.to_thread(cli_main, argv) == 0
        listed = json.loads(capsys.readouterr().out)
        assert {d["task_id"] for d in listed} == {"t-a"}
        argv = ["configs", "disable", config.key, "--database", database]
        assert await asyncio.to_thread(cli_main, argv) == 0
        assert "disabled" in capsys.readouterr().out
        stored = await gw.notifier.store.get_config_by_key(config.key)
        assert stored is not None and not stored.enabled
        assert (
            await asyncio.to_thread(cli_main, ["configs", "enable", "nope", "--database", database])
            == 1
        )


async def test_a_repeated_idempotency_key_queues_the_event_once(tmp_path: Path) -> None:
    async with (
        WebhookSink() as sink,
        running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (url, gw),
        aiohttp.ClientSession() as session,
    ):
        created = await rpc(
            session, url, "CreateTaskPushNotificationConfig", {"taskId": "t-i", "url": sink.url()}
        )
        assert "result" in created
        body = json.dumps(
            {
                "statusUpdate": {
                    "taskId": "t-i",
                    "contextId": "c",
                    "status": {"state": "TASK_STATE_WORKING"},
                }
            }
        )
        headers = {
            "Authorization": f"Bearer {AGENT_KEY}",
            "Content-Type": "application/json",
            "Idempotency-Key": "evt-1",
        }
        answers = []
        for _ in range(3):  # a client retrying after lost answers
            async with session.post(
                url + "/v1/tasks/t-i/events", data=body, headers=headers
            ) as resp:
                assert resp.status == 202
                answers.append(await resp.json())
        assert answers[0] == answers[1] == answers[2]
        async with session.post(
            url + "/v1/tasks/t-i/events",
            data=body,
            headers={**headers, "Idempotency-Key": "x" * 300},
        ) as resp:
            assert resp.status == 400
        await sink.wait_for(1)  # the event, once (no event was known at Create: no snapshot)
        await asyncio.sleep(0.3)
        assert len(sink.on("/hook")) == 1
        found = await gw.notifier.store.list_deliveries(DeliveryFilter(task_id="t-i"))
        assert len(found) == 1


async def test_large_events_are_read_whole_and_keys_rotate_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from a2a_push.store import generate_key

    key = generate_key()
    database = str(tmp_path / "outbox.db")
    settings = gateway_settings(database, encryption_keys=[key])
    async with running_gateway(settings) as (url, gw), aiohttp.ClientSession() as session:
        update = {
            "taskId": "t-large",
            "contextId": "c",
            "status": {"state": "TASK_STATE_WORKING"},
            "metadata": {"blob": "y" * 600_000},  # under the 1 MiB limit, many segments
        }
        async with session.post(
            url + "/v1/tasks/t-large/events",
            json={"statusUpdate": update},
            headers={"Authorization": f"Bearer {AGENT_KEY}"},
        ) as resp:
            assert resp.status == 202, await resp.text()
        before = gw.notifier.keyset.active.kid
        argv = ["keys", "rotate", "--database", database]
        monkeypatch.delenv("A2A_GATEWAY_ENCRYPTION_KEYS", raising=False)
        monkeypatch.delenv("A2A_PUSH_ENCRYPTION_KEYS", raising=False)
        assert await asyncio.to_thread(cli_main, argv) == 1  # without the key: says which
        assert "--encryption-key" in capsys.readouterr().err
        assert await asyncio.to_thread(cli_main, [*argv, f"--encryption-key={key}"]) == 0
        for _ in range(100):
            if gw.notifier.keyset.active.kid != before:
                break
            await asyncio.sleep(0.05)
        assert gw.notifier.keyset.active.kid != before
    raw = (tmp_path / "outbox-gateway.db").read_bytes()
    assert b"PRIVATE KEY" not in raw  # sealed at rest


async def test_cli_shows_endpoint_health_from_the_admin_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (url, gw):
        argv = ["endpoints", "--gateway", url, "--admin-key", ADMIN_KEY]
        assert await asyncio.to_thread(cli_main, argv) == 0
        assert "healthy" in capsys.readouterr().out
        health = gw.notifier.dispatcher.health
        for _ in range(health.failure_threshold):  # the endpoint keeps failing: its breaker opens
            health.record_failure("http://127.0.0.1:9")
        assert await asyncio.to_thread(cli_main, [*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"open": ["http://127.0.0.1:9"]}
        bad = ["endpoints", "--gateway", url, "--admin-key", "wrong-key-wrong-key"]
        assert await asyncio.to_thread(cli_main, bad) == 1
        assert "401" in capsys.readouterr().err
        # Without --admin-key: the gateway's own A2A_GATEWAY_ADMIN_KEYS serves too.
        monkeypatch.setenv("A2A_GATEWAY_ADMIN_KEYS", f" {ADMIN_KEY} ,another-admin-key-0123")
        monkeypatch.delenv("A2A_GATEWAY_ADMIN_KEY", raising=False)
        assert await asyncio.to_thread(cli_main, ["endpoints", "--gateway", url]) == 0
