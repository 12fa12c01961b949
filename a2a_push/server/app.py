"""aiohttp wiring: ``mount(app, service)`` adds the JSON-RPC endpoint, the v1.0 REST
routes for push configs and the JWKS route in one call.

REST errors are google.rpc.Status JSON (spec §11.6):
``{"error": {"code": <http status>, "status": "NOT_FOUND", "message", "details": [...]}}``
with the ``google.rpc.ErrorInfo`` entry in ``details``. JSON-RPC errors travel in the
JSON-RPC envelope with HTTP 200, except for bodies refused before they are read
(413 too large, 415 not JSON), which still carry a JSON-RPC error object.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from ..errors import StoreUnavailableError
from ..notifier import JWKS_PATH, serves_get
from ..openapi import JSON, RETRY_AFTER, Body, Operation, Param, route
from ..protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_A2A_VERSION,
    HEADER_RETRY_AFTER,
    VERSION_0_3,
)
from ..protocol.jsonrpc import (
    CONTENT_TYPE_NOT_SUPPORTED,
    INTERNAL_ERROR,
    INVALID_AGENT_RESPONSE,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    TASK_NOT_FOUND,
    A2AError,
    failure,
)
from ..protocol.types import TaskPushNotificationConfig
from .push_config import (
    CREATE,
    DELETE,
    GET,
    LIST,
    RETRY_AFTER_SECONDS,
    STORE_UNAVAILABLE,
    V03_DELETE,
    V03_GET,
    V03_LIST,
    V03_SET,
    PushConfigService,
    header_value,
    negotiate_version,
)
from .schemas import ConfigList, JsonRpcRequest, JsonRpcResponse, Jwks, RestError

__all__ = [
    "JSON_MEDIA_TYPES",
    "PUSH_SIGNING_EXTENSION_URI",
    "PUSH_SIGNING_EXTENSION_URIS",
    "agent_card_push_fields",
    "mount",
]

log = logging.getLogger("a2a_push.server")

PUSH_SIGNING_EXTENSION_URI: Final = "urn:a2a-push:ext:push-signing:v1"
"""Agent-card extension declaring that webhooks are signed JWTs verifiable with ``jwksUri``.

A name, not a link: nothing is fetched from it (spec §4.6.3: versioned in the URI)."""

LEGACY_PUSH_SIGNING_EXTENSION_URI: Final = "https://a2a-push.dev/extensions/push-signing/v1"
"""What earlier releases called the same extension, under a domain the project does not
control: still read from agent cards, never written."""

PUSH_SIGNING_EXTENSION_URIS: Final = frozenset(
    {PUSH_SIGNING_EXTENSION_URI, LEGACY_PUSH_SIGNING_EXTENSION_URI}
)
"""Every name of the push-signing extension a receiver accepts."""

JSON_MEDIA_TYPES: Final = frozenset({"application/json", A2A_MEDIA_TYPE})

# gRPC canonical status names for google.rpc.Status.status (spec §5.4 for the A2A codes).
_GRPC_STATUS: Final[Mapping[int, str]] = {
    PARSE_ERROR: "INVALID_ARGUMENT",
    INVALID_REQUEST: "INVALID_ARGUMENT",
    INVALID_PARAMS: "INVALID_ARGUMENT",
    METHOD_NOT_FOUND: "NOT_FOUND",  # as the official a2a-sdk answers it
    INTERNAL_ERROR: "INTERNAL",
    TASK_NOT_FOUND: "NOT_FOUND",
    CONTENT_TYPE_NOT_SUPPORTED: "INVALID_ARGUMENT",
    INVALID_AGENT_RESPONSE: "INTERNAL",
}
_DEFAULT_GRPC_STATUS: Final = "FAILED_PRECONDITION"  # the other A2A-specific errors

_BODY_TOO_LARGE: Final = 413
_UNSUPPORTED_MEDIA_TYPE: Final = 415


class _Refused(Exception):
    """A request body refused before parsing: HTTP status and the error to report."""

    def __init__(self, status: int, error: A2AError) -> None:
        super().__init__(error.message)
        self.status = status
        self.error = error


def mount(
    app: web.Application,
    service: PushConfigService,
    *,
    jsonrpc_path: str | None = "/",
    rest_prefix: str = "",
    max_body_bytes: int = 64 * 1024,
    jwks: bool = True,
) -> None:
    """Serve ``service`` on ``app``.

    Adds ``POST {jsonrpc_path}`` (JSON-RPC; None leaves it out), the v1.0 REST routes
    ``POST|GET {rest_prefix}/tasks/{taskId}/pushNotificationConfigs`` and
    ``GET|DELETE {rest_prefix}/tasks/{taskId}/pushNotificationConfigs/{id}`` (also under
    ``{rest_prefix}/{tenant}/…``, the spec's tenant-scoped bindings), and, when
    ``jwks``, ``GET /.well-known/jwks.json`` (so do not also call
    ``notifier.add_routes`` for the JWKS). Bodies over ``max_body_bytes`` get 413.
    """
    if jwks and serves_get(app, JWKS_PATH):
        raise ValueError(
            f"mount(): this app already serves GET {JWKS_PATH} (notifier.add_routes adds "
            "it): pass jwks=False"
        )
    prefix = rest_prefix.rstrip("/")
    collection = f"{prefix}/tasks/{{taskId}}/pushNotificationConfigs"
    item = f"{collection}/{{id}}"
    # The spec's tenant-scoped bindings of the same methods (a2a.proto additional_bindings).
    tenant_collection = f"{prefix}/{{tenant}}/tasks/{{taskId}}/pushNotificationConfigs"
    tenant_item = f"{tenant_collection}/{{id}}"

    async def read_body(request: web.Request) -> bytes:
        length = request.content_length
        if length is not None and length > max_body_bytes:
            raise _too_large(max_body_bytes)
        if request.content_type not in JSON_MEDIA_TYPES:
            raise _Refused(
                _UNSUPPORTED_MEDIA_TYPE,
                # Not ContentTypeNotSupported (-32005): that is about message parts.
                A2AError.invalid_request(
                    f"Content-Type {request.content_type!r}: send application/json or "
                    f"{A2A_MEDIA_TYPE}"
                ),
            )
        chunks: list[bytes] = []
        total = 0
        while total <= max_body_bytes:  # never more than the limit + 1 bytes in memory
            chunk = await request.content.read(max_body_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_body_bytes:
            raise _too_large(max_body_bytes)
        return b"".join(chunks)

    async def jsonrpc(request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request)
        except _Refused as refused:
            return web.json_response(failure(None, refused.error), status=refused.status)
        status, payload = await service.handle_jsonrpc(body, request.headers)
        headers = {HEADER_RETRY_AFTER: RETRY_AFTER_SECONDS} if status == 503 else None
        if payload is None:
            return web.Response(status=status, headers=headers)
        return web.json_response(payload, status=status, dumps=_dumps, headers=headers)

    async def rest(request: web.Request, method_v10: str, method_v03: str) -> web.StreamResponse:
        try:
            header = header_value(request.headers, HEADER_A2A_VERSION)
            if header is None:  # spec §3.6.1: a client MAY send it as a query parameter
                header = request.query.get(HEADER_A2A_VERSION)
            # These are the v1.0 REST paths: no version given means v1.0 here.
            version = negotiate_version(header, method_v10)
            task_id = request.match_info["taskId"]
            config_id = request.match_info.get("id")
            params: dict[str, Any]
            if request.method == "POST":
                params = _json_object(await read_body(request))
            else:
                params = {k: v for k, v in request.query.items() if k != HEADER_A2A_VERSION}
            method = method_v10
            if version == VERSION_0_3:
                method = method_v03
                params = _v03_rest_params(method, params, task_id, config_id)
            else:
                if request.method == "POST" and not _has_task_id(params):
                    params["taskId"] = task_id
                elif request.method == "POST":
                    _same_task(params, task_id)
                else:
                    params["taskId"] = task_id
                if config_id is not None:
                    params["id"] = config_id
                tenant = request.match_info.get("tenant")
                if tenant is not None:
                    if params.get("tenant") not in (None, "", tenant):
                        raise A2AError.invalid_params(
                            "tenant: does not match the tenant in the path", "tenant"
                        )
                    params["tenant"] = tenant
            owner = await service.resolve_owner(request.headers)
            result = await service.handle(method, params, version=version, owner=owner)
        except _Refused as refused:
            return _rest_error(refused.error, refused.status)
        except A2AError as err:
            return _rest_error(err, err.http_status)
        except StoreUnavailableError as exc:
            log.warning("push-config REST %s: the store is unavailable (%s)", request.path, exc)
            response = _rest_error(A2AError.internal_error(STORE_UNAVAILABLE), 503)
            response.headers[HEADER_RETRY_AFTER] = RETRY_AFTER_SECONDS
            return response
        except Exception:
            log.exception("push-config REST %s %s failed", request.method, request.path)
            return _rest_error(A2AError.internal_error(), 500)
        return web.json_response(
            _v03_rest_result(method, result, task_id)
            if version == VERSION_0_3
            else ({} if result is None else result),
            content_type=A2A_MEDIA_TYPE,
            dumps=_dumps,
        )

    async def create(request: web.Request) -> web.StreamResponse:
        return await rest(request, CREATE, V03_SET)

    async def list_(request: web.Request) -> web.StreamResponse:
        return await rest(request, LIST, V03_LIST)

    async def get(request: web.Request) -> web.StreamResponse:
        return await rest(request, GET, V03_GET)

    async def delete(request: web.Request) -> web.StreamResponse:
        return await rest(request, DELETE, V03_DELETE)

    async def jwks_route(request: web.Request) -> web.Response:
        return web.json_response(service.notifier.jwks(), headers={"Cache-Control": "max-age=300"})

    if jsonrpc_path is not None:
        route(app, "POST", jsonrpc_path, jsonrpc, _JSONRPC_OPERATION)
    for one, many, tenant in ((item, collection, False), (tenant_item, tenant_collection, True)):
        route(app, "POST", many, create, _rest_operation(CREATE, tenant))
        route(app, "GET", many, list_, _rest_operation(LIST, tenant))
        route(app, "GET", one, get, _rest_operation(GET, tenant))
        route(app, "DELETE", one, delete, _rest_operation(DELETE, tenant))
    if jwks:
        route(app, "GET", JWKS_PATH, jwks_route, jwks_operation("max-age=300"))


# ---- the routes' OpenAPI operations ---------------------------------------------------

_TAG: Final = "push configs"
_A2A_JSON: Final = (A2A_MEDIA_TYPE, JSON)
_VERSION_NOTE: Final = (
    "The A2A-Version header (or query parameter) picks the protocol version: absent or "
    "1.0 is v1.0; 0.3 reads and answers the v0.3 shapes."
)
_JSONRPC_OPERATION: Final = Operation(
    summary="The A2A push-config methods over JSON-RPC 2.0",
    description=(
        "Create, Get, List and Delete TaskPushNotificationConfig (v1.0 names), or "
        "tasks/pushNotificationConfig/set|get|list|delete (v0.3). Errors travel in the "
        "JSON-RPC envelope with HTTP 200, except a body refused before it is read (413, "
        "415) and an unavailable store (503 with Retry-After). " + _VERSION_NOTE
    ),
    tags=(_TAG,),
    params=(Param(HEADER_A2A_VERSION, "header", "the A2A protocol version: 1.0 or 0.3"),),
    request=Body(JsonRpcRequest, "a JSON-RPC request", _A2A_JSON),
    responses={
        200: Body(JsonRpcResponse, "the JSON-RPC response (result or error)"),
        204: Body(description="a notification (no id): no response"),
        413: Body(JsonRpcResponse, "the body is too large"),
        415: Body(JsonRpcResponse, "the body is not JSON"),
        503: Body(
            JsonRpcResponse,
            "the store is unavailable; retry",
            headers=RETRY_AFTER,
        ),
    },
)


def _rest_operation(method: str, tenant: bool) -> Operation:
    params = [
        Param("taskId", "path", "the task"),
        Param(HEADER_A2A_VERSION, "query", "the A2A protocol version, if not in the header"),
    ]
    if tenant:
        params.insert(0, Param("tenant", "path", "the tenant (the spec's tenant-scoped binding)"))
    if method in (GET, DELETE):
        params.insert(-1, Param("id", "path", "the config"))
    if method == LIST:
        params += [
            Param("pageSize", "query", "configs per page", schema={"type": "integer"}),
            Param("pageToken", "query", "nextPageToken of the previous page"),
        ]
    answers = {
        CREATE: Body(TaskPushNotificationConfig, "the config as stored", _A2A_JSON[:1]),
        GET: Body(TaskPushNotificationConfig, "the config", _A2A_JSON[:1]),
        LIST: Body(ConfigList, "a page of the task's configs", _A2A_JSON[:1]),
        DELETE: Body({"type": "object"}, "deleted (an empty object)", _A2A_JSON[:1]),
    }
    refused = Body(RestError, "refused (google.rpc.Status)", _A2A_JSON[:1])
    return Operation(
        summary=f"{method} (the v1.0 REST binding)",
        description=_VERSION_NOTE,
        tags=(_TAG,),
        params=tuple(params),
        request=Body(TaskPushNotificationConfig, "the config to register", _A2A_JSON)
        if method == CREATE
        else None,
        responses={
            200: answers[method],
            400: refused,
            404: refused,
            **({413: refused, 415: refused} if method == CREATE else {}),
            500: refused,
            503: Body(RestError, "the store is unavailable; retry", _A2A_JSON[:1], RETRY_AFTER),
        },
    )


def jwks_operation(cache_control: str) -> Operation:
    """The OpenAPI operation of ``GET /.well-known/jwks.json``."""
    return Operation(
        summary="The public keys webhooks are signed with (JWKS, RFC 7517)",
        tags=("signing",),
        security=(),
        responses={
            200: Body(
                Jwks,
                "the key set",
                headers={"Cache-Control": cache_control},
            )
        },
    )


def agent_card_push_fields(card: dict[str, Any], jwks_uri: str) -> dict[str, Any]:
    """A copy of the agent card with ``capabilities.pushNotifications = true`` and the
    push-signing extension (``PUSH_SIGNING_EXTENSION_URI``, params ``{"jwksUri"}``)
    in ``capabilities.extensions``, replacing an earlier entry with that URI (or the
    extension's legacy URI)."""
    out = copy.deepcopy(card)
    capabilities = out.get("capabilities")
    if not isinstance(capabilities, dict):
        capabilities = out["capabilities"] = {}
    capabilities["pushNotifications"] = True
    extensions = capabilities.get("extensions")
    if not isinstance(extensions, list):
        extensions = []
    extensions = [
        e
        for e in extensions
        if not (isinstance(e, dict) and str(e.get("uri")) in PUSH_SIGNING_EXTENSION_URIS)
    ]
    extensions.append(
        {
            "uri": PUSH_SIGNING_EXTENSION_URI,
            "description": (
                "Push notifications carry a JWT (X-A2A-Signature) signed with a key "
                "published at jwksUri"
            ),
            "required": False,
            "params": {"jwksUri": jwks_uri},
        }
    )
    capabilities["extensions"] = extensions
    return out


# --------------------------------------------------------------------------- helpers


def _dumps(value: Any) -> str:
    # ASCII: a lone surrogate echoed back (a request id, say) must not fail the encoding.
    return json.dumps(value, separators=(",", ":"))


def _too_large(limit: int) -> _Refused:
    return _Refused(
        _BODY_TOO_LARGE,
        A2AError.invalid_request(f"Request body too large (limit {limit} bytes)"),
    )


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise A2AError.parse_error() from None
    if not isinstance(value, dict):
        raise A2AError.invalid_request("The request body must be a JSON object")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _has_task_id(params: Mapping[str, Any]) -> bool:
    return params.get("taskId") not in (None, "") or params.get("task_id") not in (None, "")


def _same_task(params: Mapping[str, Any], task_id: str) -> None:
    for key in ("taskId", "task_id"):
        value = params.get(key)
        if value not in (None, "") and value != task_id:
            raise A2AError.invalid_params(f"{key}: does not match the task in the path", "taskId")


def _v03_rest_params(
    method: str, body: dict[str, Any], task_id: str, config_id: str | None
) -> dict[str, Any]:
    if method == V03_SET:
        if isinstance(body.get("config"), dict):
            # The v0.3 REST binding's request: {parent, configId, config: {name,
            # pushNotificationConfig}} (field names in either case); else the JSON-RPC
            # shape, {taskId, pushNotificationConfig}.
            given_id = body.get("configId", body.get("config_id"))
            config = body["config"]
            inner = config.get("pushNotificationConfig", config.get("push_notification_config"))
            if isinstance(inner, dict) and given_id and not inner.get("id"):
                inner = {**inner, "id": given_id}
            body = {"pushNotificationConfig": inner} if inner is not None else {}
        _same_task(body, task_id)
        return {**body, "taskId": task_id}
    params: dict[str, Any] = {"id": task_id}
    if config_id is not None:
        params["pushNotificationConfigId"] = config_id
    return params


def _v03_rest_result(method: str, result: Any, task_id: str) -> Any:
    """A v0.3 result as the v0.3 REST binding returns it: a config also carries its
    resource ``name`` (tasks/{taskId}/pushNotificationConfigs/{id}), which v0.3 REST
    clients read the task id from."""
    if result is None:
        return {}
    if method in (V03_SET, V03_GET) and isinstance(result, dict):
        inner = result.get("pushNotificationConfig") or {}
        return {**result, "name": f"tasks/{task_id}/pushNotificationConfigs/{inner.get('id', '')}"}
    return result


def _rest_error(err: A2AError, status: int) -> web.Response:
    body = {
        "error": {
            "code": status,
            "status": _GRPC_STATUS.get(err.code, _DEFAULT_GRPC_STATUS),
            "message": err.message,
            "details": err.data,
        }
    }
    return web.json_response(body, status=status, content_type=A2A_MEDIA_TYPE, dumps=_dumps)
