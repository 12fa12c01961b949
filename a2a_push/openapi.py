"""OpenAPI 3.1 documents rendered from the route table that serves the requests.

A service adds each route with :func:`route`, which registers the aiohttp handler and
records its :class:`Operation` (summary, parameters, request and response bodies as
pydantic models) on the app. :func:`document` walks ``app.router`` and renders every
route from its record, with the models' JSON Schemas under ``components/schemas``; a
route added without a record (``app.router.add_get`` directly) makes it raise
:class:`UndocumentedRouteError`, so no route is served undocumented.
:func:`add_openapi_route` serves the document at ``GET /openapi.json``.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonSchemaMode, models_json_schema

__all__ = [
    "JSON",
    "OPENAPI_PATH",
    "RETRY_AFTER",
    "UNAVAILABLE",
    "Body",
    "ErrorBody",
    "Operation",
    "Param",
    "UndocumentedRouteError",
    "add_openapi_route",
    "bearer_scheme",
    "document",
    "package_version",
    "refusal",
    "route",
]

OPENAPI_PATH: Final = "/openapi.json"
OPENAPI_VERSION: Final = "3.1.0"
JSON: Final = "application/json"
_REF_TEMPLATE: Final = "#/components/schemas/{model}"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ErrorBody(BaseModel):
    """The JSON every refusal of the gateway's and the receiver's own API carries."""

    model_config = ConfigDict(title="Error")

    error: str = Field(description="a stable machine-readable reason, e.g. not_found")
    message: str = Field(description="what was wrong, for a person")


@dataclass(frozen=True)
class Body:
    """A request or response body: a pydantic model (or a JSON Schema), its media types
    and, for a response, the headers it carries (name: description)."""

    schema: type[BaseModel] | Mapping[str, Any] | None = None
    description: str = ""
    media_types: tuple[str, ...] = (JSON,)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Param:
    """A path, query or header parameter (path parameters are always required)."""

    name: str
    where: Literal["path", "query", "header"]
    description: str
    required: bool = False
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class Operation:
    """What one route takes and answers; responses are by HTTP status."""

    summary: str
    responses: Mapping[int, Body]
    description: str = ""
    tags: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    request: Body | None = None
    request_required: bool = True
    security: tuple[str, ...] | None = None
    """Security scheme names (any one suffices); None: the document's default."""


RETRY_AFTER: Final = {"Retry-After": "seconds to wait before retrying"}
"""A refusal's headers when it carries ``Retry-After``."""


def refusal(text: str, **headers: str) -> Body:
    """A refusal answer: :class:`ErrorBody` JSON, with ``headers``."""
    return Body(ErrorBody, text, headers=headers)


UNAVAILABLE: Final = Body(ErrorBody, "the database is unavailable; retry", headers=RETRY_AFTER)
"""The 503 a service answers while its database does not."""


def bearer_scheme(description: str) -> dict[str, str]:
    """A security scheme: a key sent as ``Authorization: Bearer <key>``."""
    return {"type": "http", "scheme": "bearer", "description": description}


class UndocumentedRouteError(ValueError):
    """A route in the router has no :class:`Operation` (it was not added with :func:`route`)."""


_OPERATIONS: Final = web.AppKey("a2a_push_openapi_operations", dict)


def operations(app: web.Application) -> dict[tuple[str, str], Operation]:
    """The operations recorded on ``app``, by (method, path as OpenAPI writes it)."""
    if _OPERATIONS not in app:
        app[_OPERATIONS] = {}
    found: dict[tuple[str, str], Operation] = app[_OPERATIONS]
    return found


def route(app: web.Application, method: str, path: str, handler: Handler, op: Operation) -> None:
    """Serve ``method path`` with ``handler`` and record ``op`` as its documentation.
    A GET also answers HEAD (as ``add_get`` does), documented from the GET."""
    method = method.upper()
    if method == "GET":
        added = app.router.add_get(path, handler)
    else:
        added = app.router.add_route(method, path, handler)
    assert added.resource is not None
    # The canonical path drops a parameter's regex ({action:a|b} is {action}), as
    # OpenAPI writes it.
    operations(app)[(method, added.resource.canonical)] = op


def router_operations(app: web.Application) -> set[tuple[str, str]]:
    """Every (method, path) ``app.router`` serves, path as OpenAPI writes it."""
    return {
        (r.method.upper(), r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None
    }


def document(
    app: web.Application,
    *,
    title: str,
    description: str,
    version: str | None = None,
    security_schemes: Mapping[str, Mapping[str, Any]] | None = None,
    default_security: tuple[str, ...] = (),
    extra_models: tuple[type[BaseModel], ...] = (),
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route ``app.router`` serves (see module doc);
    ``extra_models`` also go under ``components/schemas`` (a shape that a description
    names, such as the ``data`` of a text/event-stream answer)."""
    recorded = operations(app)
    served = router_operations(app)
    missing = sorted(
        (m, p) for m, p in served if (m, p) not in recorded and not _head_of_get(m, p, recorded)
    )
    if missing:
        raise UndocumentedRouteError(
            "routes served without an OpenAPI operation (add them with a2a_push.openapi.route): "
            + ", ".join(f"{m} {p}" for m, p in missing)
        )
    stale = sorted(set(recorded) - served)
    if stale:
        raise UndocumentedRouteError(
            "operations recorded for routes not served: " + ", ".join(f"{m} {p}" for m, p in stale)
        )
    refs = _schema_refs(recorded.values(), extra_models)
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(served, key=lambda mp: (mp[1], mp[0])):
        op = recorded.get((method, path)) or recorded[("GET", path)]
        rendered = _operation(op, refs, default_security, head=method == "HEAD")
        rendered["operationId"] = _operation_id(method, path)
        paths.setdefault(path, {})[method.lower()] = rendered
    components: dict[str, Any] = {"schemas": refs.definitions}
    if security_schemes:
        components["securitySchemes"] = dict(security_schemes)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": package_version() if version is None else version,
            "description": description,
        },
        "paths": paths,
        "components": components,
    }


def add_openapi_route(app: web.Application, render: Callable[[], dict[str, Any]]) -> None:
    """Serve ``GET /openapi.json``: ``render()`` (e.g. a :func:`document` call), built at
    the first request (the router is frozen by then) and kept."""
    cache: list[dict[str, Any]] = []

    async def openapi(request: web.Request) -> web.Response:
        if not cache:
            cache.append(render())
        return web.json_response(cache[0])

    route(
        app,
        "GET",
        OPENAPI_PATH,
        openapi,
        Operation(
            summary="This document: the service's API as OpenAPI 3.1",
            tags=("meta",),
            security=(),
            responses={200: Body({"type": "object"}, "the OpenAPI document")},
        ),
    )


def package_version() -> str:
    """The installed a2a-push version, for ``info.version``."""
    try:
        return importlib.metadata.version("a2a-push")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _head_of_get(method: str, path: str, recorded: Mapping[tuple[str, str], Operation]) -> bool:
    return method == "HEAD" and ("GET", path) in recorded


def _operation_id(method: str, path: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", path)
    # A path with a trailing slash (a folder, e.g. /console/) is not the same route as the
    # one without it: "Index" keeps their ids apart.
    index = "Index" if path.endswith("/") and path != "/" else ""
    return method.lower() + "".join(w[:1].upper() + w[1:] for w in words) + index


@dataclass
class _Refs:
    by_model: Mapping[tuple[Any, JsonSchemaMode], Mapping[str, Any]]
    definitions: dict[str, Any]

    def schema(self, body: Body, mode: JsonSchemaMode) -> dict[str, Any] | None:
        if body.schema is None:
            return None
        if isinstance(body.schema, type):
            return dict(self.by_model[(body.schema, mode)])
        return dict(body.schema)


def _schema_refs(ops: Any, extra: tuple[type[BaseModel], ...]) -> _Refs:
    """Every model the operations name, under ``components/schemas``, once."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m, "serialization") for m in extra]
    for op in ops:
        bodies: list[tuple[Body, JsonSchemaMode]] = [
            (b, "serialization") for b in op.responses.values()
        ]
        if op.request is not None:
            bodies.append((op.request, "validation"))
        for body, mode in bodies:
            if isinstance(body.schema, type) and (body.schema, mode) not in wanted:
                wanted.append((body.schema, mode))
    by_model, top = models_json_schema(wanted, by_alias=True, ref_template=_REF_TEMPLATE)
    return _Refs(by_model, dict(top.get("$defs", {})))


def _operation(
    op: Operation, refs: _Refs, default_security: tuple[str, ...], *, head: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary}
    if op.description:
        out["description"] = op.description
    if op.tags:
        out["tags"] = list(op.tags)
    if op.params:
        out["parameters"] = [
            {
                "name": p.name,
                "in": p.where,
                "description": p.description,
                "required": p.required or p.where == "path",
                "schema": dict(p.schema),
            }
            for p in op.params
        ]
    if op.request is not None and not head:
        schema = refs.schema(op.request, "validation")
        out["requestBody"] = {
            "description": op.request.description,
            "required": op.request_required,
            "content": {m: {"schema": schema} if schema else {} for m in op.request.media_types},
        }
    responses: dict[str, Any] = {}
    for status, body in sorted(op.responses.items()):
        answer: dict[str, Any] = {"description": body.description or str(status)}
        schema = refs.schema(body, "serialization")
        if not head and (schema is not None or body.media_types != (JSON,)):
            answer["content"] = {m: {"schema": schema} if schema else {} for m in body.media_types}
        if body.headers:
            answer["headers"] = {
                name: {"description": text, "schema": {"type": "string"}}
                for name, text in body.headers.items()
            }
        responses[str(status)] = answer
    out["responses"] = responses
    security = default_security if op.security is None else op.security
    out["security"] = [{name: []} for name in security]
    return out
