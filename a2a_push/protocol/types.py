"""Pydantic models of the A2A v1.0 types this project sends and receives.

JSON out is camelCase (ProtoJSON); JSON in accepts camelCase and the proto's
snake_case field names. Unknown fields are ignored, required fields enforced.
Validation errors never echo the offending input (it may be a secret).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "INTERRUPTED_STATES",
    "TERMINAL_STATES",
    "V03_ROLE_VALUES",
    "V03_STATE_VALUES",
    "A2AModel",
    "Artifact",
    "AuthenticationInfo",
    "Message",
    "Part",
    "PushNotificationEvent",
    "Role",
    "StreamEvent",
    "StreamResponse",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
    "utc_timestamp",
]


class A2AModel(BaseModel):
    """Base of every A2A model: camelCase out, camelCase or snake_case in, unknown keys ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        # Mutation goes through the same checks as parsing (e.g. no CR/LF in a token).
        validate_assignment=True,
        # Tokens and credentials must not end up in logs through error messages.
        hide_input_in_errors=True,
        # NaN and infinities are not JSON (data and metadata are JSON values).
        allow_inf_nan=False,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The ProtoJSON-style dict: camelCase keys, unset fields omitted, JSON-ready values."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def to_json_bytes(self) -> bytes:
        """The compact JSON encoding of :meth:`to_json_dict` (UTF-8)."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


# --------------------------------------------------------------------------- enums


class TaskState(StrEnum):
    """Lifecycle state of a task. Also parses the v0.3 kebab-case values on input.

    ``TASK_STATE_UNSPECIFIED`` (and v0.3 ``unknown``) are rejected: a task in an
    unknown state can be neither delivered nor reasoned about.
    """

    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    REJECTED = "TASK_STATE_REJECTED"

    @classmethod
    def _missing_(cls, value: object) -> TaskState | None:
        if isinstance(value, str):
            return _STATE_ALIASES.get(value)
        return None

    @property
    def is_terminal(self) -> bool:
        """True for COMPLETED, FAILED, CANCELED and REJECTED: the task can no longer change."""
        return self in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        """True for INPUT_REQUIRED and AUTH_REQUIRED: the task waits for the client."""
        return self in INTERRUPTED_STATES


TERMINAL_STATES: Final[frozenset[TaskState]] = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
INTERRUPTED_STATES: Final[frozenset[TaskState]] = frozenset(
    {TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED}
)

# v0.3 spelled states in kebab case; this is the one mapping both directions use.
V03_STATE_VALUES: Final[Mapping[TaskState, str]] = {
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.AUTH_REQUIRED: "auth-required",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELED: "canceled",
    TaskState.REJECTED: "rejected",
}
_STATE_ALIASES: Final[Mapping[str, TaskState]] = {
    **{v: k for k, v in V03_STATE_VALUES.items()},
    # The v0.3 gRPC binding spelled it with two Ls.
    "TASK_STATE_CANCELLED": TaskState.CANCELED,
}


class Role(StrEnum):
    """Sender of a message. Also parses the v0.3 values ``user`` / ``agent`` on input."""

    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"

    @classmethod
    def _missing_(cls, value: object) -> Role | None:
        if isinstance(value, str):
            return _ROLE_ALIASES.get(value)
        return None


V03_ROLE_VALUES: Final[Mapping[Role, str]] = {Role.USER: "user", Role.AGENT: "agent"}
_ROLE_ALIASES: Final[Mapping[str, Role]] = {v: k for k, v in V03_ROLE_VALUES.items()}


# --------------------------------------------------------------------------- helpers


def utc_timestamp(when: datetime | None = None) -> str:
    """Format ``when`` (default: now) as the spec wants: ``YYYY-MM-DDTHH:MM:SS.sssZ`` in UTC."""
    moment = (when or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# RFC 3339 in UTC, as ProtoJSON writes a Timestamp (and its parsers want).
_RFC3339_UTC: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z")


def _check_timestamp(value: str | None) -> str | None:
    """``value`` in RFC 3339 UTC (``2025-10-28T10:30:00.000Z``, kept as it is), or any other
    ISO 8601 date-time converted to that form: with an offset, to UTC; without one, read
    as UTC. What is sent is always what ProtoJSON parsers (the official SDKs) accept."""
    if value is None:
        return None
    try:
        if _RFC3339_UTC.fullmatch(value):
            datetime.fromisoformat(value[:19])  # a real date and time (no 2025-13-45)
            return value
        moment = datetime.fromisoformat(value)
    except (ValueError, TypeError):
        raise ValueError(
            "timestamp must be an ISO 8601 date-time, e.g. 2025-10-28T10:30:00.000Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if moment.microsecond % 1000 == 0:
        return utc_timestamp(moment)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}Z"


# C0 and C1 control characters (CR, LF, NUL, DEL, NEL, ...) and the Unicode line
# separators: anything that could split or smuggle an HTTP header line.
_CONTROL_CHARS: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# RFC 9110 `token`, the syntax of an HTTP authentication scheme name.
_HTTP_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Standard or URL-safe base64, padding optional (as ProtoJSON parsers accept).
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def _reject_control_chars(value: str | None, field: str) -> str | None:
    if value is not None and _CONTROL_CHARS.search(value):
        raise ValueError(f"{field} must not contain CR, LF or other control characters")
    return check_text(value, field)


# Lone UTF-16 surrogates (e.g. "\ud800" in JSON) are not text: they cannot be stored as
# UTF-8 or sent in a header. NUL cannot be stored in a PostgreSQL text column either.
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


def is_text(value: str) -> bool:
    """Whether every store can keep ``value``: no NUL (PostgreSQL refuses it) and no
    lone surrogate (UTF-8 cannot encode it)."""
    return not _NOT_TEXT.search(value)


def check_text(value: str | None, field: str) -> str | None:
    """``value`` unchanged, or ValueError naming ``field`` when it is not :func:`is_text`."""
    if value is not None and not is_text(value):
        raise ValueError(f"{field} must be valid Unicode text (no NUL, no lone surrogate)")
    return value


def text_field(value: str | None, info: ValidationInfo) -> str | None:
    """A pydantic field check: :func:`check_text`, naming the field in camelCase."""
    return check_text(value, to_camel(info.field_name or "value"))


# Ids (a task's, a config's, a tenant) longer than this are refused: they are stored
# in indexed columns (PostgreSQL refuses an index entry over about 2.7 kB), carried in
# page tokens and URLs, and written to logs.
MAX_ID_CHARS: Final = 256


def id_problem(value: str) -> str | None:
    """What keeps ``value`` from being an id every store, URL and log line can carry
    (None: nothing): it must be non-empty text (:func:`is_text`) of at most MAX_ID_CHARS
    characters, none of them a control character (a CR or LF would forge log lines)."""
    if not value:
        return "must not be empty"
    if not is_text(value):
        return "must be valid Unicode text (no NUL, no lone surrogate)"
    if len(value) > MAX_ID_CHARS:
        return f"must be at most {MAX_ID_CHARS} characters"
    if _CONTROL_CHARS.search(value):
        return "must not contain control characters"
    return None


def is_id(value: str) -> bool:
    """Whether ``value`` is an id (see :func:`id_problem`)."""
    return id_problem(value) is None


def id_field(value: str | None, info: ValidationInfo) -> str | None:
    """A pydantic field check for an id (see :func:`id_problem`; unset or empty passes:
    whether an id is required is the model's to say)."""
    problem = id_problem(value) if value else None
    if problem is not None:
        raise ValueError(f"{to_camel(info.field_name or 'value')} {problem}")
    return value


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def encodable_field(value: str | None, info: ValidationInfo) -> str | None:
    """A pydantic field check for content: no lone surrogate (UTF-8 cannot encode one,
    so no body could carry it). NUL is fine here: content is sent, not a header."""
    if value is not None and _SURROGATE.search(value):
        field = to_camel(info.field_name or "value")
        raise ValueError(f"{field} must be valid Unicode text (no lone surrogate)")
    return value


def _empty_to_none(value: Any) -> Any:
    # proto3 strings: "" is the default value, i.e. "not set".
    return None if value == "" else value


# --------------------------------------------------------------------------- content


class Part(A2AModel):
    """One piece of content: exactly one of ``text``, ``raw`` (base64), ``url`` or ``data``.

    ``data`` may be any JSON value, ``null`` included (a ``google.protobuf.Value``):
    ``Part(data=None)`` given so, or ``{"data": null}`` read, is a data part holding
    null, written back as ``"data": null``.
    """

    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: JsonValue = None
    metadata: dict[str, JsonValue] | None = None
    filename: str | None = None
    media_type: str | None = None

    @field_validator("raw")
    @classmethod
    def _check_raw(cls, value: str | None) -> str | None:
        if value is not None and (not _BASE64.fullmatch(value) or len(value.rstrip("=")) % 4 == 1):
            raise ValueError("raw must be base64-encoded bytes")
        return value

    _encodable = field_validator("text", "url", "filename", "media_type")(encodable_field)

    @model_validator(mode="after")
    def _exactly_one_content(self) -> Part:
        present = [
            name
            for name, value in (
                ("text", self.text),
                ("raw", self.raw),
                ("url", self.url),
                ("data", self.data),
            )
            if value is not None
        ]
        if self.data is None and self.has_null_data:
            present.append("data")
        if len(present) != 1:
            got = ", ".join(present) if present else "none"
            raise ValueError(f"a Part must have exactly one of text, raw, url, data; got {got}")
        return self

    @property
    def has_null_data(self) -> bool:
        """Whether this is a data part holding ``null``."""
        return self.data is None and "data" in self.model_fields_set

    @model_serializer(mode="wrap")
    def _write_null_data(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if self.has_null_data and isinstance(out, dict):
            out["data"] = None  # not "unset": exclude_none would have dropped it
        return out

    @classmethod
    def from_bytes(
        cls, content: bytes, *, media_type: str | None = None, filename: str | None = None
    ) -> Part:
        """A ``raw`` part carrying ``content`` (base64-encoded for the wire)."""
        return cls(
            raw=base64.b64encode(content).decode("ascii"), media_type=media_type, filename=filename
        )

    def raw_bytes(self) -> bytes | None:
        """The decoded ``raw`` content, or None for other kinds of part."""
        if self.raw is None:
            return None
        unpadded = self.raw.rstrip("=")
        try:
            return base64.urlsafe_b64decode(
                unpadded.replace("+", "-").replace("/", "_") + "=" * (-len(unpadded) % 4)
            )
        except (binascii.Error, ValueError) as exc:  # guarded by _check_raw; kept for safety
            raise ValueError("raw is not valid base64") from exc


class Message(A2AModel):
    """One turn of communication between client and agent."""

    message_id: str = Field(min_length=1)
    context_id: str | None = None
    task_id: str | None = None
    role: Role
    parts: list[Part] = Field(min_length=1)
    metadata: dict[str, JsonValue] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None


class TaskStatus(A2AModel):
    """The state of a task at a point in time, with an optional message."""

    state: TaskState
    message: Message | None = None
    timestamp: str | None = None

    @field_validator("timestamp")
    @classmethod
    def _check_timestamp(cls, value: str | None) -> str | None:
        return _check_timestamp(value)


class Artifact(A2AModel):
    """An output of a task."""

    artifact_id: str = Field(min_length=1)
    name: str | None = None
    description: str | None = None
    parts: list[Part] = Field(min_length=1)
    metadata: dict[str, JsonValue] | None = None
    extensions: list[str] | None = None

    _encodable = field_validator("artifact_id", "name", "description")(encodable_field)


class Task(A2AModel):
    """A unit of work with its current status, artifacts and history.

    ``context_id`` is optional, as in the v1.0 proto (it is not marked REQUIRED there).
    """

    id: str = Field(min_length=1)
    context_id: str | None = None
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, JsonValue] | None = None


class TaskStatusUpdateEvent(A2AModel):
    """A change of a task's status."""

    task_id: str = Field(min_length=1)
    context_id: str
    status: TaskStatus
    metadata: dict[str, JsonValue] | None = None


class TaskArtifactUpdateEvent(A2AModel):
    """A new or updated (``append``) artifact of a task."""

    task_id: str = Field(min_length=1)
    context_id: str
    artifact: Artifact
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, JsonValue] | None = None


PushNotificationEvent: TypeAlias = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
StreamEvent: TypeAlias = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

_STREAM_FIELDS: Final = ("task", "message", "status_update", "artifact_update")


class StreamResponse(A2AModel):
    """The push notification / stream payload: exactly one of the four event kinds."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None

    @model_validator(mode="after")
    def _exactly_one_payload(self) -> StreamResponse:
        present = [to_camel(name) for name in _STREAM_FIELDS if getattr(self, name) is not None]
        if len(present) != 1:
            got = ", ".join(present) if present else "none"
            raise ValueError(
                "a StreamResponse must have exactly one of task, message, statusUpdate, "
                f"artifactUpdate; got {got}"
            )
        return self

    @classmethod
    def wrap(cls, event: StreamEvent) -> StreamResponse:
        """Wrap a task, message, status update or artifact update."""
        if isinstance(event, Task):
            return cls(task=event)
        if isinstance(event, Message):
            return cls(message=event)
        if isinstance(event, TaskStatusUpdateEvent):
            return cls(status_update=event)
        if isinstance(event, TaskArtifactUpdateEvent):
            return cls(artifact_update=event)
        raise TypeError(f"cannot wrap {type(event).__name__} in a StreamResponse")

    @property
    def event(self) -> StreamEvent:
        """The one payload that is set."""
        for name in _STREAM_FIELDS:
            value: StreamEvent | None = getattr(self, name)
            if value is not None:
                return value
        raise AssertionError("unreachable: validated to hold exactly one payload")

    @property
    def task_id(self) -> str | None:
        """The id of the task the payload is about (a message may have none)."""
        event = self.event
        if isinstance(event, Task):
            return event.id
        return event.task_id


# --------------------------------------------------------------------------- push config


class AuthenticationInfo(A2AModel):
    """How the agent authenticates to the webhook: ``Authorization: {scheme} {credentials}``."""

    scheme: str
    credentials: str | None = Field(default=None, repr=False)  # a secret: not in repr/str

    @field_validator("scheme")
    @classmethod
    def _check_scheme(cls, value: str) -> str:
        _reject_control_chars(value, "scheme")
        if not _HTTP_TOKEN.fullmatch(value):
            raise ValueError(
                "scheme must be an HTTP authentication scheme name such as Bearer or Basic"
            )
        return value

    @field_validator("credentials", mode="before")
    @classmethod
    def _credentials_empty_is_unset(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @field_validator("credentials")
    @classmethod
    def _check_credentials(cls, value: str | None) -> str | None:
        return _reject_control_chars(value, "credentials")


class TaskPushNotificationConfig(A2AModel):
    """A webhook registered for a task (v1.0 flat shape).

    Only wire-level checks live here (required, non-empty ``url``; no control
    characters in anything that becomes a header). URL safety policy is applied
    elsewhere. Empty strings in optional fields read as "not set", as in proto3.
    """

    tenant: str | None = None
    id: str | None = None
    task_id: str | None = None
    url: str = Field(min_length=1)
    token: str | None = Field(default=None, repr=False)  # a secret: not in repr/str
    authentication: AuthenticationInfo | None = None

    @field_validator("tenant", "id", "task_id", "token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @field_validator("url", "token")
    @classmethod
    def _no_control_chars(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _reject_control_chars(value, to_camel(info.field_name or "value"))

    _ids = field_validator("tenant", "id", "task_id")(id_field)
