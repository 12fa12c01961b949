"""Conversion between the A2A v0.3 JSON shapes and the v1.0 models.

v0.3 used ``kind`` discriminators, kebab-case task states, ``user``/``agent``
roles, ``{"kind": "file", "file": {"bytes"|"uri", "mimeType", "name"}}`` parts
and a nested ``pushNotificationConfig`` with a list of auth ``schemes``.
Readers accept camelCase or snake_case keys; writers emit camelCase.

Lossy corners (v0.3 cannot say these): a config's ``tenant``; ``mediaType`` and
``filename`` of text and data parts. A data part whose value is not a JSON object
is sent as ``{"value": <data>}`` with ``"data_part_compat": true`` in its metadata,
and read back unwrapped, as the official SDKs do. File bytes are written in
standard padded base64 (v1.0 ``raw`` may arrive URL-safe or unpadded).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from a2a_push.errors import A2APushError, InvalidConfigError
from a2a_push.protocol.types import (
    V03_ROLE_VALUES,
    V03_STATE_VALUES,
    Artifact,
    Message,
    Part,
    StreamEvent,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatus,
    TaskStatusUpdateEvent,
)

__all__ = [
    "V03FormatError",
    "artifact_from_v03",
    "artifact_to_v03",
    "artifact_update_from_v03",
    "artifact_update_to_v03",
    "config_from_v03",
    "config_to_v03",
    "message_from_v03",
    "message_to_v03",
    "part_from_v03",
    "part_to_v03",
    "push_config_from_v03",
    "push_config_to_v03",
    "status_update_from_v03",
    "status_update_to_v03",
    "stream_response_from_v03",
    "stream_response_to_v03",
    "task_from_v03",
    "task_to_v03",
    "task_view",
]

KIND_TASK: Final = "task"
KIND_MESSAGE: Final = "message"
KIND_STATUS_UPDATE: Final = "status-update"
KIND_ARTIFACT_UPDATE: Final = "artifact-update"

# Key under which a non-object v1.0 data value travels in a v0.3 DataPart.
DATA_VALUE_KEY: Final = "value"
# Marks a v0.3 data part whose value was wrapped under DATA_VALUE_KEY (the SDKs' convention).
DATA_PART_COMPAT: Final = "data_part_compat"

_T = TypeVar("_T")


class V03FormatError(A2APushError, ValueError):
    """A v0.3 payload could not be read (or a value cannot be written as v0.3)."""


def task_view(
    task_id: str,
    context_id: str | None,
    status: TaskStatus | None,
    event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent,
) -> Task | None:
    """The task after ``event`` as a sender that keeps no tasks knows it, for v0.3
    configs (v0.3 receivers get the whole task, not the event): its latest context and
    status and, for an artifact update, that artifact. None for a Task event (it is the
    whole task) and while no status is known (the event's own v0.3 form goes instead)."""
    if isinstance(event, Task) or context_id is None or status is None:
        return None
    artifacts = [event.artifact] if isinstance(event, TaskArtifactUpdateEvent) else None
    return Task(id=task_id, context_id=context_id, status=status, artifacts=artifacts)


# --------------------------------------------------------------------------- helpers


def _get(data: Mapping[str, Any], name: str) -> Any:
    """Read ``name`` (snake_case) from ``data`` by its camelCase or snake_case key."""
    camel = to_camel(name)
    if camel in data:
        return data[camel]
    return data.get(name)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise V03FormatError(f"{where} must be a JSON object")
    return value


def _list(value: Any, where: str) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise V03FormatError(f"{where} must be a JSON array")
    return value


def _first_error(exc: ValidationError) -> tuple[list[str], str]:
    """The first problem of ``exc``: its location in camelCase and its message."""
    first = exc.errors(include_input=False, include_url=False)[0]
    loc = [to_camel(p) if isinstance(p, str) else str(p) for p in first["loc"]]
    return loc, first["msg"].removeprefix("Value error, ")


def _convert(where: str, build: Callable[[], _T]) -> _T:
    try:
        return build()
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise V03FormatError(f"{'.'.join([where, *loc])}: {msg}") from exc


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# --------------------------------------------------------------------------- push configs


def _v03_field_path(names: list[str], prefix: str) -> str:
    if names[:1] == ["taskId"]:
        return "taskId"
    if names[:2] == ["authentication", "scheme"]:
        names = ["authentication", "schemes", *names[2:]]
    return ".".join([prefix, *names] if prefix else names)


def _push_config(data: Any, task_id: str | None, prefix: str) -> TaskPushNotificationConfig:
    where = prefix or "pushNotificationConfig"
    if not isinstance(data, Mapping):
        raise InvalidConfigError(where, "must be a JSON object")
    fields: dict[str, Any] = {
        "id": _get(data, "id"),
        "task_id": task_id,
        "url": _get(data, "url"),
        "token": _get(data, "token"),
    }
    auth = _get(data, "authentication")
    if auth is not None:
        auth_path = f"{prefix}.authentication" if prefix else "authentication"
        if not isinstance(auth, Mapping):
            raise InvalidConfigError(auth_path, "must be a JSON object")
        schemes = _get(auth, "schemes")
        if not isinstance(schemes, list) or not schemes:
            raise InvalidConfigError(f"{auth_path}.schemes", "must list at least one scheme")
        fields["authentication"] = {"scheme": schemes[0], "credentials": _get(auth, "credentials")}
    try:
        return TaskPushNotificationConfig.model_validate(_without_none(fields))
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise InvalidConfigError(_v03_field_path(loc, prefix), msg) from exc


def config_from_v03(data: Mapping[str, Any]) -> TaskPushNotificationConfig:
    """Read a v0.3 ``TaskPushNotificationConfig`` (``{taskId, pushNotificationConfig}``).

    The first of ``authentication.schemes`` becomes the v1.0 ``scheme``.
    Raises InvalidConfigError naming the v0.3 field at fault.
    """
    if not isinstance(data, Mapping):
        raise InvalidConfigError("params", "must be a JSON object")
    task_id = _get(data, "task_id")
    if task_id is not None and not isinstance(task_id, str):
        raise InvalidConfigError("taskId", "must be a string")
    inner = _get(data, "push_notification_config")
    if inner is None:
        raise InvalidConfigError("pushNotificationConfig", "is required")
    return _push_config(inner, task_id, "pushNotificationConfig")


def push_config_from_v03(
    data: Mapping[str, Any], task_id: str | None = None
) -> TaskPushNotificationConfig:
    """Read a bare v0.3 ``PushNotificationConfig`` (``{id?, url, token?, authentication?}``).

    As sent inline in v0.3 ``message/send``; the task id comes from elsewhere.
    Raises InvalidConfigError naming the field at fault.
    """
    return _push_config(data, task_id, "")


def push_config_to_v03(config: TaskPushNotificationConfig) -> dict[str, Any]:
    """The bare v0.3 ``PushNotificationConfig`` JSON of ``config``."""
    out: dict[str, Any] = {"url": config.url}
    if config.id is not None:
        out["id"] = config.id
    if config.token is not None:
        out["token"] = config.token
    if config.authentication is not None:
        auth: dict[str, Any] = {"schemes": [config.authentication.scheme]}
        if config.authentication.credentials is not None:
            auth["credentials"] = config.authentication.credentials
        out["authentication"] = auth
    return out


def config_to_v03(config: TaskPushNotificationConfig) -> dict[str, Any]:
    """The v0.3 ``TaskPushNotificationConfig`` JSON (``{taskId, pushNotificationConfig}``)."""
    return {
        "taskId": config.task_id or "",
        "pushNotificationConfig": push_config_to_v03(config),
    }


# --------------------------------------------------------------------------- parts


def part_to_v03(part: Part) -> dict[str, Any]:
    """A v1.0 part as a v0.3 text, file or data part."""
    out: dict[str, Any]
    if part.text is not None:
        out = {"kind": "text", "text": part.text}
    elif part.raw is not None or part.url is not None:
        file: dict[str, Any] = (
            {"bytes": base64.b64encode(part.raw_bytes() or b"").decode("ascii")}
            if part.raw is not None
            else {"uri": part.url}
        )
        if part.media_type is not None:
            file["mimeType"] = part.media_type
        if part.filename is not None:
            file["name"] = part.filename
        out = {"kind": "file", "file": file}
    elif isinstance(part.data, dict):
        out = {"kind": "data", "data": part.data}
    else:
        # v0.3 data is an object: other values (null too) are wrapped, and marked so.
        out = {
            "kind": "data",
            "data": {DATA_VALUE_KEY: part.data},
            "metadata": {**(part.metadata or {}), DATA_PART_COMPAT: True},
        }
        return out
    if part.metadata is not None:
        out["metadata"] = part.metadata
    return out


def part_from_v03(data: Any) -> Part:
    """A v0.3 part (``kind`` text / file / data) as a v1.0 part."""
    obj = _mapping(data, "part")
    kind = obj.get("kind")
    if kind is None:  # be liberal: infer the kind from the members present
        kind = next((k for k in ("text", "file", "data") if k in obj), None)
    fields: dict[str, Any] = {"metadata": obj.get("metadata")}
    if kind == "text":
        fields["text"] = obj.get("text")
        if fields["text"] is None:
            raise V03FormatError("text part: text is required")
    elif kind == "file":
        file = _mapping(obj.get("file"), "file part: file")
        raw = file.get("bytes", file.get("fileWithBytes", file.get("file_with_bytes")))
        uri = file.get("uri", file.get("fileWithUri", file.get("file_with_uri")))
        if (raw is None) == (uri is None):
            raise V03FormatError("file part: file must have exactly one of bytes, uri")
        fields.update(
            raw=raw,
            url=uri,
            media_type=_get(file, "mime_type"),
            filename=file.get("name"),
        )
    elif kind == "data":
        if obj.get("data") is None:
            raise V03FormatError("data part: data is required")
        data = obj["data"]
        metadata = fields["metadata"]
        if isinstance(metadata, Mapping) and metadata.get(DATA_PART_COMPAT) is True:
            # A value that is not an object, wrapped (see part_to_v03): unwrap it.
            if not isinstance(data, Mapping) or DATA_VALUE_KEY not in data:
                raise V03FormatError(
                    f'data part: {DATA_PART_COMPAT} is set but data has no "{DATA_VALUE_KEY}"'
                )
            rest = {k: v for k, v in metadata.items() if k != DATA_PART_COMPAT}
            fields["metadata"] = rest or None
            # Given even when null: a data part holding null.
            return _convert(
                "part",
                lambda: Part.model_validate(
                    {**_without_none(fields), "data": data[DATA_VALUE_KEY]}
                ),
            )
        fields["data"] = data
    else:
        raise V03FormatError(f"part: unknown kind {kind!r}")
    return _convert("part", lambda: Part.model_validate(_without_none(fields)))


# --------------------------------------------------------------------------- messages & tasks


def message_to_v03(message: Message) -> dict[str, Any]:
    """A v1.0 message as v0.3 JSON (``kind: "message"``, role ``user``/``agent``)."""
    out: dict[str, Any] = {
        "kind": KIND_MESSAGE,
        "messageId": message.message_id,
        "role": V03_ROLE_VALUES[message.role],
        "parts": [part_to_v03(p) for p in message.parts],
    }
    out.update(
        _without_none(
            {
                "contextId": message.context_id,
                "taskId": message.task_id,
                "metadata": message.metadata,
                "extensions": message.extensions,
                "referenceTaskIds": message.reference_task_ids,
            }
        )
    )
    return out


def _message_fields(data: Any, where: str) -> dict[str, Any]:
    obj = _mapping(data, where)
    parts = _list(obj.get("parts"), f"{where}.parts")
    return _without_none(
        {
            "message_id": _get(obj, "message_id"),
            "context_id": _get(obj, "context_id"),
            "task_id": _get(obj, "task_id"),
            "role": obj.get("role"),
            "parts": None if parts is None else [part_from_v03(p) for p in parts],
            "metadata": obj.get("metadata"),
            "extensions": obj.get("extensions"),
            "reference_task_ids": _get(obj, "reference_task_ids"),
        }
    )


def message_from_v03(data: Any) -> Message:
    """A v0.3 message as a v1.0 message."""
    fields = _message_fields(data, "message")
    return _convert("message", lambda: Message.model_validate(fields))


def artifact_to_v03(artifact: Artifact) -> dict[str, Any]:
    """A v1.0 artifact as v0.3 JSON."""
    out: dict[str, Any] = {
        "artifactId": artifact.artifact_id,
        "parts": [part_to_v03(p) for p in artifact.parts],
    }
    out.update(
        _without_none(
            {
                "name": artifact.name,
                "description": artifact.description,
                "metadata": artifact.metadata,
                "extensions": artifact.extensions,
            }
        )
    )
    return out


def _artifact_fields(data: Any, where: str) -> dict[str, Any]:
    obj = _mapping(data, where)
    parts = _list(obj.get("parts"), f"{where}.parts")
    return _without_none(
        {
            "artifact_id": _get(obj, "artifact_id"),
            "name": obj.get("name"),
            "description": obj.get("description"),
            "parts": None if parts is None else [part_from_v03(p) for p in parts],
            "metadata": obj.get("metadata"),
            "extensions": obj.get("extensions"),
        }
    )


def artifact_from_v03(data: Any) -> Artifact:
    """A v0.3 artifact as a v1.0 artifact."""
    fields = _artifact_fields(data, "artifact")
    return _convert("artifact", lambda: Artifact.model_validate(fields))


def _status_to_v03(status: TaskStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"state": V03_STATE_VALUES[status.state]}
    if status.message is not None:
        out["message"] = message_to_v03(status.message)
    if status.timestamp is not None:
        out["timestamp"] = status.timestamp
    return out


def _status_fields(data: Any, where: str) -> dict[str, Any]:
    obj = _mapping(data, where)
    message = obj.get("message")
    return _without_none(
        {
            "state": obj.get("state"),
            "message": None if message is None else _message_fields(message, f"{where}.message"),
            "timestamp": obj.get("timestamp"),
        }
    )


def task_to_v03(task: Task) -> dict[str, Any]:
    """A v1.0 task as v0.3 JSON (``kind: "task"``): the v0.3 push notification body."""
    out: dict[str, Any] = {
        "kind": KIND_TASK,
        "id": task.id,
        # Required in v0.3; proto3's empty string when the v1.0 task has none.
        "contextId": task.context_id or "",
        "status": _status_to_v03(task.status),
    }
    if task.artifacts is not None:
        out["artifacts"] = [artifact_to_v03(a) for a in task.artifacts]
    if task.history is not None:
        out["history"] = [message_to_v03(m) for m in task.history]
    if task.metadata is not None:
        out["metadata"] = task.metadata
    return out


def task_from_v03(data: Any) -> Task:
    """A v0.3 task (``kind: "task"``) as a v1.0 task."""
    obj = _mapping(data, "task")
    artifacts = _list(obj.get("artifacts"), "task.artifacts")
    history = _list(obj.get("history"), "task.history")
    fields = _without_none(
        {
            "id": obj.get("id"),
            "context_id": _get(obj, "context_id") or None,
            "status": None
            if obj.get("status") is None
            else _status_fields(obj["status"], "status"),
            "artifacts": None
            if artifacts is None
            else [_artifact_fields(a, f"artifacts.{i}") for i, a in enumerate(artifacts)],
            "history": None
            if history is None
            else [_message_fields(m, f"history.{i}") for i, m in enumerate(history)],
            "metadata": obj.get("metadata"),
        }
    )
    return _convert("task", lambda: Task.model_validate(fields))


# --------------------------------------------------------------------------- events


def status_update_to_v03(
    event: TaskStatusUpdateEvent, *, final: bool | None = None
) -> dict[str, Any]:
    """A v1.0 status update as v0.3 JSON (``kind: "status-update"``).

    ``final`` defaults to whether the new state is terminal.
    """
    out: dict[str, Any] = {
        "kind": KIND_STATUS_UPDATE,
        "taskId": event.task_id,
        "contextId": event.context_id,
        "status": _status_to_v03(event.status),
        "final": event.status.state.is_terminal if final is None else final,
    }
    if event.metadata is not None:
        out["metadata"] = event.metadata
    return out


def status_update_from_v03(data: Any) -> TaskStatusUpdateEvent:
    """A v0.3 status update as a v1.0 event (``final`` is dropped: v1.0 has no such field)."""
    obj = _mapping(data, "statusUpdate")
    status = obj.get("status")
    fields = _without_none(
        {
            "task_id": _get(obj, "task_id"),
            "context_id": _get(obj, "context_id"),
            "status": None if status is None else _status_fields(status, "status"),
            "metadata": obj.get("metadata"),
        }
    )
    return _convert("statusUpdate", lambda: TaskStatusUpdateEvent.model_validate(fields))


def artifact_update_to_v03(event: TaskArtifactUpdateEvent) -> dict[str, Any]:
    """A v1.0 artifact update as v0.3 JSON (``kind: "artifact-update"``)."""
    out: dict[str, Any] = {
        "kind": KIND_ARTIFACT_UPDATE,
        "taskId": event.task_id,
        "contextId": event.context_id,
        "artifact": artifact_to_v03(event.artifact),
    }
    out.update(
        _without_none(
            {"append": event.append, "lastChunk": event.last_chunk, "metadata": event.metadata}
        )
    )
    return out


def artifact_update_from_v03(data: Any) -> TaskArtifactUpdateEvent:
    """A v0.3 artifact update as a v1.0 event."""
    obj = _mapping(data, "artifactUpdate")
    artifact = obj.get("artifact")
    fields = _without_none(
        {
            "task_id": _get(obj, "task_id"),
            "context_id": _get(obj, "context_id"),
            "artifact": None if artifact is None else _artifact_fields(artifact, "artifact"),
            "append": obj.get("append"),
            "last_chunk": _get(obj, "last_chunk"),
            "metadata": obj.get("metadata"),
        }
    )
    return _convert("artifactUpdate", lambda: TaskArtifactUpdateEvent.model_validate(fields))


_READERS: Final[Mapping[str, Callable[[Any], StreamEvent]]] = {
    KIND_TASK: task_from_v03,
    KIND_MESSAGE: message_from_v03,
    KIND_STATUS_UPDATE: status_update_from_v03,
    KIND_ARTIFACT_UPDATE: artifact_update_from_v03,
}


def stream_response_from_v03(data: Any) -> StreamResponse:
    """Read any v0.3 event (task, message, status-update, artifact-update) by its ``kind``."""
    obj = _mapping(data, "event")
    kind = obj.get("kind")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise V03FormatError(
            f"event: kind must be one of {', '.join(_READERS)}; got {kind!r}"
            if kind is not None
            else "event: kind is required"
        )
    return StreamResponse.wrap(reader(obj))


def stream_response_to_v03(response: StreamResponse | StreamEvent) -> dict[str, Any]:
    """Write the payload of a StreamResponse (or a bare event) as the v0.3 event JSON."""
    event = response.event if isinstance(response, StreamResponse) else response
    if isinstance(event, Task):
        return task_to_v03(event)
    if isinstance(event, Message):
        return message_to_v03(event)
    if isinstance(event, TaskStatusUpdateEvent):
        return status_update_to_v03(event)
    return artifact_update_to_v03(event)
