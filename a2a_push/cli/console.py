"""``a2a-push console``: the delivery console on an outbox database, in a browser."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from typing import Final

from aiohttp import web

from ..console import Console, ConsoleSource
from ..console.auth import MIN_KEY_LENGTH
from ..listen import CannotListen, bind_sockets
from .common import PROG, CLIError, Commands, add_command
from .outbox import add_database_option, given_encryption_keys, open_outbox

ENV_CONSOLE_ADMIN_KEY: Final = "A2A_PUSH_CONSOLE_ADMIN_KEY"
DEFAULT_PORT: Final = 8070


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    sub = add_command(
        commands,
        "console",
        "open the delivery console on an outbox database (a web page)",
        description="Serve the delivery console (deliveries, attempts, dead letters, "
        "endpoints, configs) on an outbox database: the SQLite file of an embedded "
        "notifier or the gateway's database. Sign in with the admin key. Replays and "
        "config changes are written to the database; a notifier or gateway running on it "
        "picks them up. Breakers and in-flight counts live in the running process and show "
        "as unknown here.",
    )
    add_database_option(sub, env)
    sub.add_argument(
        "--admin-key",
        default=env.get(ENV_CONSOLE_ADMIN_KEY),
        metavar="KEY",
        help=f"the key to sign in with, at least {MIN_KEY_LENGTH} characters "
        f"(default: ${ENV_CONSOLE_ADMIN_KEY})",
    )
    sub.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    sub.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"listen port (default: {DEFAULT_PORT})"
    )
    sub.add_argument(
        "--encryption-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a Fernet key of an encrypted database (repeat for several)",
    )
    sub.set_defaults(handler=_cmd_console)


def _cmd_console(args: argparse.Namespace) -> int:
    key: str | None = args.admin_key
    if not key:
        raise CLIError(
            f"the console needs an admin key to sign in with: --admin-key KEY or "
            f"{ENV_CONSOLE_ADMIN_KEY} (at least {MIN_KEY_LENGTH} characters; e.g. the output "
            "of `openssl rand -hex 16`)",
            2,
        )
    if len(key) < MIN_KEY_LENGTH:
        raise CLIError(f"--admin-key: at least {MIN_KEY_LENGTH} characters, please", 2)
    given_encryption_keys(args)  # checks them before anything opens
    try:
        sockets = bind_sockets(args.host, args.port, port_setting="--port")
    except CannotListen as exc:
        raise CLIError(str(exc)) from None
    store = open_outbox(args)

    async def serve() -> None:
        app = web.Application()
        Console(ConsoleSource(store=store, name="a2a-push"), [key]).add_routes(app)

        async def lifecycle(app: web.Application):  # type: ignore[no-untyped-def]
            await store.open()
            try:
                yield
            finally:
                await store.close()

        app.cleanup_ctx.append(lifecycle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        port = sockets[0].getsockname()[1]
        host = args.host if ":" not in args.host else f"[{args.host}]"
        print(
            f"{PROG} console: http://{host}:{port}/console/ on {store.location}; sign in with "
            f"the admin key (--admin-key or ${ENV_CONSOLE_ADMIN_KEY}); Ctrl-C stops",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        print(f"{PROG} console: stopped", file=sys.stderr)
    return 0


__all__ = ["ENV_CONSOLE_ADMIN_KEY", "add_commands"]
