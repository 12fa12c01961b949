"""Settings mistakes of the gateway and the receiver: each message names the setting,
where its value came from, the value (never a secret) and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_push.cli import main as cli_main
from a2a_push.gateway.settings import GatewaySettingsError, load_gateway_settings
from receiver.settings import SettingsError, load_settings

AGENT_KEY = "agent-key-0123456789"


def _gateway_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    for name in ("A2A_GATEWAY_AGENTS", "A2A_GATEWAY_PUBLIC_URL", "A2A_GATEWAY_DATABASE"):
        monkeypatch.delenv(name, raising=False)
    assert cli_main(["gateway", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert all(line.startswith("a2a-push: error: ") for line in lines), lines
    return [line.removeprefix("a2a-push: error: ") for line in lines]


def test_agents_written_as_one_table_says_to_write_an_array_of_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(f'[agents]\nid = "a"\napi_key = "{AGENT_KEY}"\n')
    assert _gateway_errors(capsys, ["--config", str(config)], monkeypatch) == [
        f"setting agents (from {config}): agents must be an array of tables: write "
        "[[agents]] for each agent (in JSON: a list of objects)"
    ]
    receiver_config = tmp_path / "r.toml"
    receiver_config.write_text('[agents]\nurl = "http://127.0.0.1:9000/"\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(config_file=receiver_config, environ={})
    assert "write [[agents]] for each agent" in str(caught.value)


def test_a_misspelt_key_is_named_with_the_one_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        'publc_url = "https://gw.example"\n'
        f'[[agents]]\nid = "a"\napi_key = "{AGENT_KEY}"\nkey_id = "x"\n'
    )
    errors = _gateway_errors(capsys, ["--config", str(config)], monkeypatch)
    assert f"unknown gateway setting publc_url in {config}; did you mean public_url?" in errors
    # Nothing close: the keys that are allowed there.
    assert (
        f"unknown gateway setting agents[0].key_id in {config}; the settings there are: id, api_key"
    ) in errors
    receiver_config = tmp_path / "r.toml"
    receiver_config.write_text('[[agents]]\nurl = "http://127.0.0.1:9000/"\njwks_ur = "x"\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(config_file=receiver_config, environ={})
    assert str(caught.value) == (
        f"unknown receiver setting agents[0].jwks_ur in {receiver_config}; "
        "did you mean agents[0].jwks_url?"
    )


def test_a_file_of_another_extension_is_read_as_json_and_the_error_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gw.conf"
    config.write_text('port = 8081\n[[agents]]\nid = "a"\n')
    [error] = _gateway_errors(capsys, ["--config", str(config)], monkeypatch)
    assert error.startswith(
        f"config file {config} was read as JSON, since its extension is not .toml "
        "(.toml and .json are supported), and is not valid JSON: Expecting value: "
        "line 1 column 1"
    )
    assert error.endswith(
        "if it is TOML, rename it to gw.toml, else fix the JSON (and name it gw.json)"
    )


def test_a_toml_syntax_error_gives_its_line_and_column(tmp_path: Path) -> None:
    config = tmp_path / "r.toml"
    config.write_text('port = 8091\nhost = "127.0.0.1\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(config_file=config, environ={})
    assert str(caught.value).startswith(f"config file {config} is not valid TOML: ")
    assert "line 2" in str(caught.value)


def test_each_bad_value_is_one_line_naming_its_source_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(f'port = "eighty"\n[[agents]]\nid = "a b"\napi_key = "{AGENT_KEY}"\n')
    monkeypatch.setenv("A2A_GATEWAY_LEASE_SECONDS", "-1")
    monkeypatch.setenv("A2A_GATEWAY_ADMIN_KEYS", "short-secret")
    errors = _gateway_errors(
        capsys,
        ["--config", str(config), "--database", "mysql://root:hunter2hunter2@db/x"],
        monkeypatch,
    )
    assert errors == [
        f"setting port (from {config}): Input should be a valid integer, unable to parse "
        "string as an integer; got 'eighty'",
        "setting database (from --database): postgresql://user@host/db, "
        "sqlite:///path/outbox.db or a file path (the gateway keeps its data in a database: "
        "memory:// and other schemes are not supported); got 'mysql://root:***@db/x'",
        f"setting agents[0].id (from {config}): String should match pattern "
        "'^[A-Za-z0-9._-]+$'; got 'a b'",
        # A key is never shown, even a wrong one.
        "setting admin_keys (from A2A_GATEWAY_ADMIN_KEYS): an API key needs at least 16 characters",
        "setting lease_seconds (from A2A_GATEWAY_LEASE_SECONDS): Input should be greater "
        "than 0; got '-1'",
    ]


def test_a_public_url_with_a_user_or_password_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--agent-key", f"a:{AGENT_KEY}", "--public-url", "https://ops:pa55word@gw.example/"]
    [error] = _gateway_errors(capsys, argv, monkeypatch)
    assert error == (
        "setting public_url (from --public-url): a user name or password "
        "('user:password@') is not allowed in a public URL: everyone this service talks to "
        "is given it; remove it (https://host[:port][/path]); got 'https://ops:***@gw.example/'"
    )
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={"A2A_RECEIVER_PUBLIC_URL": "http://me:pw@r.example"})
    assert "setting public_url (from A2A_RECEIVER_PUBLIC_URL): a user name" in str(caught.value)
    assert "pw@" not in str(caught.value)
    with pytest.raises(GatewaySettingsError, match="not allowed in a public URL"):
        load_gateway_settings(environ={}, overrides={"public_url": "https://u@gw.example"})
