"""A small but complete A2A v1.0 agent on aiohttp, with push notifications by a2a-push.

    a2a-push mock-agent --port 9000 --allow-webhook-host 127.0.0.1
    python -m a2a_push.mock_agent --port 9000 --allow-webhook-host 127.0.0.1 --log-level INFO

Serves JSON-RPC at ``/`` (``SendMessage``, ``GetTask``, ``CancelTask``, ``ListTasks``
and the four push-config methods; the v0.3 names ``message/send``, ``tasks/get``,
``tasks/cancel`` and ``tasks/pushNotificationConfig/*`` with v0.3 shapes), the REST
push-config routes, the agent card at ``/.well-known/agent-card.json``, the JWKS at
``/.well-known/jwks.json`` and Prometheus metrics at ``/metrics``.

Skills, chosen by the first word of the message's text:

* ``roll NdM``  working -> ``dice-result`` artifact -> completed
* ``book X``    input-required (asks for a date); a follow-up message with the same
  ``taskId`` -> ``order`` artifact -> completed
* ``report``    several chunked artifact updates (``append`` / ``lastChunk``) -> completed
* ``fail``      failed;  ``reject``: rejected;  ``login``: auth-required (a follow-up
  message "signs in" and completes it)
* anything else: ``echo`` — submitted -> working -> ``echo`` artifact -> completed

Every step pauses ``step_delay`` seconds (0.5 by default) so a client can watch or cancel.
Every task change goes through ``notifier.publish``: webhooks are durable, signed,
retried and ordered. Tasks live in memory, scoped to the caller (the same owner resolver
the push-config methods use: a digest of the ``Authorization`` header).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import errno
import itertools
import logging
import os
import random
import re
import socket
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from a2a_push import logs
from a2a_push.delivery.dispatcher import webhook_log
from a2a_push.delivery.health import EndpointHealth
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.gateway.app import HEADER_OWNER
from a2a_push.gateway.client import GatewayClient, GatewayError
from a2a_push.httputil import run_app
from a2a_push.metrics import add_metrics_route
from a2a_push.notifier import JWKS_PATH, PushNotifier
from a2a_push.protocol.constants import HEADER_A2A_VERSION, VERSION_0_3, VERSION_1_0
from a2a_push.protocol.jsonrpc import A2AError, failure, parse_request, success
from a2a_push.protocol.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from a2a_push.protocol.v03 import V03FormatError, config_to_v03, message_from_v03, task_to_v03
from a2a_push.server import PushConfigService, agent_card_push_fields, mount, negotiate_version
from a2a_push.server.app import JSON_MEDIA_TYPES
from a2a_push.server.inline import parse_inline_config, register_inline_config
from a2a_push.server.push_config import CREATE, V03_SET, task_id_of
from a2a_push.signing import KeySet
from a2a_push.store import SQLiteStore

log = logging.getLogger("a2a_push.mock_agent")

AGENT_NAME: Final = "a2a-push mock agent"
AGENT_VERSION: Final = "1.0.0"
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 9000
DEFAULT_STEP_DELAY: Final = 0.5
# WARNING shows every webhook retry and dead letter (the notifier's webhook log,
# a2a_push.webhooks, is shown from INFO then) without a line per HTTP request; INFO adds
# the access log.
DEFAULT_LOG_LEVEL: Final = "WARNING"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_BODY_BYTES: Final = 1024 * 1024

# How deeply a message may nest objects and arrays (its metadata, data parts, ...). The
# task around it adds a few levels and the serialiser gives up near 255: a message
# nested deeper is refused before any task exists.
MAX_MESSAGE_DEPTH: Final = 64

# ListTasks paging (spec: default 50, 1..100).
DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 100

# Method names: v1.0, then the v0.3 aliases this agent serves.
SEND_MESSAGE: Final = "SendMessage"
GET_TASK: Final = "GetTask"
CANCEL_TASK: Final = "CancelTask"
LIST_TASKS: Final = "ListTasks"
V03_SEND: Final = "message/send"
V03_GET: Final = "tasks/get"
V03_CANCEL: Final = "tasks/cancel"
_V10_NAMES: Final = frozenset({SEND_MESSAGE, GET_TASK, CANCEL_TASK, LIST_TASKS})
_STREAMING: Final = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)

# Artifact names clients (and the tests) look for.
DICE_RESULT: Final = "dice-result"
ORDER: Final = "order"
REPORT: Final = "report"
ECHO: Final = "echo"

_DICE = re.compile(r"(\d{1,3})d(\d{1,4})", re.IGNORECASE)
_MAX_DICE: Final = 100
_MAX_SIDES: Final = 1000
_REPORT_CHUNKS: Final = (
    "# Quarterly report\n",
    "Revenue: up 12 %.\n",
    "Costs: down 3 %.\n",
    "Outlook: sunny, with a chance of webhooks.\n",
)

SKILLS: Final[tuple[dict[str, Any], ...]] = (
    {
        "id": "roll",
        "name": "Roll dice",
        "description": "Rolls N dice with M sides: 'roll NdM'. Ends with a dice-result artifact.",
        "tags": ["dice", "demo"],
        "examples": ["roll 2d6", "roll 1d20"],
    },
    {
        "id": "book",
        "name": "Book something",
        "description": "Asks for a date (input-required); a follow-up message with the same "
        "taskId completes the booking with an order artifact.",
        "tags": ["multi-turn", "input-required"],
        "examples": ["book a table for two"],
    },
    {
        "id": "report",
        "name": "Write a report",
        "description": "Streams a report as chunked artifact updates (append, lastChunk).",
        "tags": ["artifacts", "chunks"],
        "examples": ["report"],
    },
    {
        "id": "fail",
        "name": "Fail",
        "description": "Ends the task FAILED.",
        "tags": ["errors"],
        "examples": ["fail"],
    },
    {
        "id": "reject",
        "name": "Reject",
        "description": "Ends the task REJECTED.",
        "tags": ["errors"],
        "examples": ["reject"],
    },
    {
        "id": "login",
        "name": "Log in",
        "description": "Stops in AUTH_REQUIRED; a follow-up message with the same taskId "
        "completes it.",
        "tags": ["auth-required"],
        "examples": ["login"],
    },
    {
        "id": "echo",
        "name": "Echo",
        "description": "Any other text: submitted, working, an echo artifact, completed, "
        "slowly enough to watch or cancel.",
        "tags": ["echo"],
        "examples": ["hello"],
    },
)


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

    def visible(self, owner: str) -> list[TaskRecord]:
        """The owner's tasks, most recently updated first."""
        mine = [r for r in self._records.values() if r.owner == owner]
        return sorted(mine, key=lambda r: r.seq, reverse=True)


# ---- the agent -----------------------------------------------------------------------


class GatewayLink:
    """The agent's side of an a2a-push gateway: events through ``GatewayClient`` (retried
    until durable), push-config methods forwarded to the gateway's JSON-RPC endpoint
    with the caller as ``X-A2A-Owner``."""

    def __init__(self, url: str, api_key: str) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._client: GatewayClient | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._client = GatewayClient(self.url, self._api_key, session=self._session)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def publish(
        self, task_id: str, event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    ) -> None:
        self._http()
        assert self._client is not None
        try:
            await self._client.publish(task_id, event)
        except GatewayError as exc:
            raise A2AError.internal_error(f"the push gateway refused the event: {exc}") from exc

    async def call(self, method: str, params: Any, *, owner: str, version: str) -> Any:
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            HEADER_A2A_VERSION: version,
            HEADER_OWNER: owner,
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            async with self._http().post(self.url + "/v1/rpc", json=body, headers=headers) as resp:
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise A2AError.internal_error(f"the push gateway is unreachable: {exc}") from exc
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            raise A2AError.from_error_dict(data["error"])
        if not isinstance(data, dict) or "result" not in data:
            raise A2AError.internal_error("the push gateway sent no JSON-RPC result")
        return data["result"]


class MockAgent:
    """The A2A methods of the mock agent; ``call`` serves one JSON-RPC method."""

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        public_url: str,
        step_delay: float = DEFAULT_STEP_DELAY,
        gateway: GatewayLink | None = None,
    ) -> None:
        self.notifier = notifier
        # With a gateway, events and push configs go there; the embedded notifier then
        # only validates inline configs and sends nothing.
        self.gateway = gateway
        self.public_url = public_url.rstrip("/")
        self.step_delay = step_delay
        self.tasks = TaskStore()
        self.service = PushConfigService(notifier, task_lookup=self.tasks.lookup)
        self._runners: set[asyncio.Task[None]] = set()
        self._methods: dict[str, Callable[[Mapping[str, Any], str], Awaitable[Any]]] = {
            SEND_MESSAGE: self._send_v10,
            V03_SEND: self._send_v03,
            GET_TASK: self._get_v10,
            V03_GET: self._get_v03,
            CANCEL_TASK: self._cancel_v10,
            V03_CANCEL: self._cancel_v03,
            LIST_TASKS: self._list_tasks,
        }

    # ---- dispatch -----------------------------------------------------------------------

    def version_for(self, header: str | None, method: str) -> str:
        """The negotiated version; without ``A2A-Version`` a v1.0 method name means 1.0."""
        if not (header or "").strip() and method in _V10_NAMES:
            return VERSION_1_0
        return negotiate_version(header, method)

    async def call(self, method: str, params: Any, *, owner: str, version: str) -> Any:
        """Serve one method: its JSON-ready result, or an ``A2AError``.

        The method name decides the shapes (v1.0 or v0.3), as for the push-config methods.
        """
        if method in self.service.methods:
            if self.gateway is not None:
                # The gateway knows which agent owns a task, not which of this agent's
                # callers does: only the task's own caller may manage its configs.
                task_id = task_id_of(method, params)
                if task_id is not None and self.tasks.get(task_id, owner) is None:
                    raise A2AError.task_not_found(task_id)
                return await self.gateway.call(method, params, owner=owner, version=version)
            return await self.service.handle(method, params, version=version, owner=owner)
        handler = self._methods.get(method)
        if handler is None:
            if method in _STREAMING:
                raise A2AError.unsupported_operation(
                    "streaming is not supported by this agent (capabilities.streaming is "
                    "false); use SendMessage with push notifications"
                )
            raise A2AError.method_not_found(method)
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise A2AError.invalid_params("params must be a JSON object", "params")
        return await handler(params, owner)

    async def close(self) -> None:
        """Stop every running skill (graceful shutdown)."""
        runners = list(self._runners)
        for runner in runners:
            runner.cancel()
        if runners:
            await asyncio.wait(runners)

    # ---- SendMessage ----------------------------------------------------------------------

    async def _send_v10(self, params: Mapping[str, Any], owner: str) -> Any:
        raw = _raw_message(params)
        try:
            message = Message.model_validate(raw)
        except ValidationError as exc:
            raise A2AError.from_validation_error(exc, prefix="message") from None
        configuration = _configuration(params)
        wait = not _flag(
            configuration, "returnImmediately", "return_immediately", False, "configuration."
        )
        length = _history_length(configuration, "configuration.historyLength")
        record = await self._send(message, configuration, owner, VERSION_1_0)
        if wait:
            await self._settled(record)
        return {"task": _shaped(record.task, length).to_json_dict()}

    async def _send_v03(self, params: Mapping[str, Any], owner: str) -> Any:
        raw = _raw_message(params)
        try:
            message = message_from_v03(raw)
        except V03FormatError as exc:
            raise A2AError.invalid_params(str(exc), "message") from None
        configuration = _configuration(params)
        # v0.3 `blocking`: the opposite of returnImmediately; unset waits, as v0.3 servers did.
        wait = _flag(configuration, "blocking", "blocking", True, "configuration.")
        length = _history_length(configuration, "configuration.historyLength")
        record = await self._send(message, configuration, owner, VERSION_0_3)
        if wait:
            await self._settled(record)
        return task_to_v03(_shaped(record.task, length))

    async def _send(
        self, message: Message, configuration: Mapping[str, Any], owner: str, version: str
    ) -> TaskRecord:
        if message.task_id:
            return await self._continue(message, configuration, owner, version)
        # Validate the inline config before the task exists: a bad one leaves nothing.
        parse_inline_config(configuration, service=self.service)
        task_id = str(uuid.uuid4())  # task ids are the server's (spec §3.4.2)
        context_id = message.context_id or str(uuid.uuid4())
        message = message.model_copy(update={"task_id": task_id, "context_id": context_id})
        skill, subject = _skill_of(message)
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.SUBMITTED, timestamp=utc_timestamp()),
            history=[message],
        )
        record = TaskRecord(task=task, owner=owner, skill=skill, subject=subject)
        # Registers the config and queues the submitted task as its first webhook; if it
        # fails (e.g. the host does not resolve) the task was never stored.
        await self._register_inline(
            configuration, task=task, owner=owner, version=version, new_task=True
        )
        self.tasks.add(record)
        self._start(record, self._run(record))
        return record

    async def _continue(
        self, message: Message, configuration: Mapping[str, Any], owner: str, version: str
    ) -> TaskRecord:
        task_id = message.task_id or ""
        record = self.tasks.get(task_id, owner)
        if record is None:
            raise A2AError.task_not_found(task_id)
        if message.context_id and message.context_id != record.task.context_id:
            raise A2AError.invalid_params(
                "message.contextId: does not match the context of the task given in "
                "message.taskId (leave it out, or send the task's contextId)",
                "message.contextId",
            )
        self._check_accepts_messages(record)
        parse_inline_config(configuration, service=self.service, task_id=record.task.id)
        message = message.model_copy(update={"context_id": record.task.context_id})
        async with record.lock:
            self._check_accepts_messages(record)  # it may have moved on meanwhile
            await self._register_inline(
                configuration, task=record.task, owner=owner, version=version, new_task=False
            )
            history = [*(record.task.history or []), message]
            record.task = record.task.model_copy(update={"history": history})
            await self._apply_status(record, TaskState.WORKING)
            self._start(record, self._resume(record, _text_of(message)))
        return record

    def _check_accepts_messages(self, record: TaskRecord) -> None:
        state = record.state
        if state.is_terminal:
            raise A2AError.unsupported_operation(
                f"task {record.task.id} is {_state_name(state)}: a task in a terminal state "
                "accepts no more messages; send a new message without taskId"
            )
        if not state.is_interrupted:
            raise A2AError.unsupported_operation(
                f"task {record.task.id} is still {_state_name(state)}; send a follow-up "
                "only when it asks for input (INPUT_REQUIRED or AUTH_REQUIRED)"
            )

    async def _settled(self, record: TaskRecord) -> None:
        """Wait until the task is in a terminal or interrupted state."""
        while not (record.state.is_terminal or record.state.is_interrupted):
            await record.changed.wait()

    # ---- GetTask / CancelTask / ListTasks -------------------------------------------------

    def _record(self, params: Mapping[str, Any], owner: str) -> TaskRecord:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise A2AError.invalid_params("id: is required (the task id)", "id")
        record = self.tasks.get(task_id, owner)
        if record is None:
            raise A2AError.task_not_found(task_id)
        return record

    async def _get_v10(self, params: Mapping[str, Any], owner: str) -> Any:
        record = self._record(params, owner)
        return _shaped(record.task, _history_length(params, "historyLength")).to_json_dict()

    async def _get_v03(self, params: Mapping[str, Any], owner: str) -> Any:
        record = self._record(params, owner)
        return task_to_v03(_shaped(record.task, _history_length(params, "historyLength")))

    async def _cancel(self, params: Mapping[str, Any], owner: str) -> Task:
        record = self._record(params, owner)
        async with record.lock:
            if record.state.is_terminal:
                raise A2AError.task_not_cancelable(record.task.id)
            runner = record.runner
            if runner is not None and not runner.done():
                # It is sleeping or waiting for this lock: never in the middle of a publish.
                runner.cancel()
                await asyncio.wait({runner})
            await self._apply_status(
                record, TaskState.CANCELED, self._say(record, "Canceled at the client's request.")
            )
        return record.task

    async def _cancel_v10(self, params: Mapping[str, Any], owner: str) -> Any:
        return (await self._cancel(params, owner)).to_json_dict()

    async def _cancel_v03(self, params: Mapping[str, Any], owner: str) -> Any:
        return task_to_v03(await self._cancel(params, owner))

    async def _list_tasks(self, params: Mapping[str, Any], owner: str) -> Any:
        context_id = _get(params, "contextId", "context_id")
        if context_id is not None and not isinstance(context_id, str):
            raise A2AError.invalid_params("contextId: must be a string", "contextId")
        status = _status_filter(params.get("status"))
        page_size = _page_size(_get(params, "pageSize", "page_size"))
        after = _decode_page_token(_get(params, "pageToken", "page_token"))
        length = _history_length(params, "historyLength")
        include_artifacts = _flag(params, "includeArtifacts", "include_artifacts", False)
        since = _timestamp_filter(_get(params, "statusTimestampAfter", "status_timestamp_after"))

        records = [
            r
            for r in self.tasks.visible(owner)
            if (not context_id or r.task.context_id == context_id)
            and (status is None or r.state is status)
            and (since is None or _status_time(r.task) >= since)
        ]
        total = len(records)
        if after is not None:
            records = [r for r in records if r.seq < after]
        page = records[:page_size]
        next_token = _encode_page_token(page[-1].seq) if len(records) > page_size else ""
        tasks = []
        for record in page:
            task = _shaped(record.task, length)
            if not include_artifacts:  # spec: omitted entirely unless asked for
                task = task.model_copy(update={"artifacts": None})
            tasks.append(task.to_json_dict())
        return {
            "tasks": tasks,
            "nextPageToken": next_token,
            "pageSize": page_size,
            "totalSize": total,
        }

    async def _register_inline(
        self,
        configuration: Mapping[str, Any],
        *,
        task: Task,
        owner: str,
        version: str,
        new_task: bool,
    ) -> None:
        if self.gateway is None:
            await register_inline_config(
                self.service, configuration, task=task, owner=owner, version=version
            )
            return
        config = parse_inline_config(configuration, service=self.service, task_id=task.id)
        if config is None:
            return
        # The gateway keeps the config; the task's first event there claims the task id.
        # A follow-up's task is known there already (it published its way to an
        # interrupted state), and a second `task` event would reach every existing
        # subscriber: the gateway sends the new config its own snapshot instead.
        if new_task:
            await self.gateway.publish(task.id, task)
        if version == VERSION_0_3:
            # Registered as v0.3, so its webhooks are v0.3 too (and, as v0.3 servers did,
            # an id-less config is keyed by its task).
            config = config.model_copy(update={"task_id": task.id, "id": config.id or task.id})
            await self.gateway.call(
                V03_SET,
                config_to_v03(config),
                owner=owner,
                version=VERSION_0_3,
            )
            return
        params = config.model_copy(update={"task_id": task.id}).to_json_dict()
        await self.gateway.call(CREATE, params, owner=owner, version=VERSION_1_0)

    async def _publish(
        self, task: Task, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    ) -> None:
        if self.gateway is not None:
            await self.gateway.publish(task.id, event)
        else:
            await self.notifier.publish(task.id, event, task=task)

    # ---- task changes: every one goes through notifier.publish ----------------------------

    async def _apply_status(
        self, record: TaskRecord, state: TaskState, message: Message | None = None
    ) -> None:
        """Set the task's status and publish it. The caller holds ``record.lock``."""
        status = TaskStatus(state=state, message=message, timestamp=utc_timestamp())
        update: dict[str, Any] = {"status": status}
        if message is not None:
            update["history"] = [*(record.task.history or []), message]
        record.task = record.task.model_copy(update=update)
        await self._publish(
            record.task,
            TaskStatusUpdateEvent(
                task_id=record.task.id, context_id=record.task.context_id or "", status=status
            ),
        )
        self._changed(record)

    async def _status(self, record: TaskRecord, state: TaskState, text: str | None = None) -> None:
        async with record.lock:
            if record.state.is_terminal:  # canceled meanwhile: nothing more happens
                raise asyncio.CancelledError
            await self._apply_status(record, state, self._say(record, text) if text else None)

    async def _artifact(
        self, record: TaskRecord, artifact: Artifact, *, append: bool = False, last: bool = False
    ) -> None:
        async with record.lock:
            if record.state.is_terminal:
                raise asyncio.CancelledError
            artifacts = list(record.task.artifacts or [])
            existing = next(
                (i for i, a in enumerate(artifacts) if a.artifact_id == artifact.artifact_id), None
            )
            if existing is None:
                artifacts.append(artifact)
            elif append:
                old = artifacts[existing]
                artifacts[existing] = old.model_copy(
                    update={"parts": [*old.parts, *artifact.parts]}
                )
            else:
                artifacts[existing] = artifact
            record.task = record.task.model_copy(update={"artifacts": artifacts})
            await self._publish(
                record.task,
                TaskArtifactUpdateEvent(
                    task_id=record.task.id,
                    context_id=record.task.context_id or "",
                    artifact=artifact,
                    append=True if append else None,
                    last_chunk=True if last else None,
                ),
            )
            self._changed(record)

    def _changed(self, record: TaskRecord) -> None:
        self.tasks.touch(record)
        woken, record.changed = record.changed, asyncio.Event()
        woken.set()

    def _say(self, record: TaskRecord, text: str) -> Message:
        return Message(
            message_id=str(uuid.uuid4()),
            role=Role.AGENT,
            parts=[Part(text=text)],
            task_id=record.task.id,
            context_id=record.task.context_id,
        )

    # ---- skills --------------------------------------------------------------------------

    def _start(self, record: TaskRecord, work: Awaitable[None]) -> None:
        runner = asyncio.create_task(self._guarded(record, work), name=f"task-{record.task.id}")
        record.runner = runner
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)

    async def _guarded(self, record: TaskRecord, work: Awaitable[None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("skill %s of task %s failed", record.skill, record.task.id)
            try:
                await self._status(record, TaskState.FAILED, "Internal error in the mock agent.")
            except (asyncio.CancelledError, Exception):
                log.exception("could not mark task %s failed", record.task.id)

    async def _pause(self) -> None:
        await asyncio.sleep(self.step_delay)

    async def _run(self, record: TaskRecord) -> None:
        await self._pause()
        skill = record.skill
        if skill == "reject":
            await self._status(
                record, TaskState.REJECTED, "I won't do that: the reject skill always refuses."
            )
            return
        if skill == "roll" and _DICE.fullmatch(record.subject) is None:
            await self._status(
                record,
                TaskState.REJECTED,
                f"roll needs NdM, e.g. 'roll 2d6' (1-{_MAX_DICE} dice of 2-{_MAX_SIDES} sides)",
            )
            return
        await self._status(record, TaskState.WORKING)
        await self._pause()
        if skill == "roll":
            await self._roll(record)
        elif skill == "book":
            what = record.subject or "a table"
            await self._status(
                record,
                TaskState.INPUT_REQUIRED,
                f"For which date should I book {what}? Reply with the same taskId.",
            )
        elif skill == "report":
            await self._report(record)
        elif skill == "fail":
            await self._status(record, TaskState.FAILED, "The task failed, as asked.")
        elif skill == "login":
            await self._status(
                record,
                TaskState.AUTH_REQUIRED,
                "Please sign in: reply with the same taskId to continue (a mock sign-in).",
            )
        else:
            await self._echo(record)

    async def _resume(self, record: TaskRecord, text: str) -> None:
        """A follow-up message arrived for an interrupted task (now WORKING again)."""
        await self._pause()
        if record.skill == "book":
            what = record.subject or "a table"
            when = text.strip() or "the first free date"
            order_id = f"ORD-{uuid.uuid4().hex[:8].upper()}"
            await self._artifact(
                record,
                Artifact(
                    artifact_id=str(uuid.uuid4()),
                    name=ORDER,
                    parts=[
                        Part(text=f"Booked {what} for {when} (order {order_id})."),
                        Part(data={"orderId": order_id, "item": what, "date": when}),
                    ],
                ),
            )
            await self._pause()
            await self._status(record, TaskState.COMPLETED, f"Booked: order {order_id}.")
        else:
            await self._status(record, TaskState.COMPLETED, "Signed in. All done.")

    async def _roll(self, record: TaskRecord) -> None:
        match = _DICE.fullmatch(record.subject)
        assert match is not None  # checked before WORKING
        count = min(max(int(match.group(1)), 1), _MAX_DICE)
        sides = min(max(int(match.group(2)), 2), _MAX_SIDES)
        rolls = [random.randint(1, sides) for _ in range(count)]
        dice = f"{count}d{sides}"
        await self._artifact(
            record,
            Artifact(
                artifact_id=str(uuid.uuid4()),
                name=DICE_RESULT,
                parts=[
                    Part(text=f"{dice}: {' + '.join(map(str, rolls))} = {sum(rolls)}"),
                    Part(data={"dice": dice, "rolls": rolls, "total": sum(rolls)}),
                ],
            ),
        )
        await self._pause()
        await self._status(record, TaskState.COMPLETED, f"Rolled {dice}: {sum(rolls)}.")

    async def _report(self, record: TaskRecord) -> None:
        artifact_id = str(uuid.uuid4())
        last = len(_REPORT_CHUNKS) - 1
        for i, chunk in enumerate(_REPORT_CHUNKS):
            if i:
                await self._pause()
            await self._artifact(
                record,
                Artifact(
                    artifact_id=artifact_id,
                    name=REPORT,
                    parts=[Part(text=chunk, media_type="text/markdown")],
                ),
                append=i > 0,
                last=i == last,
            )
        await self._pause()
        await self._status(record, TaskState.COMPLETED, "The report is ready.")

    async def _echo(self, record: TaskRecord) -> None:
        text = _text_of((record.task.history or [])[0]) if record.task.history else ""
        await self._artifact(
            record,
            Artifact(artifact_id=str(uuid.uuid4()), name=ECHO, parts=[Part(text=text or " ")]),
        )
        await self._pause()
        await self._status(record, TaskState.COMPLETED)


class GatewayPushConfigs(PushConfigService):
    """The REST push-config routes in gateway mode.

    ``mount`` serves its routes with a ``PushConfigService``; this one answers every call
    as the JSON-RPC endpoint does, through ``MockAgent.call``: only the task's own caller
    gets past the agent, then the gateway (which keeps the configs and sends the
    webhooks) answers. So a config made over REST is the same as one made over JSON-RPC.
    """

    def __init__(self, agent: MockAgent) -> None:
        local = agent.service
        super().__init__(
            local.notifier, task_lookup=local.task_lookup, owner_resolver=local.owner_resolver
        )
        self._agent = agent

    async def handle(self, method: str, params: Any, *, version: str, owner: str) -> Any:
        if method not in self.methods:
            raise A2AError.method_not_found(method)
        return await self._agent.call(method, params, owner=owner, version=version)


# ---- params helpers ------------------------------------------------------------------


def _get(params: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = params.get(camel)
    return params.get(snake) if value is None else value


def _raw_message(params: Mapping[str, Any]) -> Any:
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


def _configuration(params: Mapping[str, Any]) -> Mapping[str, Any]:
    configuration = params.get("configuration")
    if configuration is None:
        return {}
    if not isinstance(configuration, Mapping):
        raise A2AError.invalid_params("configuration: must be a JSON object", "configuration")
    return configuration


def _flag(
    params: Mapping[str, Any], camel: str, snake: str, default: bool, where: str = ""
) -> bool:
    value = _get(params, camel, snake)
    if value is None:
        return default
    if not isinstance(value, bool):
        name = f"{where}{camel}"
        raise A2AError.invalid_params(f"{name}: must be true or false", name)
    return value


def _history_length(params: Mapping[str, Any], name: str) -> int | None:
    """``historyLength``: None = no limit, 0 = none, N = the N newest messages."""
    leaf = name.rsplit(".", 1)[-1]
    value = _get(params, leaf, "history_length")
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value.strip())  # ProtoJSON may send integers as strings
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise A2AError.invalid_params(f"{name}: must be a non-negative integer", name)
    return value


def _page_size(value: Any) -> int:
    if value is None or value == "":
        return DEFAULT_PAGE_SIZE
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE_SIZE:
        raise A2AError.invalid_params(
            f"pageSize: must be an integer from 1 to {MAX_PAGE_SIZE}", "pageSize"
        )
    return value


def _status_filter(value: Any) -> TaskState | None:
    if value is None or value in ("", "TASK_STATE_UNSPECIFIED"):
        return None
    try:
        return TaskState(value)
    except ValueError:
        raise A2AError.invalid_params(
            "status: must be a task state such as TASK_STATE_WORKING", "status"
        ) from None


def _timestamp_filter(value: Any) -> datetime | None:
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


def _status_time(task: Task) -> datetime:
    return datetime.fromisoformat(task.status.timestamp or "1970-01-01T00:00:00Z")


def _encode_page_token(seq: int) -> str:
    return base64.urlsafe_b64encode(f"tasks:{seq}".encode()).decode().rstrip("=")


def _decode_page_token(token: Any) -> int | None:
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


def _shaped(task: Task, history_length: int | None) -> Task:
    """The task with at most ``history_length`` of its newest messages (None: all)."""
    if history_length is None or task.history is None:
        return task
    history = task.history[-history_length:] if history_length else None
    return task.model_copy(update={"history": history})


def _text_of(message: Message) -> str:
    return " ".join(p.text for p in message.parts if p.text is not None).strip()


def _skill_of(message: Message) -> tuple[str, str]:
    """(skill, its argument) from the message's text: the first word picks the skill."""
    text = _text_of(message)
    word, _, rest = text.partition(" ")
    skill = word.lower()
    if skill in ("roll", "book", "report", "fail", "reject", "login"):
        return skill, rest.strip()
    return ECHO, text


def _state_name(state: TaskState) -> str:
    return state.value.removeprefix("TASK_STATE_")


# ---- the card and the application ----------------------------------------------------


def agent_card(public_url: str, jwks_uri: str | None = None) -> dict[str, Any]:
    """The agent card (v1.0 fields, plus the v0.3 ``url`` for older clients);
    ``jwks_uri``: where the keys that sign its webhooks are (default: its own)."""
    base = public_url.rstrip("/")
    endpoint = f"{base}/"
    card: dict[str, Any] = {
        "name": AGENT_NAME,
        "description": "A small A2A agent for trying push notifications: rolls dice, books "
        "things, writes reports, fails, rejects and asks you to log in.",
        "version": AGENT_VERSION,
        "supportedInterfaces": [
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION_1_0},
            {"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION_0_3},
        ],
        # v0.3 clients read these instead of supportedInterfaces.
        "url": endpoint,
        "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0",
        "capabilities": {"streaming": False, "pushNotifications": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [dict(skill) for skill in SKILLS],
    }
    return agent_card_push_fields(card, jwks_uri or f"{base}{JWKS_PATH}")


AGENT: Final = web.AppKey("a2a_push_mock_agent", MockAgent)


def create_app(
    *,
    data_dir: Path | None,
    allow_webhook_hosts: Sequence[str] = (),
    public_url: str,
    step_delay: float = DEFAULT_STEP_DELAY,
    retry_schedule: Sequence[float] | None = None,
    gateway_url: str | None = None,
    gateway_key: str | None = None,
) -> web.Application:
    """The mock agent as an aiohttp application (the notifier starts and stops with it).

    ``data_dir`` holds the SQLite outbox and the signing keys (None: a temporary folder,
    removed at shutdown). ``allow_webhook_hosts``: SSRF allowlist entries (hosts, IPs,
    CIDRs) webhooks may go to, e.g. ``127.0.0.1`` for a local receiver. ``public_url``
    is the agent's base URL: the JWT issuer and the card's URLs. ``retry_schedule``:
    seconds before each durable webhook retry (default: the notifier's 5 s, 5 m, …); a
    short one suits demos and tests, and then an unreachable endpoint's breaker also
    cools down for only its first delay. ``gateway_url`` / ``gateway_key``: post every
    event to an a2a-push gateway and let it keep the push configs and send the webhooks,
    instead of the embedded notifier.
    """
    if (gateway_url is None) != (gateway_key is None):
        raise ValueError("gateway mode needs both the gateway URL and the agent's API key")
    gateway = GatewayLink(gateway_url, gateway_key) if gateway_url and gateway_key else None
    policy = AddressPolicy(
        list(allow_webhook_hosts), allowlist_name="the mock agent's --allow-webhook-host"
    )
    tuning: dict[str, Any] = {}
    if retry_schedule is not None:
        schedule = tuple(retry_schedule)
        if not schedule or min(schedule) <= 0:
            raise ValueError("retry_schedule: give one or more positive delays in seconds")
        tuning["retry"] = RetryPolicy(schedule=schedule)
        tuning["health"] = EndpointHealth(cool_down=schedule[0], max_cool_down=schedule[0])
    scratch: tempfile.TemporaryDirectory[str] | None = None
    if data_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="a2a-push-mock-agent-")
        directory = Path(scratch.name)
    else:
        directory = Path(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
    if gateway is not None:
        notifier = PushNotifier.open(
            "memory://",
            issuer=public_url.rstrip("/"),
            data_dir=directory,
            address_policy=policy,
            run_dispatcher=False,
            **tuning,
        )
    else:
        # PushNotifier.open(directory / "push.db", data_dir=directory).
        notifier = PushNotifier(
            SQLiteStore(directory / "push.db"),
            issuer=public_url.rstrip("/"),
            keyset=KeySet.load_or_create(directory / "keys"),
            address_policy=policy,
            **tuning,
        )
    agent = MockAgent(notifier, public_url=public_url, step_delay=step_delay, gateway=gateway)
    # In gateway mode the gateway signs the webhooks: the card points at its keys.
    card = agent_card(public_url, f"{gateway.url}{JWKS_PATH}" if gateway else None)

    async def jsonrpc(request: web.Request) -> web.StreamResponse:
        if request.content_type not in JSON_MEDIA_TYPES:
            error = A2AError.content_type_not_supported(request.content_type)
            return web.json_response(failure(None, error), status=415)
        body = await request.read()
        try:
            rpc = parse_request(body)
        except A2AError as err:
            return web.json_response(failure(err.request_id, err))
        try:
            version = agent.version_for(request.headers.get(HEADER_A2A_VERSION), rpc.method)
            owner = await agent.service.resolve_owner(request.headers)
            result = await agent.call(rpc.method, rpc.params, owner=owner, version=version)
        except A2AError as err:
            response = failure(rpc.id, err)
        except Exception:
            log.exception("method %s failed", rpc.method)
            response = failure(rpc.id, A2AError.internal_error())
        else:
            response = success(rpc.id, result)
        if rpc.is_notification:
            return web.Response(status=204)
        return web.json_response(response)

    async def card_route(request: web.Request) -> web.Response:
        return web.json_response(card, headers={"Cache-Control": "max-age=60"})

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await notifier.start()
        try:
            yield
        finally:
            await agent.close()
            if gateway is not None:
                await gateway.close()
            await notifier.stop()
            if scratch is not None:
                scratch.cleanup()

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[AGENT] = agent
    app.router.add_post("/", jsonrpc)
    app.router.add_get("/.well-known/agent-card.json", card_route)
    # REST push configs (through the gateway in gateway mode, like JSON-RPC) and the JWKS.
    # (In gateway mode the local notifier signs nothing: its JWKS is not served.)
    mount(
        app,
        GatewayPushConfigs(agent) if gateway else agent.service,
        jsonrpc_path=None,
        jwks=gateway is None,
    )
    add_metrics_route(app, notifier.metrics, "/metrics", before_scrape=notifier.refresh_metrics)
    app.cleanup_ctx.append(lifecycle)
    return app


def serve(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    data_dir: Path | None = None,
    allow_webhook_hosts: Sequence[str] = (),
    public_url: str | None = None,
    step_delay: float = DEFAULT_STEP_DELAY,
    retry_schedule: Sequence[float] | None = None,
    gateway_url: str | None = None,
    gateway_key: str | None = None,
    log_level: str = DEFAULT_LOG_LEVEL,
    prog: str = "a2a-push mock-agent",
) -> int:
    """Run the mock agent until interrupted; the exit code.

    Logs to stderr at ``log_level`` (webhook retries and dead letters are warnings). The
    banner is printed once the port is bound; a port that cannot be bound is one line on
    stderr (``prog: error: ...``) and exit code 1 (2 for a port out of range).
    """
    problem = port_problem(port)
    if problem is not None:
        print(f"{prog}: error: --port {port}: {problem}", file=sys.stderr)
        return 2
    logs.configure(log_level.upper())
    if logging.getLogger().isEnabledFor(logging.WARNING):
        # Retries are INFO in the notifier's webhook log; this console shows them.
        webhook_log.setLevel(min(logging.INFO, logging.getLogger().getEffectiveLevel()))
    shown_host = f"[{host}]" if ":" in host else host
    url = (public_url or f"http://{shown_host}:{port}").rstrip("/")
    try:
        app = create_app(
            data_dir=data_dir,
            allow_webhook_hosts=allow_webhook_hosts,
            public_url=url,
            step_delay=step_delay,
            retry_schedule=retry_schedule,
            gateway_url=gateway_url,
            gateway_key=gateway_key,
        )
    except OSError as exc:  # the data folder cannot be made
        print(f"{prog}: error: {bind_error(exc, host, port)}", file=sys.stderr)
        return 1
    lines = [
        f"{AGENT_NAME}: listening on {shown_host}:{port}; JSON-RPC at {url}/, "
        f"card at {url}/.well-known/agent-card.json"
    ]
    if gateway_url:
        lines.append(f"events and push configs go to the gateway at {gateway_url}")
    if not allow_webhook_hosts:
        lines.append(
            "note: webhooks to private or loopback addresses are refused; pass "
            "--allow-webhook-host 127.0.0.1 for a receiver on this machine"
        )
    started = False

    def announce(_aiohttp_banner: str) -> None:
        # run_app calls this once every site listens: a port in use fails before it.
        nonlocal started
        started = True
        logs.serving("\n".join(lines))

    try:
        # aiohttp's access log (a line per request) is at INFO: shown from --log-level INFO.
        run_app(
            app,
            host=host,
            port=port,
            print=announce,
            access_log=logging.getLogger("aiohttp.access"),
        )
    except OSError as exc:
        if started:
            raise
        print(f"{prog}: error: {bind_error(exc, host, port)}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # the outbox file cannot be opened (at startup)
        if started:
            raise
        print(
            f"{prog}: error: cannot open the outbox in the data folder ({exc}); check "
            "--data-dir (it must be a writable folder of the mock agent's own)",
            file=sys.stderr,
        )
        return 1
    return 0


def port_problem(port: int) -> str | None:
    """Why ``port`` cannot be listened on, or None. (0, "any free port", would leave the
    agent's issuer and card URLs without the port actually chosen.)"""
    if 1 <= port <= 65535:
        return None
    return "out of range; give a port from 1 to 65535"


def bind_error(exc: OSError, host: str, port: int) -> str:
    """One line for a failure to start listening on ``host:port``."""
    if exc.filename is not None:  # not the socket: the data folder, its files
        return f"{exc.strerror or exc} ({exc.filename}); check --data-dir"
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is in use; pick another with --port or stop the process using it"
    if exc.errno == errno.EACCES:
        return (
            f"port {port}: permission denied (ports below 1024 need privileges); pick "
            "another with --port"
        )
    # (aiohttp's own text repeats the address: the system's reason alone is enough)
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        reason = str(exc.strerror or exc)  # the host name did not resolve, ...
    else:
        reason = os.strerror(exc.errno).lower()
    return f"cannot listen on {host}:{port}: {reason}; check --host and --port"


def build_parser(prog: str = "mock-agent") -> argparse.ArgumentParser:
    """The mock agent's command-line options (also used by ``a2a-push mock-agent``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"default: {DEFAULT_HOST}")
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"1 to 65535 (default: {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep the outbox and signing keys here (default: a temporary folder)",
    )
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        dest="allow_webhook_hosts",
        help="let webhooks go to this host, IP or CIDR (repeat for several); e.g. "
        "127.0.0.1 for a receiver on this machine",
    )
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="the agent's base URL as clients see it (default: http://HOST:PORT)",
    )
    parser.add_argument(
        "--step-delay",
        type=float,
        default=DEFAULT_STEP_DELAY,
        metavar="SECONDS",
        help=f"pause between task steps (default: {DEFAULT_STEP_DELAY})",
    )
    parser.add_argument(
        "--gateway",
        metavar="URL",
        dest="gateway_url",
        help="post events to this a2a-push gateway instead of the embedded notifier "
        "(the gateway keeps the push configs and sends the webhooks)",
    )
    parser.add_argument(
        "--gateway-key",
        metavar="KEY",
        default=os.environ.get("A2A_PUSH_GATEWAY_KEY"),
        help="the agent's API key at the gateway (default: $A2A_PUSH_GATEWAY_KEY)",
    )
    parser.add_argument(
        "--retry-schedule",
        type=_delays,
        metavar="SECONDS,...",
        help="seconds before each durable webhook retry, e.g. 1,1,2,5 (default: "
        f"{RetryPolicy().describe()})",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=DEFAULT_LOG_LEVEL,
        help=f"log to stderr from this level (default: {DEFAULT_LOG_LEVEL}: webhook retries "
        "and dead letters; INFO adds a line per request)",
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1 to 65535)") from None
    problem = port_problem(port)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{port} is {problem}")
    return port


def _delays(text: str) -> tuple[float, ...]:
    try:
        delays = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, e.g. 1,1,2,5") from None
    if min(delays) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every delay must be positive")
    return delays


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return serve(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            allow_webhook_hosts=args.allow_webhook_hosts,
            public_url=args.public_url,
            step_delay=args.step_delay,
            retry_schedule=args.retry_schedule,
            gateway_url=args.gateway_url,
            gateway_key=args.gateway_key,
            log_level=args.log_level,
            prog=parser.prog,
        )
    except ValueError as exc:  # a bad --allow-webhook-host entry, or --gateway without a key
        print(f"mock-agent: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
