"""Receiver settings: file < environment < flags, with errors that name the setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert settings.agents[1].issuers == ("http://agent-b.test/rpc", "http://agent-b.test")


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
    with pytest.raises(SettingsError, match=r"invalid receiver settings|client:key") as err:
        load_settings(environ=environ)
    assert expected in str(err.value)


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
    assert "agents.0.url" in proc.stderr and "http(s) URL" in proc.stderr


def test_several_workers_share_the_port_and_stop_together(tmp_path: Path) -> None:
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "receiver",
            "--workers",
            "2",
            "--port",
            str(port),
            "--agent",
            "http://127.0.0.1:9/",
            "--data-dir",
            str(tmp_path),
            "--log-level",
            "ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
