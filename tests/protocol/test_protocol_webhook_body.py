"""Webhook bodies rendered from task events (``a2a_push.protocol.webhook_body``); the
slimming of oversized ones is covered end to end in tests/notifier/test_notifier.py."""

from __future__ import annotations

from a2a_push.protocol.types import (
    Artifact,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.protocol.webhook_body import render_v10


def test_v10_body_is_exactly_the_stream_response() -> None:
    events = [
        Task(id="t1", context_id="ctx", status=TaskStatus(state=TaskState.WORKING)),
        TaskStatusUpdateEvent(
            task_id="t1",
            context_id="ctx",
            status=TaskStatus(state=TaskState.COMPLETED),
            metadata={"n": "x"},
        ),
        TaskArtifactUpdateEvent(
            task_id="t1",
            context_id="ctx",
            artifact=Artifact(artifact_id="a", parts=[Part(text="é ✓")]),
            last_chunk=True,
        ),
    ]
    for event in events:
        body = render_v10(event, 1 << 20)
        assert body == StreamResponse.wrap(event).to_json_bytes()
        assert StreamResponse.model_validate_json(body).event == event
