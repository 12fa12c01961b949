"""The gateway refuses bad input before writing anything, on SQLite and PostgreSQL:
ids a database cannot store, admin queries of the wrong type, events it will not
publish; reading a task id never claims it; idempotency keys of different tasks never
collide; settings and key rotation name the mistake without echoing secrets."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import asyncpg
import pytest

from a2a_push.cli import main as cli_main
from a2a_push.errors import StoreUnavailableError
from a2a_push.gateway.client import GatewayClient
from a2a_push.gateway.settings import GatewaySettingsError, load_gateway_settings
from a2a_push.protocol.types import MAX_ID_CHARS, TaskState
from a2a_push.store.sqlite import SQLiteStore
from a2a_push.testing import WebhookSink

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import (
    ADMIN_KEY,
    AGENT_KEY,
    OTHER_KEY,
    gateway_settings,
    rpc,
    running_gateway,
    status,
)

Gateway = Callable[[], Any]


async def _database(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return str(tmp_path / "outbox.db")
    dsn = require_postgres()
    schema = postgres_schema()  # dropped after the test by conftest
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    finally:
        await conn.close()
    return f"{dsn}?search_path={schema}"


@pytest.fixture(params=["sqlite", "postgres"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Gateway:
    """``async with gateway() as url``; the running Gateway is ``gateway.running``."""

    @asynccontextmanager
    async def start() -> AsyncIterator[str]:
        settings = gateway_settings(await _database(request.param, tmp_path))
        async with running_gateway(settings) as (url, gw):
            start.running = gw  # type: ignore[attr-defined]
            yield url

    return start


def _auth(key: str = AGENT_KEY, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **extra}


async def _post_event(
    session: aiohttp.ClientSession, url: str, task_id: str, state: TaskState, **headers: str
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{url}/v1/tasks/{quote(task_id, safe='')}/events",
        data=json.dumps({"statusUpdate": status(task_id, state).to_json_dict()}),
        headers=_auth(**headers),
    ) as resp:
        return resp.status, await resp.json()


async def test_reading_configs_of_an_unknown_task_does_not_claim_it(gateway: Gateway) -> None:
    async with gateway() as url, aiohttp.ClientSession() as session:
        for method, params in [
            ("ListTaskPushNotificationConfigs", {"taskId": "unseen"}),
            ("GetTaskPushNotificationConfig", {"taskId": "unseen", "id": "c"}),
            ("DeleteTaskPushNotificationConfig", {"taskId": "unseen", "id": "c"}),
        ]:
            answer = await rpc(session, url, method, params)
            assert answer["error"]["code"] == -32001, (method, answer)  # TaskNotFound
        async with session.get(
            f"{url}/v1/tasks/unseen/pushNotificationConfigs", headers=_auth()
        ) as resp:
            assert resp.status == 404
        # Nobody owns it: another agent may still name it first.
        code, _ = await _post_event(session, url, "unseen", TaskState.WORKING, key=OTHER_KEY)
        assert code == 202
        listed = await rpc(
            session, url, "ListTaskPushNotificationConfigs", {"taskId": "unseen"}, OTHER_KEY
        )
        assert listed["result"]["configs"] == []


async def test_ids_a_database_cannot_store_are_refused_not_500(gateway: Gateway) -> None:
    async with gateway() as url, aiohttp.ClientSession() as session:
        async with session.post(
            f"{url}/v1/tasks/a%00b/events",
            data=json.dumps({"statusUpdate": status("a\x00b", TaskState.WORKING).to_json_dict()}),
            headers=_auth(),
        ) as resp:
            assert resp.status == 400 and "NUL" in (await resp.json())["message"]
        hook = "http://127.0.0.1:9/hook"
        made = await rpc(
            session, url, "CreateTaskPushNotificationConfig", {"taskId": "t", "url": hook}
        )
        assert "result" in made, made
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("CreateTaskPushNotificationConfig", {"taskId": "t", "id": "c\x00", "url": hook}, "id"),
            (
                "CreateTaskPushNotificationConfig",
                {"taskId": "t", "url": hook, "tenant": "t\x00"},
                "tenant",
            ),
            ("GetTaskPushNotificationConfig", {"taskId": "a\x00b", "id": "c"}, "taskId"),
            ("DeleteTaskPushNotificationConfig", {"taskId": "t", "id": "c\x00"}, "id"),
            ("ListTaskPushNotificationConfigs", {"taskId": "a\x00b"}, "taskId"),
            # A page token that decodes to NUL ("AA" is base64 of one zero byte).
            ("ListTaskPushNotificationConfigs", {"taskId": "t", "pageToken": "AA"}, "pageToken"),
        ]
        for method, params, field in cases:
            answer = await rpc(session, url, method, params)
            assert answer["error"]["code"] == -32602, (method, params, answer)
            assert field in answer["error"]["message"], answer


async def test_a_long_task_id_a_config_accepts_also_takes_events(gateway: Gateway) -> None:
    # The same limit on both sides (a config for a task that can take no event, or the
    # reverse, would be a trap); past it, a clear refusal from both, never a 500.
    long_id, too_long = "t" * MAX_ID_CHARS, "t" * (MAX_ID_CHARS + 1)
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        created = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": long_id, "id": "c", "url": sink.url()},
        )
        assert "result" in created, created
        code, body = await _post_event(session, url, long_id, TaskState.WORKING)
        assert code == 202 and body["deliveries"] == 1
        refused = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": too_long, "id": "c", "url": sink.url()},
        )
        assert refused["error"]["code"] == -32602, refused
        assert f"at most {MAX_ID_CHARS} characters" in refused["error"]["message"]
        code, body = await _post_event(session, url, too_long, TaskState.WORKING)
        assert code == 400 and body["error"] == "invalid_task_id", body


async def test_an_event_naming_a_bad_task_id_gets_invalid_task_id(gateway: Gateway) -> None:
    # The documented code for an event's task id, whichever parser finds it broken: a
    # lone surrogate escape is refused by the event model's JSON parser itself.
    async with gateway() as url, aiohttp.ClientSession() as session:
        for path, named in (
            ("t", "\\ud800"),
            ("t", "a\\udc00b"),
            ("t", ""),
            ("t", "t" * (MAX_ID_CHARS + 1)),
            ("t", "a\\u0001b"),
            ("%ED%A0%80", "\\ud800"),
        ):
            body = (
                '{"statusUpdate": {"taskId": "' + named + '", "contextId": "c", '
                '"status": {"state": "TASK_STATE_WORKING"}}}'
            )
            async with session.post(
                f"{url}/v1/tasks/{path}/events", data=body, headers=_auth()
            ) as resp:
                answer = await resp.json()
                assert resp.status == 400, (named, answer)
            assert answer["error"] == "invalid_task_id", (named, answer)
            assert "no lone surrogate" in answer["message"]
        # Other mistakes in an event with a good task id stay invalid_event.
        for body in (
            '{"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": 5}}}',
            '{"statusUpdate": {"taskId": "t", "contextId": "c"',
            '{"nothing": {}}',
        ):
            async with session.post(f"{url}/v1/tasks/t/events", data=body, headers=_auth()) as resp:
                answer = await resp.json()
                assert resp.status == 400 and answer["error"] == "invalid_event", (body, answer)
        assert await gateway.running.state.owner("t") is None  # type: ignore[attr-defined]


async def test_a_refused_event_does_not_become_the_task_status(gateway: Gateway) -> None:
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        code, _ = await _post_event(session, url, "t-1", TaskState.WORKING)
        assert code == 202
        code, body = await _post_event(
            session, url, "t-1", TaskState.COMPLETED, **{"Idempotency-Key": "k" * 300}
        )
        assert code == 400 and body["error"] == "invalid_header"
        created = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "t-1", "id": "c", "url": sink.url()},
        )
        assert "result" in created, created
        await sink.wait_for(1)
        snapshot = json.loads(sink.on("/hook")[0].body)
        assert snapshot["task"]["status"]["state"] == "TASK_STATE_WORKING"


async def test_idempotency_keys_of_different_tasks_never_collide(gateway: Gateway) -> None:
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        for task in ("a", "a/b"):
            created = await rpc(
                session,
                url,
                "CreateTaskPushNotificationConfig",
                {"taskId": task, "id": "c", "url": sink.url(f"/{task.replace('/', '-')}")},
            )
            assert "result" in created, created
        # "a" + "b/c" and "a/b" + "c" joined with "/" would be the same key.
        first = await _post_event(
            session, url, "a", TaskState.WORKING, **{"Idempotency-Key": "b/c"}
        )
        second = await _post_event(
            session, url, "a/b", TaskState.WORKING, **{"Idempotency-Key": "c"}
        )
        assert first[0] == second[0] == 202
        assert second[1]["taskId"] == "a/b" and second[1]["deliveries"] == 1
        await sink.wait_for(2)  # each config its event (no event known at Create: no snapshot)
        assert len(sink.on("/a")) == 1 and len(sink.on("/a-b")) == 1


async def test_admin_endpoints_refuse_bad_input_with_400(gateway: Gateway) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with gateway() as url, aiohttp.ClientSession() as session:
        for query in ("limit=-1", "limit=0", "limit=5000", "since=abc", "since=nan", "task=a%00"):
            async with session.get(f"{url}/admin/deliveries?{query}", headers=admin) as resp:
                assert resp.status == 400, (query, await resp.text())
                assert "message" in await resp.json()
        for body in (
            json.dumps({"since": "abc"}),
            '{"since": 1' + "0" * 400 + "}",  # an integer past the float range
            json.dumps({"since": 0, "task": 5}),
            json.dumps({"ids": ["x\u0000"]}),
            "[" * 100_000,
        ):
            async with session.post(
                f"{url}/admin/deliveries/replay", data=body, headers=admin
            ) as resp:
                assert resp.status == 400, (body[:30], await resp.text())
        async with session.get(f"{url}/admin/deliveries?limit=1", headers=admin) as resp:
            assert resp.status == 200


async def test_admin_requests_with_unknown_keys_are_refused_and_change_nothing(
    gateway: Gateway,
) -> None:
    # A key the gateway does not know was dropped before: {"state": "bogus", "since": 0}
    # replayed every dead letter since 1970. Now a 400 names the key, before anything
    # is read or written.
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        sink.set_default("/hook", 400)  # dead-lettered at once
        made = await rpc(
            session, url, "CreateTaskPushNotificationConfig", {"taskId": "t", "url": sink.url()}
        )
        assert "result" in made, made
        assert (await _post_event(session, url, "t", TaskState.WORKING))[0] == 202
        dead: list[dict[str, Any]] = []
        for _ in range(100):
            async with session.get(f"{url}/admin/deliveries?state=dead", headers=admin) as resp:
                dead = (await resp.json())["deliveries"]
            if dead:
                break
            await asyncio.sleep(0.05)
        assert len(dead) == 1
        delivery, key = dead[0]["id"], dead[0]["configKey"]
        for body, named in (
            ({"state": "bogus", "since": 0}, "state: unknown key"),
            ({"ids": [delivery], "dryRun": True}, "dryRun: unknown key"),
            ({"ids": [delivery], "since": 0}, "not both"),
            ({"since": "0"}, "since: Input should be a valid number"),
            ({"since": True}, "since: Input should be a valid number"),
            ({"ids": delivery}, "ids: Input should be a valid array"),
            ({"since": 0, "task": ["t"]}, "task: Input should be a valid string"),
            ([delivery], "the body must be a JSON object"),
        ):
            async with session.post(
                f"{url}/admin/deliveries/replay", json=body, headers=admin
            ) as resp:
                answer = await resp.json()
                assert resp.status == 400, (body, answer)
            assert answer["error"] == "invalid" and named in answer["message"], (body, answer)
        async with session.post(
            f"{url}/admin/deliveries/replay", data="not json", headers=admin
        ) as resp:
            answer = await resp.json()
            assert resp.status == 400 and answer["error"] == "invalid", answer
            assert "not valid JSON" in answer["message"]
        async with session.post(
            f"{url}/admin/configs/{key}/disable", json={"reason": "noisy"}, headers=admin
        ) as resp:
            answer = await resp.json()
            assert resp.status == 400 and "reason: unknown key" in answer["message"], answer
        async with session.get(f"{url}/admin/deliveries?status=pending", headers=admin) as resp:
            answer = await resp.json()
            assert resp.status == 400 and answer["error"] == "invalid", answer
            assert answer["message"].startswith("status: unknown query parameter"), answer
        # Nothing was replayed, and the config is still enabled.
        store = gateway.running.notifier.store  # type: ignore[attr-defined]
        after = await store.get_delivery(delivery)
        assert after is not None and after.state.value == "dead"
        config = await store.get_config_by_key(key)
        assert config is not None and config.enabled
        # The same requests without the stray keys work.
        async with session.post(
            f"{url}/admin/deliveries/replay", json={"since": 0}, headers=admin
        ) as resp:
            assert resp.status == 200 and (await resp.json())["replayed"] == 1
        async with session.post(
            f"{url}/admin/configs/{key}/disable", json={}, headers=admin
        ) as resp:
            assert resp.status == 200, await resp.text()


def test_settings_name_bad_databases_and_never_echo_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    agents = [{"id": "a", "api_key": AGENT_KEY}]
    for database in ("mysql://x/y", "memory://", ":memory:", "sqlite://x.db"):
        with pytest.raises(GatewaySettingsError, match="database"):
            load_gateway_settings(environ={}, overrides={"database": database, "agents": agents})
    with pytest.raises(GatewaySettingsError, match="share an API key"):
        load_gateway_settings(
            environ={},
            overrides={
                "agents": [{"id": "a", "api_key": AGENT_KEY}, {"id": "b", "api_key": AGENT_KEY}]
            },
        )
    secret = "S3CRET-0123456789abcdef"
    with pytest.raises(GatewaySettingsError) as caught:
        load_gateway_settings(environ={"A2A_GATEWAY_AGENTS": f"agent={secret}"})
    assert secret not in str(caught.value)


def test_cli_refuses_a_bad_database_and_never_echoes_an_agent_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli_main(["gateway", "--database", "mysql://x/y", "--agent-key", f"a:{AGENT_KEY}"]) == 2
    err = capsys.readouterr().err
    assert "database" in err and "Traceback" not in err
    secret = "S3CRET-0123456789abcdef"
    assert cli_main(["gateway", "--agent-key", f"booking={secret}"]) == 2
    err = capsys.readouterr().err
    assert "--agent-key" in err and secret not in err
    assert cli_main(["gateway", "--log-level", "bogus", "--agent-key", f"a:{AGENT_KEY}"]) == 2
    assert "--log-level" in capsys.readouterr().err


def test_urls_without_a_scheme_are_refused_up_front(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agents = [{"id": "a", "api_key": AGENT_KEY}]
    for url in ("push.example.com", "ftp://push.example.com", "https://", "https://h/?q=1"):
        with pytest.raises(GatewaySettingsError, match="public_url"):
            load_gateway_settings(environ={}, overrides={"public_url": url, "agents": agents})
    ok = load_gateway_settings(
        environ={}, overrides={"public_url": "https://push.example.com/", "agents": agents}
    )
    assert ok.base_url == "https://push.example.com"
    with pytest.raises(ValueError, match="http"):
        GatewayClient("push.example.com", AGENT_KEY)
    assert cli_main(["endpoints", "--gateway", "127.0.0.1:8080", "--admin-key", ADMIN_KEY]) == 2
    assert "http(s)://" in capsys.readouterr().err
    argv = ["keys", "rotate", "--dir", str(tmp_path / "k"), "--database", str(tmp_path / "o.db")]
    assert cli_main(argv) == 2
    assert "not allowed with" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


def test_the_gateway_says_listening_only_once_it_listens(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["gateway", "--agent-key", f"a:{AGENT_KEY}", "--port", str(port)]
        argv += ["--data-dir", str(tmp_path)]
        done = subprocess.run(
            [sys.executable, "-m", "a2a_push", *argv], capture_output=True, text=True, timeout=60
        )
    assert done.returncode != 0
    assert "address already in use" in done.stderr
    assert "listening" not in done.stdout + done.stderr


def test_rotating_keys_in_a_missing_gateway_database_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    typo = tmp_path / "typo" / "outbox.db"
    assert cli_main(["keys", "rotate", "--database", str(typo)]) != 0
    assert "no gateway database" in capsys.readouterr().err
    assert not typo.parent.exists()


async def test_a_config_cannot_change_protocol_version(gateway: Gateway) -> None:
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        created = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "t-1", "id": "c", "url": sink.url()},
        )
        assert "result" in created, created
        async with session.post(
            url + "/v1/rpc",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tasks/pushNotificationConfig/set",
                "params": {
                    "taskId": "t-1",
                    "pushNotificationConfig": {"id": "c", "url": sink.url("/other")},
                },
            },
            headers={"Authorization": f"Bearer {AGENT_KEY}", "A2A-Version": "0.3"},
        ) as resp:
            answer = await resp.json()
        assert answer["error"]["code"] == -32602 and "1.0" in answer["error"]["message"]
        listed = await rpc(session, url, "ListTaskPushNotificationConfigs", {"taskId": "t-1"})
        assert [c["url"] for c in listed["result"]["configs"]] == [sink.url()]


async def test_config_methods_answer_503_while_the_store_is_unavailable(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with running_gateway(settings) as (url, gw), aiohttp.ClientSession() as session:
        hook = "http://127.0.0.1:9/hook"
        # The state a failed fsync leaves the SQLite writer in: every write refused.
        store = gw.notifier.store
        assert isinstance(store, SQLiteStore) and store._writer is not None
        store._writer._broken = StoreUnavailableError("fsync failed at /secret/path")
        async with session.post(
            url + "/v1/rpc",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": "t", "url": hook},
            },
            headers={"Authorization": f"Bearer {AGENT_KEY}", "A2A-Version": "1.0"},
        ) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"]
            text = await resp.text()
        assert json.loads(text)["error"]["code"] == -32603 and "/secret" not in text
        async with session.post(
            url + "/v1/tasks/t/pushNotificationConfigs", json={"url": hook}, headers=_auth()
        ) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"]
            assert "/secret" not in await resp.text()
        code, body = await _post_event(session, url, "t", TaskState.WORKING)
        assert code == 503 and "/secret" not in json.dumps(body)
        # A JSON-RPC notification (no id) gets no body, but still the 503 to retry on.
        async with session.post(
            url + "/v1/rpc",
            json={
                "jsonrpc": "2.0",
                "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": "t", "url": hook},
            },
            headers={"Authorization": f"Bearer {AGENT_KEY}", "A2A-Version": "1.0"},
        ) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"]
            assert await resp.read() == b""


async def test_ssrf_refusals_name_the_gateway_setting(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"), allow_webhook_hosts=[])
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        answer = await rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "t", "url": "http://127.0.0.1:9/hook"},
        )
        message = answer["error"]["message"]
        assert "--allow-webhook-host" in message and "allow_loopback" not in message


def test_settings_that_let_a_claim_outlive_its_lease_are_refused() -> None:
    agents = [{"id": "a", "api_key": AGENT_KEY}]
    with pytest.raises(GatewaySettingsError, match="lease_seconds"):
        load_gateway_settings(environ={}, overrides={"agents": agents, "request_timeout": 30})
    ok = load_gateway_settings(
        environ={}, overrides={"agents": agents, "request_timeout": 30, "lease_seconds": 200}
    )
    assert ok.lease_seconds == 200


class _PauseOnce:
    """Wraps an async method: its first call pauses (after the real call with
    ``after=True``, else before it) until ``resume`` is set; ``reached`` says it got there."""

    def __init__(self, real: Any, *, after: bool) -> None:
        self.real, self.after = real, after
        self.reached, self.resume = asyncio.Event(), asyncio.Event()

    async def __call__(self, *args: Any) -> Any:
        first = not self.reached.is_set()
        if first and not self.after:
            self.reached.set()
            await self.resume.wait()
        result = await self.real(*args)
        if first and self.after:
            self.reached.set()
            await self.resume.wait()
        return result


def _create_in_background(session: aiohttp.ClientSession, url: str, sink: WebhookSink) -> Any:
    return asyncio.create_task(
        rpc(
            session,
            url,
            "CreateTaskPushNotificationConfig",
            {"taskId": "T", "id": "cfg", "url": sink.url("/T")},
        )
    )


async def _post_during_create(
    gateway: Gateway,
    session: aiohttp.ClientSession,
    url: str,
    sink: WebhookSink,
    state: TaskState,
) -> None:
    """Create a config for task T; after its read of the task and before it is stored,
    post a ``state`` event (which therefore does not reach the config)."""
    gw = gateway.running  # type: ignore[attr-defined]
    read = gw.state.owner = _PauseOnce(gw.state.owner, after=True)
    create = _create_in_background(session, url, sink)
    await read.reached.wait()
    code, body = await _post_event(session, url, "T", state)
    assert code == 202 and body["deliveries"] == 0  # the config is not stored yet
    read.resume.set()
    assert "result" in await create


async def test_a_config_created_during_a_publish_catches_up_with_the_task(
    gateway: Gateway,
) -> None:
    """The create reads the task's status, then a publish lands before the config is
    stored (so it is not fanned out to it): the config is then sent the newer state."""
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        code, _ = await _post_event(session, url, "T", TaskState.WORKING)
        assert code == 202
        await _post_during_create(gateway, session, url, sink, TaskState.COMPLETED)
        await sink.wait_for(2, path="/T")
        states = [json.loads(h.body)["task"]["status"]["state"] for h in sink.on("/T")]
        assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]


def _state_of(body: bytes) -> str:
    data = json.loads(body)
    inner = data.get("task") or data.get("statusUpdate")
    return str(inner["status"]["state"])


async def test_a_catch_up_overtaken_by_a_publish_still_ends_on_the_latest_state(
    gateway: Gateway,
) -> None:
    """The catch-up reads the task, then a publish reaches the (now stored) config
    before the catch-up's snapshot is queued: the snapshot is older than that event, so
    the config is sent the task once more, as it is after it."""
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        assert (await _post_event(session, url, "T", TaskState.WORKING))[0] == 202
        gw = gateway.running  # type: ignore[attr-defined]
        read = gw.state.owner = _PauseOnce(gw.state.owner, after=True)
        send = gw.notifier.send_snapshot = _PauseOnce(gw.notifier.send_snapshot, after=False)
        create = _create_in_background(session, url, sink)
        await read.reached.wait()
        assert (await _post_event(session, url, "T", TaskState.INPUT_REQUIRED))[1][
            "deliveries"
        ] == 0
        read.resume.set()
        await send.reached.wait()  # the catch-up read INPUT_REQUIRED and is about to queue it
        code, body = await _post_event(session, url, "T", TaskState.COMPLETED)
        assert code == 202 and body["deliveries"] == 1  # the config exists now
        send.resume.set()
        assert "result" in await create
        await sink.wait_for(4, path="/T")
        states = [_state_of(h.body) for h in sink.on("/T")]
        assert states[-1] == "TASK_STATE_COMPLETED", states


async def test_a_failed_catch_up_does_not_fail_the_create(gateway: Gateway) -> None:
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        assert (await _post_event(session, url, "T", TaskState.WORKING))[0] == 202
        gw = gateway.running  # type: ignore[attr-defined]
        calls = 0
        real_owner = gw.state.owner

        async def second_read_fails(task_id: str) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:  # the catch-up's read, after the config is stored
                raise StoreUnavailableError("the database went away")
            return await real_owner(task_id)

        gw.state.owner = second_read_fails
        created = await rpc(
            session, url, "CreateTaskPushNotificationConfig", {"taskId": "T", "url": sink.url()}
        )
        assert "result" in created, created  # stored: a retry would make a second config
        listed = await rpc(session, url, "ListTaskPushNotificationConfigs", {"taskId": "T"})
        assert len(listed["result"]["configs"]) == 1


async def test_a_config_created_before_any_event_gets_no_made_up_snapshot(
    gateway: Gateway,
) -> None:
    """The gateway knows no contextId before the agent's first event: the config's first
    webhook is that event, not an invented snapshot."""
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        assert "result" in await _create_in_background(session, url, sink)
        assert (await _post_event(session, url, "T", TaskState.WORKING))[1]["deliveries"] == 1
        await sink.wait_for(1, path="/T")
        await asyncio.sleep(0.2)
        bodies = [json.loads(h.body) for h in sink.on("/T")]
        assert len(bodies) == 1 and "statusUpdate" in bodies[0], bodies


async def test_an_artifact_first_gives_no_snapshot_with_a_made_up_status(
    gateway: Gateway,
) -> None:
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        artifact = {
            "artifactUpdate": {
                "taskId": "T",
                "contextId": "ctx-1",
                "artifact": {"artifactId": "a1", "parts": [{"text": "early"}]},
            }
        }
        async with session.post(
            f"{url}/v1/tasks/T/events", data=json.dumps(artifact), headers=_auth()
        ) as resp:
            assert resp.status == 202, await resp.text()
        assert "result" in await _create_in_background(session, url, sink)
        assert (await _post_event(session, url, "T", TaskState.WORKING))[1]["deliveries"] == 1
        await sink.wait_for(1, path="/T")
        await asyncio.sleep(0.2)
        bodies = [json.loads(h.body) for h in sink.on("/T")]
        assert len(bodies) == 1 and "statusUpdate" in bodies[0], bodies  # no SUBMITTED


async def test_a_first_event_posted_while_a_config_is_created_is_sent_as_a_snapshot(
    gateway: Gateway,
) -> None:
    """Create reads 'nothing known', then the task's first event is posted before the
    config is stored (so it is not fanned out to it): the catch-up sends the config the
    task as that event left it, with the agent's contextId."""
    async with WebhookSink() as sink, gateway() as url, aiohttp.ClientSession() as session:
        await _post_during_create(gateway, session, url, sink, TaskState.WORKING)
        await sink.wait_for(1, path="/T")
        snapshot = json.loads(sink.on("/T")[0].body)["task"]
        sent = status("T", TaskState.WORKING)
        assert snapshot["contextId"] == sent.context_id != "T"
        assert snapshot["status"]["state"] == "TASK_STATE_WORKING"


def test_settings_check_admin_keys_encryption_keys_and_the_allowlist(
    capsys: pytest.CaptureFixture[str],
) -> None:
    agents = [{"id": "a", "api_key": AGENT_KEY}]
    with pytest.raises(
        GatewaySettingsError, match=r"admin_keys \(from --admin-key\): an API key needs at least 16"
    ):
        load_gateway_settings(environ={}, overrides={"agents": agents, "admin_keys": ["x"]})
    with pytest.raises(GatewaySettingsError, match="admin_keys"):
        load_gateway_settings(environ={"A2A_GATEWAY_ADMIN_KEYS": "y"}, overrides={"agents": agents})
    secret = "notakey-0123456789"
    with pytest.raises(GatewaySettingsError) as caught:
        load_gateway_settings(
            environ={"A2A_GATEWAY_ENCRYPTION_KEYS": secret}, overrides={"agents": agents}
        )
    message = str(caught.value)
    assert "encryption_keys" in message and "a2a-push store generate-key" in message
    assert secret not in message
    for entry in ("10.0.0.0/33", "not a host!"):
        with pytest.raises(GatewaySettingsError, match="allow_webhook_hosts"):
            load_gateway_settings(
                environ={}, overrides={"agents": agents, "allow_webhook_hosts": [entry]}
            )
    # Our own checks read as sentences, without pydantic's "Value error, " prefix.
    with pytest.raises(GatewaySettingsError) as caught:
        load_gateway_settings(environ={}, overrides={"agents": agents, "request_timeout": 30})
    assert "Value error" not in str(caught.value)
    assert str(caught.value).startswith("invalid gateway settings: lease_seconds (120)")
    # From the command line: exit 2 and one line, no traceback.
    argv = ["gateway", "--agent-key", f"a:{AGENT_KEY}", "--allow-webhook-host", "10.0.0.0/33"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "allow_webhook_hosts" in err and "Traceback" not in err
    assert cli_main(["gateway", "--agent-key", f"a:{AGENT_KEY}", "--admin-key", "short"]) == 2
    assert "admin_keys" in capsys.readouterr().err


def test_settings_built_directly_keep_secrets_out_of_validation_errors() -> None:
    """Code that builds GatewaySettings itself (not through load_gateway_settings) gets
    pydantic's ValidationError: its text must not carry the rejected key."""
    import pydantic

    from a2a_push.gateway.settings import GatewaySettings

    with pytest.raises(pydantic.ValidationError) as caught:
        GatewaySettings.model_validate(
            {"agents": [{"id": "a", "api_key": "tiny-key"}], "admin_keys": ["tiny"]}
        )
    text = str(caught.value)
    assert "admin_keys" in text or "api_key" in text
    assert "tiny-key" not in text and "'tiny'" not in text


async def test_the_gateways_sqlite_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "gateway-data"
    settings = gateway_settings("", data_dir=data)
    async with running_gateway(settings) as (url, gw):
        assert gw.notifier.store.location == f"the SQLite file {(data / 'outbox.db').resolve()}"
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for name in ("outbox.db", "outbox.db-wal", "outbox-gateway.db", "outbox-gateway.db-wal"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
            async with session.get(f"{url}/admin/deliveries?state=bogus", headers=headers) as r:
                assert r.status == 400
                assert (
                    "'bogus' is not one of pending, delivered, dead" in (await r.json())["message"]
                )


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_refused_config_does_not_make_its_agent_the_tasks_owner(
    tmp_path: Path, version: str
) -> None:
    """Found by fuzzing the REST binding against its OpenAPI document: a create refused
    for its URL (400) claimed the task for the agent first, so another agent naming the
    task got TaskNotFound, and the refusal left a row behind."""
    settings = gateway_settings(str(tmp_path / f"outbox-{version.replace('.', '')}.db"))
    if version == "1.0":
        method = "CreateTaskPushNotificationConfig"
        bad = {"taskId": "t-unclaimed", "url": "no-scheme/hook"}
        good = {"taskId": "t-unclaimed", "url": "http://127.0.0.1:9/hook"}
    else:
        method = "tasks/pushNotificationConfig/set"
        bad = {"taskId": "t-unclaimed", "pushNotificationConfig": {"url": "no-scheme/hook"}}
        good = {
            "taskId": "t-unclaimed",
            "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook"},
        }
    async with running_gateway(settings) as (url, gw), aiohttp.ClientSession() as session:
        refused = await rpc(session, url, method, bad)
        assert refused["error"]["code"] == -32602, refused
        assert await gw.state.owner("t-unclaimed") is None
        created = await rpc(session, url, method, good, key=OTHER_KEY)
        assert "result" in created, created
        owner = await gw.state.owner("t-unclaimed")
        assert owner is not None and owner.agent_id == "agent-b"
