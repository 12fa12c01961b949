"""The ``a2a-push`` command, run in-process against real SQLite files and a real local sink.

``main()`` runs its own event loop, so these tests are synchronous: the store is prepared
with ``asyncio.run`` and the webhook sink runs on an event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from a2a_push.cli import main
from a2a_push.gateway.client import GatewayClient, GatewayError
from a2a_push.ids import new_delivery_id
from a2a_push.protocol.types import TaskState
from a2a_push.signing import standard_webhooks, verify_webhook_jwt
from a2a_push.store import (
    Attempt,
    DeliveryState,
    Outcome,
    SQLiteStore,
    StoredConfig,
    StoreOptions,
    generate_key,
)
from a2a_push.testing import SinkResponse, WebhookSink

from ..gateway_support import ADMIN_KEY, AGENT_KEY, gateway_settings, running_gateway, status

ROOT = Path(__file__).resolve().parents[2]
SECRET_TOKEN = "tok-s3cret-never-print-me"
STDWH_SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
DEAD_BODY = {"statusUpdate": {"taskId": "task-1", "status": {"state": "TASK_STATE_FAILED"}}}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "A2A_PUSH_DATABASE",
        "A2A_PUSH_ENCRYPTION_KEYS",
        "A2A_PUSH_KEYS_DIR",
        "A2A_PUSH_ISSUER",
    ):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Run:
    code: int
    out: str
    err: str


CLI = Callable[..., Run]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[CLI]:
    """Call ``cli(args)`` to run the command; every output seen is checked for secrets."""
    seen: list[Run] = []

    def run(*args: str) -> Run:
        code = main(list(args))
        captured = capsys.readouterr()
        result = Run(code, captured.out, captured.err)
        seen.append(result)
        return result

    yield run
    for result in seen:
        for secret in (SECRET_TOKEN, STDWH_SECRET):
            assert secret not in result.out
            assert secret not in result.err


def one_line_error(result: Run, code: int) -> str:
    assert result.code == code, result
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("a2a-push: error: ")
    return lines[0]


# ---- a prepared outbox -----------------------------------------------------------------


@dataclass
class Outbox:
    path: Path
    dead: str  # task-1, dead-lettered after a 500
    delivered: str  # task-1
    pending: str  # task-2, body is not JSON
    config_key: str


ENDPOINT = "http://127.0.0.1:9"  # task-1's config's (task-2's is on port 10)


def _config(task_id: str, config_id: str, port: int = 9) -> StoredConfig:
    return StoredConfig(
        key=uuid.uuid4().hex,
        id=config_id,
        task_id=task_id,
        owner="alice",
        url=f"http://127.0.0.1:{port}/hook",
        token=SECRET_TOKEN,
        created_at=time.time(),
    )


async def _prepare(path: Path, options: StoreOptions | None = None) -> Outbox:
    async with SQLiteStore(path, options) as store:
        first = await store.put_config(_config("task-1", "cfg-1"))
        await store.put_config(_config("task-2", "cfg-2", port=10))

        _, [dead] = await store.enqueue(
            "task-1",
            "statusUpdate",
            lambda _v: json.dumps(DEAD_BODY).encode(),
            new_id=new_delivery_id,
        )
        [claimed] = await store.claim_due(10, lease_seconds=30, worker_id="test")
        started = claimed.created_at
        tried = (
            Attempt(claimed.id, 1, started, 5.0, ENDPOINT, "retry", None, "timeout",
                    "RequestTimeout: POST http://127.0.0.1:9: no response in time\x1b[2J",
                    started + 5.1),
            Attempt(claimed.id, 2, started + 5.1, 0.012, ENDPOINT, "retry", 503,
                    retry_at=started + 5.3, response=b'{"error": "busy,\n try later"}'),
            Attempt(claimed.id, 3, started + 5.3, 1.5, ENDPOINT, "dead", 500,
                    response=b"\x1b]0;owned\x07\x1b[31mred"),
        )  # fmt: skip
        await store.complete(
            [
                Outcome(
                    claimed.id,
                    claimed.config_key,
                    claimed.task_id,
                    "dead",
                    3,
                    500,
                    "HTTP 500",
                    history=tried,
                )
            ]
        )

        _, [delivered] = await store.enqueue(
            "task-1", "task", lambda _v: b'{"task": {}}', new_id=new_delivery_id
        )
        [claimed] = await store.claim_due(10, lease_seconds=30, worker_id="test")
        await store.complete(
            [Outcome(claimed.id, claimed.config_key, claimed.task_id, "delivered", 1, 200)]
        )

        _, [pending] = await store.enqueue(
            "task-2", "artifactUpdate", lambda _v: b"\x00not json", new_id=new_delivery_id
        )
        return Outbox(path, dead, delivered, pending, first.key)


@pytest.fixture
def outbox(tmp_path: Path) -> Outbox:
    return asyncio.run(_prepare(tmp_path / "outbox.db"))


def state_of(path: Path, delivery_id: str) -> DeliveryState:
    async def read() -> DeliveryState:
        async with SQLiteStore(path) as store:
            delivery = await store.get_delivery(delivery_id)
            assert delivery is not None
            return delivery.state

    return asyncio.run(read())


# ---- a webhook sink on its own loop ------------------------------------------------------


@dataclass
class Sink:
    sink: WebhookSink
    loop: asyncio.AbstractEventLoop

    def url(self, path: str = "/hook") -> str:
        return self.sink.url(path)


@pytest.fixture
def sink() -> Iterator[Sink]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    webhook_sink = WebhookSink()
    asyncio.run_coroutine_threadsafe(webhook_sink.start(), loop).result(10)
    try:
        yield Sink(webhook_sink, loop)
    finally:
        asyncio.run_coroutine_threadsafe(webhook_sink.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# ---- top level ---------------------------------------------------------------------------


def test_help_lists_commands_and_environment(cli: CLI) -> None:
    result = cli("--help")
    assert result.code == 0
    for word in ("demo", "keys", "deliveries", "store", "send-test", "version"):
        assert word in result.out
    for env in ("A2A_PUSH_DATABASE", "A2A_PUSH_KEYS_DIR", "A2A_PUSH_ENCRYPTION_KEYS"):
        assert env in result.out


def test_no_command_is_a_usage_error(cli: CLI) -> None:
    assert "choose a command" in one_line_error(cli(), 2)
    assert "a2a-push keys --help" in one_line_error(cli("keys"), 2)


def test_unknown_option_is_a_one_line_usage_error(cli: CLI) -> None:
    line = one_line_error(cli("deliveries", "list", "--colour"), 2)
    assert "--colour" in line


def test_version(cli: CLI) -> None:
    result = cli("version")
    assert result.code == 0
    assert result.out.startswith("a2a-push ")


def test_python_dash_m_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_push", "version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("a2a-push ")


def test_store_generate_key_prints_a_working_fernet_key(cli: CLI, tmp_path: Path) -> None:
    result = cli("store", "generate-key")
    assert result.code == 0
    key = result.out.strip()
    # The key is accepted as an encryption key by the store.
    asyncio.run(_prepare(tmp_path / "enc.db", StoreOptions(encryption_keys=[key])))


# ---- keys --------------------------------------------------------------------------------


def _field(output: str, name: str) -> str:
    for line in output.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{name!r} not in {output!r}")


def test_keys_generate_rotate_jwks_round_trip(cli: CLI, tmp_path: Path) -> None:
    keys = str(tmp_path / "keys")
    created = cli("keys", "generate", "--dir", keys)
    assert created.code == 0
    assert "created" in created.out
    first = _field(created.out, "active kid")
    assert _field(created.out, "alg") == "ES256"

    again = cli("keys", "generate", "--dir", keys, "--alg", "RS256")
    assert again.code == 0
    assert "already exists" in again.out
    assert _field(again.out, "active kid") == first
    assert "keys rotate" in again.err  # the alg was not switched; says how

    jwks = json.loads(cli("keys", "jwks", "--dir", keys).out)
    assert [k["kid"] for k in jwks["keys"]] == [first]
    assert all("d" not in k for k in jwks["keys"])

    rotated = cli("keys", "rotate", "--dir", keys, "--alg", "EdDSA")
    assert rotated.code == 0
    new = _field(rotated.out, "new active kid").split()[0]
    assert "(EdDSA)" in rotated.out
    assert _field(rotated.out, "retired kid").split()[0] == first

    jwks = json.loads(cli("keys", "jwks", "--dir", keys).out)
    assert [k["kid"] for k in jwks["keys"]] == [new, first]
    assert jwks["keys"][0]["alg"] == "EdDSA"


def test_keys_generate_with_alg(cli: CLI, tmp_path: Path) -> None:
    result = cli("keys", "generate", "--dir", str(tmp_path / "k"), "--alg", "EdDSA")
    assert result.code == 0
    assert _field(result.out, "alg") == "EdDSA"


def test_keys_prune_drops_retired_keys_past_grace(cli: CLI, tmp_path: Path) -> None:
    keys = str(tmp_path / "keys")
    first = _field(cli("keys", "generate", "--dir", keys).out, "active kid")
    assert "nothing to prune" in cli("keys", "prune", "--dir", keys).out
    cli("keys", "rotate", "--dir", keys)
    assert "nothing to prune" in cli("keys", "prune", "--dir", keys).out

    pruned = cli("keys", "prune", "--dir", keys, "--grace-period", "0")
    assert pruned.code == 0
    assert _field(pruned.out, "pruned kid") == first
    jwks = json.loads(cli("keys", "jwks", "--dir", keys).out)
    assert first not in [k["kid"] for k in jwks["keys"]]
    assert not (Path(keys) / f"{first}.pem").exists()


def test_keys_dir_from_environment(
    cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_PUSH_KEYS_DIR", str(tmp_path / "env-keys"))
    assert cli("keys", "generate").code == 0
    assert (tmp_path / "env-keys" / "keys.json").is_file()


def test_keys_without_dir_is_a_usage_error(cli: CLI) -> None:
    line = one_line_error(cli("keys", "jwks"), 2)
    assert "--dir" in line
    assert "A2A_PUSH_KEYS_DIR" in line


@pytest.mark.parametrize("command", ["jwks", "rotate", "prune"])
def test_keys_commands_never_create_a_key_set(cli: CLI, tmp_path: Path, command: str) -> None:
    keys = tmp_path / "typo"
    line = one_line_error(cli("keys", command, "--dir", str(keys)), 1)
    assert "keys generate" in line
    assert not keys.exists()


def test_keys_on_a_gateway_data_folder_point_at_its_database(cli: CLI, tmp_path: Path) -> None:
    """A gateway keeps its signing keys in its database: keys made in its data folder
    would sign nothing, so the commands say which command rotates the gateway's keys."""
    data = tmp_path / "gateway-data"
    data.mkdir()
    settings = gateway_settings(str(data / "outbox.db"))

    async def start_once() -> None:
        async with running_gateway(settings):
            pass

    asyncio.run(start_once())
    for command in ("rotate", "generate", "jwks", "prune"):
        line = one_line_error(cli("keys", command, "--dir", str(data)), 2)
        assert line == (
            f"a2a-push: error: {data} is a gateway's data folder, and a gateway keeps its "
            "signing keys in its database, not in a key directory: rotate them with "
            f"`a2a-push keys rotate --database {data / 'outbox.db'}`; the gateway publishes "
            "them at /.well-known/jwks.json and prunes retired ones itself"
        )
    assert not (data / "keys.json").exists()
    # The command it gives works as written.
    suggested = line.split("`")[1].removeprefix("a2a-push ")
    result = cli(*shlex.split(suggested))
    assert result.code == 0 and result.out.startswith("new active kid: "), result


def test_keys_on_a_notifier_data_dir_point_at_its_keys_folder(cli: CLI, tmp_path: Path) -> None:
    assert cli("keys", "generate", "--dir", str(tmp_path / "keys")).code == 0
    line = one_line_error(cli("keys", "rotate", "--dir", str(tmp_path)), 1)
    assert line.endswith(f"but there is one in {tmp_path / 'keys'}: pass --dir {tmp_path / 'keys'}")


def test_keys_broken_metadata_is_a_failure(cli: CLI, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    cli("keys", "generate", "--dir", str(keys))
    (keys / "keys.json").write_text("{not json")
    line = one_line_error(cli("keys", "jwks", "--dir", str(keys)), 1)
    assert "keys.json" in line


# ---- deliveries: list and show -----------------------------------------------------------


def test_deliveries_list_table(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "list", "--database", str(outbox.path))
    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "TASK", "SEQ", "KIND", "STATE", "ATTEMPTS", "LAST", "NEXT"]
    assert len(rows) == 3
    by_id = {row.split()[0]: row for row in rows}
    assert "dead" in by_id[outbox.dead]
    # The status once: the notifier's error ("HTTP 500") names it already.
    assert " HTTP 500 " in by_id[outbox.dead]
    assert "500 HTTP 500" not in by_id[outbox.dead]
    assert "delivered" in by_id[outbox.delivered]
    assert " HTTP 200 " in by_id[outbox.delivered]
    assert by_id[outbox.pending].rstrip().endswith("due now")


def test_deliveries_list_shows_a_claimed_delivery_as_in_flight(cli: CLI, outbox: Outbox) -> None:
    async def claim(lease_seconds: float) -> None:
        async with SQLiteStore(outbox.path) as store:
            await store.claim_due(10, lease_seconds=lease_seconds, worker_id="dead-worker")

    asyncio.run(claim(600))
    result = cli("deliveries", "list", "--database", str(outbox.path))
    row = next(r for r in result.out.splitlines() if r.startswith(outbox.pending))
    assert "in flight (claimed; lease ends in" in row
    listed = json.loads(cli("deliveries", "list", "--json", "--database", str(outbox.path)).out)
    (pending,) = [d for d in listed if d["id"] == outbox.pending]
    assert pending["leased_until"].endswith("Z")


def test_deliveries_list_filters(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)

    def ids(*args: str) -> set[str]:
        result = cli("deliveries", "list", "--database", db, "--json", *args)
        assert result.code == 0
        return {d["id"] for d in json.loads(result.out)}

    assert ids() == {outbox.dead, outbox.delivered, outbox.pending}
    assert ids("--state", "dead") == {outbox.dead}
    assert ids("--state", "pending") == {outbox.pending}
    assert ids("--task", "task-1") == {outbox.dead, outbox.delivered}
    assert ids("--task", "task-1", "--state", "delivered") == {outbox.delivered}
    assert ids("--task", "no-such-task") == set()
    assert ids("--until", "2000-01-01T00:00:00Z") == set()
    assert ids("--endpoint", "http://127.0.0.1:9") == {outbox.dead, outbox.delivered}
    assert ids("--endpoint", "http://127.0.0.1:10/any/path") == {outbox.pending}
    assert ids("--endpoint", "https://127.0.0.1") == set()
    line = one_line_error(cli("deliveries", "list", "--database", db, "--endpoint", "ftp://x"), 2)
    assert "--endpoint" in line and "scheme://host[:port]" in line
    assert ids("--since", "2000-01-01T00:00:00") == {outbox.dead, outbox.delivered, outbox.pending}


def test_deliveries_list_limit_and_paging(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    first = cli("deliveries", "list", "--database", db, "--json", "--limit", "2")
    page = json.loads(first.out)
    assert len(page) == 2
    assert f"--after {page[-1]['id']}" in first.err
    rest = json.loads(
        cli("deliveries", "list", "--database", db, "--json", "--after", page[-1]["id"]).out
    )
    assert {d["id"] for d in page + rest} == {outbox.dead, outbox.delivered, outbox.pending}


def test_deliveries_list_json_fields(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "list", "--database", str(outbox.path), "--json")
    rows = {d["id"]: d for d in json.loads(result.out)}
    dead = rows[outbox.dead]
    assert dead["state"] == "dead"
    assert dead["task_id"] == "task-1"
    assert dead["seq"] == 1
    assert dead["kind"] == "statusUpdate"
    assert dead["attempts"] == 3
    assert dead["last_status"] == 500
    assert dead["last_error"] == "HTTP 500"
    assert dead["next_attempt_at"] is None
    assert dead["created_at"].endswith("Z")
    assert rows[outbox.pending]["next_attempt_at"].endswith("Z")


def test_deliveries_list_empty(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "list", "--database", str(outbox.path), "--task", "nope")
    assert result.code == 0
    assert "no deliveries" in result.out


def test_deliveries_show_pretty_prints_a_json_body(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "show", outbox.dead, "--database", str(outbox.path))
    assert result.code == 0
    assert _field(result.out, "id") == outbox.dead
    assert _field(result.out, "state") == "dead"
    assert _field(result.out, "last status") == "500"
    assert _field(result.out, "config key") == outbox.config_key
    assert "ago" in _field(result.out, "created")
    assert "JSON" in _field(result.out, "body")
    assert '  "statusUpdate": {' in result.out


def test_deliveries_show_gives_the_length_of_a_non_json_body(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "show", outbox.pending, "--database", str(outbox.path))
    assert result.code == 0
    assert _field(result.out, "body") == "9 bytes, not JSON"
    assert "due now" in _field(result.out, "next attempt")


def test_deliveries_show_prints_the_attempts(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "show", outbox.dead, "--database", str(outbox.path))
    assert result.code == 0
    table = result.out.split("attempts (oldest first):\n", 1)[1].splitlines()
    assert table[0].split() == ["#", "STARTED", "TOOK", "ENDPOINT", "RESULT", "VERDICT", "RESPONSE"]
    first, second, third = table[1:4]
    assert first.split()[0] == "1" and "5.0 s" in first and ENDPOINT in first
    assert "timeout" in first and "retry at " in first and first.rstrip().endswith("-")
    assert "12 ms" in second and "HTTP 503" in second and '{"error": "busy, try later"}' in second
    assert "HTTP 500" in third and "dead" in third and "(18 bytes, not text)" in third
    # The endpoint chose those bytes: no escape sequence reaches the terminal.
    assert "\x1b" not in result.out and "\x07" not in result.out
    assert "  #1: RequestTimeout: POST http://127.0.0.1:9: no response in time?[2J" in table
    none = cli("deliveries", "show", outbox.pending, "--database", str(outbox.path))
    assert "attempts: none recorded" in none.out


def test_deliveries_show_json(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    shown = json.loads(cli("deliveries", "show", outbox.dead, "--database", db, "--json").out)
    assert shown["id"] == outbox.dead
    assert shown["body"] == DEAD_BODY
    pending = json.loads(cli("deliveries", "show", outbox.pending, "--database", db, "--json").out)
    assert pending["body"] is None
    assert pending["body_bytes"] == 9
    assert pending["attempts"] == [] and pending["endpoint"] == "http://127.0.0.1:10"
    first, second, third = shown["attempts"]
    assert first["error_class"] == "timeout" and first["status"] is None
    assert first["started_at"].endswith("Z") and first["retry_at"].endswith("Z")
    assert (second["status"], second["verdict"], second["response_bytes"]) == (503, "retry", 29)
    assert base64.b64decode(second["response"]) == b'{"error": "busy,\n try later"}'
    assert (third["verdict"], third["retry_at"], third["endpoint"]) == ("dead", None, ENDPOINT)


def test_deliveries_show_unknown_id_fails(cli: CLI, outbox: Outbox) -> None:
    line = one_line_error(cli("deliveries", "show", "msg_nope", "--database", str(outbox.path)), 1)
    assert "msg_nope" in line
    assert "deliveries list" in line


def test_deliveries_without_database_is_a_usage_error(cli: CLI) -> None:
    line = one_line_error(cli("deliveries", "list"), 2)
    assert "--database" in line
    assert "A2A_PUSH_DATABASE" in line


def test_deliveries_database_from_environment(
    cli: CLI, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_PUSH_DATABASE", str(outbox.path))
    result = cli("deliveries", "list", "--json")
    assert result.code == 0
    assert len(json.loads(result.out)) == 3


def test_deliveries_accepts_a_sqlite_url(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "list", "--database", f"sqlite:///{outbox.path}", "--json")
    assert result.code == 0
    assert len(json.loads(result.out)) == 3


def test_an_outbox_older_than_this_version_is_refused_not_migrated(
    cli: CLI, outbox: Outbox
) -> None:
    conn = sqlite3.connect(outbox.path)
    (latest,) = conn.execute("PRAGMA user_version").fetchone()
    conn.execute(f"PRAGMA user_version = {latest - 1}")  # as an older version left it
    conn.close()
    result = cli("deliveries", "list", "--database", str(outbox.path))
    assert result.code != 0 and "older than this a2a-push" in result.err
    conn = sqlite3.connect(outbox.path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest - 1  # untouched
    finally:
        conn.close()


def test_deliveries_missing_database_file_fails_without_creating_it(
    cli: CLI, tmp_path: Path
) -> None:
    missing = tmp_path / "typo.db"
    line = one_line_error(cli("deliveries", "list", "--database", str(missing)), 1)
    assert "does not exist" in line
    assert not missing.exists()


@pytest.mark.parametrize(
    ("database", "expected"),
    [("memory://", "in-memory"), ("ftp://x", "scheme")],
)
def test_deliveries_unusable_database_urls(cli: CLI, database: str, expected: str) -> None:
    assert expected in one_line_error(cli("deliveries", "list", "--database", database), 2)


def test_deliveries_on_an_unreachable_postgresql_says_so(cli: CLI) -> None:
    database = "postgresql://postgres:s3cret@127.0.0.1:1/x"
    line = one_line_error(cli("deliveries", "list", "--database", database), 1)
    assert "PostgreSQL" in line and "s3cret" not in line


def test_deliveries_not_a_database_fails(cli: CLI, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    assert "database" in one_line_error(cli("deliveries", "list", "--database", str(junk)), 1)


def test_deliveries_of_an_encrypted_database_need_no_keys(cli: CLI, tmp_path: Path) -> None:
    key = generate_key()
    prepared = asyncio.run(_prepare(tmp_path / "enc.db", StoreOptions(encryption_keys=[key])))
    db = str(prepared.path)
    assert len(json.loads(cli("deliveries", "list", "--database", db, "--json").out)) == 3
    assert cli("deliveries", "show", prepared.dead, "--database", db).code == 0
    with_key = cli("deliveries", "list", "--database", db, f"--encryption-key={key}")
    assert with_key.code == 0
    assert key not in with_key.out + with_key.err


def test_deliveries_encryption_keys_from_environment(
    cli: CLI, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_PUSH_ENCRYPTION_KEYS", f"{generate_key()}, {generate_key()}")
    assert cli("deliveries", "list", "--database", str(outbox.path)).code == 0


def test_deliveries_bad_encryption_key_is_a_usage_error_and_not_echoed(
    cli: CLI, outbox: Outbox
) -> None:
    bad = "not-a-fernet-key-" + "x" * 20
    result = cli("deliveries", "list", "--database", str(outbox.path), f"--encryption-key={bad}")
    line = one_line_error(result, 2)
    assert "store generate-key" in line
    assert bad not in line


# ---- deliveries: replay --------------------------------------------------------------------


def test_replay_by_id_moves_a_dead_delivery_back_to_pending(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    result = cli("deliveries", "replay", outbox.dead, "--database", db)
    assert result.code == 0
    assert "replayed 1 dead-lettered delivery;" in result.out
    assert "notifier" in result.err  # says who sends them
    assert state_of(outbox.path, outbox.dead) is DeliveryState.PENDING
    pending = json.loads(
        cli("deliveries", "list", "--database", db, "--state", "pending", "--json").out
    )
    replayed = next(d for d in pending if d["id"] == outbox.dead)
    assert replayed["attempts"] == 0
    assert replayed["last_status"] is None


def test_replay_all_dead(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "replay", "--all-dead", "--database", str(outbox.path))
    assert result.code == 0
    assert "replayed 1 dead-lettered delivery;" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.PENDING
    assert state_of(outbox.path, outbox.delivered) is DeliveryState.DELIVERED


def test_replay_all_dead_of_another_task_replays_nothing(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    result = cli("deliveries", "replay", "--all-dead", "--task", "task-2", "--database", db)
    assert result.code == 0
    assert "nothing to replay" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.DEAD


def test_replay_by_time_window(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    old = ("--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02T00:00:00Z")
    assert "nothing to replay" in cli("deliveries", "replay", *old, "--database", db).out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.DEAD
    now = ("--since", "2000-01-01T00:00:00+00:00", "--until", "2999-01-01T00:00:00Z")
    result = cli("deliveries", "replay", *now, "--task", "task-1", "--database", db)
    assert result.code == 0
    assert "replayed 1 dead-lettered delivery;" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.PENDING


def test_replay_unknown_id_fails_and_replays_nothing(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    line = one_line_error(cli("deliveries", "replay", outbox.dead, "msg_nope", "--database", db), 1)
    assert "msg_nope" in line
    assert state_of(outbox.path, outbox.dead) is DeliveryState.DEAD


def test_replay_of_a_delivery_that_is_not_dead_fails(cli: CLI, outbox: Outbox) -> None:
    result = cli("deliveries", "replay", outbox.delivered, "--database", str(outbox.path))
    assert result.code == 1
    assert "delivered, not dead" in result.err
    assert "dead-lettered" in result.err.strip().splitlines()[-1]


def test_replay_of_a_deleted_configs_delivery_fails(cli: CLI, outbox: Outbox) -> None:
    async def delete() -> None:
        async with SQLiteStore(outbox.path) as store:
            assert await store.delete_config("task-1", "cfg-1", "alice")

    asyncio.run(delete())
    line = one_line_error(
        cli("deliveries", "replay", "--all-dead", "--database", str(outbox.path)), 1
    )
    assert "disabled or deleted" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "nothing chosen"),
        (("msg_x", "--all-dead"), "not both"),
        (("msg_x", "--task", "t"), "--task"),
        (("msg_x", "--config", "k"), "--config"),
        (("--since", "yesterday"), "ISO 8601"),
        (("--since", "2025-01-02T00:00:00Z", "--until", "2025-01-01T00:00:00Z"), "earlier"),
    ],
)
def test_replay_usage_errors(
    cli: CLI, outbox: Outbox, args: tuple[str, ...], expected: str
) -> None:
    line = one_line_error(cli("deliveries", "replay", *args, "--database", str(outbox.path)), 2)
    assert expected in line


# ---- send-test ---------------------------------------------------------------------------


def test_send_test_delivers_a_verifiable_signed_webhook(
    cli: CLI, sink: Sink, tmp_path: Path
) -> None:
    keys = str(tmp_path / "keys")
    kid = _field(cli("keys", "generate", "--dir", keys).out, "active kid")
    url = sink.url("/hook?secret=in-query")
    result = cli(
        "send-test",
        url,
        "--allow-loopback",
        "--keys-dir",
        keys,
        "--token",
        SECRET_TOKEN,
        "--issuer",
        "https://agent.example",
    )
    assert result.code == 0, result.err
    assert " -> 200 in " in result.out
    assert " ms" in result.out
    assert f"kid {kid}" in result.out
    assert _field(result.out, "token") == "(set)"
    # The path it posted to is shown; the query (it may hold a token) is not.
    assert f"POST {sink.url('/hook')}?… -> 200 in " in result.out
    assert "in-query" not in result.out

    [received] = sink.sink.received
    jwks = json.loads(cli("keys", "jwks", "--dir", keys).out)
    jwt = received.header("X-A2A-Signature")
    assert jwt is not None
    claims = verify_webhook_jwt(
        jwt, jwks=jwks, body=received.body, audience=url, issuer="https://agent.example"
    )
    assert claims["taskId"] == "test-task"
    assert claims["jti"] == received.header("webhook-id")
    assert _field(result.out, "webhook-id") == claims["jti"]
    assert received.header("Authorization") == f"Bearer {jwt}"
    assert received.header("X-A2A-Notification-Token") == SECRET_TOKEN
    assert received.header("Content-Type") == "application/a2a+json"
    assert received.header("A2A-Version") == "1.0"
    update = json.loads(received.body)["statusUpdate"]
    assert update["taskId"] == "test-task"
    assert update["status"]["state"] == "TASK_STATE_WORKING"


def test_send_test_refuses_loopback_unless_allowed(cli: CLI, sink: Sink) -> None:
    line = one_line_error(cli("send-test", sink.url(), "--token", SECRET_TOKEN), 1)
    assert "--allow-loopback" in line
    assert "loopback" in line
    assert sink.sink.received == []


def test_send_test_refuses_private_addresses_naming_the_allow_flag(cli: CLI) -> None:
    line = one_line_error(cli("send-test", "http://10.1.2.3/hook", "--allow-loopback"), 1)
    assert "private" in line
    assert "--allow" in line


def test_send_test_allowlist_admits_the_address(cli: CLI, sink: Sink) -> None:
    result = cli("send-test", sink.url(), "--allow", "127.0.0.1")
    assert result.code == 0, result.err
    assert "throwaway key" in result.err  # no --keys-dir
    assert len(sink.sink.received) == 1


def test_send_test_keys_dir_from_environment(
    cli: CLI, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = str(tmp_path / "keys")
    kid = _field(cli("keys", "generate", "--dir", keys).out, "active kid")
    monkeypatch.setenv("A2A_PUSH_KEYS_DIR", keys)
    result = cli("send-test", sink.url(), "--allow-loopback")
    assert result.code == 0
    assert f"kid {kid}" in result.out
    assert "throwaway" not in result.err


def test_send_test_standard_webhooks_secret(cli: CLI, sink: Sink) -> None:
    result = cli("send-test", sink.url(), "--allow-loopback", "--token", STDWH_SECRET)
    assert result.code == 0
    assert "Standard Webhooks" in _field(result.out, "token")
    [received] = sink.sink.received
    assert received.header("X-A2A-Notification-Token") is None
    standard_webhooks.verify(
        STDWH_SECRET,
        msg_id=received.header("webhook-id") or "",
        timestamp=received.header("webhook-timestamp") or "",
        signature_header=received.header("webhook-signature") or "",
        body=received.body,
    )


def test_send_test_reports_a_failing_endpoint(cli: CLI, sink: Sink) -> None:
    sink.sink.set_default("/down", SinkResponse(503, body=b"maintenance"))
    result = cli("send-test", sink.url("/down"), "--allow-loopback", "--token", SECRET_TOKEN)
    assert result.code == 1
    assert " -> 503 in " in result.out
    assert "retry" in result.out
    assert "maintenance" in result.out


def test_send_test_shows_an_answer_without_its_terminal_escapes(cli: CLI, sink: Sink) -> None:
    """The endpoint's body is the endpoint's to choose: escapes that retitle the window,
    clear the screen or fake output are shown escaped, never sent to the terminal."""
    body = b"\x1b]0;pwned\x07\x1b[2J\x1b[31mFAKE: all good\x1b[0m"
    sink.sink.set_default("/evil", SinkResponse(400, body=body))
    result = cli("send-test", sink.url("/evil"), "--allow-loopback")
    assert result.code == 1
    assert "\x1b" not in result.out and "\x07" not in result.out
    assert "response body: \\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mFAKE: all good" in result.out


def test_send_test_reports_no_response(cli: CLI) -> None:
    # Port 9 (discard): nothing listens there in the test environment.
    line = one_line_error(cli("send-test", "http://127.0.0.1:9/hook", "--allow-loopback"), 1)
    assert "no response" in line


@pytest.mark.parametrize(
    ("url", "expected"), [("ftp://example.com/x", "scheme"), ("not a url", "URL")]
)
def test_send_test_bad_url_is_a_usage_error(cli: CLI, url: str, expected: str) -> None:
    assert expected in one_line_error(cli("send-test", url), 2)


def test_send_test_missing_keys_dir_fails(cli: CLI, sink: Sink, tmp_path: Path) -> None:
    missing = str(tmp_path / "nokeys")
    line = one_line_error(
        cli("send-test", sink.url(), "--allow-loopback", "--keys-dir", missing), 1
    )
    assert "keys generate" in line
    assert sink.sink.received == []


def test_send_test_token_with_newline_is_refused(cli: CLI) -> None:
    line = one_line_error(cli("send-test", "http://127.0.0.1:9/", "--token", "a\r\nb"), 2)
    assert "--token" in line


def test_generated_keys_never_start_with_a_dash() -> None:
    # A key starting with "-" would be read as an option after --encryption-key.
    from a2a_push.store import generate_key

    keys = [generate_key() for _ in range(2_000)]  # ~31 would start with "-" otherwise
    assert not [k for k in keys if k.startswith("-")]
    assert len(set(keys)) == len(keys)


# ---- configs: disable and enable ---------------------------------------------------------


def _config_key_of(cli: CLI, outbox: Outbox, delivery_id: str) -> str:
    listed = json.loads(cli("deliveries", "list", "--database", str(outbox.path), "--json").out)
    return str(next(d["config_key"] for d in listed if d["id"] == delivery_id))


def test_configs_disable_says_how_many_pending_deliveries_it_dead_letters(
    cli: CLI, outbox: Outbox
) -> None:
    db = str(outbox.path)
    key = _config_key_of(cli, outbox, outbox.pending)
    result = cli("configs", "disable", key, "--database", db)
    assert result.code == 0, result.err
    assert result.out.strip() == f"config {key} disabled; 1 pending delivery moved to dead letters"
    assert state_of(outbox.path, outbox.pending) is DeliveryState.DEAD
    # Again: nothing is pending any more.
    again = cli("configs", "disable", key, "--database", db)
    assert "0 pending deliveries moved to dead letters" in again.out


def test_configs_disable_help_says_it_dead_letters(cli: CLI) -> None:
    for args in (("configs", "--help"), ("configs", "disable", "--help")):
        result = cli(*args)
        assert result.code == 0
        assert "dead letters" in result.out or "dead-letters" in result.out
    assert "--all-dead --config KEY" in cli("configs", "disable", "--help").out


def test_configs_enable_says_how_to_replay_dead_letters_and_the_command_works(
    cli: CLI, outbox: Outbox
) -> None:
    db = str(outbox.path)
    key = _config_key_of(cli, outbox, outbox.pending)
    assert cli("configs", "disable", key, "--database", db).code == 0
    result = cli("configs", "enable", key, "--database", db)
    assert result.code == 0, result.err
    assert result.out.strip() == f"config {key} enabled"
    assert "1 dead-lettered delivery of this config is not re-sent" in result.err
    command = result.err.split("`")[1]
    expected = f"a2a-push deliveries replay --all-dead --config {key} --database {db}"
    assert command == shlex.join(shlex.split(expected))
    # The suggested command is real: it replays this config's dead letter, no other.
    replayed = cli(*shlex.split(command)[1:])
    assert replayed.code == 0, replayed.err
    assert "replayed 1 dead-lettered delivery;" in replayed.out
    assert state_of(outbox.path, outbox.pending) is DeliveryState.PENDING
    assert state_of(outbox.path, outbox.dead) is DeliveryState.DEAD  # another config's


def test_configs_enable_without_dead_letters_gives_no_hint(cli: CLI, outbox: Outbox) -> None:
    key = _config_key_of(cli, outbox, outbox.pending)
    result = cli("configs", "enable", key, "--database", str(outbox.path))
    assert result.code == 0
    assert result.err == ""


def test_configs_enable_hint_leaves_out_a_database_from_the_environment(
    cli: CLI, outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_PUSH_DATABASE", str(outbox.path))
    result = cli("configs", "enable", outbox.config_key)  # cfg-1 has a dead letter
    assert result.code == 0
    assert f"`a2a-push deliveries replay --all-dead --config {outbox.config_key}`" in result.err


def test_configs_unknown_key_fails(cli: CLI, outbox: Outbox) -> None:
    for action in ("disable", "enable"):
        line = one_line_error(cli("configs", action, "nope", "--database", str(outbox.path)), 1)
        assert "no config with key 'nope'" in line
        assert "deliveries list --json" in line


def test_replay_by_config(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    other = _config_key_of(cli, outbox, outbox.pending)
    result = cli("deliveries", "replay", "--all-dead", "--config", other, "--database", db)
    assert "nothing to replay" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.DEAD
    result = cli(
        "deliveries", "replay", "--all-dead", "--config", outbox.config_key, "--database", db
    )
    assert "replayed 1 dead-lettered delivery;" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.PENDING
    # A key no config has is an error, not "nothing to replay".
    line = one_line_error(
        cli("deliveries", "replay", outbox.dead, "--endpoint", ENDPOINT, "--database", db), 2
    )
    assert "--endpoint applies only with --all-dead" in line
    line = one_line_error(
        cli("deliveries", "replay", "--all-dead", "--config", "nope", "--database", db), 1
    )
    assert "--config 'nope': no config with that key in the SQLite file" in line
    assert "deliveries list --json` (config_key)" in line


def test_replay_by_endpoint(cli: CLI, outbox: Outbox) -> None:
    db = str(outbox.path)
    other = "http://127.0.0.1:10"
    result = cli("deliveries", "replay", "--all-dead", "--endpoint", other, "--database", db)
    assert "nothing to replay" in result.out
    result = cli("deliveries", "replay", "--all-dead", "--endpoint", ENDPOINT, "--database", db)
    assert "replayed 1 dead-lettered delivery;" in result.out
    assert state_of(outbox.path, outbox.dead) is DeliveryState.PENDING


@pytest.mark.parametrize(
    ("database", "shown"),
    [
        (
            "postgresql://postgres@127.0.0.1:5432/test?password=s3cret",
            "postgresql://postgres@127.0.0.1:5432/test?password=***",
        ),
        ("postgresql://u:s3cret@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://h/db?sslmode=require&SSLPassword=s3cret",
            "postgresql://h/db?sslmode=require&SSLPassword=***",
        ),
        ("postgresql://postgres@127.0.0.1/test", "postgresql://postgres@127.0.0.1/test"),
        ("sqlite:///relative/push.db", "sqlite:///relative/push.db"),
        ("push.db", "push.db"),
    ],
)
def test_a_suggested_database_hides_only_passwords(database: str, shown: str) -> None:
    """The user name stays (the suggested command must still name the database); a
    password, in the URL or as a query parameter, does not."""
    from a2a_push.cli import shown_database

    assert shown_database(database) == shown


# ---- consistency ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("deliveries", "list"),
        ("deliveries", "show"),
        ("deliveries", "replay"),
        ("configs", "disable"),
        ("configs", "enable"),
        ("keys", "rotate"),
        ("gateway",),
    ],
)
def test_the_database_option_has_one_metavar(cli: CLI, command: tuple[str, ...]) -> None:
    result = cli(*command, "--help")
    assert result.code == 0
    assert "--database DB" in result.out
    assert "--database DATABASE" not in result.out
    assert "--database URL" not in result.out


def test_gateway_errors_have_the_same_prefix(
    cli: CLI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("A2A_GATEWAY_AGENTS", "A2A_GATEWAY_ADMIN_KEYS", "A2A_GATEWAY_DATABASE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(cli("gateway"), 2)  # no agents configured
    assert "no agents configured" in line
    line = one_line_error(cli("gateway", "--agent-key", f"booking={SECRET_TOKEN}"), 2)
    assert "--agent-key" in line
    one_line_error(cli("gateway", "--log-level", "bogus"), 2)  # a usage error, as before


# ---- endpoints and gateway URLs ------------------------------------------------------------


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    """A real gateway on 127.0.0.1 (SQLite), on its own loop; its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    running = running_gateway(gateway_settings(str(tmp_path / "gateway" / "outbox.db")))
    url, _gw = asyncio.run_coroutine_threadsafe(running.__aenter__(), loop).result(30)
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(running.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_endpoints_takes_the_admin_apis_own_url_too(cli: CLI, gateway: str) -> None:
    for url in (gateway, gateway + "/", gateway + "/admin/endpoints"):
        result = cli("endpoints", "--gateway", url, "--admin-key", ADMIN_KEY)
        assert result.code == 0, result.err
        assert "healthy" in result.out


def test_endpoints_says_a_kept_path_is_no_route_of_the_gateway(cli: CLI, gateway: str) -> None:
    result = cli("endpoints", "--gateway", gateway + "/gw", "--admin-key", ADMIN_KEY)
    line = one_line_error(result, 1)
    # The gateway answers its own JSON 404 for a path it does not serve.
    assert line.startswith(
        f"a2a-push: error: {gateway}/gw/admin/endpoints answered 404: no such route: "
        "GET /gw/admin/endpoints"
    )
    assert "the path /gw of --gateway was kept" in line
    assert "JSONDecodeError" not in line and "Expecting value" not in line


def test_endpoints_at_something_else_says_it_is_not_a_gateway(cli: CLI, sink: Sink) -> None:
    page = SinkResponse(200, headers={"Content-Type": "text/html; charset=utf-8"}, body=b"<h1>")
    sink.sink.set_default("/admin/endpoints", page)
    base = sink.url("")
    line = one_line_error(cli("endpoints", "--gateway", base, "--admin-key", ADMIN_KEY), 1)
    assert (
        f"{base}/admin/endpoints did not answer like an a2a-push gateway (got HTTP 200, text/html)"
    ) in line
    assert "check --gateway" in line
    # JSON that is not the admin API's answer is no gateway either.
    json_list = SinkResponse(200, headers={"Content-Type": "application/json"}, body=b"[1]")
    sink.sink.set_default("/admin/endpoints", json_list)
    line = one_line_error(cli("endpoints", "--gateway", base, "--admin-key", ADMIN_KEY), 1)
    assert "(got HTTP 200, application/json)" in line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"http://bob:{SECRET_TOKEN}@127.0.0.1:8080", "--gateway http://***@127.0.0.1:8080 "),
        (f"http://{SECRET_TOKEN}@127.0.0.1:8080/gw", "--gateway http://***@127.0.0.1:8080/gw "),
        (f"bob:{SECRET_TOKEN}@127.0.0.1:8080", "'***@127.0.0.1:8080'"),
        (f"http://127.0.0.1:8080/?key={SECRET_TOKEN}", "?query"),
    ],
)
def test_gateway_urls_with_credentials_are_refused_without_echoing_them(
    cli: CLI, url: str, expected: str
) -> None:
    # The cli fixture checks SECRET_TOKEN is in no output.
    line = one_line_error(cli("endpoints", "--gateway", url, "--admin-key", ADMIN_KEY), 2)
    assert expected in line
    assert "bob" not in line


def test_mock_agent_refuses_a_gateway_url_with_credentials(cli: CLI) -> None:
    url = f"http://agent:{SECRET_TOKEN}@127.0.0.1:9"
    line = one_line_error(cli("mock-agent", "--gateway", url, "--gateway-key", AGENT_KEY), 2)
    assert "http://***@127.0.0.1:9" in line
    assert "user-info" in line


RETRIES = ["--retry-schedule", "1,2"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gateway-retry-for", "5"], "--gateway-retry-for only applies with --gateway URL"),
        (["--gateway-key", AGENT_KEY], "--gateway-key only applies with --gateway URL"),
        (["--gateway", "http://127.0.0.1:9"], "--gateway needs --gateway-key KEY"),
        (
            ["--gateway", "http://127.0.0.1:9", "--gateway-key", AGENT_KEY, *RETRIES],
            "give `a2a-push gateway` the --retry-schedule",
        ),
    ],
)
def test_mock_agent_refuses_options_of_the_other_mode(
    cli: CLI, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    # Refused, not ignored: the agent would otherwise run without what was asked for.
    monkeypatch.delenv("A2A_PUSH_GATEWAY_KEY", raising=False)
    line = one_line_error(cli("mock-agent", *args), 2)
    assert expected in line


@pytest.mark.parametrize("port", ["0", "70000", "-1"])
def test_mock_agent_refuses_a_port_out_of_range(cli: CLI, port: str) -> None:
    line = one_line_error(cli("mock-agent", "--port", port), 2)
    assert f"--port {port}: " in line and "65535" in line


def test_mock_agent_log_level_is_checked(cli: CLI) -> None:
    result = cli("mock-agent", "--log-level", "loud")
    assert result.code == 2 and "invalid choice: 'LOUD'" in result.err


def test_send_test_never_echoes_user_info(cli: CLI, sink: Sink) -> None:
    url = sink.url("/hook").replace("http://", f"http://user:{SECRET_TOKEN}@")
    line = one_line_error(cli("send-test", url, "--allow-loopback"), 2)
    assert "user-info" in line  # and the cli fixture checks the password is not echoed
    assert sink.sink.received == []


def test_gateway_client_says_a_url_is_not_a_gateway(cli: CLI, sink: Sink, gateway: str) -> None:
    async def publish(url: str) -> GatewayError:
        async with GatewayClient(url, AGENT_KEY, attempts=1) as client:
            with pytest.raises(GatewayError) as caught:
                await client.publish("t-1", status("t-1", TaskState.WORKING))
            return caught.value

    error = asyncio.run(publish(gateway + "/gw"))
    # The gateway itself says the path is none of its routes.
    assert str(error).startswith(
        "the gateway answered 404: no such route: POST /gw/v1/tasks/t-1/events"
    )
    assert error.status == 404 and not error.retryable
    sink.sink.set_default("/v1/tasks/t-1/events", SinkResponse(502, body=b"<html>bad gateway"))
    error = asyncio.run(publish(sink.url("")))
    assert "did not answer like an a2a-push gateway (got HTTP 502, " in str(error)
    assert error.retryable  # a proxy's 502 page: the gateway behind it may come back
    with pytest.raises(ValueError, match="user-info") as refused:
        GatewayClient(f"http://a:{SECRET_TOKEN}@127.0.0.1:1", AGENT_KEY)
    assert SECRET_TOKEN not in str(refused.value)
