"""``a2a-push receiver`` / ``python -m receiver``: run the receiver service."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from .settings import DEFAULT_HOST, DEFAULT_PORT, ENV_PREFIX, SettingsError, load_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The receiver's options (shared by ``a2a-push receiver`` and ``python -m receiver``)."""
    parser.add_argument("--config", type=Path, metavar="FILE", help="a TOML or JSON config file")
    parser.add_argument("--host", help=f"listen address (default: {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"listen port (default: {DEFAULT_PORT})")
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="URL",
        dest="agents",
        help="an agent's A2A JSON-RPC URL to trust (repeat for several); per-agent options "
        "(auth methods, JWKS URL, credentials) go in the config file",
    )
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="default: ./receiver-data")
    parser.add_argument("--database", metavar="PATH", help="default: DIR/receiver.db")
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="this receiver's URL as agents reach it (default: http://HOST:PORT)",
    )
    parser.add_argument("--log-level", default="INFO", help="default: INFO")
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="log every HTTP request (off by default: one line per webhook adds up)",
    )


def run(args: argparse.Namespace) -> int:
    """Load the settings (file < environment < flags) and serve until interrupted."""
    from .app import create_app

    overrides: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "data_dir": args.data_dir,
        "database": args.database,
        "public_url": args.public_url,
    }
    try:
        settings = load_settings(
            config_file=args.config, overrides=overrides, extra_agents=args.agents
        )
    except SettingsError as exc:
        print(f"receiver: error: {exc}", file=sys.stderr)
        return 2
    if not settings.agents:
        print(
            "receiver: error: no agents configured; pass --agent URL, set "
            f"{ENV_PREFIX}AGENTS, or list them in a --config file",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=str(args.log_level).upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    print(
        f"receiver: webhooks at {settings.webhook_url}; client API at {settings.base_url}/ "
        f"(agents: {', '.join(a.key for a in settings.agents)})",
        flush=True,
    )
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        print=None,
        access_log=logging.getLogger("aiohttp.access") if args.access_log else None,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m receiver",
        description="The a2a-push receiver: verifies A2A webhooks, fetches tasks, serves them.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
