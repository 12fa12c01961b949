"""The mock agent as an aiohttp application (JSON-RPC, agent card, REST push configs,
JWKS, metrics), and ``serve`` to run it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from a2a_push import logs
from a2a_push.delivery.dispatcher import webhook_log
from a2a_push.delivery.health import EndpointHealth
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.gateway.client import GatewayClient, GatewayError, GatewayUnreachableError
from a2a_push.httputil import SSE_KEEPALIVE_SECONDS, run_app, sse_response
from a2a_push.logs import LogFormat
from a2a_push.metrics import add_metrics_route
from a2a_push.notifier import JWKS_PATH, PushNotifier
from a2a_push.protocol.constants import HEADER_A2A_VERSION, VERSION_0_3, VERSION_1_0
from a2a_push.protocol.jsonrpc import A2AError, failure, parse_request, success
from a2a_push.server import agent_card_push_fields, mount
from a2a_push.server.app import JSON_MEDIA_TYPES
from a2a_push.signing import KeySet
from a2a_push.store import SQLiteStore

from .agent import GatewayPushConfigs, MockAgent, TaskStream
from .flows import DEFAULT_GATEWAY_RETRY_FOR, DEFAULT_STEP_DELAY, SKILLS, GatewayLink

log = logging.getLogger("a2a_push.mock_agent")

AGENT_NAME: Final = "a2a-push mock agent"
AGENT_VERSION: Final = "1.0.0"
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 9000
# WARNING shows every webhook retry and dead letter (the notifier's webhook log,
# a2a_push.webhooks, is shown from INFO then) without a line per HTTP request; INFO adds
# the access log.
DEFAULT_LOG_LEVEL: Final = "WARNING"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_BODY_BYTES: Final = 1024 * 1024
GATEWAY_CHECK_TIMEOUT: Final = 5.0
"""Seconds ``serve`` waits for the gateway's answer to its check at start."""


# ---- the card and the application ----------------------------------------------------


def agent_card(public_url: str, jwks_uri: str | None = None) -> dict[str, Any]:
    """The agent card (v1.0 fields, plus the v0.3 ``url`` for older clients);
    ``jwks_uri``: where the keys that sign its webhooks are (default: its own)."""
    base = public_url.rstrip("/")
    endpoint = f"{base}/"
    card: dict[str, Any] = {
        "name": AGENT_NAME,
        "description": "A small A2A agent for trying push notifications: rolls dice, books "
        "things, writes reports, fails, rejects and asks you to log in.",
        "version": AGENT_VERSION,
        "supportedInterfaces": [
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION_1_0},
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION_0_3},
        ],
        # v0.3 clients read these instead of supportedInterfaces.
        "url": endpoint,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "capabilities": {"streaming": True, "pushNotifications": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [dict(skill) for skill in SKILLS],
    }
    return agent_card_push_fields(card, jwks_uri or f"{base}{JWKS_PATH}")


AGENT: Final = web.AppKey("a2a_push_mock_agent", MockAgent)


def create_app(
    *,
    data_dir: Path | None,
    allow_webhook_hosts: Sequence[str] = (),
    public_url: str,
    step_delay: float = DEFAULT_STEP_DELAY,
    retry_schedule: Sequence[float] | None = None,
    gateway_url: str | None = None,
    gateway_key: str | None = None,
    gateway_retry_for: float = DEFAULT_GATEWAY_RETRY_FOR,
    keepalive: float = SSE_KEEPALIVE_SECONDS,
) -> web.Application:
    """The mock agent as an aiohttp application (the notifier starts and stops with it).

    ``data_dir`` holds the SQLite outbox and the signing keys (None: a temporary folder,
    removed at shutdown). ``allow_webhook_hosts``: SSRF allowlist entries (hosts, IPs,
    CIDRs) webhooks may go to, e.g. ``127.0.0.1`` for a local receiver. ``public_url``
    is the agent's base URL: the JWT issuer and the card's URLs. ``retry_schedule``:
    seconds before each durable webhook retry (default: the notifier's 5 s, 5 m, …); a
    short one suits demos and tests, and then an unreachable endpoint's breaker also
    cools down for only its first delay. ``gateway_url`` / ``gateway_key``: post every
    event to an a2a-push gateway and let it keep the push configs and send the webhooks,
    instead of the embedded notifier; ``gateway_retry_for``: seconds one event's hand-off
    is retried while the gateway is unavailable, before its task fails. ``keepalive``:
    seconds between the SSE comments an idle stream sends (a client that went away is
    noticed by the next one).
    """
    if (gateway_url is None) != (gateway_key is None):
        raise ValueError("gateway mode needs both the gateway URL and the agent's API key")
    gateway = (
        GatewayLink(gateway_url, gateway_key, retry_for=gateway_retry_for)
        if gateway_url and gateway_key
        else None
    )
    policy = AddressPolicy(
        list(allow_webhook_hosts), allowlist_name="the mock agent's --allow-webhook-host"
    )
    tuning: dict[str, Any] = {}
    if retry_schedule is not None:
        schedule = tuple(retry_schedule)
        if not schedule or min(schedule) <= 0:
            raise ValueError("retry_schedule: give one or more positive delays in seconds")
        tuning["retry"] = RetryPolicy(schedule=schedule)
        tuning["health"] = EndpointHealth(cool_down=schedule[0], max_cool_down=schedule[0])
    scratch: tempfile.TemporaryDirectory[str] | None = None
    if data_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="a2a-push-mock-agent-")
        directory = Path(scratch.name)
    else:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
    if gateway is not None:
        notifier = PushNotifier.open(
            "memory://",
            issuer=public_url.rstrip("/"),
            data_dir=directory,
            address_policy=policy,
            run_dispatcher=False,
            **tuning,
        )
    else:
        # PushNotifier.open(directory / "push.db", data_dir=directory).
        notifier = PushNotifier(
            SQLiteStore(directory / "push.db"),
            issuer=public_url.rstrip("/"),
            keyset=KeySet.load_or_create(directory / "keys"),
            address_policy=policy,
            **tuning,
        )
    agent = MockAgent(notifier, public_url=public_url, step_delay=step_delay, gateway=gateway)
    # In gateway mode the gateway signs the webhooks: the card points at its keys.
    card = agent_card(public_url, f"{gateway.url}{JWKS_PATH}" if gateway else None)

    async def jsonrpc(request: web.Request) -> web.StreamResponse:
        if request.content_type not in JSON_MEDIA_TYPES:
            error = A2AError.content_type_not_supported(request.content_type)
            return web.json_response(failure(None, error), status=415)
        body = await request.read()
        try:
            rpc = parse_request(body)
        except A2AError as err:
            return web.json_response(failure(err.request_id, err))
        try:
            version = agent.version_for(request.headers.get(HEADER_A2A_VERSION), rpc.method)
            owner = await agent.service.resolve_owner(request.headers)
            if agent.is_streaming(rpc.method):
                stream = await agent.open_stream(rpc.method, rpc.params, owner=owner)
                if rpc.is_notification:  # nobody to stream to: the task runs on
                    stream.close()
                    return web.Response(status=204)
                return await send_events(request, rpc.id, stream, keepalive)
            result = await agent.call(rpc.method, rpc.params, owner=owner, version=version)
        except A2AError as err:
            response = failure(rpc.id, err)
        except Exception:
            log.exception("method %s failed", rpc.method)
            response = failure(rpc.id, A2AError.internal_error())
        else:
            response = success(rpc.id, result)
        if rpc.is_notification:
            return web.Response(status=204)
        return web.json_response(response)

    async def card_route(request: web.Request) -> web.Response:
        return web.json_response(card, headers={"Cache-Control": "max-age=60"})

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await notifier.start()
        try:
            yield
        finally:
            await agent.close()
            if gateway is not None:
                await gateway.close()
            await notifier.stop()
            if scratch is not None:
                scratch.cleanup()

    async def end_streams(app: web.Application) -> None:
        # Before aiohttp waits for the handlers to finish: the open streams end now.
        agent.close_streams()

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[AGENT] = agent
    app.on_shutdown.append(end_streams)
    app.router.add_post("/", jsonrpc)
    app.router.add_get("/.well-known/agent-card.json", card_route)
    # REST push configs (through the gateway in gateway mode, like JSON-RPC) and the JWKS.
    # (In gateway mode the local notifier signs nothing: its JWKS is not served.)
    mount(
        app,
        GatewayPushConfigs(agent) if gateway else agent.service,
        jsonrpc_path=None,
        jwks=gateway is None,
    )
    add_metrics_route(app, notifier.metrics, "/metrics", before_scrape=notifier.refresh_metrics)
    app.cleanup_ctx.append(lifecycle)
    return app


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path | None,
    *,
    allow_webhook_hosts: Sequence[str] = ("127.0.0.1",),
    **options: Any,
) -> AsyncIterator[tuple[str, web.Application]]:
    """The mock agent served on a free port of 127.0.0.1 until the block ends: (its base
    URL, the application). The port is bound first, so that the card and the JWT issuer
    name it. ``options``: the rest of ``create_app``'s (``step_delay``, ...). For the
    demo, tests and benchmarks."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    runner: web.AppRunner | None = None
    try:
        sock.bind((DEFAULT_HOST, 0))
        url = f"http://{DEFAULT_HOST}:{sock.getsockname()[1]}"
        app = create_app(
            data_dir=data_dir, allow_webhook_hosts=allow_webhook_hosts, public_url=url, **options
        )
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5)
        await runner.setup()
        await web.SockSite(runner, sock, backlog=2048).start()
        yield url, app
    finally:
        if runner is not None:
            await runner.cleanup()  # the agent's notifier stops with it
        sock.close()


SSE_KEEPALIVE: Final = b": keep-alive\n\n"


async def send_events(
    request: web.Request, request_id: str | int | None, stream: TaskStream, keepalive: float
) -> web.StreamResponse:
    """Send ``stream`` as Server-Sent Events, one JSON-RPC response per event
    (``data: {"jsonrpc": "2.0", "id": ..., "result": ...}``, spec §9.4.2), until the
    stream ends; a client that goes away ends it too (its next write fails)."""
    prefix = b'data: {"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":'
    response = sse_response()
    subscriber = stream.subscriber
    try:
        await response.prepare(request)
        await response.write(prefix + stream.first + b"}\n\n")
        while True:
            try:
                item = await subscriber.get(keepalive)
            except TimeoutError:
                await response.write(SSE_KEEPALIVE)
                continue
            if item is None:
                break
            await response.write(prefix + item.result(stream.version) + b"}\n\n")
        await response.write_eof()
    except ConnectionError:
        log.debug("a stream's client went away")
    finally:
        stream.close()
    return response


def serve(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    data_dir: Path | None = None,
    allow_webhook_hosts: Sequence[str] = (),
    public_url: str | None = None,
    step_delay: float = DEFAULT_STEP_DELAY,
    retry_schedule: Sequence[float] | None = None,
    gateway_url: str | None = None,
    gateway_key: str | None = None,
    gateway_retry_for: float = DEFAULT_GATEWAY_RETRY_FOR,
    log_level: str = DEFAULT_LOG_LEVEL,
    log_format: LogFormat = "text",
    tracing: bool = False,
    prog: str = "a2a-push mock-agent",
) -> int:
    """Run the mock agent until interrupted; the exit code.

    Logs to stderr at ``log_level`` (what each level shows: ``cli.LOG_LEVEL_HELP``). The
    banner is printed once the port is bound; a port that cannot be bound is one line on
    stderr (``prog: error: ...``) and exit code 1 (2 for a port out of range).
    """
    problem = port_problem(port)
    if problem is not None:
        print(f"{prog}: error: --port {port}: {problem}", file=sys.stderr)
        return 2
    # Imported here, not at the top: a2a_push.cli brings in the other commands' modules.
    from a2a_push.cli.common import start_logging

    if not start_logging(
        log_level.upper(),
        log_format,
        tracing_on=tracing,
        service="a2a-push-mock-agent",
        tracing_setting="--tracing",
        prog=prog,
    ):
        return 2
    if logging.getLogger().isEnabledFor(logging.WARNING):
        # Retries are INFO in the notifier's webhook log; this console shows them.
        webhook_log.setLevel(min(logging.INFO, logging.getLogger().getEffectiveLevel()))
    shown_host = f"[{host}]" if ":" in host else host
    url = (public_url or f"http://{shown_host}:{port}").rstrip("/")
    try:
        app = create_app(
            data_dir=data_dir,
            allow_webhook_hosts=allow_webhook_hosts,
            public_url=url,
            step_delay=step_delay,
            retry_schedule=retry_schedule,
            gateway_url=gateway_url,
            gateway_key=gateway_key,
            gateway_retry_for=gateway_retry_for,
        )
    except OSError as exc:  # the data folder cannot be made
        print(f"{prog}: error: {bind_error(exc, host, port)}", file=sys.stderr)
        return 1
    lines = [
        f"{AGENT_NAME}: listening on {shown_host}:{port}; JSON-RPC at {url}/, "
        f"card at {url}/.well-known/agent-card.json"
    ]
    if gateway_url and gateway_key:
        try:
            agent_id = asyncio.run(ask_gateway(gateway_url, gateway_key))
        except ValueError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 1
        lines.append(
            f"events and push configs go to the gateway at {gateway_url} (as agent {agent_id})"
        )
    if not allow_webhook_hosts:
        lines.append(
            "note: webhooks to private or loopback addresses are refused; pass "
            "--allow-webhook-host 127.0.0.1 for a receiver on this machine"
        )
    started = False

    def announce(_aiohttp_banner: str) -> None:
        # run_app calls this once every site listens: a port in use fails before it.
        nonlocal started
        started = True
        logs.serving("\n".join(lines))

    try:
        # aiohttp's access log (a line per request) is at INFO: shown from --log-level INFO.
        run_app(
            app,
            host=host,
            port=port,
            print=announce,
            access_log=logging.getLogger("aiohttp.access"),
        )
    except OSError as exc:
        if started:
            raise
        print(f"{prog}: error: {bind_error(exc, host, port)}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # the outbox file cannot be opened (at startup)
        if started:
            raise
        print(
            f"{prog}: error: cannot open the outbox in the data folder ({exc}); check "
            "--data-dir (it must be a writable folder of the mock agent's own)",
            file=sys.stderr,
        )
        return 1
    return 0


async def ask_gateway(url: str, key: str, timeout: float = GATEWAY_CHECK_TIMEOUT) -> str:
    """The agent id the gateway at ``url`` knows ``key`` by (``GET /v1/agent``); a
    ValueError with the line to print when nothing answers there, or the gateway
    refuses the key, or what answers is no gateway."""
    try:
        async with GatewayClient(url, key, timeout=timeout) as client:
            return await client.whoami()
    except GatewayUnreachableError as exc:
        raise ValueError(
            f"cannot reach the gateway at {url} ({exc.cause}): is `a2a-push gateway` running there?"
        ) from None
    except GatewayError as exc:
        if exc.status in (401, 403):
            raise ValueError(
                f"the gateway at {url} refused the agent key ({exc.status}): check "
                "--gateway-key and the gateway's agents"
            ) from None
        raise ValueError(f"{exc}; check --gateway") from None


def port_problem(port: int) -> str | None:
    """Why ``port`` cannot be listened on, or None. (0, "any free port", would leave the
    agent's issuer and card URLs without the port actually chosen.)"""
    if 1 <= port <= 65535:
        return None
    return "out of range; give a port from 1 to 65535"


def bind_error(exc: OSError, host: str, port: int) -> str:
    """One line for a failure to start listening on ``host:port``."""
    if exc.filename is not None:  # not the socket: the data folder, its files
        return f"{exc.strerror or exc} ({exc.filename}); check --data-dir"
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is in use; pick another with --port or stop the process using it"
    if exc.errno == errno.EACCES:
        return (
            f"port {port}: permission denied (ports below 1024 need privileges); pick "
            "another with --port"
        )
    # (aiohttp's own text repeats the address: the system's reason alone is enough)
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        reason = str(exc.strerror or exc)  # the host name did not resolve, ...
    else:
        reason = os.strerror(exc.errno).lower()
    return f"cannot listen on {host}:{port}: {reason}; check --host and --port"
