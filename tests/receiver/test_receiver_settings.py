"""Receiver settings: file < environment < flags, with errors that name the setting."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from a2a_push.cli import main as cli_main
from receiver.settings import SettingsError, load_settings
from receiver.verify import AuthMethod


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "receiver.toml"
    config.write_text(
        """
port = 9001
public_url = "https://hooks.example"
[[agents]]
url = "http://agent-a.test/"
auth = ["jwt", "token"]
credentials = "Bearer s3cret"
"""
    )
    settings = load_settings(
        config_file=config,
        environ={"A2A_RECEIVER_PORT": "9002", "A2A_RECEIVER_API_KEYS": "alice:0123456789abcdefXYZ"},
        overrides={"port": 9003, "host": None},
        extra_agents=["http://agent-a.test", "http://agent-b.test/rpc"],
    )
    assert settings.port == 9003
    assert settings.webhook_url == "https://hooks.example/webhooks/a2a"
    assert [a.key for a in settings.agents] == ["http://agent-a.test", "http://agent-b.test/rpc"]
    a = settings.agents[0]
    assert a.methods == {AuthMethod.JWT, AuthMethod.TOKEN}
    assert "s3cret" not in repr(settings)  # secrets are masked
    assert settings.api_keys[0].client_id == "alice"
    assert settings.agents[1].issuers == (
        "http://agent-b.test/rpc",
        "http://agent-b.test",
        "http://agent-b.test/",  # an origin, with or without its slash
    )


def test_json_config_files_work_too(tmp_path: Path) -> None:
    config = tmp_path / "receiver.json"
    config.write_text(json.dumps({"agents": [{"url": "http://a.test/"}], "freshness_seconds": 60}))
    assert load_settings(config_file=config, environ={}).freshness_seconds == 60


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"A2A_RECEIVER_PORT": "http"}, "port"),
        ({"A2A_RECEIVER_API_KEYS": "nocolon"}, "client:key"),
        ({"A2A_RECEIVER_API_KEYS": "alice:short"}, "16 characters"),
        ({"A2A_RECEIVER_AGENTS": "ftp://x"}, "http(s) URL"),
    ],
)
def test_bad_values_name_the_setting(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError, match=r"^setting |client:key") as err:
        load_settings(environ=environ)
    assert expected in str(err.value)


AGENTS_TOML = """
[[agents]]
url = "http://agent-a.test/rpc/"
auth = ["token"]
credentials = "Bearer a-secret"
jwks_url = "http://keys.test/jwks.json"
issuer = "https://issuer-a.test"
protocol_version = "0.3"

[[agents]]
url = "http://agent-b.test/"
auth = ["standard-webhooks"]
standard_webhooks_secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
"""


def test_an_environment_agent_list_keeps_the_files_options_for_its_urls(tmp_path: Path) -> None:
    config = tmp_path / "receiver.toml"
    config.write_text(AGENTS_TOML)
    settings = load_settings(
        config_file=config,
        # agent-a without its trailing slash, agent-c only here, agent-b left out
        environ={"A2A_RECEIVER_AGENTS": "http://agent-a.test/rpc, http://agent-c.test/"},
    )
    assert [a.key for a in settings.agents] == ["http://agent-a.test/rpc", "http://agent-c.test"]
    a, c = settings.agents
    assert a.methods == {AuthMethod.TOKEN}
    assert a.credentials is not None and a.credentials.get_secret_value() == "Bearer a-secret"
    assert a.jwks_url == "http://keys.test/jwks.json"
    assert a.issuers == ("https://issuer-a.test", "https://issuer-a.test/")
    assert a.protocol_version == "0.3"
    assert c.methods == {AuthMethod.JWT}  # only in the environment: the defaults
    assert c.credentials is None and c.jwks_url is None
    assert settings.agent("http://agent-b.test/") is None  # the list replaces the file's


def test_agent_flags_replace_the_environment_list_and_keep_file_options(tmp_path: Path) -> None:
    config = tmp_path / "receiver.toml"
    config.write_text(AGENTS_TOML)
    settings = load_settings(
        config_file=config,
        environ={"A2A_RECEIVER_AGENTS": "http://agent-a.test/rpc/"},
        extra_agents=["http://agent-b.test", "http://agent-b.test/", "http://agent-d.test/"],
    )
    assert [a.key for a in settings.agents] == ["http://agent-b.test", "http://agent-d.test"]
    assert settings.agents[0].methods == {AuthMethod.STANDARD_WEBHOOKS}
    assert len(settings.agents[0].standard_webhooks_secrets) == 1
    assert settings.agents[1].methods == {AuthMethod.JWT}


def test_without_an_agent_list_the_files_agents_stay(tmp_path: Path) -> None:
    config = tmp_path / "receiver.toml"
    config.write_text(AGENTS_TOML)
    settings = load_settings(config_file=config, environ={"A2A_RECEIVER_AGENTS": ""})
    assert [a.key for a in settings.agents] == ["http://agent-a.test/rpc", "http://agent-b.test"]
    assert settings.agents[0].methods == {AuthMethod.TOKEN}


def test_workers_log_level_and_access_log_default() -> None:
    settings = load_settings(environ={})
    assert (settings.workers, settings.log_level, settings.access_log) == (1, "INFO", False)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_workers_log_level_and_access_log_from_the_file(tmp_path: Path, suffix: str) -> None:
    config = tmp_path / f"receiver{suffix}"
    values = {"workers": 3, "log_level": "debug", "access_log": True}
    if suffix == ".json":
        config.write_text(json.dumps(values))
    else:
        config.write_text('workers = 3\nlog_level = "debug"\naccess_log = true\n')
    settings = load_settings(config_file=config, environ={})
    assert (settings.workers, settings.log_level, settings.access_log) == (3, "DEBUG", True)


def test_workers_log_level_and_access_log_from_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "receiver.toml"
    config.write_text('workers = 3\nlog_level = "ERROR"\naccess_log = true\n')
    environ = {
        "A2A_RECEIVER_WORKERS": "4",
        "A2A_RECEIVER_LOG_LEVEL": "warning",
        "A2A_RECEIVER_ACCESS_LOG": "false",
    }
    settings = load_settings(config_file=config, environ=environ)
    assert (settings.workers, settings.log_level, settings.access_log) == (4, "WARNING", False)
    # flags (overrides) win over the environment
    settings = load_settings(
        config_file=config,
        environ=environ,
        overrides={"workers": 2, "log_level": "debug", "access_log": True},
    )
    assert (settings.workers, settings.log_level, settings.access_log) == (2, "DEBUG", True)


def test_the_config_file_can_be_named_by_the_environment(tmp_path: Path) -> None:
    named = tmp_path / "from-env.toml"
    named.write_text("workers = 5\n")
    flagged = tmp_path / "from-flag.toml"
    flagged.write_text("workers = 6\n")
    environ = {"A2A_RECEIVER_CONFIG": str(named)}
    assert load_settings(environ=environ).workers == 5
    assert load_settings(config_file=flagged, environ=environ).workers == 6
    with pytest.raises(SettingsError, match=r"missing\.toml"):
        load_settings(environ={"A2A_RECEIVER_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"A2A_RECEIVER_WORKERS": "zero"},
            "setting workers (from A2A_RECEIVER_WORKERS): Input should be a valid integer",
        ),
        (
            {"A2A_RECEIVER_WORKERS": "0"},
            "workers (from A2A_RECEIVER_WORKERS): Input should be greater than or equal to 1",
        ),
        ({"A2A_RECEIVER_LOG_LEVEL": "chatty"}, "log_level (from A2A_RECEIVER_LOG_LEVEL): Input"),
        ({"A2A_RECEIVER_ACCESS_LOG": "sometimes"}, "Input should be a valid boolean"),
    ],
)
def test_bad_new_settings_name_the_setting(environ: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError, match=r"^setting ") as err:
        load_settings(environ=environ)
    assert expected in str(err.value)


def test_the_command_reads_workers_and_log_level_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_RECEIVER_WORKERS", "0")
    args = ["receiver", "--agent", "http://a.test/", "--data-dir", str(tmp_path)]
    assert cli_main(args) == 2
    assert "setting workers (from A2A_RECEIVER_WORKERS): Input should be greater" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("A2A_RECEIVER_LOG_LEVEL", "chatty")
    assert cli_main([*args, "--workers", "1"]) == 2  # the flag fixes workers, not log_level
    err = capsys.readouterr().err
    assert "log_level" in err and "workers" not in err


def test_worker_processes_get_the_resolved_logging_options() -> None:
    from receiver.cli import _worker_argv, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--agent", "http://a.test/", "--workers", "2"])
    settings = load_settings(
        environ={"A2A_RECEIVER_LOG_LEVEL": "debug", "A2A_RECEIVER_ACCESS_LOG": "1"},
        overrides={"workers": args.workers},
        extra_agents=args.agents,
    )
    argv = _worker_argv(args, settings)
    assert argv[:6] == ["--worker", "--prog", "a2a-push", "--log-level", "DEBUG", "--access-log"]
    assert "--workers" not in argv and argv[-2:] == ["--agent", "http://a.test/"]
    again = parser.parse_args(argv)
    assert (again.worker, again.log_level, again.access_log) == (True, "DEBUG", True)
    # Workers (python -m receiver) report errors as the command the user ran.
    assert again.prog == "a2a-push"


def test_every_receiver_error_starts_as_the_command_run(tmp_path: Path) -> None:
    """a2a-push receiver: "a2a-push: error:", its workers' errors too; python -m
    receiver: its own name, as its usage errors."""
    (tmp_path / "api-keys.json").write_bytes(b"not json")
    for command, prog in (
        (["a2a_push", "receiver"], "a2a-push"),
        (["receiver"], "python -m receiver"),
    ):
        proc = subprocess.run(
            [
                *(sys.executable, "-m", *command, "--agent", "http://127.0.0.1:9/"),
                *("--port", "0", "--data-dir", str(tmp_path), "--workers", "2"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 1
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
        assert "api-keys.json" in lines[0]


def test_bad_agent_options_are_explained(tmp_path: Path) -> None:
    config = tmp_path / "r.toml"
    config.write_text('[[agents]]\nurl = "http://a.test/"\nauth = ["magic"]\n')
    with pytest.raises(SettingsError, match="unknown authentication method 'magic'"):
        load_settings(config_file=config, environ={})
    config.write_text('[[agents]]\nurl = "http://a.test/"\nstandard_webhooks_secrets = ["nope"]\n')
    with pytest.raises(SettingsError, match="whsec_"):
        load_settings(config_file=config, environ={})
    config.write_text("unknown_option = 1\n")
    with pytest.raises(SettingsError, match="unknown_option"):
        load_settings(config_file=config, environ={})
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(config_file=tmp_path / "missing.toml", environ={})


def test_receiver_command_without_agents_explains_what_to_do(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("A2A_RECEIVER_AGENTS", raising=False)
    assert cli_main(["receiver", "--port", "0"]) == 2
    assert "no agents configured" in capsys.readouterr().err


def test_python_dash_m_receiver_reports_bad_settings() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "receiver", "--agent", "not-a-url"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "setting agents[0].url (from --agent): " in proc.stderr
    assert "http(s) URL" in proc.stderr and "got 'not-a-url'" in proc.stderr


def test_several_workers_share_the_port_and_stop_together(tmp_path: Path) -> None:
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _two_workers(port, tmp_path, "ERROR")
    try:
        deadline = time.monotonic() + 30
        answered = 0
        while answered < 6 and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    answered += r.status == 200
            except OSError:
                time.sleep(0.1)
        assert answered == 6
        keys = json.loads((tmp_path / "api-keys.json").read_text())
        assert list(keys) == ["default"]  # made once, by the supervisor
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def _two_workers(
    port: int,
    data_dir: Path,
    log_level: str,
    *,
    env: dict[str, str] | None = None,
    stderr: Any = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """``receiver --workers 2`` on ``port`` for an agent nobody runs."""
    argv = ["--workers", "2", "--port", str(port), "--agent", "http://127.0.0.1:9/"]
    argv += ["--data-dir", str(data_dir), "--log-level", log_level]
    return subprocess.Popen(
        [sys.executable, "-m", "receiver", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


def _webhooks_counted(metrics_dir: Path, scratch: Path) -> list[float]:
    """Each worker's ``a2a_receiver_webhooks_total``, read from its own file alone (a
    copy, in a folder of its own, read as a scrape reads the shared folder)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    counts = []
    for path in sorted(metrics_dir.glob("counter_*.db")):
        alone = scratch / path.stem
        alone.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, alone / path.name)
        counts.append(
            sum(
                sample.value
                for family in MultiProcessCollector(None, path=str(alone)).collect()
                if family.name == "a2a_receiver_webhooks"
                for sample in family.samples
            )
        )
    return counts


def _scrape(port: int) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        sample.name + "".join(f"|{v}" for v in sample.labels.values()): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_with_workers_every_scrape_shows_the_sum_over_them_all(tmp_path: Path) -> None:
    """Each worker counts what it serves, in a private folder the supervisor made; every
    scrape (whichever worker answers it) shows the sum, and the folder goes at the end.
    The generated-API-keys warning comes once, from the supervisor."""
    import http.client
    import signal
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tmp_path / "tmp"
    temp.mkdir()
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        # TMPDIR: where the metrics folder goes.
        proc = _two_workers(
            port, tmp_path / "data", "WARNING", env={**os.environ, "TMPDIR": str(temp)}, stderr=err
        )
    streams: list[http.client.HTTPConnection] = []
    try:
        deadline = time.monotonic() + 60
        answered = 0
        while answered < 6:
            assert time.monotonic() < deadline, "the workers never answered"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    answered += r.status == 200
            except OSError:
                time.sleep(0.1)
        folders = list(temp.glob("a2a-receiver-metrics-*"))
        assert len(folders) == 1, folders
        # Unauthenticated webhooks (each a new connection, so the kernel spreads them)
        # until both workers have counted some.
        sent = 0
        while True:
            counts = _webhooks_counted(folders[0], tmp_path / "scratch")
            assert sum(counts) == sent
            if len(counts) == 2 and min(counts) > 0:
                break
            assert sent < 500 and time.monotonic() < deadline, counts
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/webhooks/a2a",
                data=b"{}",
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401
            refused.value.close()
            sent += 1
        key = json.loads((tmp_path / "data" / "api-keys.json").read_text())["default"]
        for _ in range(2):  # two open SSE streams, on whichever workers
            stream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            stream.request("GET", "/events", headers={"Authorization": f"Bearer {key}"})
            response = stream.getresponse()
            assert response.status == 200
            assert response.readline() == b"retry: 2000\n"  # written once it is counted
            streams.append(stream)
        for _ in range(6):  # each scrape on a new connection: either worker answers
            scraped = _scrape(port)
            assert scraped["a2a_receiver_webhooks_total|no_credentials"] == sent
            assert scraped["a2a_receiver_webhook_duration_seconds_count"] == sent
            assert scraped["a2a_receiver_sse_clients"] == 2
    finally:
        for stream in streams:
            stream.close()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0
    assert list(temp.iterdir()) == []  # the metrics folder is gone
    assert stderr.read_text().count("no API keys configured") == 1


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ('algorithms = ["HS256"]', "agents[0].algorithms (from CONFIG): unsupported ['HS256']"),
        ("algorithms = []", "the jwt method needs at least one algorithm"),
        ('auth = ["standard-webhooks"]', "the standard-webhooks method needs a whsec_ secret"),
        (
            'auth = ["standard-webhooks"]\nstandard_webhooks_secrets = ["whsec_!!!"]',
            "standard_webhooks_secrets",
        ),
    ],
)
def test_agent_options_the_verifier_cannot_use_are_refused_when_loading(
    tmp_path: Path, agent: str, expected: str
) -> None:
    config = tmp_path / "r.toml"
    config.write_text(f'[[agents]]\nurl = "http://a.test/"\n{agent}\n')
    with pytest.raises(SettingsError, match=r"^setting agents") as caught:
        load_settings(config_file=config, environ={})
    assert expected.replace("CONFIG", str(config)) in str(caught.value)


def test_the_command_refuses_unusable_agent_options_with_exit_2_and_no_traceback(
    tmp_path: Path,
) -> None:
    config = tmp_path / "r.toml"
    config.write_text(
        f'port = 0\ndata_dir = "{tmp_path / "data"}"\n'
        '[[agents]]\nurl = "http://127.0.0.1:9/"\nalgorithms = ["HS256"]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "receiver", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "python -m receiver: error: setting agents[0].algorithms (from " in proc.stderr
    assert "Traceback" not in proc.stderr and "Unclosed" not in proc.stderr


async def test_a_failed_start_closes_the_http_session_and_the_store(tmp_path: Path) -> None:
    from receiver.core import Receiver
    from receiver.settings import ReceiverSettings

    settings = ReceiverSettings.model_validate(
        {"data_dir": tmp_path, "agents": [{"url": "http://127.0.0.1:9/"}]}
    )
    # An agent entry that skipped validation (model_copy does not validate): the verifier
    # refuses it at start.
    broken = settings.agents[0].model_copy(update={"algorithms": ("HS256",)})
    receiver = Receiver(settings.model_copy(update={"agents": (broken,)}))
    with pytest.raises(ValueError, match="HS256"):
        await receiver.start()
    assert receiver._session is not None and receiver._session.closed
    assert receiver._maintenance is None
    with pytest.raises(Exception, match="not open"):
        await receiver.store.ping()


DATABASE_ACCEPTED = "postgresql://user@host/db, sqlite:///path/receiver.db or a file path"


@pytest.mark.parametrize(
    "database",
    ["mysql://x/y", "memory://", ":memory:", "redis://localhost/0", "file:///tmp/r.db"],
)
def test_a_database_url_the_receiver_cannot_open_is_refused(database: str) -> None:
    with pytest.raises(SettingsError, match=r"^setting database \(from --database\): ") as err:
        load_settings(environ={}, overrides={"database": database})
    assert DATABASE_ACCEPTED in str(err.value)
    with pytest.raises(
        SettingsError, match=r"database \(from A2A_RECEIVER_DATABASE\): .*or a file path"
    ):
        load_settings(environ={"A2A_RECEIVER_DATABASE": database})


@pytest.mark.parametrize("database", ["sqlite://", "sqlite:///", "sqlite://rel.db"])
def test_a_sqlite_url_needs_a_file_path(database: str) -> None:
    with pytest.raises(
        SettingsError, match=r"database \(from --database\): .*a sqlite URL needs a file path"
    ):
        load_settings(environ={}, overrides={"database": database})


@pytest.mark.parametrize(
    "database",
    [
        "postgresql://user@db.test:5432/receiver",
        "postgres://db.test/receiver",
        "sqlite:///data/receiver.db",
        "sqlite:////var/lib/receiver.db",
        "data/receiver.db",
        "/var/lib/receiver.db",
    ],
)
def test_postgres_sqlite_urls_and_file_paths_are_databases(database: str) -> None:
    assert load_settings(environ={}, overrides={"database": database}).database_url == database


def test_the_store_refuses_an_unvalidated_database_url_too(tmp_path: Path) -> None:
    from receiver.core import open_receiver_store
    from receiver.settings import ReceiverSettings

    settings = ReceiverSettings(data_dir=tmp_path).model_copy(update={"database": "mysql://x/y"})
    with pytest.raises(ValueError, match="database: postgresql://"):
        open_receiver_store(settings)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("database", ["mysql://x/y", "memory://"])
def test_the_command_refuses_a_database_url_with_exit_2_and_creates_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    database: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2A_RECEIVER_CONFIG", raising=False)
    monkeypatch.delenv("A2A_RECEIVER_DATABASE", raising=False)
    args = ["receiver", "--agent", "http://127.0.0.1:9/", "--database", database, "--port", "0"]
    assert cli_main(args) == 2
    captured = capsys.readouterr()
    assert "a2a-push: error: setting database (from --database): " in captured.err
    assert DATABASE_ACCEPTED in captured.err and "Traceback" not in captured.err
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []  # no ./mysql:/x/y, no ./memory:


@pytest.mark.parametrize(
    "public_url",
    [
        "receiver.example.com",
        "receiver.example.com:8090",
        "//receiver.example.com",
        "ftp://receiver.example.com",
        "https://",
        "http://:8090/",
        "https://receiver.example.com:99999",
        "https://receiver.example.com:0",
        "https://receiver.example.com/?a=b",
        "https://receiver.example.com/#x",
        "http://[::1",
    ],
)
def test_a_public_url_agents_cannot_call_is_refused(public_url: str) -> None:
    with pytest.raises(SettingsError, match=r"^setting public_url \(from --public-url\): ") as err:
        load_settings(environ={}, overrides={"public_url": public_url})
    assert "an absolute http(s) URL with a host" in str(err.value)
    with pytest.raises(
        SettingsError, match=r"public_url \(from A2A_RECEIVER_PUBLIC_URL\): .*absolute http"
    ):
        load_settings(environ={"A2A_RECEIVER_PUBLIC_URL": public_url})


@pytest.mark.parametrize(
    ("public_url", "webhook_url"),
    [
        ("https://receiver.example.com", "https://receiver.example.com/webhooks/a2a"),
        ("https://receiver.example.com/", "https://receiver.example.com/webhooks/a2a"),
        ("http://10.0.0.5:8090/hooks/", "http://10.0.0.5:8090/hooks/webhooks/a2a"),
        ("http://[::1]:8090", "http://[::1]:8090/webhooks/a2a"),
    ],
)
def test_an_absolute_public_url_gives_the_webhook_url(public_url: str, webhook_url: str) -> None:
    settings = load_settings(environ={}, overrides={"public_url": public_url})
    assert settings.webhook_url == webhook_url


def test_the_command_refuses_a_public_url_without_a_scheme_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2A_RECEIVER_CONFIG", raising=False)
    args = ["receiver", "--agent", "http://127.0.0.1:9/", "--public-url", "receiver.example.com"]
    assert cli_main([*args, "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert "a2a-push: error: setting public_url (from --public-url): " in captured.err
    assert "receiver.example.com/webhooks/a2a" not in captured.out
    assert list(tmp_path.iterdir()) == []


def _receiver_on(port: int, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "receiver",
        "--agent",
        "http://127.0.0.1:9/",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--log-level",
        "ERROR",
    ]


def test_no_banner_when_the_port_is_taken(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            _receiver_on(port, tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode != 0
    assert "address already in use" in proc.stderr
    assert "receiver: webhooks at" not in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_busy_port_is_one_clear_line_and_writes_no_keys_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    """The port is taken: the command says so before it writes anything (the generated
    API keys file, the database), in one line naming the port and what to do."""
    import socket

    from receiver.cli import main

    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = _receiver_on(port, data_dir)[3:]  # the flags, without python -m receiver
        code = main([*argv, "--host", "127.0.0.1", "--workers", workers])
    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"python -m receiver: error: cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in lines[0]
    assert "--port" in lines[0] and "stop the process" in lines[0]
    assert "receiver: webhooks at" not in out
    assert not (data_dir / "api-keys.json").exists()
    assert not data_dir.exists()  # nor the database, nor the folder


def test_the_banner_comes_once_the_receiver_answers(tmp_path: Path) -> None:
    import signal
    import socket
    import threading
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        _receiver_on(port, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(60, proc.kill)  # a receiver that never prints: readline ends
    watchdog.start()
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert banner.startswith(f"receiver: webhooks at http://127.0.0.1:{port}/webhooks/a2a")
        # Printed after the bind and the store's opening: no retry needed.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        watchdog.cancel()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()


@pytest.mark.parametrize("field", ["url", "jwks_url"])
def test_an_agent_url_with_user_info_is_refused_without_echoing_it(field: str) -> None:
    """user:password@ in an agent URL would reach every client (agentUrl) and every
    message naming the URL; credentials go in `credentials`."""
    from receiver.settings import AgentSettings

    entry = {"url": "http://127.0.0.1:9/", field: "http://svc:S3cretPw@127.0.0.1:9/x"}
    with pytest.raises(ValueError) as caught:
        AgentSettings.model_validate(entry)
    text = str(caught.value)
    assert "user-info" in text and "credentials" in text
    assert "S3cretPw" not in text and "svc" not in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_workers_announce_once_and_go_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    """One banner for the receiver (not one per worker); and a supervisor killed with
    SIGKILL (it cannot forward a signal) leaves no workers behind serving the port."""
    import signal
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--workers", "2", "--port", str(port), "--agent", "http://127.0.0.1:9/"]
    argv += ["--data-dir", str(tmp_path), "--log-level", "ERROR"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "receiver", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # whatever happens, the test can stop the whole group
        # The killed supervisor cannot remove its metrics folder: let it be the test's.
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "receiver: webhooks at" in first and "2 workers" in first, first
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        workers = [int(pid) for pid in children]
        assert len(workers) == 2
        proc.kill()  # SIGKILL: no chance to forward anything
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their supervisor"
            time.sleep(0.1)
        # Nothing more was announced: the second worker printed no banner of its own.
        assert proc.stdout.read() == ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


# A process under a parent that is then killed with SIGKILL: it watches its parent with
# receiver.cli.watch_parent (no parent-death signal set), and either stops on SIGTERM
# as a worker's graceful stop does, or ignores it (a graceful stop that hangs).
_ORPHAN = """
import os, signal, sys, time
from receiver.cli import watch_parent
if sys.argv[1] == "hangs":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
watch_parent(os.getppid(), "a2a-receiver", signalled=False, grace=1.0)
print("watching", flush=True)
time.sleep(60)
print("outlived its parent", flush=True)
"""
_PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(60)
"""


@pytest.mark.parametrize("stop", ["stops", "hangs"])
def test_a_worker_whose_supervisor_is_gone_is_stopped_then_ended(stop: str) -> None:
    """The watch thread of a receiver worker: once the parent is gone it sends SIGTERM
    (the graceful stop); a worker still there a grace period later (here 1 s) says so in
    one line and exits, instead of serving the port for good."""
    import signal
    import time

    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, _ORPHAN, stop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None and parent.stderr is not None
        assert parent.stdout.readline() == "watching\n"
        parent.kill()
        parent.wait(timeout=10)
        killed = time.monotonic()
        # The orphan holds the pipes until it exits: their end is its end.
        rest, err = parent.communicate(timeout=20)
        took = time.monotonic() - killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
    assert rest == ""  # it never got to outlive its parent
    if stop == "stops":
        assert err == "" and took < 5  # SIGTERM's default: gone at once
    else:
        assert 1.0 <= took < 10
        assert err.splitlines() == [
            "a2a-receiver: error: the supervisor of this receiver worker has exited and "
            "the worker did not stop within 1 s; stopping it now"
        ]


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped (by init, once orphaned)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_agent_url_written_another_way_names_the_same_agent() -> None:
    """A client may write the agent's URL with its scheme or host in capitals, the default
    port spelled out, or a trailing slash: the same agent. The path is case-sensitive."""
    settings = load_settings(
        overrides={"agents": [{"url": "http://Agent.Example:80/a2a"}, {"url": "https://b.test"}]}
    )
    first, second = settings.agents
    for url in (
        "HTTP://agent.example/a2a",
        "http://AGENT.example:80/a2a/",
        "http://agent.example/a2a",
    ):
        assert settings.agent(url) is first, url
    assert settings.agent("https://B.TEST:443/") is second
    for url in (
        "http://agent.example/A2A",
        "http://agent.example:8080/a2a",
        "https://agent.example/a2a",
    ):
        assert settings.agent(url) is None, url


def test_a_port_shared_by_another_receivers_workers_counts_as_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers set SO_REUSEPORT to share their port: a second receiver with workers must
    not join them (it would take a share of the first one's webhooks and clients)."""
    import socket

    from receiver.cli import main

    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as a worker does
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = _receiver_on(port, tmp_path / "data")[3:]
        code = main([*argv, "--host", "127.0.0.1", "--workers", "2"])
    assert code == 1
    assert "address already in use" in capsys.readouterr().err
