"""Loading service settings: config files, environment pairs, validation messages.

Shared by the gateway and the receiver, so both read the same file formats and report a
bad value the same way (the setting's path, then what is wrong).
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, SecretStr, ValidationError

from .store import is_postgres_url, shown_database

MIN_API_KEY_LENGTH = 16


class SettingsError(ValueError):
    """The configuration is invalid; the message names the setting and what to do."""


_FORMATS: Final = {".toml": "TOML", ".json": "JSON"}


def read_config_file(path: Path) -> dict[str, Any]:
    """A TOML (``.toml``) or JSON config file as a dict; any other extension is read as
    JSON, and a parse error then says so and how to name the file."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise SettingsError(f"config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(f"config file {path}: not UTF-8 text ({exc.reason})") from None
    kind = _FORMATS.get(path.suffix.lower())
    try:
        data = tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        if kind is None:
            raise SettingsError(
                f"config file {path} was read as JSON, since its extension is not .toml "
                f"(.toml and .json are supported), and is not valid JSON: {exc}; if it is "
                f"TOML, rename it to {path.with_suffix('.toml').name}, else fix the JSON "
                f"(and name it {path.with_suffix('.json').name})"
            ) from None
        raise SettingsError(f"config file {path} is not valid {kind}: {exc}") from None
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
            "not an absolute http(s) URL with a host, as others reach this "
            "service: https://host[:port][/path], no query or fragment"
        )
    if "@" in parts.netloc:
        # Others are given this URL (the JWT issuer, the JWKS or webhook location): a
        # password in it would be handed to every one of them.
        raise ValueError(
            "a user name or password ('user:password@') is not allowed in a public URL: "
            "everyone this service talks to is given it; remove it "
            "(https://host[:port][/path])"
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


_M = TypeVar("_M", bound=BaseModel)


class Sources:
    """Where each top-level setting's value came from, for messages: ``from FILE``,
    ``from A2A_..._NAME`` or ``from --flag`` (the last source given wins, as values do)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}

    def add_file(self, path: Path, data: Mapping[str, Any]) -> None:
        for name, value in data.items():
            self.set(name, value, f"from {path}")

    def set(self, name: str, value: Any, origin: str) -> None:
        self.values[name] = value
        self.origin[name] = origin

    def validate(self, model: type[_M], what: str) -> _M:
        """``model`` from the values gathered; a :class:`SettingsError` with one line per
        problem (see :func:`describe`)."""
        try:
            return model.model_validate(self.values)
        except ValidationError as exc:
            raise describe(exc, what, model=model, sources=self) from None


# Settings whose values are never shown: keys, tokens, secrets (at any depth).
SECRET_SETTINGS: Final = frozenset(
    {
        "api_key",
        "api_keys",
        "admin_keys",
        "encryption_keys",
        "credentials",
        "standard_webhooks_secrets",
    }
)
# What one entry of a list-of-tables setting is called, for "write [[agents]] for each agent".
_ENTRY_NOUNS: Final = {"agents": "agent", "api_keys": "client"}


def describe(
    exc: ValidationError,
    what: str,
    *,
    model: type[BaseModel] | None = None,
    sources: Sources | None = None,
) -> SettingsError:
    """One error, one line per invalid setting: ``setting NAME (from WHERE): what is
    wrong; got VALUE`` (secrets never shown); an unknown key says which was meant."""
    lines = [_problem(err, what, model, sources) for err in exc.errors()]
    return SettingsError("\n".join(dict.fromkeys(lines)))


def _problem(err: Any, what: str, model: type[BaseModel] | None, sources: Sources | None) -> str:
    loc = tuple(err["loc"])
    name = _dotted(loc)
    origin = sources.origin.get(str(loc[0])) if sources is not None and loc else None
    if err["type"] == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        where = origin.removeprefix("from ") if origin else "the settings"
        line = f"unknown {what} setting {name} in {where}"
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        if close:
            return f"{line}; did you mean {_dotted((*loc[:-1], close[0]))}?"
        return f"{line}; the settings there are: {', '.join(known)}" if known else line
    # pydantic prefixes the messages of our own checks with "Value error, ".
    message = str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    if err["type"] in ("tuple_type", "list_type") and isinstance(value, dict) and loc:
        noun = _ENTRY_NOUNS.get(str(loc[-1]), "entry")
        message = (
            f"{name} must be an array of tables: write [[{name}]] for each {noun} "
            "(in JSON: a list of objects)"
        )
    if not loc:
        return f"invalid {what} settings: {message}"
    line = f"setting {name}{f' ({origin})' if origin else ''}: {message}"
    shown = _shown_value(loc, value)
    return f"{line}; got {shown}" if shown is not None else line


def _dotted(loc: tuple[Any, ...]) -> str:
    """``agents[0].url`` for the location ``("agents", 0, "url")``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f"{'.' if out else ''}{part}"
    return out


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The setting names of the (nested) model at ``loc``; [] when not known."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # an entry of a list: its model is the item type found below
        field = current.model_fields.get(part) if _is_model(current) else None
        if field is None:
            return []
        current = next(
            (
                t
                for t in (field.annotation, *getattr(field.annotation, "__args__", ()))
                if _is_model(t)
            ),
            None,
        )
    return list(current.model_fields) if _is_model(current) else []


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


_LONGEST_SHOWN: Final = 200


def _shown_value(loc: tuple[Any, ...], value: Any) -> str | None:
    """``value`` for a message: None for a secret, a table or a list (which may hold
    one); a URL without its password."""
    if any(part in SECRET_SETTINGS for part in loc):
        return None
    if isinstance(value, str):
        try:
            shown = shown_database(value)
        except ValueError:  # not a URL that parses: shown if it holds no password
            if "@" in value:
                return None
            shown = value
        return repr(shown if len(shown) <= _LONGEST_SHOWN else shown[:_LONGEST_SHOWN] + "…")
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    return None


_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([smhd]?)\s*$")
_UNIT_SECONDS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_seconds(value: Any) -> float:
    """A positive duration in seconds, from a number (seconds) or a string such as
    ``90``, ``90s``, ``5m``, ``1.5h`` or ``7d``; ``ValueError`` saying how to write one."""
    if isinstance(value, bool):
        seconds = math.nan
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.match(value.lower())):
        seconds = float(found.group(1)) * _UNIT_SECONDS[found.group(2)]
    else:
        raise ValueError(
            f"{str(value)[:50]!r} is not a duration: write seconds (90) or a number with "
            "a unit, s, m, h or d (90s, 5m, 2h, 7d)"
        )
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{value!r}: a duration must be a positive number of seconds")
    return seconds


def service_base_url(public_url: str | None, host: str, port: int) -> str:
    """A service's own URL: ``public_url`` when set, else ``http://host:port`` (an IPv6
    host in brackets)."""
    if public_url:
        return public_url.rstrip("/")
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
