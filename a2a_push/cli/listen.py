"""``a2a-push listen``: a local webhook endpoint that verifies and prints what arrives."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web
from yarl import URL

from ..httputil import GuardedAppRunner
from ..listen import CannotListen, bind_sockets
from ..listener import FailPlan, Listener
from ..signing import standard_webhooks as stdwh
from .common import CLIError, Commands, add_command, positive_int, positive_seconds

DESCRIPTION = """\
Listen for webhooks on this machine, verify each one (a JWT against an agent's JWK
Set, a notification token or a Standard Webhooks secret), print a line per webhook
and answer as told (--fail). For quickstarts and tests; see docs/listen.md."""

_EPILOG = """\
exit status: 0 when stopped (Ctrl-C, or --count reached) with no webhook refused;
1 when a webhook failed verification, or --timeout passed before --count;
2 for a usage error."""


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``listen`` command."""
    listen = add_command(
        commands,
        "listen",
        "receive, verify and print webhooks on this machine (for quickstarts and tests)",
        description=DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listen.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    listen.add_argument(
        "--port",
        type=_port,
        default=8000,
        help="the port (default: 8000; 0: any free port, printed)",
    )
    listen.add_argument("--path", default="/webhook", help="the webhook path (default: /webhook)")
    listen.add_argument(
        "--agent",
        metavar="URL",
        help="verify JWTs with the JWK Set this agent's card declares "
        "(else URL's origin + /.well-known/jwks.json)",
    )
    listen.add_argument("--jwks", metavar="URL", help="verify JWTs with this JWK Set")
    listen.add_argument(
        "--issuer", metavar="ISS", help="the JWT iss must be this (with --agent or --jwks)"
    )
    listen.add_argument(
        "--audience", metavar="AUD", help="the JWT aud must be this (with --agent or --jwks)"
    )
    listen.add_argument(
        "--token",
        metavar="TOKEN",
        help="the X-A2A-Notification-Token header must be this; never printed",
    )
    listen.add_argument(
        "--secret",
        metavar="WHSEC",
        help="the webhook-signature must match this Standard Webhooks secret (whsec_...); "
        "never printed",
    )
    listen.add_argument(
        "--fail",
        type=_fail_plan,
        metavar="STATUS[xN]",
        help="answer STATUS to the first N webhooks that would get 200 (e.g. 503x2), then "
        "200; without xN, to all",
    )
    listen.add_argument(
        "--retry-after",
        type=_whole_seconds,
        metavar="SECONDS",
        help="send Retry-After: SECONDS with the --fail answers",
    )
    listen.add_argument(
        "--jsonl",
        type=Path,
        metavar="FILE",
        help="append one JSON object per webhook to FILE (headers with tokens redacted)",
    )
    listen.add_argument(
        "--count",
        type=positive_int,
        metavar="N",
        help="stop after N webhooks got a final answer (not --fail, not 503)",
    )
    listen.add_argument(
        "--timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="with --count: give up (exit 1) if the count is not reached in SECONDS",
    )
    listen.set_defaults(handler=run)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range; give 0 to 65535")
    return value


def _fail_plan(text: str) -> FailPlan:
    try:
        return FailPlan.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _http_url(value: str, flag: str) -> str:
    try:
        url = URL(value)
    except ValueError:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        example = "example: http://127.0.0.1:9000"
        raise CLIError(f"{flag} {value!r} is not an http(s) URL ({example})", 2)
    if url.user or url.password:
        raise CLIError(f"{flag}: put no credentials in the URL", 2)
    return value


def _listener(args: argparse.Namespace) -> Listener:
    """The listener the options describe; a usage error (exit 2) for a bad combination."""
    jwt_source = args.agent is not None or args.jwks is not None
    if args.agent is not None and args.jwks is not None:
        raise CLIError(
            "--agent and --jwks: give one (--agent finds the JWK Set in the agent card)", 2
        )
    for flag, value in (("--issuer", args.issuer), ("--audience", args.audience)):
        if value is not None and not jwt_source:
            raise CLIError(f"{flag} needs --agent or --jwks (it is checked in the JWT)", 2)
    if args.agent is not None:
        _http_url(args.agent, "--agent")
    if args.jwks is not None:
        _http_url(args.jwks, "--jwks")
    if args.token is not None and args.secret is not None:
        raise CLIError(
            "--token and --secret: a push config holds one token; give --secret for a "
            "whsec_ one, --token for any other",
            2,
        )
    if args.token is not None:
        if not args.token:
            raise CLIError("--token is empty", 2)
        if stdwh.is_standard_webhooks_secret(args.token):
            raise CLIError(
                "--token whsec_...: a whsec_ token is sent as a Standard Webhooks signature, "
                "not as a token header; pass it as --secret",
                2,
            )
    if args.secret is not None and not stdwh.is_standard_webhooks_secret(args.secret):
        raise CLIError("--secret must be a Standard Webhooks secret (whsec_...)", 2)
    if args.retry_after is not None and args.fail is None:
        raise CLIError("--retry-after needs --fail (it goes with the failing answers)", 2)
    if args.timeout is not None and args.count is None:
        raise CLIError("--timeout needs --count (it is how long to wait for the count)", 2)
    if not args.path.startswith("/"):
        raise CLIError(f"--path {args.path!r} must start with '/' (example: /webhook)", 2)
    try:
        return Listener(
            path=args.path,
            agent=args.agent,
            jwks_url=args.jwks,
            issuer=args.issuer,
            audience=args.audience,
            token=args.token,
            secret=args.secret,
            fail=args.fail,
            retry_after=args.retry_after,
            jsonl=args.jsonl,
            count=args.count,
        )
    except ValueError as exc:  # a secret that is not valid base64, ...
        message = str(exc).removeprefix("standard_webhooks_secrets: ")
        raise CLIError(f"--secret: {message}" if args.secret else message, 2) from None


def run(args: argparse.Namespace) -> int:
    listener = _listener(args)
    # The JWK Set cache logs its fetch failures for a service's operator; here the
    # listener's own lines say the same, once.
    logging.getLogger("receiver.verify").setLevel(logging.ERROR)
    try:
        sockets = bind_sockets(args.host, args.port, port_setting="--port")
    except CannotListen as exc:
        raise CLIError(str(exc), 1) from None
    try:
        return asyncio.run(_serve(listener, sockets, args.host, args.timeout))
    finally:
        for sock in sockets:
            sock.close()


async def _serve(
    listener: Listener, sockets: list[socket.socket], host: str, timeout: float | None
) -> int:
    runner = GuardedAppRunner(listener.app(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()  # the listener's start-up: the JSON Lines file, the JWK Set
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    timed_out = False
    try:
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        port = sockets[0].getsockname()[1]
        for line in listener.start_lines(_webhook_url(host, port, listener.path)):
            print(line, flush=True)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(listener.done.wait())]
        try:
            finished, _ = await asyncio.wait(
                waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
        timed_out = not finished
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(signum)
        await runner.cleanup()
    print(f"a2a-push listen: stopped: {listener.summary()}", flush=True)
    if timed_out:
        assert listener.count is not None and timeout is not None
        print(
            f"a2a-push: error: --timeout: {listener.finals} of {listener.count} webhooks in "
            f"{timeout:g} s; is the sender's push config pointed at this URL?",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return listener.exit_code()


def _webhook_url(host: str, port: int, path: str) -> str:
    """The URL a push config names to reach this listener (a wildcard host: loopback)."""
    shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}{path}"
