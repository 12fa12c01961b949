"""``a2a-push gateway``: run the gateway service; key rotation in its database."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import socket
import stat
import sys
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from a2a_push import logs
from a2a_push.cli.common import print_error, start_logging, unknown_variable
from a2a_push.errors import StoreUnavailableError
from a2a_push.events import key_rotated, queue_for_operator
from a2a_push.httputil import run_app
from a2a_push.listen import CannotListen, bind_sockets
from a2a_push.settings_files import SettingsError, read_config_file
from a2a_push.signing.keys import Algorithm, KeyStoreError
from a2a_push.store import StoreOptions, open_store

from .settings import (
    DEFAULT_PORT,
    ENV_PREFIX,
    GatewaySettings,
    GatewaySettingsError,
    load_gateway_settings,
)
from .state import open_gateway_state

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="a TOML or JSON config file")
    parser.add_argument("--host", help="listen address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"listen port (default: {DEFAULT_PORT})")
    parser.add_argument(
        "--database",
        metavar="DB",
        help="postgresql://user@host/db (replicas share it) or a SQLite file "
        "(default: DATA_DIR/outbox.db)",
    )
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="default: ./gateway-data")
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the gateway's base URL: JWT issuer (default: http://HOST:PORT)",
    )
    parser.add_argument(
        "--agent-key",
        action="append",
        default=[],
        metavar="AGENT:KEY",
        help=f"an agent id and its API key (repeat; or {ENV_PREFIX}AGENTS=a:k,b:k)",
    )
    parser.add_argument(
        "--admin-key", action="append", default=[], metavar="KEY", help="an admin API key (repeat)"
    )
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        help="let webhooks go to this private host/IP/CIDR (e.g. 127.0.0.1)",
    )
    policy = parser.add_argument_group(
        "delivery policy", "how deliveries are retried and paced (see docs/operations.md)"
    )
    policy.add_argument(
        "--retry-schedule",
        metavar="DELAYS",
        help="the waits before each durable retry, e.g. 5s,5m,30m,2h "
        "(default: 5s,5m,30m,2h,5h,10h,10h)",
    )
    policy.add_argument(
        "--max-delivery-age",
        metavar="DURATION",
        help="dead-letter a failing delivery once it is this old, e.g. 1d (default: none)",
    )
    policy.add_argument(
        "--max-in-flight-per-endpoint",
        type=int,
        metavar="N",
        help="requests in flight to one endpoint at most, per replica (default: 16)",
    )
    policy.add_argument(
        "--rate-limit",
        type=float,
        metavar="RPS",
        help="requests per second to each endpoint at most, all replicas together (default: none)",
    )
    policy.add_argument(
        "--endpoint-rate-limit",
        action="append",
        default=[],
        metavar="ORIGIN=RPS",
        help="requests per second to one endpoint, e.g. https://hooks.example.com=5 "
        "(repeat; overrides --rate-limit for it)",
    )
    parser.add_argument(
        "--operator-url",
        metavar="URL",
        help="send operational events (config disabled, dead letters, breakers, key "
        "rotations) here as signed webhooks (docs/events.md)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=_log_level,
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (default: INFO)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="log every HTTP request (off by default: one line per webhook adds up)",
    )
    logs.add_arguments(parser)


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(value: str) -> str:
    level = value.strip().upper()
    if level not in _LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{value!r}: use one of {', '.join(_LOG_LEVELS)}")
    return level


def _settings(args: argparse.Namespace) -> Any:
    agents = []
    for pair in args.agent_key:
        agent, sep, key = pair.partition(":")
        if not sep or not agent or not key:
            # Never echo the value: it may be a key (with the separator mistyped).
            raise GatewaySettingsError(
                "--agent-key: expected AGENT:KEY (an agent id, a colon, its API key)"
            )
        agents.append({"id": agent, "api_key": key})
    return load_gateway_settings(
        config_file=args.config,
        overrides={
            "host": args.host,
            "port": args.port,
            "database": args.database,
            "data_dir": args.data_dir,
            "public_url": args.public_url,
            "agents": agents,
            "admin_keys": args.admin_key,
            "allow_webhook_hosts": args.allow_webhook_host,
            "operator_url": args.operator_url,
            "retry_schedule": args.retry_schedule,
            "max_delivery_age": args.max_delivery_age,
            "max_in_flight_per_endpoint": args.max_in_flight_per_endpoint,
            "rate_limit": args.rate_limit,
            "endpoint_rate_limits": args.endpoint_rate_limit,
            "log_format": args.log_format,
            "tracing": args.tracing,
        },
    )


def run(args: argparse.Namespace) -> int:
    unknown = unknown_variable(ENV_PREFIX, GatewaySettings.model_fields, "gateway")
    if unknown is not None:
        print_error(unknown)
        return 2
    try:
        settings = _settings(args)
    except GatewaySettingsError as exc:
        print_error(str(exc))
        return 2
    if not settings.agents:
        print(
            "a2a-push: error: no agents configured; pass --agent-key AGENT:KEY, set "
            f"{ENV_PREFIX}AGENTS, or list them in a --config file",
            file=sys.stderr,
        )
        return 2
    if not start_logging(
        str(args.log_level).upper(),
        settings.log_format,
        tracing_on=settings.tracing,
        service="a2a-push-gateway",
        tracing_setting=f"tracing (--tracing, {ENV_PREFIX}TRACING)",
    ):
        return 2
    if args.config is not None:
        _warn_if_others_can_read(args.config)
    # Bound before anything else: a port that is taken stops the command before it
    # opens the database (a second process on a SQLite outbox would send from it too)
    # or creates a data folder and a signing key.
    try:
        sockets = bind_sockets(
            settings.host, settings.port, port_setting=f"--port (or port, {ENV_PREFIX}PORT)"
        )
    except CannotListen as exc:
        print(f"a2a-push: error: {exc}", file=sys.stderr)
        return 1
    try:
        return _serve(args, settings, sockets)
    finally:
        for sock in sockets:
            sock.close()


def _serve(
    args: argparse.Namespace, settings: GatewaySettings, sockets: list[socket.socket]
) -> int:
    from .app import Gateway, create_app

    if settings.port == 0:
        # Port 0 picked a free port: the issuer and the banner name that one.
        settings = settings.model_copy(update={"port": sockets[0].getsockname()[1]})
    gateway = Gateway(settings)  # opens nothing yet
    if settings.public_url is None and _is_wildcard(settings.host):
        log.warning(
            "public_url is not set: webhooks are signed with issuer %s and point receivers "
            "at %s/.well-known/jwks.json, which they cannot reach; set --public-url (or "
            "public_url, %sPUBLIC_URL) to the URL receivers reach this gateway at",
            settings.base_url,
            settings.base_url,
            ENV_PREFIX,
        )
    # The issuer exactly as the JWTs carry it (no trailing slash added): the value to
    # copy into a receiver's issuer setting.
    banner = (
        f"gateway: listening on {settings.host}:{settings.port}; issuer (JWT iss) "
        f"{gateway.notifier.issuer}; database {gateway.notifier.store.location}; "
        f"JWKS at {settings.base_url}/.well-known/jwks.json"
    )
    try:
        run_app(
            create_app(settings, gateway=gateway),
            sock=sockets,
            # Called once the database is open and the port is bound, not before.
            print=lambda _started: logs.serving(banner),
            access_log=logging.getLogger("aiohttp.access") if args.access_log else None,
        )
    except StoreUnavailableError as exc:
        if not settings.is_postgres:
            raise
        # At start nothing is running that would reconnect: say what to check, once.
        print_error(_unreachable(settings.database_url, exc))
        return 1
    return 0


def _unreachable(database: str, exc: StoreUnavailableError) -> str:
    """``cannot reach PostgreSQL at host:port (why); ...``: never the DSN's password."""
    try:
        parts = urlsplit(database)
        where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
    except ValueError:
        where = "the configured database"
    reason = str(exc.__cause__ or exc) or type(exc.__cause__ or exc).__name__
    return (
        f"cannot reach PostgreSQL at {where} ({reason}); is the server running? check "
        f"--database (or database, {ENV_PREFIX}DATABASE)"
    )


_SECRET_KEYS: Final = ("agents", "admin_keys", "encryption_keys", "operator_token")


def _warn_if_others_can_read(path: Path) -> None:
    """A config file holding keys that other local users can read: say so (the start
    goes on: the keys are already out, and the fix is the operator's chmod)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        holds_keys = any(read_config_file(path).get(name) for name in _SECRET_KEYS)
    except (OSError, SettingsError):
        return  # it was just read; a race at most
    if os.name == "posix" and mode & 0o077 and holds_keys:
        log.warning(
            "the config file %s holds API or encryption keys and other users can read it "
            "(mode %04o); make it private: chmod 600 %s",
            path,
            mode,
            shlex.quote(str(path)),
        )


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")  # noqa: S104 (a comparison, no bind)


def rotate_in_database(
    database: str, alg: Algorithm | None, encryption_keys: list[str] | None = None
) -> tuple[str, str]:
    """Rotate the gateway's signing key in its database; (new kid, its algorithm)."""

    async def go() -> tuple[str, str]:
        state = open_gateway_state(database, encryption_keys, create=False)
        await state.open()
        try:
            current = await state.load_keys(create=False)
            if not current:
                # A typo'd database (or schema) must not get a key no gateway signs with.
                raise KeyStoreError(
                    "no signing keys in this database: no gateway has started on it; give "
                    "the --database the gateway runs with, or start the gateway once"
                )
            active = [k for k in current if k.retired_at is None]
            new = await state.rotate_key(alg or (active[0].alg if active else "ES256"))
        finally:
            await state.close()
        previous = active[0].kid if active else None
        await _queue_key_rotated(database, encryption_keys, new.kid, new.alg, previous)
        return new.kid, new.alg

    return asyncio.run(go())


async def _queue_key_rotated(
    database: str, encryption_keys: list[str] | None, kid: str, alg: str, previous: str | None
) -> None:
    """Queue the rotation's ``key.rotated`` event for the gateway's operator endpoint (when
    it has one), so it is sent even when no gateway runs now; the gateways that adopt the
    key queue the same event, and the outbox keeps one. A failure is a warning: the key
    is rotated, and a running gateway still reports it."""
    store = open_store(database, StoreOptions(encryption_keys=encryption_keys))
    try:
        await store.open()
        await queue_for_operator(store, key_rotated(kid, alg, previous))
    except Exception as exc:
        log.warning(
            "the key is rotated, but its key.rotated event could not be queued for the "
            "operator endpoint (%s: %s); running gateways report it when they adopt the key",
            type(exc).__name__,
            exc,
        )
    finally:
        await store.close()
