"""``a2a-push mock-agent``: the mock agent's options, declared once, and how it starts.

``python -m a2a_push.mock_agent`` runs the same command.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from a2a_push import logs
from a2a_push.cli.common import (
    PROG,
    CLIError,
    gateway_url,
    non_negative_seconds,
    positive_seconds,
)
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.logs import LOG_FORMATS

from .app import DEFAULT_HOST, DEFAULT_LOG_LEVEL, DEFAULT_PORT, LOG_LEVELS, port_problem, serve
from .flows import DEFAULT_GATEWAY_RETRY_FOR, DEFAULT_STEP_DELAY

ENV_GATEWAY_KEY = "A2A_PUSH_GATEWAY_KEY"
ENV_LOG_FORMAT = "A2A_PUSH_LOG_FORMAT"
ENV_TRACING = "A2A_PUSH_TRACING"

# What --log-level shows: the --help text, which README.md repeats word for word (a test
# compares them).
LOG_LEVEL_HELP = (
    f"what to log to stderr. {DEFAULT_LOG_LEVEL} (the default): every webhook retry and "
    "dead letter (at most one line of each a minute per push config), and other "
    "warnings; INFO adds a line per HTTP request; DEBUG adds everything; ERROR: errors only"
)

DESCRIPTION = (
    "Run the example A2A v1.0 agent with an embedded notifier: roll NdM, book X, report, "
    "fail, reject, login, or any text to echo."
)


def add_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The options of ``a2a-push mock-agent`` (defaults from ``env``)."""
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"default: {DEFAULT_HOST}")
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"1 to 65535 (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep the outbox and signing keys here (default: a temporary folder)",
    )
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        dest="allow_webhook_hosts",
        help="let webhooks go to this host, IP or CIDR (repeat for several); e.g. "
        "127.0.0.1 for a receiver on this machine",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the agent's base URL as clients see it (default: http://HOST:PORT)",
    )
    parser.add_argument(
        "--step-delay",
        type=non_negative_seconds,
        default=DEFAULT_STEP_DELAY,
        metavar="SECONDS",
        help=f"pause between task steps (default: {DEFAULT_STEP_DELAY})",
    )
    parser.add_argument(
        "--retry-schedule",
        type=_delays,
        metavar="SECONDS,...",
        help="seconds before each durable webhook retry, e.g. 1,1,2,5 (default: "
        f"{RetryPolicy().describe()})",
    )
    parser.add_argument(
        "--gateway",
        metavar="URL",
        help="post events to this a2a-push gateway instead of the embedded notifier "
        "(the gateway keeps the push configs and sends the webhooks)",
    )
    parser.add_argument(
        "--gateway-key",
        metavar="KEY",
        help=f"the agent's API key at the gateway (default: ${ENV_GATEWAY_KEY})",
    )
    # Told apart from a --gateway-key typed on the command line: the environment's key is
    # only used with --gateway, and is no mistake without it.
    parser.set_defaults(gateway_key_env=env.get(ENV_GATEWAY_KEY))
    parser.add_argument(
        "--gateway-retry-for",
        type=positive_seconds,
        metavar="SECONDS",
        help="how long one event's hand-off is retried while the gateway is unavailable "
        f"(at most 8 tries), before its task fails (default: {DEFAULT_GATEWAY_RETRY_FOR:g})",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=DEFAULT_LOG_LEVEL,
        help=LOG_LEVEL_HELP,
    )
    logs.add_arguments(
        parser,
        log_format=env.get(ENV_LOG_FORMAT) or "text",
        tracing=env.get(ENV_TRACING, "").strip().lower() in ("1", "true", "yes", "on"),
        default_note=f" (defaults: ${ENV_LOG_FORMAT}, ${ENV_TRACING})",
    )


def run(args: argparse.Namespace) -> int:
    """Run the mock agent as ``args`` say, until interrupted; the exit code."""
    problem = port_problem(args.port)
    if problem is not None:
        raise CLIError(f"--port {args.port}: {problem}", 2)
    try:
        AddressPolicy(args.allow_webhook_hosts)
    except ValueError as exc:
        raise CLIError(f"--allow-webhook-host: {exc}", 2) from None
    if args.log_format not in LOG_FORMATS:
        raise CLIError(f"${ENV_LOG_FORMAT}: {args.log_format!r}; use text or json", 2)
    _check_gateway_options(args)
    gateway_key = (args.gateway_key or args.gateway_key_env) if args.gateway else None
    return serve(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        allow_webhook_hosts=args.allow_webhook_hosts,
        public_url=args.public_url,
        step_delay=args.step_delay,
        retry_schedule=args.retry_schedule,
        gateway_url=gateway_url(args.gateway, "--gateway") if args.gateway else None,
        gateway_key=gateway_key,
        gateway_retry_for=args.gateway_retry_for or DEFAULT_GATEWAY_RETRY_FOR,
        log_level=args.log_level,
        log_format=args.log_format,
        tracing=args.tracing,
        prog=PROG,
    )


def _check_gateway_options(args: argparse.Namespace) -> None:
    """Options that only mean something with --gateway, or only without it, are refused
    in the other mode rather than ignored."""
    if args.gateway:
        if not (args.gateway_key or args.gateway_key_env):
            raise CLIError(f"--gateway needs --gateway-key KEY (or ${ENV_GATEWAY_KEY})", 2)
        if args.retry_schedule is not None:
            # The gateway sends the webhooks, on its own retry schedule.
            raise CLIError(
                "--retry-schedule is for the embedded notifier; with --gateway the gateway "
                "sends the webhooks: give `a2a-push gateway` the --retry-schedule, or leave "
                "out --gateway",
                2,
            )
        return
    for given, option in (
        (args.gateway_key is not None, "--gateway-key"),
        (args.gateway_retry_for is not None, "--gateway-retry-for"),
    ):
        if given:
            raise CLIError(f"{option} only applies with --gateway URL; add --gateway URL", 2)


def main(argv: Sequence[str] | None = None) -> int:
    """``a2a-push mock-agent`` with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    from a2a_push.cli import main as cli_main

    return cli_main(["mock-agent", *(sys.argv[1:] if argv is None else argv)])


def _port(text: str) -> int:
    # The range is checked when the agent starts (a usage error naming --port).
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)") from None


def _delays(text: str) -> tuple[float, ...]:
    try:
        delays = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, e.g. 1,1,2,5") from None
    if not all(math.isfinite(delay) and delay > 0 for delay in delays):
        raise argparse.ArgumentTypeError(f"{text!r}: every delay must be a positive number")
    return delays
