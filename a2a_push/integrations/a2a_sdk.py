"""a2a-sdk 1.x drop-in: durable, signed, retried, ordered push notifications for an SDK agent.

An a2a-sdk agent gets its push notifications from two constructor arguments of its request
handler. Swap the SDK's in-memory store and fire-and-forget sender for these two, both
backed by one :class:`~a2a_push.notifier.PushNotifier`::

    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a_push import PushNotifier
    from a2a_push.integrations.a2a_sdk import A2APushConfigStore, A2APushSender

    notifier = PushNotifier.open("push.db", issuer="https://agent.example.com",
                                 data_dir="./a2a-push-data")
    handler = DefaultRequestHandler(
        agent_executor=MyExecutor(),
        task_store=tasks,  # tasks = InMemoryTaskStore(), say
        agent_card=card,
        push_config_store=A2APushConfigStore(notifier, task_store=tasks),  # was InMemory...()
        push_sender=A2APushSender(notifier, task_store=tasks),  # was BasePush...Sender(...)
    )
    # start the notifier with the app (``await notifier.start()`` / ``async with notifier``)
    # and serve ``notifier.jwks()`` at /.well-known/jwks.json for receivers.

Every event the SDK hands the sender is written to the notifier's outbox before
``send_notification`` returns; the notifier's dispatcher then delivers it to every config
of the task, in order, signed, with retries. Needs the ``a2a-sdk`` extra
(``pip install 'a2a-push[a2a-sdk]'``); nothing else in ``a2a_push`` imports it.

Owners: configs are scoped to the caller the SDK resolved (``context.user.user_name``,
like the SDK's own stores); an unauthenticated caller (empty user name) maps to
:data:`ANONYMOUS_OWNER`. Pass ``owner_resolver=`` to scope differently.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks.push_notification_config_store import (
    PushNotificationConfigStore,
    normalize_push_notification_config,
)
from a2a.server.tasks.push_notification_sender import (
    PushNotificationEvent as SdkPushNotificationEvent,
)
from a2a.server.tasks.push_notification_sender import PushNotificationSender
from a2a.server.tasks.task_store import TaskStore
from a2a.types import a2a_pb2
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import (  # type: ignore[import-untyped, unused-ignore]
    MessageToDict,
)

from ..errors import InvalidConfigError
from ..notifier import PushNotifier
from ..protocol import types as t
from ..protocol.constants import HEADER_A2A_VERSION, VERSION_0_3, VERSION_1_0
from ..protocol.jsonrpc import A2AError
from ..protocol.v03 import task_view
from ..server.push_config import header_value, negotiate_version
from ..store import StoredConfig

__all__ = [
    "ANONYMOUS_OWNER",
    "A2APushConfigStore",
    "A2APushSender",
    "owner_from_context",
    "protocol_version_of",
]

log = logging.getLogger("a2a_push.integrations.a2a_sdk")

ANONYMOUS_OWNER = "a2a-sdk:anonymous"
"""The owner of configs registered by a caller the SDK did not authenticate."""

OwnerResolver = Callable[[ServerCallContext], str]

_PAGE = 100


def protocol_version_of(context: ServerCallContext) -> str:
    """The A2A version a call speaks: "0.3" when the SDK's v0.3 compatibility layer
    serves it (a v0.3 method name such as ``tasks/pushNotificationConfig/set`` or
    ``message/send``, or ``A2A-Version: 0.3`` on the request), else "1.0". A config keeps
    it: its webhooks are rendered for that version (docs/protocol.md). A call with no HTTP
    headers at all (not from the SDK's HTTP routes) is 1.0."""
    method = context.state.get("method")
    if isinstance(method, str) and "/" in method:
        return VERSION_0_3
    headers = context.state.get("headers")
    if isinstance(headers, Mapping):
        # As the SDK reads it: no (or an empty) header is 0.3, which its v1.0 handlers
        # refuse; so a call that got here without one came through its v0.3 layer.
        try:
            return negotiate_version(header_value(headers, HEADER_A2A_VERSION))
        except A2AError:
            return VERSION_1_0  # the SDK refused other versions before calling us
    return VERSION_1_0


def owner_from_context(context: ServerCallContext) -> str:
    """The SDK's caller identity (``context.user.user_name``), or :data:`ANONYMOUS_OWNER`."""
    name: str = context.user.user_name
    return name or ANONYMOUS_OWNER


# How long a task not found in the task store is not looked for again.
_LOOK_AGAIN_AFTER = 60.0


class _NamedUser(User):
    """The SDK caller named ``user_name`` (how the sender reads a user's stored task)."""

    def __init__(self, user_name: str) -> None:
        self._name = user_name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def _context_of(user_name: str) -> ServerCallContext:
    return ServerCallContext(user=_NamedUser(user_name))


def _to_proto_config(
    stored: StoredConfig, *, redact: bool = False
) -> a2a_pb2.TaskPushNotificationConfig:
    """The stored config as the SDK's message; ``redact`` leaves the token and the
    credentials out (what clients are shown, as ``a2a_push.server`` does)."""
    config = a2a_pb2.TaskPushNotificationConfig(
        id=stored.id, task_id=stored.task_id, url=stored.url
    )
    if stored.tenant:
        config.tenant = stored.tenant
    if stored.token and not redact:
        config.token = stored.token
    if stored.auth_scheme:
        config.authentication.scheme = stored.auth_scheme
        if stored.auth_credentials and not redact:
            config.authentication.credentials = stored.auth_credentials
    return config


def _to_model(message: Any, model: type[t.A2AModel]) -> Any:
    """A proto message as our pydantic model (both speak ProtoJSON: camelCase, enum names)."""
    return model.model_validate(MessageToDict(message))


class A2APushConfigStore(PushNotificationConfigStore):
    """The SDK's ``PushNotificationConfigStore`` on the notifier's durable, owner-scoped store.

    ``set_info`` goes through :meth:`PushNotifier.register_config`, so the notifier's URL
    policy (SSRF checks) and per-task config cap apply; a refused config is raised to the
    SDK as ``InvalidParamsError`` (a JSON-RPC -32602 for the client).
    """

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        owner_resolver: OwnerResolver = owner_from_context,
        task_store: TaskStore | None = None,
        redact_secrets: bool = True,
    ) -> None:
        self.notifier = notifier
        self.owner_resolver = owner_resolver
        # Configs shown to clients (set_info's and get_info's answers) leave the token
        # and credentials out; get_info_for_dispatch, the sender's read, keeps them.
        self.redact_secrets = redact_secrets
        # The handler's task store: a new config's first webhook is the task's snapshot
        # (docs/protocol.md). Without it (and no notifier task_provider), nothing is sent to
        # the config until the task's next event.
        self.task_store = task_store

    async def set_info(
        self,
        task_id: str,
        notification_config: a2a_pb2.TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> a2a_pb2.TaskPushNotificationConfig:
        normalized = normalize_push_notification_config(task_id, notification_config)
        try:
            config = _to_model(normalized, t.TaskPushNotificationConfig)
            snapshot = await self._snapshot(task_id, context)
            stored = await self.notifier.register_config(
                config,
                owner=self.owner_resolver(context),
                task_id=task_id,
                protocol_version=protocol_version_of(context),
                task=snapshot,
            )
            if snapshot is not None:
                await self.notifier.catch_up(
                    stored, snapshot, lambda: self._snapshot(task_id, context)
                )
        except InvalidConfigError as exc:
            raise InvalidParamsError(message=f"push notification config: {exc}") from exc
        except ValueError as exc:  # pydantic's ValidationError (it hides the input)
            raise InvalidParamsError(message=f"push notification config: {exc}") from exc
        return _to_proto_config(stored, redact=self.redact_secrets)

    async def _snapshot(self, task_id: str, context: ServerCallContext) -> t.Task | None:
        """The task from the handler's task store, for a new config's first webhook; None
        (no snapshot, the config still stands) when there is none or it cannot be read."""
        if self.task_store is None:
            return None
        found = await self.task_store.get(task_id, context)
        if found is None:
            return None
        try:
            snapshot: t.Task = _to_model(found, t.Task)
        except ValueError as exc:  # pydantic's ValidationError: a task our model refuses
            log.warning("task %s: no snapshot for the new config (%s)", task_id, exc)
            return None
        return snapshot

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[a2a_pb2.TaskPushNotificationConfig]:
        owned = await self._owned(task_id, self.owner_resolver(context))
        return [_to_proto_config(c, redact=self.redact_secrets) for c in owned]

    async def get_info_for_dispatch(self, task_id: str) -> list[a2a_pb2.TaskPushNotificationConfig]:
        """Every enabled config of the task, all owners (the SDK's dispatch read path).

        :class:`A2APushSender` does not need it (the notifier fans out by itself); it is
        here for SDK code, or a ``BasePushNotificationSender``, reading this store.
        """
        return [_to_proto_config(c) for c in await self.notifier.store.configs_for_task(task_id)]

    async def delete_info(
        self,
        task_id: str,
        context: ServerCallContext,
        config_id: str | None = None,
    ) -> None:
        owner = self.owner_resolver(context)
        if config_id is not None:
            await self.notifier.delete_config(task_id, config_id, owner)
            return
        for config in await self._owned(task_id, owner):
            await self.notifier.delete_config(task_id, config.id, owner)

    async def _owned(self, task_id: str, owner: str) -> list[StoredConfig]:
        configs: list[StoredConfig] = []
        token: str | None = None
        while True:
            page, token = await self.notifier.list_configs(
                task_id, owner, page_size=_PAGE, page_token=token
            )
            configs.extend(page)
            if not token:
                return configs


class A2APushSender(PushNotificationSender):
    """The SDK's ``PushNotificationSender``: each event is durably queued by the notifier.

    ``send_notification`` returns once the event is in the outbox for every config of the
    task (delivery, signing, retries and per-config order are the notifier's). It raises
    if that fails (a storage failure, or an event our models reject): the SDK's contract
    is that the framework catches and logs a sender's exception without disturbing the
    task, so the failure is logged here (under ``a2a_push``) and re-raised rather than
    hidden.
    """

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        task_store: TaskStore | None = None,
        remembered_tasks: int = 10_000,
    ) -> None:
        self.notifier = notifier
        # Each task's latest context and status (the most recently active tasks), so
        # that v0.3 configs get the whole task for every event, as docs/protocol.md says.
        self._known: OrderedDict[str, tuple[str | None, t.TaskStatus]] = OrderedDict()
        # Tasks looked for and not found, and when (time.monotonic()).
        self._not_stored: OrderedDict[str, float] = OrderedDict()
        self._remembered = remembered_tasks
        # The handler's task store: where an artifact update's task status is read when
        # this sender has not seen it (after a restart, or once the task was evicted).
        self.task_store = task_store

    async def send_notification(self, task_id: str, event: SdkPushNotificationEvent) -> None:
        try:
            model = self._convert(event)
            if isinstance(model, t.Task | t.TaskStatusUpdateEvent):
                self._remember(task_id, model.context_id, model.status)
            context_id, status = self._known.get(task_id, (None, None))
            if status is not None:
                self._known.move_to_end(task_id)
            elif isinstance(model, t.TaskArtifactUpdateEvent):
                context_id, status = await self._stored_status(task_id)
            task = model if isinstance(model, t.Task) else None
            await self.notifier.publish(
                task_id, model, task=task or task_view(task_id, context_id, status, model)
            )
            if status is not None and status.state.is_terminal:
                self._known.pop(task_id, None)  # no more events come for it
        except Exception:
            log.error(
                "could not queue the push notification (%s) for task %s",
                type(event).__name__,
                task_id,
            )
            raise

    async def _stored_status(self, task_id: str) -> tuple[str | None, t.TaskStatus | None]:
        """The task's context and status from the handler's task store (remembered for
        the task's next events); (None, None) without a store, a stored task or a status
        our models read. A failed read is logged and the event goes in its own form.

        The SDK does not say who owns the task, and its stores scope tasks by user: the
        task is looked for as an anonymous caller, then as each owner of its configs
        (taken for the user name, as :func:`owner_from_context` maps them). A task not
        found is not looked for again for a minute (or until its next status)."""
        if self.task_store is None:
            return None, None
        missed = self._not_stored.get(task_id)
        if missed is not None and time.monotonic() - missed < _LOOK_AGAIN_AFTER:
            return None, None
        found: a2a_pb2.Task | None = None
        try:
            owners = {c.owner for c in await self.notifier.store.configs_for_task(task_id)}
            for user in [None, *sorted(owners - {ANONYMOUS_OWNER})]:
                context = ServerCallContext() if user is None else _context_of(user)
                found = await self.task_store.get(task_id, context)
                if found is not None:
                    break
            status: t.TaskStatus | None = None
            if found is not None and found.HasField("status"):
                status = _to_model(found.status, t.TaskStatus)
        except Exception as exc:  # a store or a task we cannot read: send the event as is
            log.warning(
                "task %s: its status could not be read from the task store (%s)",
                task_id,
                type(exc).__name__,
            )
            return None, None
        if found is None or status is None or not found.context_id:
            self._not_stored[task_id] = time.monotonic()
            self._not_stored.move_to_end(task_id)
            if len(self._not_stored) > self._remembered:
                self._not_stored.popitem(last=False)
            return None, None
        self._remember(task_id, found.context_id, status)
        return found.context_id, status

    def _remember(self, task_id: str, context_id: str | None, status: t.TaskStatus) -> None:
        self._not_stored.pop(task_id, None)
        self._known[task_id] = (context_id, status)
        self._known.move_to_end(task_id)
        if len(self._known) > self._remembered:
            self._known.popitem(last=False)

    @staticmethod
    def _convert(event: SdkPushNotificationEvent) -> t.PushNotificationEvent:
        if isinstance(event, a2a_pb2.Task):
            task: t.Task = _to_model(event, t.Task)
            return task
        if isinstance(event, a2a_pb2.TaskStatusUpdateEvent):
            status: t.TaskStatusUpdateEvent = _to_model(event, t.TaskStatusUpdateEvent)
            return status
        if isinstance(event, a2a_pb2.TaskArtifactUpdateEvent):
            artifact: t.TaskArtifactUpdateEvent = _to_model(event, t.TaskArtifactUpdateEvent)
            return artifact
        raise TypeError(f"not a push notification event: {type(event).__name__}")
