"""The gateway service: agents post task events; it owns configs, signing and delivery.

Routes:

- ``POST /v1/tasks/{taskId}/events`` (agent API key): a ``StreamResponse``-shaped
  event, durable before the 202.
- ``POST /v1/rpc`` and ``/v1/tasks/{taskId}/pushNotificationConfigs[/{id}]`` (agent API
  key): the A2A push-config methods for agents that delegate config management; configs
  are scoped to the agent and to the owner the agent names in ``X-A2A-Owner``.
- ``GET /.well-known/jwks.json``: the keys every replica signs with (kept in the
  database).
- ``/admin/...`` (admin key): deliveries (list, show, attempts, replay), endpoint health,
  configs (disable, enable).
- ``GET /metrics``, ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

from aiohttp import web
from pydantic import ValidationError

from a2a_push import tracing
from a2a_push.console import Console, ConsoleSource
from a2a_push.delivery.dispatcher import DispatcherOptions
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts
from a2a_push.endpoints import parse_endpoint
from a2a_push.errors import StoreUnavailableError
from a2a_push.events import OPERATOR_TASK, is_operator_task
from a2a_push.httputil import read_at_most
from a2a_push.metrics import add_metrics_route
from a2a_push.notifier import JWKS_PATH, PushNotifier
from a2a_push.openapi import (
    JSON,
    UNAVAILABLE,
    Body,
    Operation,
    Param,
    add_openapi_route,
    bearer_scheme,
    document,
    refusal,
    route,
)
from a2a_push.protocol.constants import HEADER_RETRY_AFTER
from a2a_push.protocol.jsonrpc import A2AError
from a2a_push.protocol.types import (
    MAX_ID_CHARS,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
    is_id,
)
from a2a_push.protocol.v03 import task_view
from a2a_push.server import PushConfigService, mount
from a2a_push.server.app import jwks_operation
from a2a_push.server.push_config import NO_SNAPSHOT, RETRY_AFTER_SECONDS, NoSnapshot
from a2a_push.signing.keys import KeySet
from a2a_push.store import DeliveryFilter, DeliveryState, StoreOptions, matching_ids, open_store

from .schemas import (
    REPLAY_USAGE,
    AgentIdentity,
    AttemptList,
    AttemptView,
    BodyError,
    ConfigState,
    DeliveryList,
    DeliveryView,
    EventAccepted,
    Health,
    NoBody,
    OpenEndpoints,
    Replayed,
    ReplayRequest,
    parse_body,
)
from .settings import ENV_PREFIX, GatewaySettings
from .state import GatewayState, TaskOwner, open_gateway_state

log = logging.getLogger(__name__)

HEADER_OWNER: Final = "X-A2A-Owner"
HEADER_IDEMPOTENCY_KEY: Final = "Idempotency-Key"
MAINTENANCE_INTERVAL: Final = 3600.0
"""Seconds between two runs of the gateway's upkeep (finished tasks, retired keys)."""
TASK_PURGE_BATCH: Final = 1000
REPLAY_BY_FILTER_LIMIT: Final = 10_000  # dead letters one replay by filter sends at most
META_ISSUER: Final = "issuer"
"""The gateway state's record of the issuer the last gateway to start signed as."""


class Gateway:
    """The gateway's parts: notifier (outbox, dispatcher, signer), state and API keys."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        keys = [k.get_secret_value() for k in settings.encryption_keys] or None
        self.state: GatewayState = open_gateway_state(settings.database_url, keys)
        store = open_store(
            settings.database_url,
            StoreOptions(encryption_keys=keys, attempt_history=settings.attempt_history),
        )
        # A placeholder key set: start() adopts the keys stored in the database.
        self._keyset = KeySet.generate()
        self.notifier = PushNotifier(
            store,
            issuer=settings.base_url,
            keyset=self._keyset,
            address_policy=AddressPolicy(
                list(settings.allow_webhook_hosts),
                allowlist_name="the gateway's allow_webhook_hosts (--allow-webhook-host)",
            ),
            timeouts=Timeouts(
                connect=min(5.0, settings.request_timeout), total=settings.request_timeout
            ),
            retry=RetryPolicy(
                quick_attempts=settings.quick_attempts, schedule=settings.retry_schedule
            ),
            dispatcher=DispatcherOptions(
                lease_seconds=settings.lease_seconds,
                per_endpoint=settings.max_in_flight_per_endpoint,
                max_delivery_age=settings.max_delivery_age,
                rate_limits=settings.rate_limits,
            ),
            key_reload_interval=0,
            operator_url=settings.operator_url,
            operator_token=settings.operator_token.get_secret_value()
            if settings.operator_token is not None
            else None,
        )
        self._agents = {_digest(a.api_key.get_secret_value()): a.id for a in settings.agents}
        self._admins = [_digest(k.get_secret_value()) for k in settings.admin_keys]
        self._key_watcher: asyncio.Task[None] | None = None
        self._keys_checked_at = float("-inf")  # time.monotonic() of the last reload
        self._maintenance: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # The outbox first: a database that cannot be used (not a database, no such
        # role...) stops the start before the gateway's state, and a new signing key in
        # it, are created beside it. (The notifier's start opens it again: a no-op.)
        try:
            await self.notifier.store.open()
            await self.state.open()
            await self.reload_keys(starting=True)
            await self.check_issuer()
            await self.notifier.start()
        except BaseException:
            # aiohttp runs no cleanup for a startup that failed: close what is open, or
            # its threads (aiosqlite's) keep the process from exiting.
            with contextlib.suppress(Exception):
                await self.state.close()
            with contextlib.suppress(Exception):
                await self.notifier.store.close()
            raise
        self._key_watcher = asyncio.create_task(self._watch_keys(), name="gateway-keys")
        self._maintenance = asyncio.create_task(self._maintain(), name="gateway-maintenance")

    async def stop(self) -> None:
        tasks = [t for t in (self._key_watcher, self._maintenance) if t is not None]
        for task in tasks:  # all cancelled before any is awaited: none starts a new run
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._key_watcher = self._maintenance = None
        await self.notifier.stop()
        await self.state.close()

    async def check_issuer(self) -> None:
        """Record the issuer this gateway signs as in the database its replicas share,
        and warn when the gateway that started on it before signed as another: a
        receiver trusts one issuer per agent, so it refuses one replica's webhooks (or,
        after a change of public_url, every webhook until its issuer is updated)."""
        issuer = self.notifier.issuer
        before = await self.state.swap_meta(META_ISSUER, issuer)
        if before is None or before[0] == issuer:
            return
        previous, at = before
        log.warning(
            "this gateway signs webhooks as issuer %s, but the gateway that started before "
            "it on this database (at %s) signed as %s: receivers accept one issuer per agent "
            "and refuse the other's webhooks. Give every replica the same --public-url "
            "(public_url, %sPUBLIC_URL), the URL receivers reach the gateways at; if the "
            "change is meant, set issuer = %s in each receiver's entry for these agents",
            issuer,
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)),
            previous,
            ENV_PREFIX,
            json.dumps(issuer),
        )

    async def reload_keys(self, *, starting: bool = False) -> bool:
        """Adopt keys another replica (or ``a2a-push keys rotate``) stored; True if changed."""
        keys = await self.state.load_keys()
        if [(k.kid, k.retired_at) for k in keys] == [
            (k.kid, k.retired_at) for k in self._keyset.keys
        ]:
            return False
        self._keyset._adopt(KeySet(keys, grace_period=self._keyset.grace_period))
        what = "signing keys loaded" if starting else "signing keys reloaded"
        log.info("%s; active kid %s", what, self._keyset.active.kid)
        self.notifier.note_key_changes()  # key.rotated, key.retired (docs/events.md)
        return True

    async def fresh_keys(self) -> None:
        """Reload the stored keys if the last look was over a second ago (for the JWKS
        route); a failure keeps the set in memory, and is logged."""
        now = time.monotonic()
        if now - self._keys_checked_at < 1.0:
            return
        self._keys_checked_at = now
        try:
            await self.reload_keys()
        except StoreUnavailableError as exc:
            log.warning("reloading signing keys failed; publishing the old set (%s)", exc)
        except Exception:
            log.exception("reloading signing keys failed; publishing the old set")

    async def _watch_keys(self) -> None:
        while True:
            await asyncio.sleep(self.settings.key_reload_interval)
            try:
                await self.reload_keys()
            except StoreUnavailableError as exc:
                # An outage: one line per try, not a traceback every key_reload_interval.
                log.warning("reloading signing keys failed; still using the old set (%s)", exc)
            except Exception:
                log.warning("reloading signing keys failed; still using the old set", exc_info=True)

    async def _maintain(self) -> None:
        """At start, then every MAINTENANCE_INTERVAL: forget finished tasks past their
        retention and delete retired keys past their grace. A failure is one warning
        line; the next run tries again."""
        jobs = (
            ("purging finished tasks", self.purge_finished_tasks),
            ("pruning retired signing keys", self.prune_keys),
        )
        while True:
            for what, job in jobs:
                try:
                    await job()
                except StoreUnavailableError as exc:
                    log.warning("%s failed; retrying in an hour (%s)", what, exc)
                except Exception as exc:
                    log.warning(
                        "%s failed; retrying in an hour (%s: %s)", what, type(exc).__name__, exc
                    )
            await asyncio.sleep(MAINTENANCE_INTERVAL)

    async def purge_finished_tasks(
        self, *, now: float | None = None, batch: int = TASK_PURGE_BATCH
    ) -> int:
        """Forget tasks whose latest status is terminal and whose last event is older than
        ``task_retention_days`` (and that have no push config left), ``batch`` rows per
        statement; the count. Logs one line when it deleted any. Their ids become new:
        the next agent to name one owns it."""
        retention = self.settings.task_retention_seconds
        if retention is None:
            return 0
        before = (time.time() if now is None else now) - retention
        total = 0
        while True:
            deleted = await self.state.purge_tasks(updated_before=before, limit=batch)
            total += deleted
            if deleted < batch:
                break
            await asyncio.sleep(0)  # let requests in between batches
        if total:
            log.info(
                "purged %d finished task(s) last updated over %g day(s) ago",
                total,
                self.settings.task_retention_days,
            )
        return total

    async def prune_keys(self, *, now: float | None = None) -> list[str]:
        """Delete retired signing keys past their grace period (no longer in the JWKS)
        from the database, then drop them here too; the kids deleted."""
        pruned = await self.state.prune_keys(self._keyset.grace_period, now)
        if pruned:
            log.info("deleted %d retired signing key(s) past their grace period", len(pruned))
            await self.reload_keys()
        return pruned

    # ---- identities ------------------------------------------------------------------

    def agent_for(self, headers: Mapping[str, str]) -> str | None:
        key = _bearer(headers)
        if key is None:
            return None
        digest = _digest(key)
        found = None
        for known, agent in self._agents.items():
            if hmac.compare_digest(known, digest):
                found = agent
        return found

    def is_admin(self, headers: Mapping[str, str]) -> bool:
        key = _bearer(headers)
        if key is None:
            return False
        digest = _digest(key)
        return any(hmac.compare_digest(known, digest) for known in self._admins)

    async def record(
        self, agent_id: str, task_id: str, status: dict[str, Any] | None, context: str | None
    ) -> TaskOwner | None:
        """Claim ``task_id`` for ``agent_id`` when new and record its latest status and
        context; the task's record after that, None when another agent owns it.
        Always the database's answer (no cache): a finished task's row may have been
        purged (by any replica), and its id is then a new task for whoever names it."""
        return await self.state.claim_task(task_id, agent_id, context_id=context, status=status)

    async def owns(self, agent_id: str, task_id: str) -> bool:
        """Whether ``agent_id`` owns ``task_id``, claiming it when new."""
        return await self.record(agent_id, task_id, None, None) is not None

    async def task_for(self, task_id: str, owner: str) -> Task | NoSnapshot | None:
        """The push-config service's lookup for Create: the task if the owner's agent owns
        it, claiming a task id no agent has named yet."""
        agent_id = owner.split("/", 1)[0]
        if not await self.owns(agent_id, task_id):
            return None
        return await self._task(task_id)

    async def known_task(self, task_id: str, owner: str) -> Task | NoSnapshot | None:
        """The lookup for Get, List and Delete: the task if the owner's agent owns it.
        Never claims: reading a task id nobody has named must not make it the reader's."""
        agent_id = owner.split("/", 1)[0]
        known = await self.state.owner(task_id)
        if known is None or known.agent_id != agent_id:
            return None
        return await self._task(task_id, known)

    async def _task(self, task_id: str, known: TaskOwner | None = None) -> Task | NoSnapshot:
        """The task as the gateway knows it (its latest recorded status and context), or
        NO_SNAPSHOT before its agent has posted an event with its context and status: a
        new config then gets the task's events from the next one, not a made-up
        snapshot."""
        if known is None:
            known = await self.state.owner(task_id)
        status = _recorded_status(known)
        if known is None or known.context_id is None or status is None:
            return NO_SNAPSHOT
        return Task(id=task_id, context_id=known.context_id, status=status)


def _recorded_status(known: TaskOwner | None) -> TaskStatus | None:
    """The task's last recorded status; None when there is none (or it is unreadable)."""
    if known is None or known.status is None:
        return None
    try:
        return TaskStatus.model_validate(known.status)
    except ValidationError:
        return None


def _digest(value: str) -> str:
    # Header values may hold undecodable bytes (as surrogates): never a 500 for those.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


def _error(status: int, reason: str, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": reason, "message": message}, status=status, headers=headers)


def _unauthorized(headers: Mapping[str, str], what: str, setting: str) -> web.Response:
    if _bearer(headers) is None:
        return _error(401, "unauthorized", f"send Authorization: Bearer <{what}>")
    # Never echo the key sent: it may be another secret.
    return _error(
        401,
        "unauthorized",
        f"the bearer key sent is not an {what} of this gateway; use one from its {setting}",
    )


def _unavailable(exc: Exception) -> web.Response:
    # The cause (a host, a port, a driver message) is for the operator's log, not callers.
    log.warning("answering 503: the database is unavailable (%s)", exc)
    return _error(
        503,
        "unavailable",
        "the database is unavailable; nothing was written; retry after a moment",
        **{HEADER_RETRY_AFTER: RETRY_AFTER_SECONDS},
    )


_ROUTER_ERRORS: Final = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def _router_message(exc: web.HTTPException, request: web.Request) -> str:
    asked = f"{request.method} {request.path}"
    if exc.status == 404:
        return (
            f"no such route: {asked}; the gateway serves /v1/tasks/{{taskId}}/events, "
            "/v1/rpc, /v1/tasks/{taskId}/pushNotificationConfigs, /admin/..., "
            "/.well-known/jwks.json, /metrics and /healthz"
        )
    if exc.status == 405:
        return f"{asked}: method not allowed here; use {exc.headers.get('Allow', 'another')}"
    if exc.status == 413:
        return f"{asked}: the body is too large"
    return f"{asked}: {exc.reason}"


_LIST_PARAMETERS: Final = (
    "state",
    "task",
    "config",
    "endpoint",
    "since",
    "until",
    "limit",
    "after",
)


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not an integer") from None


def _unix_time(name: str, text: str) -> float:
    try:
        return _finite(text)
    except ValueError:
        raise ValueError(
            f"{name}: Unix seconds (e.g. 1767225600), not {text!r}; the CLI "
            "(a2a-push deliveries list --since) takes ISO 8601"
        ) from None


def valid_task_id(value: str) -> bool:
    """An id by the push-config methods' rule (:func:`is_id`): non-empty text a database
    can store (no NUL, no lone surrogate), at most 256 characters, no control characters."""
    return is_id(value)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


_INVALID_TASK_ID: Final = (
    f"the task id must be text of at most {MAX_ID_CHARS} characters (no NUL, no control "
    "characters, no lone surrogate)"
)
_EVENT_TASK_KEYS: Final = (
    ("statusUpdate", "taskId"),
    ("status_update", "task_id"),
    ("artifactUpdate", "taskId"),
    ("artifact_update", "task_id"),
    ("task", "id"),
)


def _named_task_id(raw: bytes) -> object:
    """The task id a refused event body names (None: none found), read with the
    standard library's parser, which takes what the event model's refuses (a lone
    surrogate escape): only to tell a bad task id from other mistakes."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    for variant, key in _EVENT_TASK_KEYS:
        inner = body.get(variant)
        if isinstance(inner, dict) and key in inner:
            return inner[key]
    return None


def _event_task_id(event: StreamResponse) -> str | None:
    inner = event.event
    if isinstance(inner, Task):
        return inner.id
    if isinstance(inner, TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
        return inner.task_id
    return None


CONSOLE_PATH: Final = "/console"
GATEWAY: Final = web.AppKey("a2a_push_gateway", Gateway)


def create_app(settings: GatewaySettings, *, gateway: Gateway | None = None) -> web.Application:
    """The gateway as an aiohttp application; it starts and stops with the app."""
    gw = gateway or Gateway(settings)
    limit = settings.max_body_bytes

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        path = request.path
        if path.startswith("/v1/") and gw.agent_for(request.headers) is None:
            return _unauthorized(request.headers, "agent API key", "agents (--agent-key)")
        if path.startswith("/admin/") and not gw.is_admin(request.headers):
            return _unauthorized(request.headers, "admin key", "admin_keys (--admin-key)")
        try:
            return await handler(request)
        except StoreUnavailableError as exc:
            return _unavailable(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            # The router's own 404 and 405 (a wrong path or method): JSON like every
            # other answer, saying what was asked.
            return _error(
                exc.status,
                _ROUTER_ERRORS.get(exc.status, "http_error"),
                _router_message(exc, request),
                **({"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}),
            )
        except Exception:
            log.exception("unexpected error answering %s %s", request.method, request.path)
            return _error(500, "internal", "internal error; see the gateway's log")

    async def post_event(request: web.Request) -> web.Response:
        # The agent's trace continues here (its traceparent header, sent by
        # GatewayClient): the publish, every attempt and the receiver are in it.
        with tracing.server_span("a2a_push gateway event", request.headers) as span:
            response = await accept_event(request)
            if span is not None:
                span.set_attribute("http.response.status_code", response.status)
        return response

    async def accept_event(request: web.Request) -> web.Response:
        agent_id = gw.agent_for(request.headers)
        assert agent_id is not None
        task_id = request.match_info["task_id"]
        tracing.annotate(**{"a2a_push.agent": agent_id})
        if not valid_task_id(task_id):
            return _error(400, "invalid_task_id", _INVALID_TASK_ID)
        if is_operator_task(task_id):
            return _error(400, "invalid_task_id", f"the task id {OPERATOR_TASK!r} is reserved")
        if request.content_type not in ("application/json", "application/a2a+json"):
            return _error(415, "unsupported_media_type", "send application/json")
        if request.content_length is not None and request.content_length > limit:
            return _error(413, "too_large", f"the body is over {limit} bytes")
        raw = await read_at_most(request.content, limit)
        if raw is None:
            return _error(413, "too_large", f"the body is over {limit} bytes")
        try:
            event = StreamResponse.model_validate_json(raw)
        except ValidationError as exc:
            named = _named_task_id(raw)
            if isinstance(named, str) and not valid_task_id(named):
                # The id rule, whichever parser found it broken (a lone surrogate is
                # refused by the JSON parser itself): the code the docs give for it.
                return _error(400, "invalid_task_id", _INVALID_TASK_ID)
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            message = str(first["msg"]).removeprefix("Value error, ")
            return _error(400, "invalid_event", f"{where}: {message}")
        event_task = _event_task_id(event)
        if event_task is None:
            return _error(400, "invalid_event", "post a task, statusUpdate or artifactUpdate")
        if not valid_task_id(event_task):
            return _error(400, "invalid_task_id", _INVALID_TASK_ID)
        if event_task != task_id:
            return _error(400, "invalid_event", f"the event is for task {event_task!r}")
        inner = event.event
        status = inner.status if isinstance(inner, Task | TaskStatusUpdateEvent) else None
        context = getattr(inner, "context_id", None)
        status_json = status.to_json_dict() if status is not None else None
        # Everything is checked before anything is written: a refused event must not
        # become the task's recorded status (which new subscribers get as a snapshot).
        key = request.headers.get(HEADER_IDEMPOTENCY_KEY)
        if key is not None and not (0 < len(key) <= 255 and key.isascii() and key.isprintable()):
            return _error(400, "invalid_header", f"{HEADER_IDEMPOTENCY_KEY}: 1-255 printable ASCII")
        tracing.annotate(**{"a2a_push.task_id": task_id})
        known = await gw.record(agent_id, task_id, status_json, context)
        if known is None:
            return _error(404, "task_not_found", f"task {task_id!r} was not found")
        result = await gw.notifier.publish(
            task_id,
            event,
            # For v0.3 configs: the task after an update (its own status, when it has one).
            task=task_view(task_id, known.context_id, status or _recorded_status(known), inner)
            if isinstance(inner, TaskStatusUpdateEvent | TaskArtifactUpdateEvent)
            else None,
            # The notifier scopes keys to the task; agent ids hold no "/" (settings).
            idempotency_key=f"{agent_id}/{key}" if key else None,
        )
        accepted = EventAccepted(
            task_id=task_id, seq=result.seq, deliveries=len(result.delivery_ids)
        )
        return web.json_response(accepted.to_json(), status=202)

    async def whoami(request: web.Request) -> web.Response:
        agent_id = gw.agent_for(request.headers)
        assert agent_id is not None  # the guard refused any other key
        return web.json_response(AgentIdentity(agent_id=agent_id).to_json())

    async def owner_of(headers: Mapping[str, str]) -> str:
        agent_id = gw.agent_for(headers)
        if agent_id is None:
            raise A2AError.invalid_request("an agent API key is required")
        owner = headers.get(HEADER_OWNER, "default")
        if not owner or len(owner) > 256 or not owner.isprintable():
            raise A2AError.invalid_params(f"{HEADER_OWNER}: a printable owner id is required")
        return f"{agent_id}/{owner}"

    # ---- admin -----------------------------------------------------------------------

    def _delivery(d: Any) -> DeliveryView:
        return DeliveryView(
            id=d.id,
            task_id=d.task_id,
            config_key=d.config_key,
            state=d.state.value if hasattr(d.state, "value") else d.state,
            attempts=d.attempts,
            seq=d.seq,
            last_error=getattr(d, "last_error", None),
            created_at=getattr(d, "created_at", None),
            # A worker holds the delivery until then (in flight, or its worker died).
            leased_until=getattr(d, "leased_until", None),
            endpoint=getattr(d, "endpoint", None),
        )

    async def list_deliveries(request: web.Request) -> web.Response:
        q = request.query
        unknown = sorted(set(q) - set(_LIST_PARAMETERS))
        if unknown:
            return _error(
                400,
                "invalid",
                f"{unknown[0]}: unknown query parameter; use {', '.join(_LIST_PARAMETERS)}",
            )
        try:
            state = _delivery_state(q["state"]) if "state" in q else None
            limit = _integer("limit", q.get("limit", "100"))
            since = _unix_time("since", q["since"]) if "since" in q else None
            until = _unix_time("until", q["until"]) if "until" in q else None
            endpoint = _endpoint("endpoint", q["endpoint"]) if "endpoint" in q else None
        except ValueError as exc:
            return _error(400, "invalid", f"bad query parameter: {exc}")
        if not 1 <= limit <= 1000:
            return _error(400, "invalid", "limit: from 1 to 1000")
        for name in ("task", "config", "after"):
            if name in q and not valid_task_id(q[name]):
                return _error(400, "invalid", f"{name}: text (no NUL, no lone surrogate)")
        found = await gw.notifier.store.list_deliveries(
            DeliveryFilter(
                state=state,
                task_id=q.get("task"),
                config_key=q.get("config"),
                endpoint=endpoint,
                created_after=since,
                created_before=until,
                limit=limit,
                after_id=q.get("after"),
            )
        )
        return web.json_response(DeliveryList(deliveries=[_delivery(d) for d in found]).to_json())

    async def show_delivery(request: web.Request) -> web.Response:
        if request.match_info["id"] == "replay":  # no delivery has that id (msg_...)
            return _error(
                405,
                "method_not_allowed",
                f"GET {request.path}: method not allowed here; use POST",
                Allow="POST",
            )
        if not valid_task_id(request.match_info["id"]):
            return _error(404, "not_found", "no such delivery")
        d = await gw.notifier.store.get_delivery(request.match_info["id"])
        if d is None:
            return _error(404, "not_found", "no such delivery")
        return web.json_response(_delivery(d).to_json())

    async def show_attempts(request: web.Request) -> web.Response:
        delivery_id = request.match_info["id"]
        if not valid_task_id(delivery_id):
            return _error(404, "not_found", "no such delivery")
        store = gw.notifier.store
        attempts = await store.list_attempts(delivery_id)
        if not attempts and await store.get_delivery(delivery_id) is None:
            return _error(404, "not_found", "no such delivery")
        return web.json_response(
            AttemptList(
                attempts=[AttemptView.of(a) for a in attempts],
                recording=store.options.attempt_history,
            ).to_json()
        )

    async def replay(request: web.Request) -> web.Response:
        try:
            body = parse_body(ReplayRequest, await request.read(), REPLAY_USAGE)
        except BodyError as exc:
            return _error(400, "invalid", str(exc))
        ids = body.ids
        if ids is None:
            # Read page by page, as the console's "replay all that match" does.
            ids = await matching_ids(
                gw.notifier.store,
                DeliveryFilter(
                    state=DeliveryState.DEAD,
                    created_after=body.since,
                    created_before=body.until,
                    task_id=body.task,
                ),
                at_most=REPLAY_BY_FILTER_LIMIT,
            )
        return web.json_response(Replayed(replayed=await gw.notifier.replay(ids)).to_json())

    async def endpoints(request: web.Request) -> web.Response:
        health = gw.notifier.dispatcher.health
        return web.json_response(OpenEndpoints(open=sorted(health.open_endpoints())).to_json())

    async def set_config(request: web.Request) -> web.Response:
        try:
            parse_body(NoBody, await request.read(), "this request takes no body (or {})")
        except BodyError as exc:
            return _error(400, "invalid", str(exc))
        if not valid_task_id(request.match_info["key"]):
            return _error(404, "not_found", "no such config")
        enabled = request.match_info["action"] == "enable"
        ok = await gw.notifier.store.set_config_enabled(
            request.match_info["key"], enabled, None if enabled else "disabled by an operator"
        )
        if not ok:
            return _error(404, "not_found", "no such config")
        return web.json_response(
            ConfigState(key=request.match_info["key"], enabled=enabled).to_json()
        )

    async def healthz(request: web.Request) -> web.Response:
        try:
            await gw.notifier.store.stats(count_delivered=False)
        except Exception as exc:
            return _error(503, "unavailable", f"the database does not answer: {type(exc).__name__}")
        return web.json_response(Health(status="ok").to_json())

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await gw.start()
        try:
            yield
        finally:
            await gw.stop()

    app = web.Application(middlewares=[guard], client_max_size=limit + 1)
    app[GATEWAY] = gw
    service = PushConfigService(
        gw.notifier,
        task_lookup=gw.known_task,
        create_lookup=gw.task_for,
        owner_resolver=owner_of,
    )
    route(app, "POST", "/v1/tasks/{task_id}/events", post_event, _POST_EVENT)
    route(app, "GET", "/v1/agent", whoami, _WHOAMI)
    mount(app, service, jsonrpc_path="/v1/rpc", rest_prefix="/v1", jwks=False)

    async def jwks(request: web.Request) -> web.Response:
        # The keys as stored (read at most once a second): another replica may sign with
        # a key rotated in before this one's next periodic reload.
        await gw.fresh_keys()
        return web.json_response(gw.notifier.jwks(), headers={"Cache-Control": "max-age=60"})

    route(app, "GET", JWKS_PATH, jwks, jwks_operation("max-age=60"))
    route(app, "GET", "/admin/deliveries", list_deliveries, _LIST_DELIVERIES)
    route(app, "GET", "/admin/deliveries/{id}", show_delivery, _SHOW_DELIVERY)
    route(app, "GET", "/admin/deliveries/{id}/attempts", show_attempts, _SHOW_ATTEMPTS)
    route(app, "POST", "/admin/deliveries/replay", replay, _REPLAY)
    route(app, "GET", "/admin/endpoints", endpoints, _ENDPOINTS)
    route(app, "POST", "/admin/configs/{key}/{action:enable|disable}", set_config, _SET_CONFIG)
    route(app, "GET", "/healthz", healthz, _HEALTHZ)
    Console(
        ConsoleSource.of_notifier(gw.notifier, name="a2a-push gateway"),
        [k.get_secret_value() for k in settings.admin_keys],
        # Behind https (public_url says so), the session cookie is Secure whatever the
        # proxy in front forwards as plain http.
        secure_cookies=True if settings.base_url.startswith("https://") else None,
    ).add_routes(app, CONSOLE_PATH)

    add_metrics_route(app, gw.notifier.metrics, before_scrape=gw.notifier.refresh_metrics)
    add_openapi_route(app, lambda: openapi_document(app))
    app.cleanup_ctx.append(lifecycle)
    return app


# ---- the OpenAPI document ------------------------------------------------------------

_AGENT: Final = ("agentKey",)
_ADMIN: Final = ("adminKey",)
_UNAUTHORIZED: Final = refusal("no bearer key, or not one of this gateway's")
_POST_EVENT: Final = Operation(
    summary="Post a task event (durable before the 202); the gateway delivers it",
    description=(
        "A StreamResponse with exactly one of task, statusUpdate or artifactUpdate for "
        "the task in the path. The first agent to name a task id owns it."
    ),
    tags=("agent",),
    security=_AGENT,
    params=(
        Param("task_id", "path", "the task (at most 256 characters, no control characters)"),
        Param(HEADER_IDEMPOTENCY_KEY, "header", "1-255 printable ASCII: a retry is one event"),
    ),
    request=Body(StreamResponse, "the event", (JSON, "application/a2a+json")),
    responses={
        202: Body(EventAccepted, "stored; deliveries queued"),
        400: refusal("invalid_event, invalid_task_id or invalid_header"),
        401: _UNAUTHORIZED,
        404: refusal("another agent owns this task (task_not_found)"),
        413: refusal("the body is over max_body_bytes"),
        415: refusal("not application/json"),
        503: UNAVAILABLE,
    },
)
_WHOAMI: Final = Operation(
    summary="The agent the API key belongs to",
    description=(
        "Answers the calling agent's id: a check, before posting events, that the "
        "gateway is reachable and takes the key."
    ),
    tags=("agent",),
    security=_AGENT,
    responses={200: Body(AgentIdentity, "the agent's id"), 401: _UNAUTHORIZED},
)
_LIST_DELIVERIES: Final = Operation(
    summary="List deliveries, oldest first, filtered",
    tags=("admin",),
    security=_ADMIN,
    params=(
        Param(
            "state",
            "query",
            "only deliveries in this state",
            schema={"type": "string", "enum": [s.value for s in DeliveryState]},
        ),
        Param("task", "query", "only this task's"),
        Param("config", "query", "only this config's (its key)"),
        Param(
            "endpoint",
            "query",
            "only those queued for this endpoint: scheme://host[:port] (a URL counts by its "
            "origin; the default port may be left out)",
        ),
        Param("since", "query", "created at or after (Unix seconds)", schema={"type": "number"}),
        Param("until", "query", "created before (Unix seconds)", schema={"type": "number"}),
        Param(
            "limit",
            "query",
            "page size (default 100)",
            schema={"type": "integer", "minimum": 1, "maximum": 1000},
        ),
        Param("after", "query", "the last id of the previous page"),
    ),
    responses={
        200: Body(DeliveryList, "a page of deliveries"),
        400: refusal("an unknown or bad query parameter"),
        401: _UNAUTHORIZED,
        503: UNAVAILABLE,
    },
)
_SHOW_DELIVERY: Final = Operation(
    summary="Show one delivery",
    tags=("admin",),
    security=_ADMIN,
    params=(Param("id", "path", "the delivery id (msg_...)"),),
    responses={
        200: Body(DeliveryView, "the delivery"),
        401: _UNAUTHORIZED,
        404: refusal("no such delivery"),
        405: refusal("GET /admin/deliveries/replay: use POST", Allow="POST"),
        503: UNAVAILABLE,
    },
)
_SHOW_ATTEMPTS: Final = Operation(
    summary="The attempts of one delivery, oldest first",
    description=(
        "Every HTTP attempt: when it started and how long it took, the endpoint's origin, "
        "the HTTP status or the error class, the verdict, and the first 1 KiB of the answer "
        "(base64, as received). Kept as long as the delivery."
    ),
    tags=("admin",),
    security=_ADMIN,
    params=(Param("id", "path", "the delivery id (msg_...)"),),
    responses={
        200: Body(AttemptList, "the delivery's attempts"),
        401: _UNAUTHORIZED,
        404: refusal("no such delivery"),
        503: UNAVAILABLE,
    },
)
_REPLAY: Final = Operation(
    summary="Send dead letters again, by id or by the window they were created in",
    tags=("admin",),
    security=_ADMIN,
    request=Body(ReplayRequest, REPLAY_USAGE),
    responses={
        200: Body(Replayed, "how many were queued again"),
        400: refusal("the body names an unknown key, a bad value, or both ways"),
        401: _UNAUTHORIZED,
        503: UNAVAILABLE,
    },
)
_ENDPOINTS: Final = Operation(
    summary="Webhook hosts whose circuit breaker is open",
    tags=("admin",),
    security=_ADMIN,
    responses={200: Body(OpenEndpoints, "the open endpoints"), 401: _UNAUTHORIZED},
)
_SET_CONFIG: Final = Operation(
    summary="Enable or disable a push config",
    tags=("admin",),
    security=_ADMIN,
    params=(
        Param("key", "path", "the config's key"),
        Param("action", "path", "what to do", schema={"enum": ["enable", "disable"]}),
    ),
    request=Body(NoBody, "nothing, or {}"),
    request_required=False,
    responses={
        200: Body(ConfigState, "the config's new state"),
        400: refusal("a body other than nothing or {}"),
        401: _UNAUTHORIZED,
        404: refusal("no such config"),
        503: UNAVAILABLE,
    },
)
_HEALTHZ: Final = Operation(
    summary="Whether the gateway's database answers",
    tags=("meta",),
    security=(),
    responses={
        200: Body(Health, "healthy"),
        503: refusal("the database does not answer"),
    },
)
SECURITY_SCHEMES: Final = {
    "agentKey": bearer_scheme("an agent's API key (the gateway's agents, --agent-key)"),
    "adminKey": bearer_scheme("an admin key (the gateway's admin_keys, --admin-key)"),
}


def openapi_document(app: web.Application) -> dict[str, Any]:
    """The gateway's OpenAPI 3.1 document, rendered from ``app``'s routes."""
    return document(
        app,
        title="a2a-push gateway",
        description=(
            "Agents post task events; the gateway owns push configs, signs webhooks and "
            "delivers them. Refusals of the gateway's own routes are "
            '{"error": reason, "message": text}; router 404/405 answers too.'
        ),
        security_schemes=SECURITY_SCHEMES,
        default_security=_AGENT,  # the push-config routes under /v1
    )


def _endpoint(name: str, value: str) -> str:
    try:
        return parse_endpoint(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _delivery_state(value: str) -> DeliveryState:
    try:
        return DeliveryState(value)
    except ValueError:
        choices = ", ".join(s.value for s in DeliveryState)
        raise ValueError(f"state: {value!r} is not one of {choices}") from None
