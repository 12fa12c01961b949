"""Gateway configuration: a file (TOML or JSON), ``A2A_GATEWAY_*`` variables, then flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from a2a_push.delivery.dispatcher import DispatcherOptions, longest_claim
from a2a_push.delivery.ratelimit import RateLimits
from a2a_push.delivery.retry import DEFAULT_SCHEDULE, RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.errors import InvalidConfigError
from a2a_push.logs import LogFormat
from a2a_push.settings_files import (
    SettingsError,
    Sources,
    check_api_key,
    check_database,
    check_public_url,
    duration_seconds,
    key_pairs,
    read_config_file,
    service_base_url,
)
from a2a_push.signing import standard_webhooks as stdwh
from a2a_push.store import is_postgres_url
from a2a_push.store.secrets import SecretBox

ENV_PREFIX: Final = "A2A_GATEWAY_"
DEFAULT_PORT: Final = 8080


class GatewaySettingsError(SettingsError):
    """The gateway's configuration is invalid; the message names the setting."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class AgentKey(_Model):
    """An agent allowed to post events, and the API key it authenticates with."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    api_key: SecretStr

    _long_enough = field_validator("api_key")(check_api_key)


class GatewaySettings(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    public_url: str | None = Field(
        default=None, description="the gateway's base URL: JWT issuer, JWKS location"
    )
    database: str = Field(
        default="", description="postgresql://… or a SQLite file; default DATA_DIR/outbox.db"
    )
    data_dir: Path = Path("gateway-data")
    agents: tuple[AgentKey, ...] = ()
    admin_keys: tuple[SecretStr, ...] = ()
    encryption_keys: tuple[SecretStr, ...] = ()
    allow_webhook_hosts: tuple[str, ...] = ()
    operator_url: str | None = Field(
        default=None,
        description="where operational events go as signed webhooks (docs/events.md)",
    )
    operator_token: SecretStr | None = Field(
        default=None,
        description="sent with each operational event: a whsec_ secret signs it (Standard "
        "Webhooks), any other token goes in X-A2A-Notification-Token",
    )
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    key_reload_interval: float = Field(default=10.0, gt=0)
    lease_seconds: float = Field(
        default=120.0, gt=0, description="how long a replica's claim lasts if it dies"
    )
    request_timeout: float = Field(default=15.0, gt=0, description="per webhook request")
    quick_attempts: int = Field(default=3, ge=1, description="in-process tries before rescheduling")
    attempt_history: bool = Field(
        default=True,
        description="record every HTTP attempt of every delivery (the admin API's "
        "/admin/deliveries/{id}/attempts); false records none",
    )
    retry_schedule: tuple[float, ...] = Field(
        default=DEFAULT_SCHEDULE,
        description="seconds before each durable retry (after the quick attempts); the "
        "delivery is dead-lettered once they are used up",
    )
    max_delivery_age: float | None = Field(
        default=None,
        description="a failing delivery is retried until it is this old (seconds since "
        "its publish), then dead-lettered; unset: until the retry schedule is used up",
    )
    max_in_flight_per_endpoint: int = Field(
        default=DispatcherOptions().per_endpoint,
        ge=1,
        le=DispatcherOptions().concurrency,
        description="requests in flight to one endpoint (scheme://host:port) at most, per replica",
    )
    rate_limit: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="requests per second to each endpoint at most, all replicas together; "
        "unset: no limit",
    )
    endpoint_rate_limits: dict[str, float] = Field(
        default_factory=dict,
        description="requests per second to particular endpoints (origin -> limit), "
        "overriding rate_limit",
    )
    log_format: LogFormat = Field(
        default="text", description="text, or json: one JSON object per line"
    )
    tracing: bool = Field(
        default=False,
        description="OpenTelemetry spans, exported with OTLP (needs the otel extra)",
    )
    task_retention_days: float | None = Field(
        default=7.0,
        ge=0,
        allow_inf_nan=False,
        description="a finished task's owner and last status are forgotten this long after "
        "its last event; 0 or null keeps them for ever",
    )

    @model_validator(mode="after")
    def _claims_end_before_their_lease(self) -> GatewaySettings:
        # As the notifier checks (a claim outliving its lease could be sent twice), but
        # in the gateway's own terms.
        quick_pause = RetryPolicy().quick_retry_after_max
        longest = longest_claim(
            lease_seconds=self.lease_seconds,
            quick_attempts=self.quick_attempts,
            total_timeout=self.request_timeout,
            quick_pause=quick_pause,
        )
        if self.lease_seconds <= longest:
            raise ValueError(
                f"lease_seconds ({self.lease_seconds:g}) must be longer than one claim can "
                f"take: quick_attempts x (request_timeout + {quick_pause:g}) + "
                f"lease_seconds / 4 = {longest:g} s; raise lease_seconds (to more than "
                f"{4 / 3 * self.quick_attempts * (self.request_timeout + quick_pause):g}) "
                "or lower request_timeout or quick_attempts"
            )
        return self

    _public_url = field_validator("public_url")(check_public_url)

    @field_validator("retry_schedule", mode="before")
    @classmethod
    def _schedule(cls, value: Any) -> tuple[float, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ValueError("a list of durations, e.g. 5s,5m,30m,2h (or [5, 300, 1800])")
        delays = tuple(
            duration_seconds(item.strip() if isinstance(item, str) else item) for item in items
        )
        if not delays:
            raise ValueError("at least one delay, e.g. 5s,5m,30m,2h")
        return delays

    @field_validator("max_delivery_age", mode="before")
    @classmethod
    def _max_age(cls, value: Any) -> float | None:
        return None if value is None else duration_seconds(value)

    @field_validator("endpoint_rate_limits", mode="before")
    @classmethod
    def _endpoint_limits(cls, value: Any) -> dict[str, float]:
        if isinstance(value, str | list | tuple):
            pairs = value.split(",") if isinstance(value, str) else value
            parsed: dict[str, float] = {}
            for pair in pairs:
                origin, sep, rate = str(pair).strip().rpartition("=")
                if not sep or not origin:
                    raise ValueError(
                        f"{str(pair)[:100]!r}: write ORIGIN=REQUESTS_PER_SECOND, e.g. "
                        "https://hooks.example.com=5"
                    )
                try:
                    parsed[origin] = float(rate)
                except ValueError:
                    raise ValueError(
                        f"{origin}: {rate[:50]!r} is not a number of requests per second"
                    ) from None
            value = parsed
        if not isinstance(value, dict):
            raise ValueError("a table of origin = requests per second")
        return dict(RateLimits(endpoints=value).endpoints)  # a ValueError naming the entry

    @field_validator("admin_keys")
    @classmethod
    def _admin_keys_long_enough(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for key in value:
            check_api_key(key)
        return value

    @field_validator("encryption_keys")
    @classmethod
    def _fernet_keys(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        try:
            SecretBox([k.get_secret_value() for k in value])
        except ValueError:
            raise ValueError(
                "each key must be a Fernet key (32 url-safe base64-encoded bytes); make one "
                "with: a2a-push store generate-key"
            ) from None
        return value

    @field_validator("allow_webhook_hosts")
    @classmethod
    def _allowlist(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        AddressPolicy(value)  # a ValueError naming the bad entry
        return value

    @field_validator("operator_url")
    @classmethod
    def _operator_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if not value:
            return None
        hosts = info.data.get("allow_webhook_hosts", ())
        try:  # checked as any webhook URL is (syntax, SSRF policy)
            AddressPolicy(list(hosts)).validate_url(value, "operator_url")
        except InvalidConfigError as exc:
            raise ValueError(exc.message) from None
        return value

    @field_validator("operator_token")
    @classmethod
    def _operator_token(cls, value: SecretStr | None) -> SecretStr | None:
        secret = value.get_secret_value() if value is not None else ""
        if not secret:
            return None
        try:  # checked as any push config's token is
            stdwh.check_secret(secret)
        except InvalidConfigError as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _operator_token_needs_url(self) -> GatewaySettings:
        if self.operator_token is not None and self.operator_url is None:
            raise ValueError("operator_token is set without an operator_url to send it to")
        return self

    @field_validator("agents")
    @classmethod
    def _distinct_agents(cls, value: tuple[AgentKey, ...]) -> tuple[AgentKey, ...]:
        ids = [a.id for a in value]
        if len(set(ids)) != len(ids):
            raise ValueError("each agent id may appear once")
        keys = [a.api_key.get_secret_value() for a in value]
        if len(set(keys)) != len(keys):
            raise ValueError("two agents share an API key; give each agent its own")
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        return value and check_database(value, example="outbox.db", service="gateway")

    @property
    def rate_limits(self) -> RateLimits:
        return RateLimits(self.rate_limit, self.endpoint_rate_limits)

    @property
    def task_retention_seconds(self) -> float | None:
        """``task_retention_days`` in seconds; None: finished tasks are kept for ever."""
        days = self.task_retention_days
        return None if not days else days * 86400.0

    @property
    def base_url(self) -> str:
        return service_base_url(self.public_url, self.host, self.port)

    @property
    def database_url(self) -> str:
        return self.database or str(self.data_dir / "outbox.db")

    @property
    def is_postgres(self) -> bool:
        return is_postgres_url(self.database_url)


# The flag that sets a setting, where it is not ``--`` and the name with dashes.
FLAGS: Final = {
    "agents": "--agent-key",
    "admin_keys": "--admin-key",
    "allow_webhook_hosts": "--allow-webhook-host",
    "endpoint_rate_limits": "--endpoint-rate-limit",
}


def load_gateway_settings(
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> GatewaySettings:
    """Merge file < environment < flags and validate, with messages naming the setting
    and where its value came from."""
    sources = Sources()
    try:
        if config_file is not None:
            sources.add_file(config_file, read_config_file(config_file))
        env = os.environ if environ is None else environ
        for name in GatewaySettings.model_fields:
            variable = ENV_PREFIX + name.upper()
            raw = env.get(variable)
            if not raw:
                continue
            if name == "agents":
                value: Any = key_pairs(raw, variable, "id", "agent")
            elif name in ("admin_keys", "encryption_keys", "allow_webhook_hosts"):
                value = [v.strip() for v in raw.split(",") if v.strip()]
            else:
                value = raw
            sources.set(name, value, f"from {variable}")
    except SettingsError as exc:
        raise GatewaySettingsError(str(exc)) from None
    for name, value in (overrides or {}).items():
        if value not in (None, [], ()):
            flag = FLAGS.get(name, "--" + name.replace("_", "-"))
            sources.set(name, value, f"from {flag}")
    try:
        return sources.validate(GatewaySettings, "gateway")
    except SettingsError as exc:
        raise GatewaySettingsError(str(exc)) from None
