"""The receiver's HTTP API: the webhook endpoint, the client API (REST + SSE), health
and metrics, as an aiohttp application around a :class:`~receiver.core.Receiver`.

``create_app(settings)`` builds it; ``python -m receiver`` / ``a2a-push receiver`` run it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from a2a_push.errors import StoreUnavailableError
from a2a_push.httputil import SSE_KEEPALIVE_SECONDS, read_at_most, sse_response
from a2a_push.metrics import METRICS_OPERATION
from a2a_push.openapi import (
    JSON,
    RETRY_AFTER,
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
from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_AUTHORIZATION,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_RETRY_AFTER,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.protocol.types import StreamResponse, Task

from .core import (
    INVALID_ID,
    JSON_TYPES,
    STORE_RETRY_AFTER,
    ClientError,
    Receiver,
    error_body,
    require_id,
    unavailable_body,
    unavailable_cause,
)
from .schemas import (
    ClientEvent,
    DeletedSubscription,
    Health,
    SubscriptionList,
    SubscriptionRequest,
    SubscriptionView,
    TaskList,
    WebhookAccepted,
    WebhookRefused,
)
from .settings import WEBHOOK_PATH, ReceiverSettings
from .store import ReceiverStore, Subscription, SubscriptionPosition

log = logging.getLogger(__name__)

_MAX_EVENT_ID: Final = 2**63 - 1
_PAGE_DEFAULT: Final = 100
_PAGE_MAX: Final = 1000
_MAX_CURSOR_LENGTH: Final = 2048

RECEIVER: Final = web.AppKey("a2a_push_receiver", Receiver)


def _json(status: int, body: Any, *, retry_after: int | None = None) -> web.Response:
    headers = None if retry_after is None else {HEADER_RETRY_AFTER: str(retry_after)}
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ClientError as exc:
        return _json(exc.status, error_body(exc.reason, str(exc)), retry_after=exc.retry_after)
    except StoreUnavailableError as exc:
        log.warning("%s %s answered 503: %s", request.method, request.path, unavailable_cause(exc))
        return _json(503, unavailable_body(), retry_after=STORE_RETRY_AFTER)
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            response = _json(
                exc.status, error_body(exc.reason.lower().replace(" ", "_"), exc.reason)
            )
            if "Allow" in exc.headers:  # a 405 says which methods the path takes
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        raise
    except Exception:
        # A bug or an unexpected failure: the traceback is for the log; the client gets
        # JSON like every other answer (aiohttp's own 500 is a text page).
        log.exception("%s %s failed", request.method, request.path)
        return _json(500, error_body("internal", "the request could not be processed"))


async def _read_limited(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is over ``limit`` bytes (read no further than that)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    return await read_at_most(request.content, limit)


def create_app(
    settings: ReceiverSettings,
    *,
    store: ReceiverStore | None = None,
    receiver: Receiver | None = None,
) -> web.Application:
    """The receiver as an aiohttp application; it starts and stops with the app."""
    core = receiver or Receiver(settings, store=store)
    limit = settings.max_body_bytes

    async def webhook(request: web.Request) -> web.Response:
        body = await _read_limited(request, limit)
        if body is None:
            core.metrics.webhooks.labels("too_large").inc()
            return _json(413, error_body("too_large", f"the body is over {limit} bytes"))
        status, result = await core.handle_webhook(request.headers, body, request.content_type)
        return _json(status, result, retry_after=result.get("retryAfter"))

    async def json_body(request: web.Request) -> dict[str, Any]:
        if request.content_type not in JSON_TYPES:
            raise ClientError(415, "unsupported_media_type", "send application/json")
        raw = await _read_limited(request, 64 * 1024)
        if raw is None:
            raise ClientError(413, "too_large", "the body is over 64 KiB")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise ClientError(400, "malformed", "the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ClientError(400, "malformed", "the body must be a JSON object")
        return data

    def client(request: web.Request) -> str:
        return core.client_for(request.headers.get("Authorization"))

    async def create_subscription(request: web.Request) -> web.Response:
        client_id = client(request)
        data = await json_body(request)
        agent_url, task_id = data.get("agentUrl"), data.get("taskId")
        if not isinstance(agent_url, str) or not agent_url or len(agent_url) > 2048:
            raise ClientError(400, "invalid", "agentUrl: a non-empty string is required")
        if not isinstance(task_id, str):
            raise ClientError(400, "invalid", INVALID_ID.format("taskId"))
        sub, created = await core.subscribe(client_id, agent_url, task_id)
        return _json(201 if created else 200, sub.to_json())

    async def list_subscriptions(request: web.Request) -> web.Response:
        client_id = client(request)
        limit = _page_limit(request)
        cursor = request.query.get("cursor")
        after = _position(cursor) if cursor is not None else None
        # One more than the page: whether there is a next one, without another read.
        subs = await core.store.list_subscriptions(client_id, after=after, limit=limit + 1)
        page = subs[:limit]
        more = len(subs) > limit
        return _json(
            200,
            {
                "subscriptions": [s.to_json() for s in page],
                "nextCursor": _cursor(page[-1]) if more else None,
            },
        )

    async def get_subscription(request: web.Request) -> web.Response:
        sub = await core.own_subscription(client(request), request.match_info["id"])
        return _json(200, sub.to_json())

    async def delete_subscription(request: web.Request) -> web.Response:
        sub, removed = await core.unsubscribe(client(request), request.match_info["id"])
        return _json(200, {**sub.to_json(), "removedOnAgent": removed})

    async def get_task(request: web.Request) -> web.Response:
        task = await core.task_for_client(
            client(request), request.match_info["task_id"], request.query.get("agentUrl")
        )
        return _json(200, task)

    async def list_tasks(request: web.Request) -> web.Response:
        client_id = client(request)
        limit = _page_limit(request)
        context_id = request.query.get("contextId")
        if context_id is not None:
            require_id(context_id, "contextId")
        snaps = await core.store.snapshots_for_client(client_id, context_id=context_id, limit=limit)
        return _json(200, {"tasks": [s.task for s in snaps]})

    async def events(request: web.Request) -> web.StreamResponse:
        client_id = client(request)
        raw = request.headers.get("Last-Event-ID") or request.query.get("lastEventId") or "0"
        # Checked before the stream starts: an id past int64 cannot be compared in SQL.
        if not (raw.isascii() and raw.isdigit() and len(raw) < 20) or int(raw) > _MAX_EVENT_ID:
            raise ClientError(
                400, "invalid", f"Last-Event-ID: an event id (0 to {_MAX_EVENT_ID}) is required"
            )
        last = int(raw)
        resp = sse_response()
        await resp.prepare(request)
        async with core.client_events(client_id, after=last, idle=SSE_KEEPALIVE_SECONDS) as stream:
            try:
                await resp.write(b"retry: 2000\n\n")
                async for event in stream:
                    if event is None:
                        await resp.write(b": keepalive\n\n")
                        continue
                    payload = {
                        "agentUrl": event.agent_url,
                        "taskId": event.task_id,
                        "task": event.data,
                    }
                    data = json.dumps(payload, separators=(",", ":"))
                    await resp.write(
                        f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()
                    )
            except (ConnectionResetError, asyncio.CancelledError):
                pass
            except Exception:
                # The response has started: no error answer can follow, so the stream
                # ends (the client reconnects with its Last-Event-ID after `retry`).
                log.exception("an SSE stream failed; closing it")
        return resp

    async def healthz(request: web.Request) -> web.Response:
        try:
            await core.store.ping()
        except Exception as exc:
            return _json(503, {"status": "unavailable", "reason": type(exc).__name__})
        return _json(200, {"status": "ok"})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=core.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await core.start()
        try:
            yield
        finally:
            await core.stop()

    # Big bodies are refused by the webhook handler itself, with a JSON 413.
    app = web.Application(middlewares=[_errors], client_max_size=max(limit, 64 * 1024) + 1)
    app[RECEIVER] = core
    route(app, "POST", WEBHOOK_PATH, webhook, _WEBHOOK)
    route(app, "POST", "/subscriptions", create_subscription, _CREATE_SUBSCRIPTION)
    route(app, "GET", "/subscriptions", list_subscriptions, _LIST_SUBSCRIPTIONS)
    route(app, "GET", "/subscriptions/{id}", get_subscription, _GET_SUBSCRIPTION)
    route(app, "DELETE", "/subscriptions/{id}", delete_subscription, _DELETE_SUBSCRIPTION)
    route(app, "GET", "/tasks", list_tasks, _LIST_TASKS)
    route(app, "GET", "/tasks/{task_id}", get_task, _GET_TASK)
    route(app, "GET", "/events", events, _EVENTS)
    route(app, "GET", "/healthz", healthz, _HEALTHZ)
    route(app, "GET", "/metrics", metrics, METRICS_OPERATION)
    add_openapi_route(app, lambda: openapi_document(app))

    async def end_streams(app: web.Application) -> None:
        # on_shutdown runs before the server waits for open handlers: without this, each
        # SSE stream would hold a graceful shutdown until its next keepalive (15 s).
        core.end_streams()

    app.on_shutdown.append(end_streams)
    app.cleanup_ctx.append(lifecycle)
    return app


# ---- the OpenAPI document ------------------------------------------------------------

_CLIENT: Final = ("clientKey",)
_UNAUTHORIZED: Final = refusal("no bearer API key, or not a client's")
_LIMIT: Final = Param(
    "limit",
    "query",
    "page size (default 100; more than 1000 counts as 1000)",
    schema={"type": "integer", "minimum": 1},
)
_SUBSCRIPTION_ID: Final = Param("id", "path", "the subscription")


def _webhookrefusal(text: str) -> Body:
    return Body(WebhookRefused, text, headers=RETRY_AFTER)


_WEBHOOK: Final = Operation(
    summary="Take a push notification from an agent (verified, deduplicated, stored)",
    description=(
        "Authenticated by a JWT (X-A2A-Signature or Authorization: Bearer) checked "
        "against the agent's JWKS, a Standard Webhooks signature, or the subscription's "
        "notification token, as the agent's settings allow. The body is a v1.0 "
        "StreamResponse (or a v0.3 Task / event)."
    ),
    tags=("webhook",),
    security=(),
    params=(
        Param(HEADER_SIGNATURE, "header", "the webhook's JWT (compact JWS)"),
        Param(HEADER_AUTHORIZATION, "header", "Bearer <JWT>, or the agent's own credentials"),
        Param(HEADER_NOTIFICATION_TOKEN, "header", "the subscription's notification token"),
        Param(HEADER_NOTIFICATION_TOKEN_ALT, "header", "the same, by its other name"),
        Param(HEADER_WEBHOOK_ID, "header", "Standard Webhooks: the message id"),
        Param(HEADER_WEBHOOK_TIMESTAMP, "header", "Standard Webhooks: Unix seconds"),
        Param(HEADER_WEBHOOK_SIGNATURE, "header", "Standard Webhooks: v1,<base64 HMAC>"),
    ),
    request=Body(StreamResponse, "the event", (A2A_MEDIA_TYPE, JSON)),
    responses={
        200: Body(WebhookAccepted, "taken (or a repeat)"),
        400: _webhookrefusal("malformed, or the JWT is for another task"),
        401: _webhookrefusal("not authenticated, or by an unknown agent or token"),
        404: _webhookrefusal("no subscription to this task"),
        410: _webhookrefusal("the subscription was deleted: stop sending"),
        413: _webhookrefusal("the body is over max_body_bytes"),
        415: _webhookrefusal("not JSON"),
        500: _webhookrefusal("the receiver failed; retry"),
        503: _webhookrefusal("the database is unavailable; retry after retryAfter"),
    },
)
_CREATE_SUBSCRIPTION: Final = Operation(
    summary="Subscribe to a task of an agent",
    tags=("client",),
    security=_CLIENT,
    request=Body(SubscriptionRequest, "the agent and the task", (JSON, A2A_MEDIA_TYPE)),
    responses={
        200: Body(SubscriptionView, "already subscribed"),
        201: Body(SubscriptionView, "subscribed (the agent accepted the push config)"),
        400: refusal("a bad or unknown agentUrl or taskId, or a body that is not JSON"),
        401: _UNAUTHORIZED,
        413: refusal("the body is over 64 KiB"),
        415: refusal("not application/json"),
        502: refusal("the agent refused or failed"),
        503: UNAVAILABLE,
    },
)
_LIST_SUBSCRIPTIONS: Final = Operation(
    summary="List the client's subscriptions, oldest first",
    tags=("client",),
    security=_CLIENT,
    params=(_LIMIT, Param("cursor", "query", "nextCursor of the previous page")),
    responses={
        200: Body(SubscriptionList, "a page"),
        400: refusal("a bad limit or cursor"),
        401: _UNAUTHORIZED,
        503: UNAVAILABLE,
    },
)
_GET_SUBSCRIPTION: Final = Operation(
    summary="Show one of the client's subscriptions",
    tags=("client",),
    security=_CLIENT,
    params=(_SUBSCRIPTION_ID,),
    responses={
        200: Body(SubscriptionView, "the subscription"),
        401: _UNAUTHORIZED,
        404: refusal("no such subscription"),
        503: UNAVAILABLE,
    },
)
_DELETE_SUBSCRIPTION: Final = Operation(
    summary="Unsubscribe (here, and on the agent when it answers)",
    tags=("client",),
    security=_CLIENT,
    params=(_SUBSCRIPTION_ID,),
    responses={
        200: Body(DeletedSubscription, "deleted"),
        401: _UNAUTHORIZED,
        404: refusal("no such subscription"),
        503: UNAVAILABLE,
    },
)
_LIST_TASKS: Final = Operation(
    summary="The latest snapshots of the client's tasks",
    tags=("client",),
    security=_CLIENT,
    params=(_LIMIT, Param("contextId", "query", "only this context's tasks")),
    responses={
        200: Body(TaskList, "the tasks"),
        400: refusal("a bad limit or contextId"),
        401: _UNAUTHORIZED,
        503: UNAVAILABLE,
    },
)
_GET_TASK: Final = Operation(
    summary="The latest snapshot of one of the client's tasks",
    tags=("client",),
    security=_CLIENT,
    params=(
        Param("task_id", "path", "the task"),
        Param("agentUrl", "query", "the agent, when several have a task with this id"),
    ),
    responses={
        200: Body(Task, "the task (A2A Task)"),
        400: refusal("a bad task id"),
        401: _UNAUTHORIZED,
        404: refusal("no subscription to this task, or not fetched yet"),
        503: UNAVAILABLE,
    },
)
_EVENTS: Final = Operation(
    summary="The client's task events as a Server-Sent Events stream",
    description=(
        "Each event: id (resume with Last-Event-ID), event (the kind) and data, a JSON "
        "ClientEvent; a comment line every 15 s keeps the stream open."
    ),
    tags=("client",),
    security=_CLIENT,
    params=(
        Param("Last-Event-ID", "header", "resume after this event id (0 to 2^63-1)"),
        Param("lastEventId", "query", "the same, for clients that cannot set headers"),
    ),
    responses={
        200: Body(
            {"type": "string", "description": "SSE lines; each data is a ClientEvent"},
            "the stream",
            ("text/event-stream",),
        ),
        400: refusal("a bad Last-Event-ID"),
        401: _UNAUTHORIZED,
    },
)
_HEALTHZ: Final = Operation(
    summary="Whether the receiver's database answers",
    tags=("meta",),
    security=(),
    responses={200: Body(Health, "healthy"), 503: Body(Health, "the database does not answer")},
)
SECURITY_SCHEMES: Final = {
    "clientKey": bearer_scheme("a client's API key (the receiver's api-keys.json)"),
}


def openapi_document(app: web.Application) -> dict[str, Any]:
    """The receiver's OpenAPI 3.1 document, rendered from ``app``'s routes."""
    return document(
        app,
        title="a2a-push receiver",
        description=(
            "Takes agents' push notifications (the webhook) and serves them to its "
            'clients (REST and SSE). Refusals are {"error": reason, "message": text}.'
        ),
        security_schemes=SECURITY_SCHEMES,
        extra_models=(ClientEvent,),
    )


def _page_limit(request: web.Request) -> int:
    """The ``limit`` query parameter of a listing: 100 by default, at most 1000 (more
    counts as 1000); 400 unless an integer of at least 1."""
    try:
        limit = min(int(request.query.get("limit", str(_PAGE_DEFAULT))), _PAGE_MAX)
    except ValueError:
        raise ClientError(400, "invalid", "limit: an integer is required") from None
    if limit < 1:
        raise ClientError(400, "invalid", "limit: must be at least 1")
    return limit


def _cursor(sub: Subscription) -> str:
    """The ``nextCursor`` of a page of subscriptions ending with ``sub``: its position,
    opaque to clients (base64url of ``[createdAt, id]``)."""
    raw = json.dumps(list(sub.position), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _position(cursor: str) -> SubscriptionPosition:
    """The position a ``cursor`` query parameter names (see :func:`_cursor`), else a 400."""
    bad = ClientError(
        400, "invalid", "cursor: not a nextCursor from GET /subscriptions; start without it"
    )
    if not cursor or len(cursor) > _MAX_CURSOR_LENGTH or not cursor.isascii():
        raise bad
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        value = json.loads(raw)
    except (ValueError, RecursionError):  # bad base64, bad UTF-8 or bad JSON
        raise bad from None
    if not isinstance(value, list) or len(value) != 2:
        raise bad
    created_at, sub_id = value
    if (
        isinstance(created_at, bool)
        or not isinstance(created_at, int | float)
        or not isinstance(sub_id, str)
        or not sub_id.isprintable()  # no NUL, no lone surrogate: what the stores take
    ):
        raise bad
    try:
        at = float(created_at)
    except OverflowError:
        raise bad from None
    if not math.isfinite(at):
        raise bad
    return (at, sub_id)
