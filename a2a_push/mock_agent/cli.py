"""The mock agent's command-line options and ``main``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from a2a_push.delivery.retry import RetryPolicy

from .app import DEFAULT_HOST, DEFAULT_LOG_LEVEL, DEFAULT_PORT, LOG_LEVELS, port_problem, serve
from .flows import DEFAULT_STEP_DELAY


def build_parser(prog: str = "mock-agent") -> argparse.ArgumentParser:
    """The mock agent's command-line options (also used by ``a2a-push mock-agent``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
        type=float,
        default=DEFAULT_STEP_DELAY,
        metavar="SECONDS",
        help=f"pause between task steps (default: {DEFAULT_STEP_DELAY})",
    )
    parser.add_argument(
        "--gateway",
        metavar="URL",
        dest="gateway_url",
        help="post events to this a2a-push gateway instead of the embedded notifier "
        "(the gateway keeps the push configs and sends the webhooks)",
    )
    parser.add_argument(
        "--gateway-key",
        metavar="KEY",
        default=os.environ.get("A2A_PUSH_GATEWAY_KEY"),
        help="the agent's API key at the gateway (default: $A2A_PUSH_GATEWAY_KEY)",
    )
    parser.add_argument(
        "--retry-schedule",
        type=_delays,
        metavar="SECONDS,...",
        help="seconds before each durable webhook retry, e.g. 1,1,2,5 (default: "
        f"{RetryPolicy().describe()})",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=DEFAULT_LOG_LEVEL,
        help=f"log to stderr from this level (default: {DEFAULT_LOG_LEVEL}: webhook retries "
        "and dead letters; INFO adds a line per request)",
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)") from None
    problem = port_problem(port)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{port} is {problem}")
    return port


def _delays(text: str) -> tuple[float, ...]:
    try:
        delays = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, e.g. 1,1,2,5") from None
    if min(delays) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every delay must be positive")
    return delays


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return serve(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            allow_webhook_hosts=args.allow_webhook_hosts,
            public_url=args.public_url,
            step_delay=args.step_delay,
            retry_schedule=args.retry_schedule,
            gateway_url=args.gateway_url,
            gateway_key=args.gateway_key,
            log_level=args.log_level,
            prog=parser.prog,
        )
    except ValueError as exc:  # a bad --allow-webhook-host entry, or --gateway without a key
        print(f"mock-agent: error: {exc}", file=sys.stderr)
        return 2
