"""The ``a2a-push`` command: signing keys, the delivery outbox, test webhooks and the demo.

Every command returns an exit code: 0 on success, 1 when the work failed, 2 for a usage
error. Errors are one line on stderr saying what is wrong and what to do. Secrets (config
tokens, encryption keys) are never printed; a set token shows as "(set)".
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import inspect
import json
import os
import shlex
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, NoReturn, get_args
from urllib.parse import unquote, urlsplit, urlunsplit

from yarl import URL

from .database import migrations
from .delivery.retry import Verdict, classify
from .delivery.ssrf import AddressPolicy
from .delivery.transport import AddressRefused, Timeouts, Transport, TransportError
from .delivery.webhook import webhook_headers
from .errors import A2APushError, InvalidConfigError, UnsafeURLError
from .gateway.client import check_gateway_url, describe_answer, printable, redact_url
from .ids import new_delivery_id
from .protocol.constants import (
    DEFAULT_KEY_GRACE_PERIOD_SECONDS,
    HEADER_WEBHOOK_ID,
    VERSION_1_0,
)
from .protocol.types import (
    StreamResponse,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from .signing import DEFAULT_ALGORITHM, Algorithm, KeySet, WebhookSigner
from .signing import standard_webhooks as stdwh
from .signing.keys import METADATA_FILE
from .store import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    MemoryStore,
    SecretBox,
    SQLiteStore,
    Store,
    StoredConfig,
    StoreOptions,
    generate_key,
    is_postgres_url,
    open_store,
)

PROG = "a2a-push"

ENV_DATABASE = "A2A_PUSH_DATABASE"
ENV_ENCRYPTION_KEYS = "A2A_PUSH_ENCRYPTION_KEYS"
ENV_KEYS_DIR = "A2A_PUSH_KEYS_DIR"
ENV_ISSUER = "A2A_PUSH_ISSUER"

ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
STATES: tuple[str, ...] = tuple(state.value for state in DeliveryState)

SEND_TEST_TASK_ID = "test-task"
SEND_TEST_CONTEXT_ID = "test-context"
SEND_TEST_CONFIG_ID = "send-test"
SEND_TEST_ISSUER = "urn:a2a-push:send-test"
SEND_TEST_FLAG = "a2a-push/test"

# Dead-lettered deliveries are gathered for replay in pages of this size.
_REPLAY_PAGE = 500
# How much of a failure reason a table cell shows.
_LAST_WIDTH = 48

_EPILOG = f"""\
environment variables (a flag given on the command line wins):
  {ENV_DATABASE}         the outbox database for `deliveries` and `configs` (--database)
  {ENV_ENCRYPTION_KEYS}  comma-separated Fernet keys of an encrypted database
                            (--encryption-key)
  {ENV_KEYS_DIR}         the signing key directory for `keys` and `send-test` (--dir,
                            --keys-dir)
  {ENV_ISSUER}           the JWT issuer for `send-test` (--issuer)
  A2A_PUSH_GATEWAY_KEY      the agent's gateway API key for `mock-agent` (--gateway-key)
  A2A_GATEWAY_ADMIN_KEY     a gateway admin key for `endpoints` (--admin-key); else the
                            first of A2A_GATEWAY_ADMIN_KEYS, the gateway's own variable

exit status: 0 success, 1 failure, 2 usage error.
Tokens, credentials and encryption keys are never printed.
"""


class CLIError(Exception):
    """A failure to report as one line on stderr, with the exit code to return."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what is wrong, where to read more) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)", 2)


# ---- entry point ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the ``a2a-push`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            prog = getattr(args, "command_prog", PROG)
            raise CLIError(f"choose a command (see `{prog} --help`)", 2)
        return handler(args)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except CLIError as exc:
        return _fail(exc.message, exc.code)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except A2APushError as exc:
        return _fail(str(exc), 1)
    except sqlite3.Error as exc:
        return _fail(f"database: {exc}; check that --database names an a2a-push SQLite file", 1)
    except OSError as exc:
        return _fail(_describe_os_error(exc), 1)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def _describe_os_error(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


# ---- the parser ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``a2a-push`` command (defaults read from the environment)."""
    env = os.environ
    parser = _Parser(
        prog=PROG,
        description="Durable, signed, retried, ordered A2A push notifications.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(
        group: argparse._SubParsersAction[_Parser], name: str, help_text: str, **kwargs: Any
    ) -> _Parser:
        sub = group.add_parser(
            name,
            help=help_text,
            description=kwargs.pop("description", help_text),
            **kwargs,
        )
        sub.set_defaults(command_prog=sub.prog)
        return sub

    demo = command(
        commands,
        "demo",
        "run the end-to-end demo (mock agent, notifier, receiver)",
        description="Run the end-to-end demo. Needs a checkout of a2a-push (`make demo`).",
    )
    demo.set_defaults(handler=_cmd_demo)

    mock_agent = command(
        commands,
        "mock-agent",
        "run the example A2A agent (JSON-RPC, agent card, push notifications)",
        description="Run the example A2A v1.0 agent with an embedded notifier: roll NdM, "
        "book X, report, fail, reject, login, or any text to echo. Needs a checkout of "
        "a2a-push.",
    )
    mock_agent.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    mock_agent.add_argument("--port", type=int, default=9000, help="default: 9000")
    mock_agent.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep the outbox and signing keys here (default: a temporary folder)",
    )
    mock_agent.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        dest="allow_webhook_hosts",
        help="let webhooks go to this host, IP or CIDR (repeat for several); e.g. "
        "127.0.0.1 for a receiver on this machine",
    )
    mock_agent.add_argument(
        "--public-url",
        metavar="URL",
        help="the agent's base URL as clients see it (default: http://HOST:PORT)",
    )
    mock_agent.add_argument(
        "--step-delay",
        type=_non_negative_seconds,
        default=0.5,
        metavar="SECONDS",
        help="pause between task steps (default: 0.5)",
    )
    mock_agent.add_argument(
        "--retry-schedule",
        metavar="SECONDS,...",
        help="seconds before each durable webhook retry, e.g. 1,1,2,5 (default: 5 s, 5 m, …)",
    )
    mock_agent.add_argument(
        "--gateway",
        metavar="URL",
        help="post events to this a2a-push gateway instead of the embedded notifier",
    )
    mock_agent.add_argument(
        "--gateway-key",
        metavar="KEY",
        default=env.get("A2A_PUSH_GATEWAY_KEY"),
        help="the agent's API key at the gateway (default: $A2A_PUSH_GATEWAY_KEY)",
    )
    mock_agent.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="WARNING",
        help="log to stderr from this level (default: WARNING: webhook retries and dead "
        "letters; INFO adds a line per request)",
    )
    mock_agent.set_defaults(handler=_cmd_mock_agent)

    receiver = command(
        commands,
        "receiver",
        "run the receiver (verify webhooks, GetTask, REST + SSE for apps)",
        description="Run the receiver: it subscribes to tasks on agents, verifies every "
        "webhook, fetches each task with GetTask, stores it and serves it to clients. "
        "Settings come from --config, then A2A_RECEIVER_* environment variables, then flags.",
    )
    from receiver import cli as receiver_cli

    receiver_cli.add_arguments(receiver)
    receiver.set_defaults(handler=receiver_cli.run)

    from .gateway import cli as gateway_cli

    gateway = command(
        commands,
        "gateway",
        "run the gateway service (agents post events; it signs and delivers)",
        description="Run the gateway: agents post task events to it, it owns push configs, "
        "signing and delivery. Several replicas share one PostgreSQL database. Settings come "
        "from --config, then A2A_GATEWAY_* environment variables, then flags.",
    )
    gateway_cli.add_arguments(gateway)
    gateway.set_defaults(handler=gateway_cli.run)

    # keys ------------------------------------------------------------------------------
    keys = command(
        commands,
        "keys",
        "manage the JWT signing keys (generate, rotate, jwks, prune)",
        description="Manage the key set that signs webhook JWTs, kept in a directory.",
    )
    keys_commands = keys.add_subparsers(title="commands", metavar="COMMAND")
    dir_help = f"the key set directory (default: ${ENV_KEYS_DIR})"
    grace_help = (
        "how long a retired key stays published in the JWKS, in seconds (default: "
        f"{DEFAULT_KEY_GRACE_PERIOD_SECONDS:g}); use the value your notifier runs with"
    )

    generate = command(
        keys_commands,
        "generate",
        "create the key set if it does not exist; print the active kid and algorithm",
    )
    generate.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    generate.add_argument(
        "--alg",
        choices=ALGORITHMS,
        help=f"algorithm of the first key (default: {DEFAULT_ALGORITHM}); an existing set "
        "keeps its keys (use `keys rotate --alg` to switch)",
    )
    generate.set_defaults(handler=_cmd_keys_generate)

    rotate = command(
        keys_commands,
        "rotate",
        "make a new key active and retire the current one (still published for the grace period)",
    )
    where = rotate.add_mutually_exclusive_group()  # a key directory or a gateway's keys
    where.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    rotate.add_argument(
        "--alg", choices=ALGORITHMS, help="algorithm of the new key (default: the current one)"
    )
    rotate.add_argument("--grace-period", type=_non_negative_seconds, default=None, help=grace_help)
    where.add_argument(
        "--database",
        metavar="DB",
        help="rotate the key set a gateway keeps in this database (postgresql://… or the "
        "gateway's SQLite outbox file) instead of a directory",
    )
    rotate.add_argument(
        "--encryption-key",
        action="append",
        metavar="KEY",
        dest="encryption_keys",
        help="with --database: a Fernet key the gateway seals its keys with; repeat for "
        f"several (default: ${ENV_ENCRYPTION_KEYS} or $A2A_GATEWAY_ENCRYPTION_KEYS)",
    )
    rotate.set_defaults(handler=_cmd_keys_rotate)

    jwks = command(keys_commands, "jwks", "print the public JWK Set receivers verify webhooks with")
    jwks.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    jwks.add_argument("--grace-period", type=_non_negative_seconds, default=None, help=grace_help)
    jwks.set_defaults(handler=_cmd_keys_jwks)

    prune = command(keys_commands, "prune", "delete retired keys whose grace period is over")
    prune.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    prune.add_argument("--grace-period", type=_non_negative_seconds, default=None, help=grace_help)
    prune.set_defaults(handler=_cmd_keys_prune)

    # endpoints -------------------------------------------------------------------------
    endpoints = command(
        commands,
        "endpoints",
        "show a running gateway's endpoint health (breakers that are open)",
        description="Ask a running gateway (its admin API) which webhook endpoints have an "
        "open breaker, i.e. are failing and get no attempts for now.",
    )
    endpoints.add_argument("--gateway", required=True, metavar="URL", help="the gateway's URL")
    endpoints.add_argument(
        "--admin-key",
        default=env.get("A2A_GATEWAY_ADMIN_KEY") or _first_admin_key(env),
        metavar="KEY",
        help="an admin key of the gateway (default: $A2A_GATEWAY_ADMIN_KEY, else the first "
        "of $A2A_GATEWAY_ADMIN_KEYS)",
    )
    endpoints.add_argument("--json", action="store_true", help="print JSON")
    endpoints.set_defaults(handler=_cmd_endpoints)

    # configs ---------------------------------------------------------------------------
    configs = command(
        commands,
        "configs",
        "disable or enable a push config (disabling dead-letters its pending deliveries)",
        description="Disable or enable a push config in a notifier or gateway database, by "
        "its key (the config_key that `deliveries list --json` shows; configKey in the "
        "gateway's admin API).",
    )
    configs_commands = configs.add_subparsers(title="commands", metavar="COMMAND")
    toggles = {
        "disable": (
            "stop a config's deliveries; its pending deliveries are moved to dead letters",
            "Disable a push config: no new deliveries are queued for it, and its pending "
            "deliveries are moved to dead letters at once (the command says how many). To "
            f"send them later: `{PROG} configs enable KEY`, then `{PROG} deliveries replay "
            "--all-dead --config KEY`.",
        ),
        "enable": (
            "let a disabled config get deliveries again",
            "Enable a push config: new events are delivered to it again. Deliveries "
            "dead-lettered meanwhile are not re-sent by themselves; the command says how "
            f"many there are and how to replay them (`{PROG} deliveries replay`).",
        ),
    }
    for action, (help_text, description) in toggles.items():
        sub = command(configs_commands, action, help_text, description=description)
        sub.add_argument(
            "key", metavar="KEY", help="the config's key (config_key in `deliveries list --json`)"
        )
        sub.add_argument(
            "--database",
            default=env.get(ENV_DATABASE),
            metavar="DB",
            help="the notifier's or gateway's database: a SQLite file path, sqlite:///path or "
            f"postgresql://… (default: ${ENV_DATABASE})",
        )
        sub.set_defaults(handler=_cmd_configs_toggle, enable=action == "enable")

    # deliveries ------------------------------------------------------------------------
    deliveries = command(
        commands,
        "deliveries",
        "inspect the delivery outbox and replay dead-lettered deliveries",
        description="Inspect the delivery outbox of a notifier or gateway database. These "
        "commands never read config secrets.",
    )
    deliveries_commands = deliveries.add_subparsers(title="commands", metavar="COMMAND")

    def database_options(sub: _Parser) -> None:
        sub.add_argument(
            "--database",
            default=env.get(ENV_DATABASE),
            metavar="DB",
            help="the notifier's or gateway's database: a SQLite file path, sqlite:///path "
            f"or postgresql://… (default: ${ENV_DATABASE})",
        )
        sub.add_argument(
            "--encryption-key",
            action="append",
            metavar="KEY",
            dest="encryption_keys",
            help="a Fernet key the database's secrets are encrypted with; repeat for "
            f"several (default: ${ENV_ENCRYPTION_KEYS}, comma-separated)",
        )

    listing = command(
        deliveries_commands,
        "list",
        "list deliveries, oldest first",
        epilog="Times: 'next' is when a pending delivery is tried next.",
    )
    database_options(listing)
    listing.add_argument("--state", choices=STATES, help="only deliveries in this state")
    listing.add_argument("--task", metavar="ID", help="only deliveries of this task")
    listing.add_argument("--config", metavar="KEY", help="only deliveries to this config")
    listing.add_argument(
        "--since", type=_iso_time, metavar="ISO", help="only deliveries created at or after"
    )
    listing.add_argument(
        "--until", type=_iso_time, metavar="ISO", help="only deliveries created before"
    )
    listing.add_argument(
        "--after", metavar="ID", help="start after this delivery id (to page through)"
    )
    listing.add_argument(
        "--limit", type=_positive_int, default=100, metavar="N", help="at most N (default: 100)"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(handler=_cmd_deliveries_list)

    show = command(deliveries_commands, "show", "show one delivery with its body")
    show.add_argument("id", metavar="ID", help="the delivery id (the webhook-id header)")
    database_options(show)
    show.add_argument("--json", action="store_true", help="print a JSON object")
    show.set_defaults(handler=_cmd_deliveries_show)

    replay = command(
        deliveries_commands,
        "replay",
        "send dead-lettered deliveries again",
        description="Put dead-lettered deliveries back in their queues as new. Replay only "
        "requeues them: a notifier or gateway running on the same database sends them.",
        epilog="Choose what to replay: delivery IDs, or --all-dead, or a creation window "
        "(--since/--until); --task and --config narrow the last two. A delivery whose config "
        "is disabled or deleted is not replayed. Times are ISO 8601; without an offset they "
        "are UTC.",
    )
    replay.add_argument("ids", nargs="*", metavar="ID", help="dead-lettered delivery ids")
    database_options(replay)
    replay.add_argument(
        "--all-dead", action="store_true", help="replay every dead-lettered delivery"
    )
    replay.add_argument("--task", metavar="ID", help="only dead-lettered deliveries of this task")
    replay.add_argument(
        "--config", metavar="KEY", help="only dead-lettered deliveries to this config"
    )
    replay.add_argument(
        "--since", type=_iso_time, metavar="ISO", help="only ones created at or after this time"
    )
    replay.add_argument(
        "--until", type=_iso_time, metavar="ISO", help="only ones created before this time"
    )
    replay.set_defaults(handler=_cmd_deliveries_replay)

    # store -----------------------------------------------------------------------------
    store = command(commands, "store", "store utilities (generate-key)")
    store_commands = store.add_subparsers(title="commands", metavar="COMMAND")
    gen_key = command(
        store_commands,
        "generate-key",
        "print a new Fernet key for encrypting config secrets (encryption_keys)",
        epilog="Keep it secret: put it in your secret manager, not in a repository.",
    )
    gen_key.set_defaults(handler=_cmd_store_generate_key)

    # send-test ---------------------------------------------------------------------------
    send_test = command(
        commands,
        "send-test",
        "send one signed test webhook to a URL",
        description=(
            "Send one signed test webhook (a statusUpdate for task "
            f"'{SEND_TEST_TASK_ID}', state WORKING) with exactly the headers the notifier "
            "sends; print the status, latency and JWT kid. Exits 0 only on a 2xx answer."
        ),
    )
    send_test.add_argument("url", metavar="URL", help="the webhook URL (http or https)")
    send_test.add_argument(
        "--token",
        help="the config token to send (a whsec_ secret is sent as a Standard Webhooks "
        "signature instead); never printed",
    )
    send_test.add_argument(
        "--keys-dir",
        default=env.get(ENV_KEYS_DIR),
        metavar="DIR",
        help=f"sign with this key set (default: ${ENV_KEYS_DIR}; none: a throwaway key)",
    )
    send_test.add_argument(
        "--issuer",
        default=env.get(ENV_ISSUER) or SEND_TEST_ISSUER,
        metavar="URL",
        help=f"the JWT iss claim (default: ${ENV_ISSUER}, else {SEND_TEST_ISSUER})",
    )
    send_test.add_argument(
        "--allow-loopback",
        action="store_true",
        help="allow loopback addresses (127.0.0.0/8, ::1) for local testing",
    )
    send_test.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        help="allow this private address, CIDR or host name (*.example.com for subdomains); "
        "repeatable",
    )
    send_test.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=Timeouts().total,
        metavar="SECONDS",
        help=f"give up after this long (default: {Timeouts().total:g})",
    )
    send_test.set_defaults(handler=_cmd_send_test)

    # version ---------------------------------------------------------------------------
    version = command(commands, "version", "print the version")
    version.set_defaults(handler=_cmd_version)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _non_negative_seconds(text: str) -> float:
    value = _seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _iso_time(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (example: 2025-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a2a-push")
    except PackageNotFoundError:
        pass
    # Running from a checkout that is not installed: read the version beside the package.
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        import tomllib

        with pyproject.open("rb") as f:
            found = tomllib.load(f).get("project", {}).get("version")
    except (OSError, ValueError):
        found = None
    return str(found) if found else "unknown (not installed)"


# ---- demo, version, store ------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    how = "run `make demo` from a checkout of a2a-push"
    try:
        module = _import_demo()
    except ModuleNotFoundError as exc:
        if exc.name in ("examples", "examples.demo"):
            raise CLIError(f"the demo is not part of the installed package; {how}") from None
        raise CLIError(
            f"the demo needs the module {exc.name!r}, which is not installed; {how} "
            "(it installs everything the demo needs)"
        ) from None
    run = getattr(module, "main", None)
    if not callable(run):
        raise CLIError(f"examples.demo has no main(); {how}")
    # A main(argv) must not read this command's own arguments from sys.argv.
    takes_argv = bool(inspect.signature(run).parameters)
    result = run([]) if takes_argv else run()
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result if isinstance(result, int) else 0


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _import_demo() -> Any:
    try:
        return importlib.import_module("examples.demo")
    except ModuleNotFoundError as exc:
        if exc.name not in ("examples", "examples.demo"):
            raise
        # Installed from a checkout (editable) but started elsewhere: the examples live
        # at the repository root, beside the package.
        root = Path(__file__).resolve().parent.parent
        if not (root / "examples" / "demo.py").is_file() or str(root) in sys.path:
            raise
        sys.path.insert(0, str(root))
        return importlib.import_module("examples.demo")


def _cmd_mock_agent(args: argparse.Namespace) -> int:
    how = "run it from a checkout of a2a-push (`python -m examples.mock_agent`)"
    try:
        module = _import_example("mock_agent")
    except ModuleNotFoundError as exc:
        if exc.name in ("examples", "examples.mock_agent"):
            raise CLIError(f"the mock agent is not part of the installed package; {how}") from None
        raise CLIError(
            f"the mock agent needs the module {exc.name!r}, which is not installed"
        ) from None
    problem = module.port_problem(args.port)
    if problem is not None:
        raise CLIError(f"--port {args.port}: {problem}", 2)
    try:
        AddressPolicy(args.allow_webhook_hosts)
    except ValueError as exc:
        raise CLIError(f"--allow-webhook-host: {exc}", 2) from None
    schedule = None
    if args.retry_schedule:
        try:
            schedule = module._delays(args.retry_schedule)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise CLIError(f"--retry-schedule: {exc}", 2) from None
    if bool(args.gateway) != bool(args.gateway_key):
        raise CLIError("--gateway needs --gateway-key (or $A2A_PUSH_GATEWAY_KEY)", 2)
    if args.gateway:
        args.gateway = _gateway_url(args.gateway, "--gateway")
    result = module.serve(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        allow_webhook_hosts=args.allow_webhook_hosts,
        public_url=args.public_url,
        step_delay=args.step_delay,
        retry_schedule=schedule,
        gateway_url=args.gateway,
        gateway_key=args.gateway_key,
        log_level=args.log_level,
        prog="a2a-push",
    )
    return result if isinstance(result, int) else 0


def _import_example(name: str) -> Any:
    """``examples.<name>`` from the checkout this package was installed from."""
    module = f"examples.{name}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in ("examples", module):
            raise
        root = Path(__file__).resolve().parent.parent
        if not (root / "examples" / f"{name}.py").is_file() or str(root) in sys.path:
            raise
        sys.path.insert(0, str(root))
        return importlib.import_module(module)


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"{PROG} {_version()}")
    return 0


def _cmd_store_generate_key(args: argparse.Namespace) -> int:
    print(generate_key())
    return 0


# ---- keys ----------------------------------------------------------------------------


def _keys_dir(args: argparse.Namespace) -> Path:
    if not args.dir:
        raise CLIError(f"no key directory given: pass --dir DIR or set {ENV_KEYS_DIR}", 2)
    return Path(args.dir)


def _grace(args: argparse.Namespace) -> float:
    value: float | None = getattr(args, "grace_period", None)
    return DEFAULT_KEY_GRACE_PERIOD_SECONDS if value is None else value


def _load_keyset(directory: Path, grace_period: float = DEFAULT_KEY_GRACE_PERIOD_SECONDS) -> KeySet:
    """An existing key set; never creates one (a typo must not mint a new signing key)."""
    if not (directory / METADATA_FILE).is_file():
        raise CLIError(
            f"no key set in {directory} (no {METADATA_FILE}); create one with "
            f"`{PROG} keys generate --dir {directory}`"
        )
    return KeySet.load_or_create(directory, grace_period=grace_period)


def _cmd_keys_generate(args: argparse.Namespace) -> int:
    directory = _keys_dir(args)
    existed = (directory / METADATA_FILE).is_file()
    keyset = KeySet.load_or_create(directory, alg=args.alg or DEFAULT_ALGORITHM)
    active = keyset.active
    if existed:
        print(f"key set already exists in {directory}; unchanged")
        if args.alg and args.alg != active.alg:
            _note(
                f"the active key is {active.alg}, not {args.alg}; switch with "
                f"`{PROG} keys rotate --dir {directory} --alg {args.alg}`"
            )
    else:
        print(f"created key set in {directory}")
    print(f"active kid: {active.kid}")
    print(f"alg: {active.alg}")
    return 0


def _cmd_keys_rotate(args: argparse.Namespace) -> int:
    if getattr(args, "database", None):
        from .gateway.cli import rotate_in_database

        keys = _encryption_keys(args)
        if not keys:
            keys = [
                k.strip()
                for k in os.environ.get("A2A_GATEWAY_ENCRYPTION_KEYS", "").split(",")
                if k.strip()
            ]
        from .gateway.state import sqlite_state_path

        database = str(args.database)
        state = sqlite_state_path(database)
        if state is not None and not state.is_file():
            # A typo must not mint a signing key in a new, unused database.
            raise CLIError(
                f"no gateway database at {database.removeprefix('sqlite:///')} (no "
                f"{state.name} beside it); give the --database the gateway runs with, or "
                "start the gateway once"
            )
        kid, alg = rotate_in_database(database, args.alg, keys or None)
        print(f"new active kid: {kid} ({alg})")
        _note("running gateways switch to the new key within their key_reload_interval (10 s)")
        return 0
    directory = _keys_dir(args)
    grace = _grace(args)
    keyset = _load_keyset(directory, grace)
    previous = keyset.active
    new = keyset.rotate(alg=args.alg)
    until = (previous.retired_at or time.time()) + grace
    print(f"new active kid: {new.kid} ({new.alg})")
    print(f"retired kid: {previous.kid} ({previous.alg}), published until {_utc(until)}")
    _note(
        "running notifiers with their keys in this directory switch to the new key within "
        "their key_reload_interval (30 s by default)"
    )
    return 0


def _cmd_keys_jwks(args: argparse.Namespace) -> int:
    keyset = _load_keyset(_keys_dir(args), _grace(args))
    print(json.dumps(keyset.jwks(), indent=2))
    return 0


def _cmd_keys_prune(args: argparse.Namespace) -> int:
    grace = _grace(args)
    keyset = _load_keyset(_keys_dir(args), grace)
    pruned = keyset.prune()
    if not pruned:
        print(f"nothing to prune: no retired key is past its grace period ({_duration(grace)})")
        return 0
    for kid in pruned:
        print(f"pruned kid: {kid}")
    return 0


# ---- deliveries ----------------------------------------------------------------------


def _encryption_keys(args: argparse.Namespace) -> list[str]:
    given: list[str] | None = getattr(args, "encryption_keys", None)
    if given is None:
        given = os.environ.get(ENV_ENCRYPTION_KEYS, "").split(",")
    keys = [k.strip() for k in given if k.strip()]
    try:
        SecretBox(keys or None)
    except ValueError:
        # Never echo the value: it is a secret.
        raise CLIError(
            "--encryption-key: each key must be a Fernet key (32 url-safe base64-encoded "
            f"bytes); make one with `{PROG} store generate-key`",
            2,
        ) from None
    return keys


def _open_store(args: argparse.Namespace) -> Store:
    database: str | None = args.database
    if not database:
        raise CLIError(
            "no database given: pass --database DB (a SQLite file path or sqlite:///path) "
            f"or set {ENV_DATABASE}",
            2,
        )
    keys = _encryption_keys(args)
    try:
        store = open_store(database, StoreOptions(encryption_keys=keys or None))
    except ValueError as exc:
        raise CLIError(f"--{exc}", 2) from None
    if isinstance(store, MemoryStore):
        raise CLIError(
            f"--database {redact_url(database)}: an in-memory store holds nothing between runs; "
            "point it at the notifier's SQLite file or the gateway's PostgreSQL database",
            2,
        )
    if isinstance(store, SQLiteStore) and not store.path.is_file():
        # Opening would create an empty database and show nothing, hiding the typo.
        raise CLIError(
            f"database {store.path} does not exist; pass the file your notifier or "
            f"gateway uses (--database or {ENV_DATABASE})"
        )
    if isinstance(store, SQLiteStore) and not _is_outbox_file(store.path):
        # Opening migrates: it would add our tables to another application's file.
        raise CLIError(
            f"{store.path} is not an a2a-push outbox (no deliveries table); pass the file "
            f"your notifier or gateway uses (--database or {ENV_DATABASE})"
        )
    if is_postgres_url(database):
        from .store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        # Nor on PostgreSQL: a typo'd database or schema gets an error, not our tables.
        store.migrate = False
    return store


def _is_outbox_file(path: Path) -> bool:
    """Whether ``path`` is an SQLite file holding an a2a-push outbox (read-only look);
    a CLIError naming the problem when it cannot be read at all, or when the outbox is
    older than this version (opening it would migrate it, maybe under a running older
    notifier: the CLI never migrates)."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {row[0] for row in rows}
            (version,) = conn.execute("PRAGMA user_version").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            return False
        # Locked, unreadable, a WAL file that cannot be opened...: say what it is.
        raise CLIError(f"cannot read {path}: {exc}") from None
    if not {"configs", "deliveries", "lanes"} <= tables:
        return False
    latest = max(v for v, _ in migrations("sqlite"))
    if version < latest:
        raise CLIError(
            f"the outbox {path} is older than this a2a-push (schema {version}, this version "
            f"uses {latest}): start the notifier or gateway of this version once to upgrade "
            "it; the CLI never migrates"
        )
    return True


def _run_with_store(args: argparse.Namespace, work: Callable[[Store], Any]) -> int:
    store = _open_store(args)

    async def run() -> int:
        async with store:
            result: int = await work(store)
            return result

    return asyncio.run(run())


def _cmd_endpoints(args: argparse.Namespace) -> int:
    import aiohttp

    if not args.admin_key:
        raise CLIError(
            "--admin-key (or $A2A_GATEWAY_ADMIN_KEY, or $A2A_GATEWAY_ADMIN_KEYS) is required", 2
        )
    base = _gateway_url(args.gateway, "--gateway")
    # Given the admin API's own URL (copied from the docs), do not ask for it twice.
    base = base.removesuffix("/admin/endpoints")
    url = base + "/admin/endpoints"

    async def fetch() -> tuple[int, str | None, bytes]:
        headers = {"Authorization": f"Bearer {args.admin_key}"}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
            session.get(url, headers=headers) as resp,
        ):
            return resp.status, resp.headers.get("Content-Type"), await resp.read()

    try:
        status, content_type, body = asyncio.run(fetch())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise CLIError(f"{url}: {type(exc).__name__}: {exc}; is the gateway running?") from None
    try:
        data = json.loads(body)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        data = None
    path = base.partition("://")[2].partition("/")[2]
    hint = (
        f"; the path /{path} of --gateway was kept: give the gateway's base URL "
        "unless it is served under that path"
        if path
        else "; check --gateway: it takes the gateway's base URL, e.g. http://host:8080"
    )
    if isinstance(data, dict) and status != 200:
        # A gateway answering 404 (its JSON "no such route"): most likely a wrong path.
        raise CLIError(
            f"{url} answered {status}: {data.get('message') or 'no details'}"
            f"{hint if status == 404 else ''}"
        )
    opened = data.get("open") if isinstance(data, dict) else None
    if not isinstance(opened, list):
        raise CLIError(
            f"{url} did not answer like an a2a-push gateway "
            f"({describe_answer(status, content_type)}){hint}"
        )
    if args.json:
        print(json.dumps({"open": opened}, indent=2))
    elif not opened:
        print("every endpoint is healthy (no open breaker on this gateway replica)")
    else:
        print(f"{len(opened)} endpoint(s) with an open breaker (no attempts for now):")
        for endpoint in opened:
            print(f"  {endpoint}")
    return 0


def _gateway_url(given: str, flag: str) -> str:
    """A gateway's base URL, checked (a usage error never echoes credentials)."""
    try:
        return check_gateway_url(given, flag)
    except ValueError as exc:
        raise CLIError(str(exc), 2) from None


def _cmd_configs_toggle(args: argparse.Namespace) -> int:
    key: str = args.key

    async def work(store: Store) -> int:
        reason = None if args.enable else "disabled by an operator (a2a-push configs disable)"
        # The store answers only whether the config exists: count what disabling moves
        # to dead letters first (a notifier running meanwhile may change it a little).
        pending = (
            []
            if args.enable
            else await _matching_ids(
                store, DeliveryFilter(state=DeliveryState.PENDING, config_key=key)
            )
        )
        if not await store.set_config_enabled(key, args.enable, reason):
            raise CLIError(
                f"no config with key {key!r}; find keys with `{PROG} deliveries list --json` "
                "(config_key)"
            )
        if not args.enable:
            print(
                f"config {key} disabled; {_count(len(pending), 'pending delivery')} moved to "
                "dead letters"
            )
            return 0
        print(f"config {key} enabled")
        dead = await _matching_ids(store, DeliveryFilter(state=DeliveryState.DEAD, config_key=key))
        if dead:
            command = f"{PROG} deliveries replay --all-dead --config {shlex.quote(key)}"
            _note(
                f"{_count(len(dead), 'dead-lettered delivery')} of this config "
                f"{'is' if len(dead) == 1 else 'are'} not re-sent by enabling it; re-send "
                f"{'it' if len(dead) == 1 else 'them'} with `{command}{_database_flag(args)}`"
            )
        return 0

    return _run_with_store(args, work)


def _count(n: int, noun: str) -> str:
    """``1 pending delivery``, ``3 pending deliveries``."""
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {plural}"


def _database_flag(args: argparse.Namespace) -> str:
    """`` --database DB`` for a command to suggest; nothing when the environment has it.
    Credentials in a URL show as ``***``."""
    database: str | None = args.database
    if not database or database == os.environ.get(ENV_DATABASE):
        return ""
    return f" --database {shlex.quote(shown_database(database))}"


_SECRET_QUERY_KEYS: Final = frozenset({"password", "sslpassword"})


def shown_database(database: str) -> str:
    """``database`` for a command to suggest: a URL's password (``user:***@``) and any
    ``password=``/``sslpassword=`` query parameter show as ``***``; the user name and
    everything else stay, so the command still names the same database."""
    if "://" not in database:
        return database  # a file path
    parts = urlsplit(database)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{hostport}"
    query = "&".join(
        f"{piece.partition('=')[0]}=***"
        if unquote(piece.partition("=")[0]).lower() in _SECRET_QUERY_KEYS
        else piece
        for piece in parts.query.split("&")
    )
    if netloc == parts.netloc and query == parts.query:
        return database  # nothing to hide (urlunsplit would also drop sqlite:///'s //)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _cmd_deliveries_list(args: argparse.Namespace) -> int:
    flt = DeliveryFilter(
        state=DeliveryState(args.state) if args.state else None,
        task_id=args.task,
        config_key=args.config,
        created_after=args.since,
        created_before=args.until,
        limit=args.limit,
        after_id=args.after,
    )

    async def work(store: Store) -> int:
        found = await store.list_deliveries(flt)
        if args.json:
            print(json.dumps([_delivery_json(d) for d in found], indent=2))
        elif not found:
            print("no deliveries match")
        else:
            _print_table(found, time.time())
        if len(found) == args.limit:
            _note(
                f"showing the first {args.limit}; for more, pass --after {found[-1].id} "
                "or a larger --limit"
            )
        return 0

    return _run_with_store(args, work)


def _print_table(deliveries: Sequence[Delivery], now: float) -> None:
    header = ("ID", "TASK", "SEQ", "KIND", "STATE", "ATTEMPTS", "LAST", "NEXT")
    rows = [
        (
            d.id,
            d.task_id,
            str(d.seq),
            d.kind,
            d.state.value,
            str(d.attempts),
            _shorten(_last_result(d), _LAST_WIDTH),
            _next_attempt(d, now),
        )
        for d in deliveries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _last_result(d: Delivery) -> str:
    error = " ".join((d.last_error or "").split())
    if d.last_status is None:
        return error or "-"
    status = f"HTTP {d.last_status}"
    # The notifier's errors name the status already ("HTTP 404", "retries exhausted;
    # last: HTTP 503"): print it once.
    if status in error:
        return error
    return f"{status}: {error}" if error else status


def _next_attempt(d: Delivery, now: float) -> str:
    if d.state is not DeliveryState.PENDING:
        return "-"
    if d.leased_until is not None:
        if d.leased_until > now:
            return f"in flight (claimed; lease ends in {_duration(d.leased_until - now)})"
        return "due now (its worker's lease ran out)"
    if d.next_attempt_at <= now:
        return "due now"
    return f"in {_duration(d.next_attempt_at - now)}"


def _cmd_deliveries_show(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        delivery = await store.get_delivery(args.id)
        if delivery is None:
            raise CLIError(
                f"no delivery with id {args.id!r} in {store.location}; find ids with "
                f"`{PROG} deliveries list`"
            )
        if args.json:
            print(json.dumps(_delivery_json(delivery, with_body=True), indent=2))
        else:
            _print_delivery(delivery, time.time())
        return 0

    return _run_with_store(args, work)


def _print_delivery(d: Delivery, now: float) -> None:
    fields = [
        ("id", d.id),
        ("task", d.task_id),
        ("config key", d.config_key),
        ("seq", str(d.seq)),
        ("kind", d.kind),
        ("state", d.state.value),
        ("attempts", str(d.attempts)),
        ("retry rounds", str(d.rounds)),
        ("last status", "-" if d.last_status is None else str(d.last_status)),
        ("last error", d.last_error or "-"),
        (
            "next attempt",
            f"{_utc(d.next_attempt_at)} ({_next_attempt(d, now)})"
            if d.state is DeliveryState.PENDING
            else "-",
        ),
        ("created", f"{_utc(d.created_at)} ({_ago(d.created_at, now)})"),
        ("updated", f"{_utc(d.updated_at)} ({_ago(d.updated_at, now)})"),
    ]
    parsed = _parse_body(d.body)
    described = "JSON" if parsed is not _NOT_JSON else "not JSON"
    fields.append(("body", f"{len(d.body)} bytes, {described}"))
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        print(f"{name + ':':<{width}} {value}")
    if parsed is not _NOT_JSON:
        print(json.dumps(parsed, indent=2, ensure_ascii=False))


_NOT_JSON = object()


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return _NOT_JSON


def _delivery_json(d: Delivery, *, with_body: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": d.id,
        "task_id": d.task_id,
        "config_key": d.config_key,
        "seq": d.seq,
        "kind": d.kind,
        "state": d.state.value,
        "attempts": d.attempts,
        "rounds": d.rounds,
        "last_status": d.last_status,
        "last_error": d.last_error,
        "next_attempt_at": _utc_iso(d.next_attempt_at)
        if d.state is DeliveryState.PENDING
        else None,
        "leased_until": None if d.leased_until is None else _utc_iso(d.leased_until),
        "created_at": _utc_iso(d.created_at),
        "updated_at": _utc_iso(d.updated_at),
        "body_bytes": len(d.body),
    }
    if with_body:
        parsed = _parse_body(d.body)
        data["body"] = None if parsed is _NOT_JSON else parsed
    return data


def _cmd_deliveries_replay(args: argparse.Namespace) -> int:
    by_filter = args.all_dead or args.since is not None or args.until is not None
    if args.ids and by_filter:
        raise CLIError("give either delivery IDs or --all-dead/--since/--until, not both", 2)
    if not args.ids and not by_filter:
        raise CLIError("nothing chosen: give delivery IDs, --all-dead, or --since/--until", 2)
    for flag, given in (("--task", args.task), ("--config", args.config)):
        if given and not by_filter:
            raise CLIError(f"{flag} applies only with --all-dead or --since/--until", 2)
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise CLIError("--since must be earlier than --until", 2)

    async def work(store: Store) -> int:
        if args.ids:
            chosen = await _dead_by_id(store, args.ids)
        else:
            chosen = await _matching_ids(
                store,
                DeliveryFilter(
                    state=DeliveryState.DEAD,
                    task_id=args.task,
                    config_key=args.config,
                    created_after=args.since,
                    created_before=args.until,
                ),
            )
        if not chosen:
            if args.config and await store.get_config_by_key(args.config) is None:
                # A mistyped key is not "nothing to do".
                raise CLIError(
                    f"--config {args.config!r}: no config with that key in {store.location}; "
                    f"find keys with `{PROG} deliveries list --json` (config_key)"
                )
            print("nothing to replay: no dead-lettered deliveries match")
            return 0
        count = await store.replay(chosen)
        skipped = len(chosen) - count
        if count == 0:
            raise CLIError(
                f"none of the {len(chosen)} dead-lettered deliveries could be replayed: "
                "their push configs are disabled or deleted (a2a-push configs enable KEY "
                "for a disabled one, or register the config again; then replay)"
            )
        noun = "delivery" if count == 1 else "deliveries"
        print(f"replayed {count} dead-lettered {noun}; pending again")
        if skipped:
            _note(
                f"{skipped} not replayed: their push config is disabled or deleted, or they "
                "are no longer dead"
            )
        _note(
            "replay only requeues: a notifier or gateway running on this database sends "
            "them (start one if none is running)"
        )
        return 0

    return _run_with_store(args, work)


async def _dead_by_id(store: Store, ids: Sequence[str]) -> list[str]:
    chosen: list[str] = []
    for delivery_id in dict.fromkeys(ids):
        delivery = await store.get_delivery(delivery_id)
        if delivery is None:
            raise CLIError(
                f"no delivery with id {delivery_id!r} in {store.location}; nothing was replayed "
                f"(find ids with `{PROG} deliveries list --state dead`)"
            )
        if delivery.state is DeliveryState.DEAD:
            chosen.append(delivery_id)
        else:
            _note(f"{delivery_id} is {delivery.state.value}, not dead; skipped")
    if not chosen:
        raise CLIError("none of the given deliveries is dead-lettered; only those can be replayed")
    return chosen


async def _matching_ids(store: Store, flt: DeliveryFilter) -> list[str]:
    """The ids of every delivery ``flt`` matches (its limit and after_id are ignored)."""
    chosen: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_deliveries(
            dataclasses.replace(flt, limit=_REPLAY_PAGE, after_id=after)
        )
        chosen.extend(d.id for d in page)
        if len(page) < _REPLAY_PAGE:
            return chosen
        after = page[-1].id


# ---- send-test -----------------------------------------------------------------------


def _cmd_send_test(args: argparse.Namespace) -> int:
    url: str = args.url
    token: str | None = args.token or None
    if token is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in token):
        raise CLIError("--token must not contain control characters (CR, LF, ...)", 2)
    try:
        policy = AddressPolicy(args.allow, allow_loopback=args.allow_loopback)
    except ValueError as exc:
        raise CLIError(f"--allow: {exc}", 2) from None
    try:
        target = policy.validate_url(url)
    except UnsafeURLError as exc:
        raise CLIError(_refused(exc.message)) from None
    except InvalidConfigError as exc:
        raise CLIError(f"URL {exc.message}", 2) from None

    throwaway = not args.keys_dir
    keyset = KeySet.generate() if throwaway else _load_keyset(Path(args.keys_dir))
    signer = WebhookSigner(keyset, args.issuer)
    delivery, config = _test_webhook(url, token)
    timeouts = Timeouts(connect=min(Timeouts().connect, args.timeout), total=args.timeout)

    async def send() -> int:
        try:
            await policy.check_url(url)
        except UnsafeURLError as exc:
            raise CLIError(_refused(exc.message)) from None
        except InvalidConfigError as exc:
            raise CLIError(f"URL {exc.message}; check the host name") from None
        headers = webhook_headers(delivery, config, signer)
        async with Transport(policy, timeouts) as transport:
            try:
                result = await transport.post(url, delivery.body, headers)
            except AddressRefused as exc:
                raise CLIError(_refused(str(exc))) from None
            except TransportError as exc:
                then = "retry" if exc.retryable else "dead-letter it"
                raise CLIError(f"no response: {exc}; a notifier would {then}") from None
        verdict = classify(result)
        print(f"POST {_shown_target(target)} -> {result.status} in {result.elapsed * 1000:.1f} ms")
        print(f"{HEADER_WEBHOOK_ID}: {delivery.id}")
        print(f"signed: {keyset.active.alg}, kid {keyset.active.kid}, iss {args.issuer}")
        print(f"token: {_describe_token(token)}")
        print(f"a notifier would: {_VERDICT_TEXT[verdict]}")
        if throwaway:
            _note(
                "signed with a throwaway key that no receiver knows; pass --keys-dir (or set "
                f"{ENV_KEYS_DIR}) to sign with your agent's keys"
            )
        if verdict is not Verdict.DELIVERED:
            # The endpoint's words, on one line, with no control characters (an answer
            # may carry terminal escapes that fake output).
            answer = printable(" ".join(result.body[:200].decode("utf-8", "replace").split()))
            if answer:
                print(f"response body: {answer}")
            return 1
        return 0

    return asyncio.run(send())


_VERDICT_TEXT = {
    Verdict.DELIVERED: "mark it delivered",
    Verdict.RETRY: "retry later (retryable status)",
    Verdict.DEAD: "dead-letter it (redirects and other 4xx are permanent)",
    Verdict.GONE: "disable the config (410 Gone)",
}


def _test_webhook(url: str, token: str | None) -> tuple[Delivery, StoredConfig]:
    """A synthetic delivery and config: the same shapes the notifier sends from."""
    now = time.time()
    event = TaskStatusUpdateEvent(
        task_id=SEND_TEST_TASK_ID,
        context_id=SEND_TEST_CONTEXT_ID,
        status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
        metadata={SEND_TEST_FLAG: True},
    )
    delivery = Delivery(
        id=new_delivery_id(),
        config_key=SEND_TEST_CONFIG_ID,
        task_id=SEND_TEST_TASK_ID,
        seq=1,
        kind="statusUpdate",
        body=StreamResponse.wrap(event).to_json_bytes(),
        state=DeliveryState.PENDING,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
        updated_at=now,
    )
    config = StoredConfig(
        key=SEND_TEST_CONFIG_ID,
        id=SEND_TEST_CONFIG_ID,
        task_id=SEND_TEST_TASK_ID,
        owner=SEND_TEST_CONFIG_ID,
        url=url,
        token=token,
        protocol_version=VERSION_1_0,
        created_at=now,
    )
    return delivery, config


def _shown_target(target: URL) -> str:
    """Where send-test posted: origin and path; a query (it may hold a token) as ``?…``."""
    shown = f"{target.origin()}{target.raw_path}"
    return f"{shown}?…" if target.raw_query_string else shown


def _describe_token(token: str | None) -> str:
    if token is None:
        return "none"
    if stdwh.is_standard_webhooks_secret(token):
        return "(set; Standard Webhooks secret, sent as a webhook-signature header)"
    return "(set)"


def _refused(message: str) -> str:
    # The library's advice names its Python API; on the command line it is a flag.
    reason = message.split("; to allow it", 1)[0]
    if "loopback" in reason:
        hint = "pass --allow-loopback to send to this machine (local testing)"
    elif "cloud metadata" in reason:
        hint = "pass --allow with that exact address if you really mean it"
    else:
        hint = "pass --allow with the address, a CIDR covering it, or the host name"
    return f"refused: {reason}; {hint}"


# ---- formatting ----------------------------------------------------------------------


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _duration(seconds: float) -> str:
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def _ago(ts: float, now: float) -> str:
    if ts > now:
        return f"in {_duration(ts - now)}"
    return f"{_duration(now - ts)} ago"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = ["build_parser", "main"]


def _first_admin_key(env: Mapping[str, str]) -> str | None:
    """The first of the gateway's own ``A2A_GATEWAY_ADMIN_KEYS`` (comma-separated)."""
    keys = [k.strip() for k in env.get("A2A_GATEWAY_ADMIN_KEYS", "").split(",") if k.strip()]
    return keys[0] if keys else None
