"""Push configs sent inline with ``SendMessage``: ``params.configuration``.

v1.0 sends a flat ``TaskPushNotificationConfig`` as ``taskPushNotificationConfig`` (its
task id empty: the task does not exist yet); v0.3 ``message/send`` sends a bare
``PushNotificationConfig`` (``{id?, url, token?, authentication{schemes[]}}``) as
``pushNotificationConfig``. Either key is read in camelCase or snake_case.

An agent validates first (``parse_inline_config``), before it creates the task, so a
bad config leaves nothing behind; then it registers the config for the new task
(``register_inline_config``), which queues the task snapshot as the first webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from ..errors import InvalidConfigError
from ..protocol.constants import VERSION_0_3, VERSION_1_0
from ..protocol.jsonrpc import A2AError
from ..protocol.types import Task, TaskPushNotificationConfig
from ..protocol.v03 import push_config_from_v03
from .push_config import PushConfigService

__all__ = ["parse_inline_config", "register_inline_config"]

_V10_KEYS: Final = ("taskPushNotificationConfig", "task_push_notification_config")
_V03_KEYS: Final = ("pushNotificationConfig", "push_notification_config")


def _find(configuration: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for key in keys:
        value = configuration.get(key)
        if value is not None:
            return key, value
    return None


def parse_inline_config(
    configuration: Mapping[str, Any] | None,
    *,
    service: PushConfigService | None = None,
    task_id: str | None = None,
) -> TaskPushNotificationConfig | None:
    """The push config inside a ``SendMessage`` configuration, or None when there is none.

    Checks its shape and its URL's syntax (and, with ``service``, that push notifications
    are enabled and the URL passes the notifier's address policy) without touching the
    store. ``task_id``: the task the message continues, if any; a config naming another
    task is refused. Raises ``A2AError`` invalid params naming the field at fault.
    """
    if configuration is None:
        return None
    if not isinstance(configuration, Mapping):
        raise A2AError.invalid_params("configuration: must be a JSON object", "configuration")
    v10 = _find(configuration, _V10_KEYS)
    v03 = _find(configuration, _V03_KEYS)
    if v10 is not None and v03 is not None:
        raise A2AError.invalid_params(
            f"configuration: give either {v10[0]} or {v03[0]}, not both", f"configuration.{v10[0]}"
        )
    found = v10 or v03
    if found is None:
        return None
    key, raw = found
    where = f"configuration.{key}"
    if service is not None and not service.push_enabled:
        raise A2AError.push_notification_not_supported()
    if not isinstance(raw, Mapping):
        raise A2AError.invalid_params(f"{where}: must be a JSON object", where)
    try:
        if v10 is not None:
            config = TaskPushNotificationConfig.model_validate(raw)
        else:
            config = push_config_from_v03(raw)
    except ValidationError as exc:
        raise A2AError.from_validation_error(exc, prefix=where) from None
    except InvalidConfigError as exc:
        raise _invalid(where, exc) from None
    if config.task_id and config.task_id != task_id:
        field = f"{where}.taskId"
        raise A2AError.invalid_params(
            f"{field}: must be empty (the server assigns the task id) or the id of the "
            "task the message continues",
            field,
        )
    if service is not None:
        try:
            service.notifier.address_policy.validate_url(config.url)
        except InvalidConfigError as exc:
            raise _invalid(where, exc) from None
    return config


async def register_inline_config(
    service: PushConfigService,
    configuration: Mapping[str, Any],
    *,
    task: Task,
    owner: str,
    version: str,
) -> None:
    """Register the inline push config of ``configuration`` (if any) for ``task``.

    ``version`` is the protocol version of the request (``"1.0"`` or ``"0.3"``): it
    decides the shape of the webhooks. The new config's first webhook is a snapshot of
    ``task``. On bad input raises ``A2AError`` invalid params naming the field, and
    registers nothing.
    """
    if version not in (VERSION_1_0, VERSION_0_3):
        raise A2AError.version_not_supported(str(version)[:32])
    config = parse_inline_config(configuration, service=service, task_id=task.id)
    if config is None:
        return
    key = next(k for k in (*_V10_KEYS, *_V03_KEYS) if configuration.get(k) is not None)
    update: dict[str, Any] = {"task_id": task.id}
    if config.id is None and version == VERSION_0_3:
        update["id"] = task.id  # v0.3 servers keyed an id-less config by its task
    config = config.model_copy(update=update)
    try:
        await service.notifier.register_config(
            config, owner=owner, protocol_version=version, task=task
        )
    except InvalidConfigError as exc:
        raise _invalid(f"configuration.{key}", exc) from None


def _invalid(where: str, exc: InvalidConfigError) -> A2AError:
    field = where if exc.field in ("", "params") else f"{where}.{exc.field}"
    return A2AError.invalid_params(f"{field}: {exc.message}", field)
