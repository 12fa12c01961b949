"""Shared by the commands: errors, the parser class, argument types and formatting."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, NoReturn, TypeAlias

from .. import logs, tracing
from ..gateway.client import check_gateway_url

PROG = "a2a-push"

ENV_DATABASE = "A2A_PUSH_DATABASE"

ENV_ENCRYPTION_KEYS = "A2A_PUSH_ENCRYPTION_KEYS"

ENV_KEYS_DIR = "A2A_PUSH_KEYS_DIR"

ENV_ISSUER = "A2A_PUSH_ISSUER"

# The variables with our prefixes that are not gateway or receiver settings (those are
# A2A_GATEWAY_<SETTING> and A2A_RECEIVER_<SETTING>, from the settings models), and what
# reads them. A variable with one of the prefixes that is in neither stops the gateway
# and the receiver at start (a misspelt name must not be ignored); add new ones here.
KNOWN_VARIABLES: Final[dict[str, str]] = {
    ENV_DATABASE: "a2a-push deliveries|configs: --database",
    ENV_ENCRYPTION_KEYS: "a2a-push deliveries|configs|keys rotate: --encryption-key",
    ENV_KEYS_DIR: "a2a-push keys|send-test: --dir, --keys-dir",
    ENV_ISSUER: "a2a-push send-test: --issuer",
    "A2A_PUSH_GATEWAY_KEY": "a2a-push mock-agent: --gateway-key",
    "A2A_PUSH_LOG_FORMAT": "a2a-push mock-agent: --log-format",
    "A2A_PUSH_TRACING": "a2a-push mock-agent: --tracing",
    "A2A_PUSH_CONSOLE_ADMIN_KEY": "a2a-push console: --admin-key",
    "A2A_PUSH_TEST_POSTGRES_DSN": "the test suite: a PostgreSQL database to test with",
    "A2A_PUSH_BENCH_POSTGRES_DSN": "the benchmarks: a PostgreSQL database to measure",
    "A2A_GATEWAY_ADMIN_KEY": "a2a-push endpoints: --admin-key",
    "A2A_RECEIVER_CONFIG": "the receiver: its config file, when no --config is given",
    "A2A_RECEIVER_SUPERVISOR_PID": "the receiver: set by the supervisor for its workers",
    "A2A_RECEIVER_WORKER_INDEX": "the receiver: set by the supervisor for its workers",
}

PUSH_PREFIX: Final = "A2A_PUSH_"


def unknown_variable(
    prefix: str,
    settings: Iterable[str],
    service: str,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The error for the first variable named ``prefix...`` that is neither one of the
    ``settings`` (``prefix + NAME``) nor in :data:`KNOWN_VARIABLES`; None if there is none."""
    env = os.environ if environ is None else environ
    known = {prefix + name.upper() for name in settings}
    known |= {name for name in KNOWN_VARIABLES if name.startswith(prefix)}
    for name in sorted(env):
        if name.startswith(prefix) and name not in known:
            close = _close_variable(name, prefix, known)
            fix = (
                f"did you mean {close}?"
                if close
                else f"the {service} reads {prefix}<SETTING> for each of its settings "
                "(see docs/configuration.md); unset it or correct its name"
            )
            return f"unknown environment variable {name}; {fix}"
    return None


def _close_variable(name: str, prefix: str, known: Iterable[str]) -> str | None:
    """The known variable ``name`` most likely misspells (compared without the prefix
    they share, which would make any two look alike)."""
    tails = {k.removeprefix(prefix): k for k in known}
    close = difflib.get_close_matches(name.removeprefix(prefix), sorted(tails), n=1)
    return tails[close[0]] if close else None


def note_unknown_push_variables(environ: Mapping[str, str] | None = None) -> None:
    """A note on stderr for each ``A2A_PUSH_*`` variable no command reads (a typo,
    most likely): not an error, as nothing else depends on it."""
    env = os.environ if environ is None else environ
    known = sorted(n for n in KNOWN_VARIABLES if n.startswith(PUSH_PREFIX))
    for name in sorted(env):
        if name.startswith(PUSH_PREFIX) and name not in KNOWN_VARIABLES:
            close = _close_variable(name, PUSH_PREFIX, known)
            hint = f"; did you mean {close}?" if close else "; no a2a-push command reads it"
            note(f"unknown environment variable {name}{hint}")


class CLIError(Exception):
    """A failure to report as one line on stderr, with the exit code to return."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (what is wrong, where to read more) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see `{self.prog} --help`)", 2)


def print_error(message: str, prog: str = PROG) -> None:
    """``message`` on stderr as ``PROG: error: ...``, each of its lines so prefixed
    (a settings error has one line per invalid setting)."""
    for line in message.splitlines() or [""]:
        print(f"{prog}: error: {line}", file=sys.stderr)


def start_logging(
    level: str | int,
    log_format: logs.LogFormat,
    *,
    tracing_on: bool,
    service: str,
    tracing_setting: str,
    prog: str = PROG,
) -> bool:
    """For a service's command (gateway, receiver, mock agent): log to stderr at
    ``level`` as ``log_format`` says, then, when ``tracing_on``, export spans as
    ``service``. False when tracing cannot start, once that is printed as
    ``prog: error: <tracing_setting>: why``: the command then exits with 2."""
    logs.configure(level, log_format)
    if tracing_on:
        try:
            tracing.configure_service(service)
        except tracing.TracingUnavailableError as exc:
            print_error(f"{tracing_setting}: {exc}", prog)
            return False
    return True


def note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
    return value


def positive_seconds(text: str) -> float:
    value = parse_seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    value = parse_seconds(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def iso_time(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (example: 2025-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def gateway_url(given: str, flag: str) -> str:
    """A gateway's base URL, checked (a usage error never echoes credentials)."""
    try:
        return check_gateway_url(given, flag)
    except ValueError as exc:
        raise CLIError(str(exc), 2) from None


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def duration(seconds: float) -> str:
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


def ago(ts: float, now: float) -> str:
    if ts > now:
        return f"in {duration(ts - now)}"
    return f"{duration(now - ts)} ago"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# (a string: the class cannot be subscripted at run time)
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"


def add_command(group: Commands, name: str, help_text: str, **kwargs: Any) -> Parser:
    """A subcommand of ``group``; its description is ``help_text`` unless one is given."""
    sub = group.add_parser(
        name,
        help=help_text,
        description=kwargs.pop("description", help_text),
        **kwargs,
    )
    sub.set_defaults(command_prog=sub.prog)
    return sub
