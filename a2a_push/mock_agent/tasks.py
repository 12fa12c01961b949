"""The mock agent's tasks in memory, and the rules its methods read their params by."""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from a2a_push.protocol.jsonrpc import A2AError
from a2a_push.protocol.types import (
    Message,
    Task,
    TaskState,
)

from .streams import Subscriber

# How deeply a message may nest objects and arrays (its metadata, data parts, ...). The
# task around it adds a few levels and the serialiser gives up near 255: a message
# nested deeper is refused before any task exists.
MAX_MESSAGE_DEPTH: Final = 64

# ListTasks paging (spec: default 50, 1..100).
DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 100


# ---- the task store ------------------------------------------------------------------


@dataclass(eq=False)
class TaskRecord:
    """One task and what the agent keeps beside it."""

    task: Task
    owner: str
    skill: str
    subject: str  # the skill's argument (what to book, which dice, ...)
    seq: int = 0  # last-update order, for ListTasks (newest first)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    # The open streams of the task (SendStreamingMessage, SubscribeToTask).
    subscribers: set[Subscriber] = field(default_factory=set)

    @property
    def state(self) -> TaskState:
        return self.task.status.state


class TaskStore:
    """Tasks in memory; every read is scoped to the owner (others get "not found")."""

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._seq = itertools.count(1)

    def add(self, record: TaskRecord) -> None:
        self.touch(record)
        self._records[record.task.id] = record

    def touch(self, record: TaskRecord) -> None:
        record.seq = next(self._seq)

    def get(self, task_id: str, owner: str) -> TaskRecord | None:
        record = self._records.get(task_id)
        if record is None or record.owner != owner:
            return None
        return record

    async def lookup(self, task_id: str, owner: str) -> Task | None:
        """The ``task_lookup`` of the push-config service."""
        record = self.get(task_id, owner)
        return None if record is None else record.task

    def records(self) -> list[TaskRecord]:
        """Every task, whoever owns it (for shutdown)."""
        return list(self._records.values())

    def visible(self, owner: str) -> list[TaskRecord]:
        """The owner's tasks, most recently updated first."""
        mine = [r for r in self._records.values() if r.owner == owner]
        return sorted(mine, key=lambda r: r.seq, reverse=True)


# ---- params helpers ------------------------------------------------------------------


def get_param(params: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = params.get(camel)
    return params.get(snake) if value is None else value


def raw_message(params: Mapping[str, Any]) -> Any:
    """``params.message`` as sent, refused when missing or nested too deeply.

    The message becomes part of the task, which every answer, ``ListTasks`` and every
    webhook serialise: one the serialiser cannot handle must not get that far.
    """
    raw = params.get("message")
    if raw is None:
        raise A2AError.invalid_params("message: is required", "message")
    if _nested_deeper_than(raw, MAX_MESSAGE_DEPTH):
        raise A2AError.invalid_params(
            f"message: nested too deeply (at most {MAX_MESSAGE_DEPTH} levels of objects "
            "and arrays, metadata and data parts included)",
            "message",
        )
    return raw


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has more than ``limit`` levels of objects and arrays.

    Iterative: what ``json.loads`` accepted may nest nearly as deep as Python's
    recursion limit, too deep for a recursive walk from inside a request handler."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def configuration_of(params: Mapping[str, Any]) -> Mapping[str, Any]:
    configuration = params.get("configuration")
    if configuration is None:
        return {}
    if not isinstance(configuration, Mapping):
        raise A2AError.invalid_params("configuration: must be a JSON object", "configuration")
    return configuration


def flag(params: Mapping[str, Any], camel: str, snake: str, default: bool, where: str = "") -> bool:
    value = get_param(params, camel, snake)
    if value is None:
        return default
    if not isinstance(value, bool):
        name = f"{where}{camel}"
        raise A2AError.invalid_params(f"{name}: must be true or false", name)
    return value


def history_length_of(params: Mapping[str, Any], name: str) -> int | None:
    """``historyLength``: None = no limit, 0 = none, N = the N newest messages."""
    leaf = name.rsplit(".", 1)[-1]
    value = get_param(params, leaf, "history_length")
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value.strip())  # ProtoJSON may send integers as strings
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise A2AError.invalid_params(f"{name}: must be a non-negative integer", name)
    return value


def page_size_of(value: Any) -> int:
    if value is None or value == "":
        return DEFAULT_PAGE_SIZE
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE_SIZE:
        raise A2AError.invalid_params(
            f"pageSize: must be an integer from 1 to {MAX_PAGE_SIZE}", "pageSize"
        )
    return value


def status_filter(value: Any) -> TaskState | None:
    if value is None or value in ("", "TASK_STATE_UNSPECIFIED"):
        return None
    try:
        return TaskState(value)
    except ValueError:
        raise A2AError.invalid_params(
            "status: must be a task state such as TASK_STATE_WORKING", "status"
        ) from None


def timestamp_filter(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is not None:
                return moment
    raise A2AError.invalid_params(
        "statusTimestampAfter: must be an ISO 8601 time with an offset, e.g. 2025-10-27T10:00:00Z",
        "statusTimestampAfter",
    )


def status_time(task: Task) -> datetime:
    return datetime.fromisoformat(task.status.timestamp or "1970-01-01T00:00:00Z")


def encode_page_token(seq: int) -> str:
    return base64.urlsafe_b64encode(f"tasks:{seq}".encode()).decode().rstrip("=")


def decode_page_token(token: Any) -> int | None:
    if token is None or token == "":
        return None
    bad = A2AError.invalid_params(
        "pageToken: is not a token from this agent's ListTasks; start without it", "pageToken"
    )
    if not isinstance(token, str):
        raise bad
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    prefix, _, number = text.partition(":")
    if prefix != "tasks" or not number.isdecimal():
        raise bad
    return int(number)


def shaped(task: Task, history_length: int | None) -> Task:
    """The task with at most ``history_length`` of its newest messages (None: all)."""
    if history_length is None or task.history is None:
        return task
    history = task.history[-history_length:] if history_length else None
    return task.model_copy(update={"history": history})


def text_of(message: Message) -> str:
    return " ".join(p.text for p in message.parts if p.text is not None).strip()


def state_name(state: TaskState) -> str:
    return state.value.removeprefix("TASK_STATE_")
