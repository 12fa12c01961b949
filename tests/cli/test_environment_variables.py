"""Variables with our prefixes that nothing reads: a misspelt name is not ignored."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import a2a_push
import receiver
from a2a_push.cli import main as cli_main
from a2a_push.cli.common import KNOWN_VARIABLES
from a2a_push.gateway.settings import ENV_PREFIX as GATEWAY_PREFIX
from a2a_push.gateway.settings import GatewaySettings
from receiver.settings import ENV_PREFIX as RECEIVER_PREFIX
from receiver.settings import ReceiverSettings

AGENT_KEY = "agent-key-0123456789"


def test_a_misspelt_gateway_variable_stops_the_gateway(tmp_path: Path) -> None:
    env = {**os.environ, "A2A_GATEWAY_PUBLICURL": "https://gw.example"}
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_push", "gateway", "--agent-key", f"a:{AGENT_KEY}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "a2a-push: error: unknown environment variable A2A_GATEWAY_PUBLICURL; "
        "did you mean A2A_GATEWAY_PUBLIC_URL?\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_an_unknown_receiver_variable_stops_the_receiver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("A2A_RECEIVER_AGENT", "http://127.0.0.1:9000/")
    assert cli_main(["receiver", "--port", "0"]) == 2
    assert "unknown environment variable A2A_RECEIVER_AGENT; did you mean A2A_RECEIVER_AGENTS?" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("A2A_RECEIVER_AGENT")
    monkeypatch.setenv("A2A_RECEIVER_ZZZ", "1")
    assert cli_main(["receiver", "--agent", "http://127.0.0.1:9000/", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "unknown environment variable A2A_RECEIVER_ZZZ; the receiver reads " in err
    assert "unset it or correct its name" in err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_push_variable_is_a_note_not_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_PUSH_DATABSE", "outbox.db")
    assert cli_main(["version"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "note: unknown environment variable A2A_PUSH_DATABSE; did you mean A2A_PUSH_DATABASE?\n"
    )
    assert captured.out.startswith("a2a-push ")


def test_every_variable_the_code_names_is_a_setting_or_registered() -> None:
    """A variable read anywhere must be in KNOWN_VARIABLES (or be a setting), or the
    services would refuse to start with it set."""
    settings = {GATEWAY_PREFIX + f.upper() for f in GatewaySettings.model_fields}
    settings |= {RECEIVER_PREFIX + f.upper() for f in ReceiverSettings.model_fields}
    literal = re.compile(r"""["'](A2A_(?:PUSH|GATEWAY|RECEIVER)_[A-Z0-9_]*[A-Z0-9])["']""")
    found: set[str] = set()
    for package in (a2a_push, receiver):
        for path in Path(package.__file__).parent.rglob("*.py"):
            found |= set(literal.findall(path.read_text("utf-8")))
    root = Path(a2a_push.__file__).parents[1]
    for folder in ("tests", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            found |= {
                name
                for name in literal.findall(path.read_text("utf-8"))
                if name.endswith("_DSN")  # what the suite reads, not what it sets
            }
    assert found - settings - set(KNOWN_VARIABLES) == set()
    assert set(KNOWN_VARIABLES) & settings == set()
