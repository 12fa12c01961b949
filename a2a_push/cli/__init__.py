"""The ``a2a-push`` command: signing keys, the delivery outbox, test webhooks and the demo.

Every command returns an exit code: 0 on success, 1 when the work failed, 2 for a usage
error. Errors are one line on stderr saying what is wrong and what to do. Secrets (config
tokens, encryption keys) are never printed; a set token shows as "(set)".

Each command's options are declared once, in the module of its group: ``keys``,
``endpoints``, ``configs``, ``deliveries`` (with ``store``), ``send_test``, ``listen`` here;
``mock-agent``, ``gateway`` and ``receiver`` beside their code.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..errors import A2APushError
from ..store import shown_database
from . import configs, console, deliveries, endpoints, keys, listen, send_test
from .common import (
    ENV_DATABASE,
    ENV_ENCRYPTION_KEYS,
    ENV_ISSUER,
    ENV_KEYS_DIR,
    PROG,
    CLIError,
    Parser,
    add_command,
    note_unknown_push_variables,
    print_error,
)

_EPILOG = f"""\
environment variables (a flag given on the command line wins):
  {ENV_DATABASE}         the outbox database for `deliveries` and `configs` (--database)
  {ENV_ENCRYPTION_KEYS}  comma-separated Fernet keys of an encrypted database
                            (--encryption-key)
  {ENV_KEYS_DIR}         the signing key directory for `keys` and `send-test` (--dir,
                            --keys-dir)
  {ENV_ISSUER}           the JWT issuer for `send-test` (--issuer)
  A2A_PUSH_GATEWAY_KEY      the agent's gateway API key for `mock-agent` (--gateway-key)
  A2A_PUSH_CONSOLE_ADMIN_KEY  the admin key `console` signs in with (--admin-key)
  A2A_GATEWAY_ADMIN_KEY     a gateway admin key for `endpoints` (--admin-key); else the
                            first of A2A_GATEWAY_ADMIN_KEYS, the gateway's own variable

exit status: 0 success, 1 failure, 2 usage error.
Tokens, credentials and encryption keys are never printed.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the ``a2a-push`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    note_unknown_push_variables()
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
    print_error(message)
    return code


def _describe_os_error(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``a2a-push`` command (defaults read from the environment)."""
    env = os.environ
    parser = Parser(
        prog=PROG,
        description="Durable, signed, retried, ordered A2A push notifications.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    demo = add_command(
        commands,
        "demo",
        "run the end-to-end demo (mock agent, notifier, receiver)",
        description="Run the end-to-end demo: the mock agent, signed webhooks to a local sink, "
        "then the whole loop through the receiver in its own process.",
    )
    demo.set_defaults(handler=_cmd_demo)

    from ..mock_agent import cli as mock_agent_cli

    mock_agent = add_command(
        commands,
        "mock-agent",
        "run the example A2A agent (JSON-RPC, agent card, push notifications)",
        description=mock_agent_cli.DESCRIPTION,
    )
    mock_agent_cli.add_arguments(mock_agent, env)
    mock_agent.set_defaults(handler=mock_agent_cli.run)

    receiver = add_command(
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

    from ..gateway import cli as gateway_cli

    gateway = add_command(
        commands,
        "gateway",
        "run the gateway service (agents post events; it signs and delivers)",
        description="Run the gateway: agents post task events to it, it owns push configs, "
        "signing and delivery. Several replicas share one PostgreSQL database. Settings come "
        "from --config, then A2A_GATEWAY_* environment variables, then flags.",
    )
    gateway_cli.add_arguments(gateway)
    gateway.set_defaults(handler=gateway_cli.run)

    keys.add_commands(commands, env)
    endpoints.add_commands(commands, env)
    configs.add_commands(commands, env)
    deliveries.add_commands(commands, env)
    console.add_commands(commands, env)
    send_test.add_commands(commands, env)
    listen.add_commands(commands, env)

    version = add_command(commands, "version", "print the version")
    version.set_defaults(handler=_cmd_version)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a2a-push")
    except PackageNotFoundError:
        pass
    # Running from a checkout that is not installed: read the version beside the package.
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        import tomllib

        with pyproject.open("rb") as f:
            found = tomllib.load(f).get("project", {}).get("version")
    except (OSError, ValueError):
        found = None
    return str(found) if found else "unknown (not installed)"


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import main as run_demo

    return run_demo()


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"{PROG} {_version()}")
    return 0


__all__ = ["build_parser", "main", "shown_database"]
