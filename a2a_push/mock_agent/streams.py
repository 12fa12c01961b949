"""Streams of task events for ``SendStreamingMessage`` and ``SubscribeToTask``.

Every change of a task is offered to each of its subscribers at once (never awaited): a
subscriber queues at most ``limit`` events, and one that falls that far behind (a client
that stopped reading) is dropped, its stream ended, so the task never waits for a client
and a client that went away holds nothing. A subscriber detaches itself from its task
after the event that ends its stream (a terminal or interrupted state) and when its
stream ends for any other reason (the client went away, the agent stops).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import MutableSet
from typing import Final

from a2a_push.protocol.constants import VERSION_0_3
from a2a_push.protocol.types import (
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from a2a_push.protocol.v03 import status_update_to_v03, stream_response_to_v03
from a2a_push.protocol.webhook_body import compact_json

STREAM_QUEUE_LIMIT: Final = 256
"""Events one stream may have queued before it is dropped as too slow."""


TaskUpdate = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def ends_stream(event: Task | TaskUpdate) -> bool:
    """Whether a stream closes after ``event``: the task is now in a terminal state, or
    (for an update) an interrupted one (A2A spec §3.1.2, §11.7)."""
    if isinstance(event, Task):
        return event.status.state.is_terminal
    if isinstance(event, TaskStatusUpdateEvent):
        state = event.status.state
        return state.is_terminal or state.is_interrupted
    return False


def render_result(event: Task | TaskUpdate, version: str, *, final: bool | None = None) -> bytes:
    """The JSON-RPC ``result`` of one stream event: a v1.0 ``StreamResponse``, or the v0.3
    event (``kind``; a status update's ``final`` says whether the stream ends with it).
    ``final``: ``ends_stream(event)``, when the caller has it already."""
    if version == VERSION_0_3:
        if isinstance(event, TaskStatusUpdateEvent):
            ends = ends_stream(event) if final is None else final
            return compact_json(status_update_to_v03(event, final=ends))
        return compact_json(stream_response_to_v03(event))
    return StreamResponse.wrap(event).to_json_bytes()


class StreamItem:
    """One task update as every stream sends it, rendered once per protocol version."""

    __slots__ = ("_rendered", "event", "final")

    def __init__(self, event: TaskUpdate) -> None:
        self.event = event
        self.final = ends_stream(event)
        self._rendered: dict[str, bytes] = {}

    def result(self, version: str) -> bytes:
        rendered = self._rendered.get(version)
        if rendered is None:
            rendered = self._rendered[version] = render_result(
                self.event, version, final=self.final
            )
        return rendered


class Subscriber:
    """One stream's queue of a task's updates (bounded), attached to the task's set."""

    __slots__ = ("_items", "_task_subscribers", "_wake", "closed", "limit", "overflowed")

    def __init__(self, task_subscribers: MutableSet[Subscriber], limit: int) -> None:
        self._task_subscribers = task_subscribers
        self._items: deque[StreamItem] = deque()
        self._wake = asyncio.Event()
        self.limit = limit
        self.closed = False  # nothing more will be queued
        self.overflowed = False  # dropped: it fell ``limit`` events behind
        task_subscribers.add(self)

    def offer(self, item: StreamItem) -> None:
        """Queue ``item`` (never blocks); a subscriber already ``limit`` behind is dropped."""
        if self.closed:
            return
        if len(self._items) >= self.limit:
            self.overflowed = True
            self._items.clear()
            self.close()
            return
        self._items.append(item)
        self._wake.set()
        if item.final:
            self.close()

    def close(self) -> None:
        """Detach from the task: what is queued is still delivered, nothing more."""
        self.closed = True
        self._task_subscribers.discard(self)
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._items)

    async def get(self, timeout: float) -> StreamItem | None:
        """The next update; None once closed and drained; TimeoutError after ``timeout``
        seconds with nothing to send."""
        while not self._items:
            if self.closed:
                return None
            self._wake.clear()
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        return self._items.popleft()
