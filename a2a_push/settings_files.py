"""Loading service settings: config files, environment pairs, validation messages.

Shared by the gateway and the receiver, so both read the same file formats and report a
bad value the same way (the setting's path, then what is wrong).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError

from .store import is_postgres_url

MIN_API_KEY_LENGTH = 16


class SettingsError(ValueError):
    """The configuration is invalid; the message names the setting and what to do."""


def read_config_file(path: Path) -> dict[str, Any]:
    """A TOML (``.toml``) or JSON config file as a dict."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise SettingsError(f"config file {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: the top level must be a table/object")
    return data


def key_pairs(raw: str, where: str, name_field: str, owner: str) -> list[dict[str, str]]:
    """``a:k1,b:k2`` (an environment variable) as ``[{name_field: a, "api_key": k1}, ...]``."""
    out: list[dict[str, str]] = []
    for pair in raw.split(","):
        name, sep, key = pair.strip().partition(":")
        if not sep or not name or not key:
            # Never echo the pair: it may hold a key (with the separator mistyped).
            raise SettingsError(
                f"{where}: expected comma-separated {owner}:key pairs; "
                f"pair {len(out) + 1} is not one"
            )
        out.append({name_field: name, "api_key": key})
    return out


def check_api_key(value: SecretStr) -> SecretStr:
    """A pydantic field check: API keys must be long enough to be guessed by no one."""
    if len(value.get_secret_value()) < MIN_API_KEY_LENGTH:
        raise ValueError(f"an API key needs at least {MIN_API_KEY_LENGTH} characters")
    return value


def check_public_url(value: str | None) -> str | None:
    """A pydantic field check: a service's public URL is an absolute http(s) URL with a
    host, and no query or fragment (paths are appended to it; it is the JWT issuer, the
    JWKS location or the webhook URL that others call). Empty means the default."""
    if not value:
        return value
    try:
        parts = urlsplit(value)
        port = parts.port  # a ValueError for a port outside 0-65535
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == 0
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            f"{value!r} is not an absolute http(s) URL with a host, as others reach this "
            "service: https://host[:port][/path], no query or fragment"
        )
    return value


def check_database(value: str, *, example: str, service: str) -> str:
    """``value`` if a service can keep its data there: ``postgresql://`` /
    ``postgres://``, ``sqlite:///path`` or a file path (``example``: a file name for the
    messages); any other ``scheme://`` would be taken for a file name."""
    if is_postgres_url(value):
        return value
    if value.startswith("sqlite://"):
        if not value.startswith("sqlite:///") or value == "sqlite:///":
            raise ValueError(
                f"a sqlite URL needs a file path: sqlite:///relative/{example} "
                f"or sqlite:////absolute/{example}"
            )
        return value
    if "://" in value or value == ":memory:":
        raise ValueError(
            f"postgresql://user@host/db, sqlite:///path/{example} or a file path (the "
            f"{service} keeps its data in a database: memory:// and other schemes are not "
            "supported)"
        )
    return value


def describe(exc: ValidationError, what: str) -> SettingsError:
    """One error naming every invalid setting by its path."""
    problems = "; ".join(_problem(err) for err in exc.errors())
    return SettingsError(f"invalid {what} settings: {problems}")


def _problem(err: Any) -> str:
    # pydantic prefixes the messages of our own checks with "Value error, ".
    message = str(err["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {message}" if where else message


def service_base_url(public_url: str | None, host: str, port: int) -> str:
    """A service's own URL: ``public_url`` when set, else ``http://host:port`` (an IPv6
    host in brackets)."""
    if public_url:
        return public_url.rstrip("/")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
