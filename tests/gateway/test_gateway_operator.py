"""What a gateway operator runs into: wrong paths and methods get JSON errors, admin
queries name the parameter and the unit, a taken port stops the command before it
opens or creates anything, a database outage is one log line per key reload, a
gateway listening on every interface without public_url says its issuer is unusable,
and a config file holding keys that others can read is pointed out."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from yarl import URL

from a2a_push.protocol.types import TaskState
from a2a_push.testing import WebhookSink
from receiver.verify import JWKSCache, VerifyPolicy, WebhookVerifier

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import (
    ADMIN_KEY,
    AGENT_KEY,
    free_port,
    gateway_settings,
    rpc,
    running_gateway,
    status,
)

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}


async def test_wrong_paths_and_methods_get_json_errors(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        cases = [
            ("GET", "/nowhere", {}, 404, "not_found"),
            ("GET", "/admin/nothing", ADMIN, 404, "not_found"),
            ("POST", "/admin/configs/k/frob", ADMIN, 404, "not_found"),
            ("GET", "/v1/nothing", AGENT, 404, "not_found"),
            ("GET", "/admin/configs/k/enable", ADMIN, 405, "method_not_allowed"),
            ("DELETE", "/admin/deliveries", ADMIN, 405, "method_not_allowed"),
            ("GET", "/v1/tasks/t/events", AGENT, 405, "method_not_allowed"),
            ("PUT", "/v1/tasks/t/pushNotificationConfigs/c", AGENT, 405, "method_not_allowed"),
            # Replay is a POST; a GET is not a lookup of a delivery called "replay".
            ("GET", "/admin/deliveries/replay", ADMIN, 405, "method_not_allowed"),
        ]
        for method, path, headers, code, error in cases:
            async with session.request(method, url + path, headers=headers) as resp:
                assert resp.status == code, (method, path)
                assert resp.content_type == "application/json", (method, path)
                body = await resp.json()
                assert body["error"] == error, (method, path, body)
                assert f"{method} {path}" in body["message"]
                if code == 405:
                    assert resp.headers["Allow"]
        # The agent and admin namespaces still ask for their keys first.
        async with session.get(url + "/admin/nothing") as resp:
            assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
        # A body over the limit on an admin route: JSON too.
        big = b"[" * (settings.max_body_bytes + 10)
        async with session.post(url + "/admin/deliveries/replay", data=big, headers=ADMIN) as resp:
            assert resp.status == 413 and (await resp.json())["error"] == "too_large"


async def test_a_wrong_key_is_told_apart_from_a_missing_one(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    wrong = {"Authorization": "Bearer not-a-key-of-this-gateway"}
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        for path, what, setting in (
            ("/v1/tasks/t/pushNotificationConfigs", "agent API key", "--agent-key"),
            ("/admin/deliveries", "admin key", "--admin-key"),
        ):
            async with session.get(url + path) as resp:
                assert resp.status == 401
                assert (await resp.json())["message"] == f"send Authorization: Bearer <{what}>"
            # The agent's key is no admin key, and the reverse.
            other = AGENT if "admin" in path else ADMIN
            for headers in (wrong, other):
                async with session.get(url + path, headers=headers) as resp:
                    assert resp.status == 401
                    text = (await resp.json())["message"]
                assert f"is not an {what} of this gateway" in text and setting in text
                assert headers["Authorization"].split()[1] not in text


async def test_admin_query_errors_name_the_parameter_and_the_unit(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:

        async def message(query: str) -> str:
            async with session.get(f"{url}/admin/deliveries?{query}", headers=ADMIN) as resp:
                assert resp.status == 400
                return str((await resp.json())["message"])

        text = await message("limit=abc")
        assert "limit: 'abc' is not an integer" in text and "int()" not in text
        text = await message("since=2026-01-01")
        assert "since: Unix seconds" in text and "'2026-01-01'" in text
        assert "could not convert" not in text
        assert "until: Unix seconds" in await message("until=nan")


async def test_event_errors_have_no_pydantic_prefix(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with (
        running_gateway(settings) as (url, _gw),
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/tasks/t/events", json={}, headers=AGENT) as resp,
    ):
        assert resp.status == 400
        text = (await resp.json())["message"]
    assert "exactly one of task" in text and "Value error" not in text


def _gateway(*argv: str) -> list[str]:
    return [sys.executable, "-m", "a2a_push", "gateway", "--agent-key", f"a:{AGENT_KEY}", *argv]


def test_a_taken_port_stops_the_gateway_before_it_opens_anything(tmp_path: Path) -> None:
    data = tmp_path / "gateway-data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            _gateway("--port", str(port), "--data-dir", str(data)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"a2a-push: error: cannot listen on 127.0.0.1:{port}: address")
    assert "--port" in lines[0]
    # No database opened (no dispatcher on another process's SQLite file), no signing
    # key minted, no folder made.
    assert not data.exists()
    assert "signing keys" not in done.stderr


def _output_until_listening(argv: list[str], env: dict[str, str] | None = None) -> str:
    """What a gateway started with ``argv`` printed until it said it listens; stopped."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "listening on" in line:
                break
    finally:
        proc.terminate()
        proc.wait(30)
    text = "".join(seen)
    assert "listening on" in text, text
    return text


def test_a_gateway_on_every_interface_without_public_url_warns(tmp_path: Path) -> None:
    port = free_port()
    data = str(tmp_path / "d")
    text = _output_until_listening(
        _gateway("--host", "0.0.0.0", "--port", str(port), "--data-dir", data)
    )
    assert f"public_url is not set: webhooks are signed with issuer http://0.0.0.0:{port}" in text
    assert "--public-url" in text
    # Not on the default host (a trial on this machine), nor with a public_url.
    for argv in (("--port", str(free_port())), ("--public-url", "https://push.example.com")):
        text = _output_until_listening(_gateway(*argv, "--data-dir", data))
        assert "public_url is not set" not in text


def test_port_0_names_the_port_it_got(tmp_path: Path) -> None:
    """--port 0 takes a free port; the banner and the issuer name it, not :0."""
    text = _output_until_listening(_gateway("--port", "0", "--data-dir", str(tmp_path / "d")))
    match = re.search(
        r"listening on 127\.0\.0\.1:(\d+); issuer \(JWT iss\) http://127\.0\.0\.1:(\d+);", text
    )
    assert match is not None, text
    assert match.group(1) == match.group(2) != "0"


async def test_the_issuer_in_the_start_up_line_is_the_one_webhooks_carry(
    tmp_path: Path,
) -> None:
    """The start-up line names the issuer exactly as the JWT iss has it (it said
    "as http://HOST:PORT/", with a slash the iss lacks): copied into a receiver's
    verifier with the JWKS URL beside it, it verifies the gateway's webhooks."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *_gateway("--port", str(port), "--data-dir", str(tmp_path / "d")),
        "--allow-webhook-host",
        "127.0.0.1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        banner = ""
        while line := (await asyncio.wait_for(proc.stdout.readline(), 60)).decode():
            if "listening on" in line:
                banner = line
                break
        match = re.search(r"issuer \(JWT iss\) (\S+); .* JWKS at (\S+)$", banner.strip())
        assert match is not None, banner
        issuer, jwks_url = match.groups()
        assert issuer == f"http://127.0.0.1:{port}"
        url = f"http://127.0.0.1:{port}"
        async with WebhookSink() as sink, aiohttp.ClientSession() as session:
            made = await rpc(
                session,
                url,
                "CreateTaskPushNotificationConfig",
                {"taskId": "t", "id": "c", "url": sink.url()},
            )
            assert "result" in made, made
            event = {"statusUpdate": status("t", TaskState.WORKING).to_json_dict()}
            async with session.post(f"{url}/v1/tasks/t/events", json=event, headers=AGENT) as resp:
                assert resp.status == 202, await resp.text()
            await sink.wait_for(1)
            webhook = sink.on("/hook")[0]
            verifier = WebhookVerifier(
                VerifyPolicy(issuer=issuer, audience=sink.url()),
                JWKSCache(jwks_url, session=session),
            )
            verified = await verifier.verify(dict(webhook.headers), webhook.body)
        assert verified.claims is not None and verified.claims["iss"] == issuer
    finally:
        proc.terminate()
        await proc.wait()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_replicas_signing_as_different_issuers_are_warned_about(
    backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Replicas without one --public-url each sign as their own http://HOST:PORT, and a
    receiver refuses all but one. The database they share records the issuer of the
    last gateway to start; one that signs as another says so, with what to set."""
    database = str(tmp_path / "outbox.db")
    if backend == "postgres":
        dsn, schema = require_postgres(), postgres_schema()
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        finally:
            await conn.close()
        database = f"{dsn}?search_path={schema}"

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "signs webhooks as issuer" in r.getMessage()
        ]

    first = gateway_settings(database, public_url="https://push.example.com/")
    other = gateway_settings(database)  # no public_url: it signs as http://127.0.0.1:PORT
    with caplog.at_level(logging.WARNING, logger="a2a_push.gateway.app"):
        async with running_gateway(first):
            pass
        # The same public_url (its trailing slash aside): the same issuer.
        async with running_gateway(gateway_settings(database, public_url=first.base_url)):
            pass
        assert warnings() == []
        async with running_gateway(other):
            pass
    [message] = warnings()
    assert f"signs webhooks as issuer {other.base_url}," in message
    assert "signed as https://push.example.com:" in message
    assert "--public-url (public_url, A2A_GATEWAY_PUBLIC_URL)" in message
    assert f'set issuer = "{other.base_url}"' in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="a2a_push.gateway.app"):
        async with running_gateway(gateway_settings(database, public_url=other.base_url)):
            pass  # the issuer the last one used: nothing to say
    assert warnings() == []


def test_a_config_file_with_keys_others_can_read_is_warned_about(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "d"}"\n[[agents]]\nid = "a"\napi_key = "{AGENT_KEY}"\n'
    )
    config.chmod(0o644)
    argv = [sys.executable, "-m", "a2a_push", "gateway", "--config", str(config)]
    text = _output_until_listening([*argv, "--port", str(free_port())])
    assert f"the config file {config} holds API or encryption keys and other users can" in text
    assert "(mode 0644)" in text and "chmod 600" in text
    assert AGENT_KEY not in text
    config.chmod(0o600)
    text = _output_until_listening([*argv, "--port", str(free_port())])
    assert "other users can read it" not in text


async def test_key_reload_during_a_database_outage_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dsn = require_postgres()
    name = f"a2a_push_outage_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        database = str(URL(dsn).with_path(f"/{name}"))
        try:
            async with running_gateway(gateway_settings(database)):
                caplog.set_level(logging.WARNING, logger="a2a_push.gateway.app")
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                    name,
                )
                await asyncio.sleep(1.5)  # several key reloads (every 0.2 s)
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                await asyncio.sleep(0.5)
        finally:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        await admin.close()
    failed = [r for r in caplog.records if "reloading signing keys failed" in r.getMessage()]
    assert failed, [r.getMessage() for r in caplog.records]
    for record in failed:
        assert record.exc_info is None  # no traceback every key_reload_interval
        assert "not currently accepting connections" in record.getMessage()


def test_a_file_that_is_not_a_database_stops_the_start_with_nothing_created(
    tmp_path: Path,
) -> None:
    """The outbox is opened first: a --database that is not an SQLite database stops the
    start before the gateway's state (and a new signing key in it) is created beside it."""
    bad = tmp_path / "outbox.db"
    bad.write_text("not a database at all, just text")
    done = subprocess.run(
        _gateway("--port", str(free_port()), "--database", str(bad)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "file is not a database" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outbox.db"]
    assert bad.read_text() == "not a database at all, just text"


def test_a_start_that_fails_after_the_outbox_opened_exits(tmp_path: Path) -> None:
    """Restarted with another encryption key, the gateway cannot open its sealed signing
    key: it must say so and exit, not hang on the outbox it had already opened."""
    import os

    from a2a_push.store import generate_key

    data = str(tmp_path / "d")
    first = {**os.environ, "A2A_GATEWAY_ENCRYPTION_KEYS": generate_key()}
    text = _output_until_listening(_gateway("--port", str(free_port()), "--data-dir", data), first)
    assert "listening on" in text
    other = {**os.environ, "A2A_GATEWAY_ENCRYPTION_KEYS": generate_key()}
    done = subprocess.run(
        _gateway("--port", str(free_port()), "--data-dir", data),
        env=other,
        capture_output=True,
        text=True,
        timeout=60,  # it used to hang here
    )
    assert done.returncode != 0
    assert "sealed" in done.stderr and "Traceback" not in done.stderr
