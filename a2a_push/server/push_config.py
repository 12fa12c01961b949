"""The four push-config methods, independent of any web framework.

``PushConfigService.handle(method, params, version=, owner=)`` serves one call and
returns its JSON-ready result or raises ``A2AError``; ``handle_jsonrpc(body, headers)``
wraps it in the JSON-RPC 2.0 binding. ``a2a_push.server.app`` mounts both (and the
REST binding) into an aiohttp application.

Methods and shapes (the method name decides the shape; see docs/protocol.md "Push-config methods"):

- v1.0 ``CreateTaskPushNotificationConfig``: params are the flat
  ``TaskPushNotificationConfig`` (the spec's request message); a ``{taskId, config}``
  wrapper is read too. Get / Delete: ``{taskId, id}``. List:
  ``{taskId, pageSize?, pageToken?}`` -> ``{configs, nextPageToken}``. Delete -> ``{}``.
- v0.3 ``tasks/pushNotificationConfig/set|get|list|delete``: ``{taskId,
  pushNotificationConfig}``; ``{id, pushNotificationConfigId?}``; ``{id}`` -> array;
  delete -> ``null``. As in v0.3, a config set without an id takes the task's id, and
  a get without ``pushNotificationConfigId`` reads that config.

Every name is accepted in camelCase or the proto's snake_case.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from pydantic import Field, StrictStr, ValidationError, field_validator

from ..errors import InvalidConfigError, StoreUnavailableError
from ..notifier import PushNotifier
from ..protocol.constants import HEADER_A2A_VERSION, HEADER_AUTHORIZATION, VERSION_0_3, VERSION_1_0
from ..protocol.jsonrpc import TASK_NOT_FOUND, A2AError, failure, parse_request, success
from ..protocol.types import (
    A2AModel,
    AuthenticationInfo,
    Task,
    TaskPushNotificationConfig,
    id_field,
    text_field,
)
from ..protocol.v03 import config_from_v03, config_to_v03
from ..store import StoredConfig

__all__ = [
    "CREATE",
    "DELETE",
    "GET",
    "LIST",
    "NO_SNAPSHOT",
    "V03_DELETE",
    "V03_GET",
    "V03_LIST",
    "V03_SET",
    "NoSnapshot",
    "OwnerResolver",
    "PushConfigService",
    "TaskLookup",
    "default_owner_resolver",
    "negotiate_version",
    "task_id_of",
]

log = logging.getLogger("a2a_push.server")

CREATE: Final = "CreateTaskPushNotificationConfig"
GET: Final = "GetTaskPushNotificationConfig"
LIST: Final = "ListTaskPushNotificationConfigs"
DELETE: Final = "DeleteTaskPushNotificationConfig"
V03_SET: Final = "tasks/pushNotificationConfig/set"
V03_GET: Final = "tasks/pushNotificationConfig/get"
V03_LIST: Final = "tasks/pushNotificationConfig/list"
V03_DELETE: Final = "tasks/pushNotificationConfig/delete"

V10_METHODS: Final = frozenset({CREATE, GET, LIST, DELETE})
V03_METHODS: Final = frozenset({V03_SET, V03_GET, V03_LIST, V03_DELETE})

ANONYMOUS_OWNER: Final = "anonymous"

OwnerResolver = Callable[[Mapping[str, str]], str | Awaitable[str]]
"""Maps request headers to the caller's owner id (may be async; may raise A2AError)."""


class NoSnapshot:
    """A lookup's answer for a task that is the caller's but has nothing to show yet (a
    gateway that has had no event for it): a new config gets no snapshot; the task's
    first event is its first webhook."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_SNAPSHOT"


NO_SNAPSHOT: Final = NoSnapshot()

TaskLookup = Callable[[str, str], Awaitable[Task | NoSnapshot | None]]
"""``(task_id, owner)`` -> the task if it exists and belongs to the owner (or
``NO_SNAPSHOT``: it does, with nothing known of it yet), else None."""

# The longest unsupported version string echoed back in an error.
_MAX_ECHOED_VERSION: Final = 32


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]``, case-insensitively, for plain dicts as well as multidicts."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, found in headers.items():
        if key.lower() == lowered:
            return found
    return None


def default_owner_resolver(headers: Mapping[str, str]) -> str:
    """A stable, opaque owner id: SHA-256 of the ``Authorization`` header, or "anonymous".

    The raw credential is never stored, only its digest.
    """
    authorization = header_value(headers, HEADER_AUTHORIZATION)
    if not authorization:
        return ANONYMOUS_OWNER
    return hashlib.sha256(authorization.encode("utf-8", "surrogatepass")).hexdigest()


def negotiate_version(header: str | None, method: str | None = None) -> str:
    """The protocol version to serve, from ``A2A-Version`` (and the method name).

    ``Major.Minor`` is what counts (a patch number is ignored, "1" reads as "1.0").
    Empty means 0.3 (spec §3.6.2), except for a v1.0 method name: a client that uses
    v1.0 names is a v1.0 client. Anything else raises VersionNotSupported.
    """
    value = (header or "").strip()
    if not value:
        return VERSION_1_0 if method in V10_METHODS else VERSION_0_3
    parts = value.split(".")
    if 1 <= len(parts) <= 3 and all(p.isdecimal() and p.isascii() and len(p) <= 9 for p in parts):
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
        found = f"{major}.{minor}"
        if found in (VERSION_1_0, VERSION_0_3):
            return found
    raise A2AError.version_not_supported(value[:_MAX_ECHOED_VERSION])


# --------------------------------------------------------------------------- param models


class _ConfigRef(A2AModel):
    """v1.0 Get / Delete params."""

    tenant: str | None = None
    task_id: StrictStr = Field(min_length=1)
    id: StrictStr = Field(min_length=1)

    _ids = field_validator("tenant", "task_id", "id")(id_field)


class _ListParams(A2AModel):
    """v1.0 List params (pageSize may arrive as a string: ProtoJSON and REST queries)."""

    tenant: str | None = None
    task_id: StrictStr = Field(min_length=1)
    page_size: int | None = None
    page_token: StrictStr | None = None

    _ids = field_validator("tenant", "task_id")(id_field)
    _text = field_validator("page_token")(text_field)

    @field_validator("page_size", mode="before")
    @classmethod
    def _page_size(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be an integer")
        if value < 0:
            raise ValueError("must not be negative")
        return value


class _V03TaskRef(A2AModel):
    """v0.3 TaskIdParams (list), and get / delete with the config id."""

    id: StrictStr = Field(min_length=1)
    push_notification_config_id: StrictStr | None = None

    _ids = field_validator("id", "push_notification_config_id")(id_field)


# --------------------------------------------------------------------------- the service


# What a caller is told while the store is unavailable (the cause is logged, not sent).
STORE_UNAVAILABLE: Final = "the push-config store is unavailable; retry after a moment"
RETRY_AFTER_SECONDS: Final = "2"  # what a 503 asks callers to wait


class PushConfigService:
    """Create / Get / List / Delete push notification configs for the caller's tasks.

    ``task_lookup(task_id, owner)`` returns the task when it exists and belongs to
    ``owner`` (else None: the caller gets TaskNotFound, never "forbidden"). The task it
    returns becomes the first webhook of a new config (a snapshot); ``NO_SNAPSHOT``: the
    task is the owner's but a new config gets no snapshot. ``create_lookup``
    (default: ``task_lookup``) is asked instead on Create (and the v0.3 set): a service
    where naming a task first makes it yours (the gateway) claims it there, and only
    there.
    """

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        task_lookup: TaskLookup,
        create_lookup: TaskLookup | None = None,
        owner_resolver: OwnerResolver | None = None,
        push_enabled: bool = True,
        redact_secrets: bool = True,
        max_page_size: int = 100,
    ) -> None:
        if max_page_size < 1:
            raise ValueError("max_page_size must be at least 1")
        self.notifier = notifier
        self.task_lookup = task_lookup
        self.create_lookup = create_lookup or task_lookup
        self.owner_resolver: OwnerResolver = owner_resolver or default_owner_resolver
        self.push_enabled = push_enabled
        self.redact_secrets = redact_secrets
        self.max_page_size = max_page_size
        self._methods: dict[str, Callable[[Any, str], Awaitable[Any]]] = {
            CREATE: self._create,
            GET: self._get,
            LIST: self._list,
            DELETE: self._delete,
            V03_SET: self._v03_set,
            V03_GET: self._v03_get,
            V03_LIST: self._v03_list,
            V03_DELETE: self._v03_delete,
        }

    @property
    def methods(self) -> frozenset[str]:
        """Every method name this service answers (v1.0 and the v0.3 aliases)."""
        return frozenset(self._methods)

    async def resolve_owner(self, headers: Mapping[str, str]) -> str:
        owner = self.owner_resolver(headers)
        if inspect.isawaitable(owner):
            owner = await owner
        return owner

    # ---- dispatch -----------------------------------------------------------------------

    async def handle(self, method: str, params: Any, *, version: str, owner: str) -> Any:
        """Serve one call: the JSON-ready result, or an ``A2AError``.

        Usable from any JSON-RPC dispatcher: pass the method name, the params, the
        negotiated protocol version (see ``negotiate_version``) and the caller's owner id.
        """
        handler = self._methods.get(method)
        if handler is None:
            raise A2AError.method_not_found(method)
        if version not in (VERSION_1_0, VERSION_0_3):
            raise A2AError.version_not_supported(str(version)[:_MAX_ECHOED_VERSION])
        if not self.push_enabled:
            raise A2AError.push_notification_not_supported()
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise A2AError.invalid_params("params must be a JSON object", "params")
        try:
            return await handler(params, owner)
        except ValidationError as exc:
            raise A2AError.from_validation_error(exc) from None
        except InvalidConfigError as exc:
            raise A2AError.invalid_params(str(exc), exc.field) from None

    async def handle_jsonrpc(
        self, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, dict[str, Any] | None]:
        """One JSON-RPC 2.0 request body -> (HTTP status, response dict or None).

        Errors travel in the JSON-RPC envelope with HTTP 200, as JSON-RPC over HTTP
        does; a notification (no ``id``) gets 204 and no body. The exception: while the
        store is unavailable, 503 (nothing was done; retry), with the error envelope
        unless the request was a notification.
        """
        request_id: str | int | None = None
        try:
            request = parse_request(body)
        except A2AError as err:
            return 200, failure(err.request_id, err)
        request_id = request.id
        try:
            version = negotiate_version(header_value(headers, HEADER_A2A_VERSION), request.method)
            owner = await self.resolve_owner(headers)
            result = await self.handle(request.method, request.params, version=version, owner=owner)
        except A2AError as err:
            response = failure(request_id, err)
        except StoreUnavailableError as exc:
            # The database is down or restarting: nothing was written; retry (503).
            log.warning("push-config method %s: the store is unavailable (%s)", request.method, exc)
            if request.is_notification:
                return 503, None  # no body for a notification, but the sender may retry
            return 503, failure(request_id, A2AError.internal_error(STORE_UNAVAILABLE))
        except Exception:
            log.exception("push-config method %s failed", request.method)
            response = failure(request_id, A2AError.internal_error())
        else:
            response = success(request_id, result)
        if request.is_notification:
            return 204, None
        return 200, response

    # ---- v1.0 ---------------------------------------------------------------------------

    async def _create(self, params: Mapping[str, Any], owner: str) -> Any:
        config = TaskPushNotificationConfig.model_validate(_flatten_create(params))
        if config.task_id is None:
            raise A2AError.invalid_params("taskId: is required", "taskId")
        # Checked before the lookup, which may claim the task (a gateway's first config for
        # a task makes the agent its owner): a refused config leaves nothing behind.
        checked = await self.notifier.check_config(config, protocol_version=VERSION_1_0)
        task = await self._task(config.task_id, owner, create=True)
        stored = await self.notifier.register_checked(checked, owner=owner, task=_snapshot(task))
        await self._catch_up(stored, task, owner)
        return self._v10(stored)

    async def _get(self, params: Mapping[str, Any], owner: str) -> Any:
        ref = _ConfigRef.model_validate(params)
        return self._v10(await self._stored(ref.task_id, ref.id, owner))

    async def _list(self, params: Mapping[str, Any], owner: str) -> Any:
        query = _ListParams.model_validate(params)
        await self._task(query.task_id, owner)
        size = min(query.page_size or self.max_page_size, self.max_page_size)
        configs, next_token = await self.notifier.list_configs(
            query.task_id, owner, page_size=size, page_token=query.page_token or None
        )
        return {"configs": [self._v10(c) for c in configs], "nextPageToken": next_token or ""}

    async def _delete(self, params: Mapping[str, Any], owner: str) -> Any:
        ref = _ConfigRef.model_validate(params)
        await self._task(ref.task_id, owner)
        await self.notifier.delete_config(ref.task_id, ref.id, owner)  # idempotent
        return {}

    # ---- v0.3 ---------------------------------------------------------------------------

    async def _v03_set(self, params: Mapping[str, Any], owner: str) -> Any:
        config = config_from_v03(params)
        task_id = config.task_id
        if task_id is None:
            raise A2AError.invalid_params("taskId: is required", "taskId")
        if config.id is None:  # v0.3 servers keyed an id-less config by its task
            config = config.model_copy(update={"id": task_id})
        checked = await self.notifier.check_config(config, protocol_version=VERSION_0_3)
        task = await self._task(task_id, owner, create=True)  # after the check: see _create
        stored = await self.notifier.register_checked(checked, owner=owner, task=_snapshot(task))
        await self._catch_up(stored, task, owner)
        return config_to_v03(self._model(stored))

    async def _v03_get(self, params: Mapping[str, Any], owner: str) -> Any:
        ref = _V03TaskRef.model_validate(params)
        config_id = ref.push_notification_config_id or ref.id
        return config_to_v03(self._model(await self._stored(ref.id, config_id, owner)))

    async def _v03_list(self, params: Mapping[str, Any], owner: str) -> Any:
        ref = _V03TaskRef.model_validate(params)
        await self._task(ref.id, owner)
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:  # v0.3 has no paging: the whole list
            page, token = await self.notifier.list_configs(
                ref.id, owner, page_size=self.max_page_size, page_token=token
            )
            out.extend(config_to_v03(self._model(c)) for c in page)
            if not token:
                return out

    async def _v03_delete(self, params: Mapping[str, Any], owner: str) -> Any:
        ref = _V03TaskRef.model_validate(params)
        if not ref.push_notification_config_id:
            raise A2AError.invalid_params(
                "pushNotificationConfigId: is required", "pushNotificationConfigId"
            )
        await self._task(ref.id, owner)
        await self.notifier.delete_config(ref.id, ref.push_notification_config_id, owner)
        return None

    # ---- helpers ------------------------------------------------------------------------

    async def _catch_up(
        self, stored: StoredConfig, snapshot: Task | NoSnapshot, owner: str
    ) -> None:
        """See :meth:`PushNotifier.catch_up`: the task as it is now, if a publish slipped
        between the snapshot being read and the config being stored (with no snapshot:
        if the task's first events did)."""

        async def read() -> Task | None:
            return _snapshot(await self.create_lookup(stored.task_id, owner))

        await self.notifier.catch_up(stored, _snapshot(snapshot), read)

    async def _task(self, task_id: str, owner: str, *, create: bool = False) -> Task | NoSnapshot:
        lookup = self.create_lookup if create else self.task_lookup
        task = await lookup(task_id, owner)
        if task is None:
            raise A2AError.task_not_found(task_id)
        return task

    async def _stored(self, task_id: str, config_id: str, owner: str) -> StoredConfig:
        await self._task(task_id, owner)
        stored = await self.notifier.get_config(task_id, config_id, owner)
        if stored is None:
            # No A2A error names a missing config; the resource is not found (404).
            raise A2AError(
                TASK_NOT_FOUND,
                "Push notification config not found",
                metadata={"taskId": task_id, "configId": config_id},
            )
        return stored

    def _model(self, stored: StoredConfig) -> TaskPushNotificationConfig:
        redact = self.redact_secrets
        auth = None
        if stored.auth_scheme is not None:
            auth = AuthenticationInfo(
                scheme=stored.auth_scheme,
                credentials=None if redact else stored.auth_credentials,
            )
        return TaskPushNotificationConfig(
            tenant=stored.tenant,
            id=stored.id,
            task_id=stored.task_id,
            url=stored.url,
            token=None if redact else stored.token,
            authentication=auth,
        )

    def _v10(self, stored: StoredConfig) -> dict[str, Any]:
        return self._model(stored).to_json_dict()


def _snapshot(found: Task | NoSnapshot | None) -> Task | None:
    return found if isinstance(found, Task) else None


def _flatten_create(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """Read ``{taskId, config: {...}}`` (the proto's method signature) as the flat config.

    A value given both outside and inside ``config`` must be the same (a REST path's task
    id arrives outside): a mismatch is invalid params, never silently one or the other.
    """
    inner = params.get("config")
    if not isinstance(inner, Mapping) or "url" in params:
        return params
    merged = dict(inner)
    for name, snake in (("taskId", "task_id"), ("tenant", "tenant"), ("configId", "config_id")):
        target = "id" if name == "configId" else name
        for key in (name, snake):
            if key in params and params[key] is not None:
                inside = merged[target] if target in merged else merged.get(snake)
                if inside not in (None, "") and inside != params[key]:
                    raise A2AError.invalid_params(
                        f"config.{target}: does not match {key} ({params[key]!r})",
                        f"config.{target}",
                    )
                merged.setdefault(target, params[key])
    return merged


def task_id_of(method: str, params: Any) -> str | None:
    """The task a push-config request names, as the service will read it (None when it
    names none): for a proxy that must check the caller's access to the task first."""
    if not isinstance(params, Mapping):
        return None
    if method in V03_METHODS and method != V03_SET:
        value = params.get("id")
    else:
        flat = params
        if method == CREATE:
            try:
                flat = _flatten_create(params)
            except A2AError:
                return None  # the service refuses it anyway
        value = flat.get("taskId", flat.get("task_id"))
    return value if isinstance(value, str) and value else None
