"""Webhook bodies: a task event rendered for a config's protocol version, slimmed when
over the size limit.

v1.0 bodies are the event wrapped in a ``StreamResponse``; v0.3 bodies are the bare
v0.3 object (the whole task when its snapshot is known: v0.3 receivers expect it). An
event whose body is over the limit is sent slimmed: its large parts left out, its
metadata replaced by ``{TRUNCATED_FLAG: true}``; the receiver fetches the rest with
GetTask.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

from pydantic_core import PydanticSerializationError

from a2a_push.protocol.constants import VERSION_0_3
from a2a_push.protocol.types import (
    Artifact,
    Part,
    PushNotificationEvent,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.protocol.v03 import artifact_update_to_v03, status_update_to_v03, task_to_v03

__all__ = ["TRUNCATED_FLAG", "body_renderer", "render_body", "render_v03", "render_v10"]

TRUNCATED_FLAG: Final = "a2a-push/truncated"
"""Metadata key set on an event sent slimmed because it exceeded the payload limit."""

_TRUNCATED_NOTE: Final = (
    "(content left out: over the webhook size limit; fetch the task with GetTask)"
)


def compact_json(data: object) -> bytes:
    """``data`` as the compact UTF-8 JSON that webhook bodies and stream events are sent
    as (no spaces, no ASCII escaping, no NaN)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def body_renderer(
    event: PushNotificationEvent, task: Task | None, limit: int
) -> Callable[[str], bytes]:
    """``render(version)``: the body of ``event`` for a config of that protocol version
    (see :func:`render_body`); what the outbox calls once per version a task's configs
    use."""

    def render(version: str) -> bytes:
        return render_body(event, task, version, limit)

    return render


def render_body(event: PushNotificationEvent, task: Task | None, version: str, limit: int) -> bytes:
    """The webhook body of ``event`` for protocol ``version`` ("0.3"; anything else is
    v1.0), slimmed when over ``limit`` bytes. ``task``: the task's snapshot, which v0.3
    bodies carry whole. Raises ``ValueError`` when the event cannot be JSON."""
    try:
        if version == VERSION_0_3:
            return render_v03(event, task, limit)
        return render_v10(event, limit)
    except (ValueError, TypeError, UnicodeError, PydanticSerializationError) as exc:
        # Left to fail here: a string the models let through that UTF-8 cannot
        # encode (a lone surrogate in an id or in metadata). Nothing is queued.
        raise ValueError(
            f"the event cannot be sent as JSON ({type(exc).__name__}: "
            f"{str(exc)[:200]}); check its strings for lone surrogates"
        ) from None


_STREAM_KEYS: Final = {
    Task: b'{"task":',
    TaskStatusUpdateEvent: b'{"statusUpdate":',
    TaskArtifactUpdateEvent: b'{"artifactUpdate":',
}


def _stream_response(event: PushNotificationEvent) -> bytes:
    # The StreamResponse wrapper written around the event's own JSON: the same bytes as
    # StreamResponse.wrap(event).to_json_bytes(), without building and validating it.
    return _STREAM_KEYS[type(event)] + event.to_json_bytes() + b"}"


def render_v10(event: PushNotificationEvent, limit: int) -> bytes:
    """The v1.0 body: ``event`` as a ``StreamResponse``, slimmed when over ``limit``."""
    body = _stream_response(event)
    if len(body) <= limit:
        return body
    return _slimmed(event, limit, _stream_response)


def render_v03(event: PushNotificationEvent, task: Task | None, limit: int) -> bytes:
    """The v0.3 body: ``task`` when given (v0.3 receivers expect the whole task), else
    the event itself; slimmed when over ``limit``."""

    def dump(e: PushNotificationEvent) -> bytes:
        if isinstance(e, Task):
            data = task_to_v03(e)
        elif task is not None:
            data = task_to_v03(task)  # v0.3 receivers expect the whole task
        elif isinstance(e, TaskStatusUpdateEvent):
            data = status_update_to_v03(e)
        else:
            data = artifact_update_to_v03(e)
        return compact_json(data)

    body = dump(event)
    if len(body) <= limit:
        return body
    if task is not None:
        slim_task = _slim(task)
        assert isinstance(slim_task, Task)
        task = slim_task
    return _slimmed(event, limit, dump)


def _slimmed(
    event: PushNotificationEvent,
    limit: int,
    dump: Callable[[PushNotificationEvent], bytes],
) -> bytes:
    """``dump`` of the slimmed event; an artifact update still over ``limit`` so loses its
    artifact's name too."""
    body = dump(_slim(event))
    if len(body) > limit and isinstance(event, TaskArtifactUpdateEvent):
        body = dump(_slim(event, keep_name=False))
    return body


def _slim(event: PushNotificationEvent, *, keep_name: bool = True) -> PushNotificationEvent:
    """The event without its large parts, flagged; the receiver's GetTask gets the rest.
    ``keep_name=False``: an artifact's name goes too (for when it is large itself)."""
    flag = {TRUNCATED_FLAG: True}
    if isinstance(event, Task):
        return Task(
            id=event.id,
            context_id=event.context_id,
            status=TaskStatus(state=event.status.state, timestamp=event.status.timestamp),
            metadata=flag,
        )
    if isinstance(event, TaskStatusUpdateEvent):
        return TaskStatusUpdateEvent(
            task_id=event.task_id,
            context_id=event.context_id,
            status=TaskStatus(state=event.status.state, timestamp=event.status.timestamp),
            metadata=flag,
        )
    return TaskArtifactUpdateEvent(
        task_id=event.task_id,
        context_id=event.context_id,
        artifact=Artifact(
            artifact_id=event.artifact.artifact_id,
            name=event.artifact.name if keep_name else None,
            parts=[Part(text=_TRUNCATED_NOTE)],
        ),
        append=event.append,
        last_chunk=event.last_chunk,
        metadata=flag,
    )
