"""Receiver configuration: a file (TOML or JSON), environment variables, then flags.

Every setting has one definition here; the loaders only say where values come from.
Environment variables are ``A2A_RECEIVER_<NAME>`` (``A2A_RECEIVER_PORT=8090``); lists are
comma-separated (``A2A_RECEIVER_AGENTS=http://a:1/,http://b:2/``), API keys are
``client:key`` pairs (``A2A_RECEIVER_API_KEYS=alice:k1,bob:k2``). ``A2A_RECEIVER_CONFIG``
names the config file when no ``--config`` is given.

A list of agent URLs from the environment or from flags replaces the file's ``agents``,
but an agent it names that the file also lists (same URL, trailing slash aside) keeps the
file's per-agent options (auth methods, credentials, JWKS URL, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from a2a_push.logs import LogFormat
from a2a_push.settings_files import SettingsError as SettingsError  # re-exported
from a2a_push.settings_files import (
    Sources,
    check_api_key,
    check_public_url,
    key_pairs,
    service_base_url,
)
from a2a_push.settings_files import check_database as check_db
from a2a_push.settings_files import read_config_file as read_config_file  # re-exported
from a2a_push.signing.keys import ALGORITHMS
from a2a_push.signing.standard_webhooks import is_standard_webhooks_secret

from .verify import (
    DEFAULT_FRESHNESS_SECONDS,
    AuthMethod,
    VerifyPolicy,
    allowed_methods,
    issuer_spellings,
)

ENV_PREFIX: Final = "A2A_RECEIVER_"
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8090
WEBHOOK_PATH: Final = "/webhooks/a2a"
CONFIG_ENV: Final = ENV_PREFIX + "CONFIG"
DEFAULT_LOG_LEVEL: Final = "INFO"
DEFAULT_DEDUP_RETENTION_HOURS: Final = 48.0

LogLevel: TypeAlias = Literal["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, hide_input_in_errors=True
    )


class AgentSettings(_Model):
    """One agent this receiver trusts."""

    url: str = Field(description="the agent's A2A JSON-RPC endpoint")
    auth: tuple[str, ...] = Field(
        default=("jwt",),
        description="methods its webhooks may use: jwt, token, standard-webhooks",
    )
    jwks_url: str | None = Field(
        default=None,
        description="where its JWK Set is; default: the agent card's push-signing "
        "extension, else <origin>/.well-known/jwks.json",
    )
    issuer: str | None = Field(
        default=None, description="the JWT iss; default: the agent URL or its origin"
    )
    algorithms: tuple[str, ...] = ALGORITHMS
    standard_webhooks_secrets: tuple[SecretStr, ...] = ()
    credentials: SecretStr | None = Field(
        default=None,
        description="Authorization header value for calls to the agent, e.g. 'Bearer abc'",
    )
    protocol_version: Literal["1.0", "0.3"] = "1.0"
    history_length: int | None = Field(default=None, ge=0)

    @field_validator("url", "jwks_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL (http://host[:port]/path)")
        if "@" in parts.netloc:
            # It would be shown to every client (agentUrl) and in messages; the password
            # is not repeated here.
            host = parts.netloc.rpartition("@")[2]
            raise ValueError(
                f"{parts.scheme}://***@{host}...: user-info ('user:password@') is not allowed "
                "in an agent URL; put the agent's credentials in `credentials` (an "
                "Authorization header value, e.g. 'Basic dXNlcjpwYXNz' or 'Bearer abc')"
            )
        return value

    @field_validator("auth")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(m.value for m in allowed_methods(value)))

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(ALGORITHMS))
        if unknown:
            raise ValueError(f"unsupported {unknown}; use any of {', '.join(ALGORITHMS)}")
        return value

    @model_validator(mode="after")
    def _usable_policy(self) -> AgentSettings:
        """What the receiver's verifier for this agent needs (an algorithm for jwt, a
        secret for standard-webhooks...), checked by building it now rather than as a
        crash at start."""
        VerifyPolicy(
            methods=self.methods,
            algorithms=self.algorithms,
            standard_webhooks_secrets=tuple(
                s.get_secret_value() for s in self.standard_webhooks_secrets
            ),
        )
        return self

    @field_validator("standard_webhooks_secrets")
    @classmethod
    def _secrets(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for secret in value:
            if not is_standard_webhooks_secret(secret.get_secret_value()):
                raise ValueError("a Standard Webhooks secret must start with 'whsec_'")
        return value

    @field_validator("credentials")
    @classmethod
    def _no_crlf(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and any(c in value.get_secret_value() for c in "\r\n"):
            raise ValueError("credentials must not contain CR or LF")
        return value

    @property
    def methods(self) -> frozenset[AuthMethod]:
        return allowed_methods(self.auth)

    @property
    def issuers(self) -> tuple[str, ...]:
        """The JWT ``iss`` values this agent's webhooks may carry: ``issuer``, else its
        URL and its origin; an origin-only one with or without a trailing slash
        (:func:`receiver.verify.issuer_spellings`)."""
        named = (self.issuer,) if self.issuer is not None else (self.url.rstrip("/"), self.origin)
        return tuple(dict.fromkeys(s for issuer in named for s in issuer_spellings(issuer)))

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of the agent URL, where its well-known documents live."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def key(self) -> str:
        """How the agent is named in storage: its URL without a trailing slash."""
        return self.url.rstrip("/")


class ClientKey(_Model):
    client_id: str = Field(min_length=1, max_length=128)
    api_key: SecretStr

    _long_enough = field_validator("api_key")(check_api_key)


class ReceiverSettings(_Model):
    """Everything the receiver can be told."""

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    public_url: str | None = Field(
        default=None,
        description="this receiver's URL as agents reach it (http(s)://host[:port][/path]); "
        "default http://host:port",
    )
    data_dir: Path = Path("receiver-data")
    database: str | None = Field(
        default=None,
        description="postgresql://… or a SQLite file (a path or sqlite:///path); "
        "default: receiver.db in data_dir",
    )
    agents: tuple[AgentSettings, ...] = ()
    api_keys: tuple[ClientKey, ...] = ()
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    freshness_seconds: int = Field(default=DEFAULT_FRESHNESS_SECONDS, ge=1)
    fetch_concurrency: int = Field(default=32, ge=1)
    fetch_timeout: float = Field(default=15.0, gt=0)
    fetch_attempts: int = Field(default=5, ge=1)
    fetch_min_interval_seconds: float = Field(
        default=1.0,
        ge=0,
        description="at most one GetTask per task per interval while its notifications keep "
        "coming; a terminal or input-required notification is fetched at once",
    )
    fetch_coalesce_seconds: float = Field(
        default=0.02, ge=0, description="how long notifications for a task gather before a fetch"
    )
    retention_days: float = Field(
        default=7.0,
        gt=0,
        description="subscriptions to tasks finished this long ago end; notifications "
        "(fetched or not), deleted subscriptions, superseded events and unsubscribed tasks "
        "are purged after this; a task whose GetTask keeps failing is given up on after this",
    )
    dedup_retention_hours: float = Field(
        default=DEFAULT_DEDUP_RETENTION_HOURS,
        gt=0,
        description="webhook ids are remembered this long, so a sender's late retry is "
        "still recognised as a duplicate (body hashes of senders that send no webhook id: "
        "one hour, so a repeated identical status is not lost)",
    )
    webhook_rate_limit: float = Field(
        default=0.0, ge=0, description="webhooks/s per agent before 429; 0 = unlimited"
    )
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    workers: int = Field(
        default=1,
        ge=1,
        description="processes serving on the port and sharing the store; up to one per core",
    )
    log_level: LogLevel = Field(default=DEFAULT_LOG_LEVEL, description="case-insensitive")
    access_log: bool = Field(default=False, description="log every HTTP request")
    log_format: LogFormat = Field(
        default="text", description="text, or json: one JSON object per line"
    )
    tracing: bool = Field(
        default=False,
        description="OpenTelemetry spans, exported with OTLP (needs the otel extra)",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    _public_url = field_validator("public_url")(check_public_url)

    @field_validator("database")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        return value and check_database(value)

    @property
    def base_url(self) -> str:
        return service_base_url(self.public_url, self.host, self.port)

    @property
    def webhook_url(self) -> str:
        return self.base_url + WEBHOOK_PATH

    @property
    def database_url(self) -> str:
        return self.database or str(self.data_dir / "receiver.db")

    def agent(self, url: str) -> AgentSettings | None:
        """The agent ``url`` names: its configured URL, or the same URL written another
        way (scheme and host in another case, the default port spelled out)."""
        key = url.rstrip("/")
        found = next((a for a in self.agents if a.key == key), None)
        if found is None:
            same = _comparable(key)
            found = next((a for a in self.agents if _comparable(a.key) == same), None)
        return found


def _comparable(url: str) -> str:
    """``url`` with what does not change where it points normalised: scheme and host in
    lower case, no default port, no trailing slash. (Not the path: it is case-sensitive.)"""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    scheme = parts.scheme.lower()
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), parts.query, ""))


def check_database(value: str) -> str:
    """``value`` if the receiver can open it (:func:`receiver.core.open_receiver_store`)."""
    return check_db(value, example="receiver.db", service="receiver")


def _agent_key(url: str) -> str:
    """How agent URLs are compared: without a trailing slash, as :attr:`AgentSettings.key`."""
    return url.strip().rstrip("/")


def _env_values(environ: Mapping[str, str], sources: Sources) -> None:
    """The settings given as ``A2A_RECEIVER_<NAME>``, except ``agents`` (a list of URLs)."""
    for name in ReceiverSettings.model_fields:
        variable = ENV_PREFIX + name.upper()
        raw = environ.get(variable)
        if raw is None or raw == "" or name == "agents":
            continue
        if name == "api_keys":
            sources.set(name, key_pairs(raw, variable, "client_id", "client"), f"from {variable}")
        else:
            sources.set(name, raw, f"from {variable}")


def _env_agent_urls(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get(ENV_PREFIX + "AGENTS") or ""
    return [u.strip() for u in raw.split(",") if u.strip()]


def _named_agents(urls: Sequence[str], configured: object) -> list[Any]:
    """The agents a list of URLs names, in its order and each once.

    An agent the config file also lists (same URL, trailing slash aside) keeps the file's
    entry, with its per-agent options; any other gets the defaults.
    """
    from_file: dict[str, Any] = {}
    if isinstance(configured, list):
        for entry in configured:
            if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                from_file.setdefault(_agent_key(entry["url"]), entry)
    out: list[Any] = []
    seen: set[str] = set()
    for url in urls:
        key = _agent_key(url)
        if key not in seen:
            seen.add(key)
            out.append(from_file.get(key, {"url": url}))
    return out


def load_settings(
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    extra_agents: Sequence[str] = (),
) -> ReceiverSettings:
    """Merge file < environment < flags (``overrides``) and validate, with clear errors.

    Without ``config_file``, ``A2A_RECEIVER_CONFIG`` names the file (if set). The agent
    list is the last one given: the flags' (``extra_agents``), else
    ``A2A_RECEIVER_AGENTS``, else the file's. A list from flags or the environment
    replaces the file's, but a URL it shares with the file keeps the file's per-agent
    options; a URL only it names gets the defaults.
    """
    env = os.environ if environ is None else environ
    if config_file is None and env.get(CONFIG_ENV):
        config_file = Path(env[CONFIG_ENV])
    sources = Sources()
    if config_file is not None:
        sources.add_file(config_file, read_config_file(config_file))
    if extra_agents:
        agents = _named_agents(extra_agents, sources.values.get("agents"))
        sources.set("agents", agents, "from --agent")
    elif _env_agent_urls(env):
        agents = _named_agents(_env_agent_urls(env), sources.values.get("agents"))
        sources.set("agents", agents, f"from {ENV_PREFIX}AGENTS")
    _env_values(env, sources)
    for name, value in (overrides or {}).items():
        if value is not None:
            sources.set(name, value, f"from --{name.replace('_', '-')}")
    return sources.validate(ReceiverSettings, "receiver")
