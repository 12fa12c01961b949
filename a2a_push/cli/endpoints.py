"""``a2a-push endpoints``: a running gateway's endpoint health."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping

from ..gateway.client import describe_answer
from .common import CLIError, Commands, add_command, gateway_url


def _cmd_endpoints(args: argparse.Namespace) -> int:
    import aiohttp

    if not args.admin_key:
        raise CLIError(
            "--admin-key (or $A2A_GATEWAY_ADMIN_KEY, or $A2A_GATEWAY_ADMIN_KEYS) is required", 2
        )
    base = gateway_url(args.gateway, "--gateway")
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


def _first_admin_key(env: Mapping[str, str]) -> str | None:
    """The first of the gateway's own ``A2A_GATEWAY_ADMIN_KEYS`` (comma-separated)."""
    keys = [k.strip() for k in env.get("A2A_GATEWAY_ADMIN_KEYS", "").split(",") if k.strip()]
    return keys[0] if keys else None


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``endpoints`` command."""
    endpoints = add_command(
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
