"""The A2A methods of the mock agent (v1.0 and the v0.3 names), over its task flows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from a2a_push.notifier import PushNotifier
from a2a_push.protocol.constants import VERSION_0_3, VERSION_1_0
from a2a_push.protocol.jsonrpc import A2AError
from a2a_push.protocol.types import (
    Message,
    Task,
    TaskState,
    TaskStatus,
    utc_timestamp,
)
from a2a_push.protocol.v03 import V03FormatError, config_to_v03, message_from_v03, task_to_v03
from a2a_push.server import PushConfigService, negotiate_version
from a2a_push.server.inline import parse_inline_config, register_inline_config
from a2a_push.server.push_config import CREATE, V03_SET, task_id_of

from .flows import DEFAULT_STEP_DELAY, GatewayHandoffError, GatewayLink, TaskFlows, skill_of
from .streams import Subscriber, ends_stream, render_result
from .tasks import (
    TaskRecord,
    configuration_of,
    decode_page_token,
    encode_page_token,
    flag,
    get_param,
    history_length_of,
    page_size_of,
    raw_message,
    shaped,
    state_name,
    status_filter,
    status_time,
    text_of,
    timestamp_filter,
)

# Method names: v1.0, then the v0.3 aliases this agent serves.
SEND_MESSAGE: Final = "SendMessage"
GET_TASK: Final = "GetTask"
CANCEL_TASK: Final = "CancelTask"
LIST_TASKS: Final = "ListTasks"
SEND_STREAMING_MESSAGE: Final = "SendStreamingMessage"
SUBSCRIBE_TO_TASK: Final = "SubscribeToTask"
V03_SEND: Final = "message/send"
V03_GET: Final = "tasks/get"
V03_CANCEL: Final = "tasks/cancel"
V03_STREAM: Final = "message/stream"
V03_RESUBSCRIBE: Final = "tasks/resubscribe"
_V10_NAMES: Final = frozenset(
    {SEND_MESSAGE, GET_TASK, CANCEL_TASK, LIST_TASKS, SEND_STREAMING_MESSAGE, SUBSCRIBE_TO_TASK}
)


@dataclass(eq=False)
class TaskStream:
    """One open stream: its first event (the task as it was when the stream opened,
    rendered), then what ``subscriber`` queues, rendered for ``version``."""

    first: bytes
    subscriber: Subscriber
    version: str

    def close(self) -> None:
        self.subscriber.close()


class MockAgent(TaskFlows):
    """The A2A methods of the mock agent; ``call`` serves one JSON-RPC method."""

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        public_url: str,
        step_delay: float = DEFAULT_STEP_DELAY,
        gateway: GatewayLink | None = None,
    ) -> None:
        super().__init__(notifier, step_delay=step_delay, gateway=gateway)
        self.public_url = public_url.rstrip("/")
        self.service = PushConfigService(notifier, task_lookup=self.tasks.lookup)
        self._methods: dict[str, Callable[[Mapping[str, Any], str], Awaitable[Any]]] = {
            SEND_MESSAGE: self._send_v10,
            V03_SEND: self._send_v03,
            GET_TASK: self._get_v10,
            V03_GET: self._get_v03,
            CANCEL_TASK: self._cancel_v10,
            V03_CANCEL: self._cancel_v03,
            LIST_TASKS: self._list_tasks,
        }
        self._stream_methods: dict[
            str, Callable[[Mapping[str, Any], str], Awaitable[TaskStream]]
        ] = {
            SEND_STREAMING_MESSAGE: self._stream_v10,
            V03_STREAM: self._stream_v03,
            SUBSCRIBE_TO_TASK: self._subscribe_v10,
            V03_RESUBSCRIBE: self._subscribe_v03,
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
            if method in self._stream_methods:
                raise A2AError.unsupported_operation(
                    f"{method} answers with a stream of events (text/event-stream); call it "
                    "over HTTP at the agent's JSON-RPC URL"
                )
            raise A2AError.method_not_found(method)
        return await handler(_params_object(params), owner)

    def is_streaming(self, method: str) -> bool:
        """Whether ``method`` answers with a stream (``open_stream``) rather than a result."""
        return method in self._stream_methods

    async def open_stream(self, method: str, params: Any, *, owner: str) -> TaskStream:
        """Open the stream of a streaming method, or raise its ``A2AError`` (before any
        event is sent). v0.3 method names stream v0.3 shapes, as for the other methods."""
        return await self._stream_methods[method](_params_object(params), owner)

    async def close(self) -> None:
        """End every open stream and stop every running skill (graceful shutdown)."""
        self.close_streams()
        runners = list(self._runners)
        for runner in runners:
            runner.cancel()
        if runners:
            await asyncio.wait(runners)

    # ---- SendMessage ----------------------------------------------------------------------

    async def _send_v10(self, params: Mapping[str, Any], owner: str) -> Any:
        message = _message_v10(params)
        configuration = configuration_of(params)
        wait = not flag(
            configuration, "returnImmediately", "return_immediately", False, "configuration."
        )
        length = history_length_of(configuration, "configuration.historyLength")
        record = await self._send(message, configuration, owner, VERSION_1_0)
        if wait:
            await self._settled(record)
        return {"task": shaped(record.task, length).to_json_dict()}

    async def _send_v03(self, params: Mapping[str, Any], owner: str) -> Any:
        message = _message_v03(params)
        configuration = configuration_of(params)
        # v0.3 `blocking`: the opposite of returnImmediately; unset waits, as v0.3 servers did.
        wait = flag(configuration, "blocking", "blocking", True, "configuration.")
        length = history_length_of(configuration, "configuration.historyLength")
        record = await self._send(message, configuration, owner, VERSION_0_3)
        if wait:
            await self._settled(record)
        return task_to_v03(shaped(record.task, length))

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
        skill, subject = skill_of(message)
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
            try:
                await self._apply_status(record, TaskState.WORKING)
            except GatewayHandoffError:
                # Logged; the caller gets the error, and the task (WORKING here by
                # now, with nothing to move it on) fails rather than hang.
                self._start(record, self._tell_gateway(record.task.id, self._fail_here(record)))
                raise
            self._start(record, self._resume(record, text_of(message)))
        return record

    def _check_accepts_messages(self, record: TaskRecord) -> None:
        state = record.state
        if state.is_terminal:
            raise A2AError.unsupported_operation(
                f"task {record.task.id} is {state_name(state)}: a task in a terminal state "
                "accepts no more messages; send a new message without taskId"
            )
        if not state.is_interrupted:
            raise A2AError.unsupported_operation(
                f"task {record.task.id} is still {state_name(state)}; send a follow-up "
                "only when it asks for input (INPUT_REQUIRED or AUTH_REQUIRED)"
            )

    async def _settled(self, record: TaskRecord) -> None:
        """Wait until the task is in a terminal or interrupted state."""
        while not (record.state.is_terminal or record.state.is_interrupted):
            await record.changed.wait()

    # ---- SendStreamingMessage / SubscribeToTask -------------------------------------------

    async def _stream_v10(self, params: Mapping[str, Any], owner: str) -> TaskStream:
        return await self._stream_send(_message_v10(params), params, owner, VERSION_1_0)

    async def _stream_v03(self, params: Mapping[str, Any], owner: str) -> TaskStream:
        return await self._stream_send(_message_v03(params), params, owner, VERSION_0_3)

    async def _stream_send(
        self, message: Message, params: Mapping[str, Any], owner: str, version: str
    ) -> TaskStream:
        """SendMessage, then follow the task: the Task first, then every update until a
        terminal or interrupted state (spec §3.1.2, §11.7). ``returnImmediately`` /
        ``blocking`` do not apply to a stream."""
        configuration = configuration_of(params)
        length = history_length_of(configuration, "configuration.historyLength")
        record = await self._send(message, configuration, owner, version)
        return await self._follow(record, length, version)

    async def _subscribe_v10(self, params: Mapping[str, Any], owner: str) -> TaskStream:
        return await self._subscribe(params, owner, VERSION_1_0)

    async def _subscribe_v03(self, params: Mapping[str, Any], owner: str) -> TaskStream:
        return await self._subscribe(params, owner, VERSION_0_3)

    async def _subscribe(self, params: Mapping[str, Any], owner: str, version: str) -> TaskStream:
        """The task as it is now, then every update until it reaches a terminal or
        interrupted state; a task already terminal has nothing more to stream (spec
        §3.1.6, §9.4.6: UnsupportedOperationError)."""
        record = self._record(params, owner)
        self._check_not_terminal(record)
        stream = await self._follow(record, history_length_of(params, "historyLength"), version)
        if record.state.is_terminal:  # it ended while the stream was being opened
            stream.close()
            self._check_not_terminal(record)
        return stream

    def _check_not_terminal(self, record: TaskRecord) -> None:
        if record.state.is_terminal:
            raise A2AError.unsupported_operation(
                f"task {record.task.id} is {state_name(record.state)}: a task in a terminal "
                "state has no more events to stream; read it with GetTask"
            )

    async def _follow(self, record: TaskRecord, length: int | None, version: str) -> TaskStream:
        task, subscriber = await self.follow(record)
        if ends_stream(task):
            subscriber.close()  # the Task is all there is to send
        first = render_result(shaped(task, length), version)
        return TaskStream(first=first, subscriber=subscriber, version=version)

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
        return shaped(record.task, history_length_of(params, "historyLength")).to_json_dict()

    async def _get_v03(self, params: Mapping[str, Any], owner: str) -> Any:
        record = self._record(params, owner)
        return task_to_v03(shaped(record.task, history_length_of(params, "historyLength")))

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
        context_id = get_param(params, "contextId", "context_id")
        if context_id is not None and not isinstance(context_id, str):
            raise A2AError.invalid_params("contextId: must be a string", "contextId")
        status = status_filter(params.get("status"))
        page_size = page_size_of(get_param(params, "pageSize", "page_size"))
        after = decode_page_token(get_param(params, "pageToken", "page_token"))
        length = history_length_of(params, "historyLength")
        include_artifacts = flag(params, "includeArtifacts", "include_artifacts", False)
        since = timestamp_filter(
            get_param(params, "statusTimestampAfter", "status_timestamp_after")
        )

        records = [
            r
            for r in self.tasks.visible(owner)
            if (not context_id or r.task.context_id == context_id)
            and (status is None or r.state is status)
            and (since is None or status_time(r.task) >= since)
        ]
        total = len(records)
        if after is not None:
            records = [r for r in records if r.seq < after]
        page = records[:page_size]
        next_token = encode_page_token(page[-1].seq) if len(records) > page_size else ""
        tasks = []
        for record in page:
            task = shaped(record.task, length)
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
            await self.hand_over(task.id, task)
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


def _params_object(params: Any) -> Mapping[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise A2AError.invalid_params("params must be a JSON object", "params")
    return params


def _message_v10(params: Mapping[str, Any]) -> Message:
    try:
        return Message.model_validate(raw_message(params))
    except ValidationError as exc:
        raise A2AError.from_validation_error(exc, prefix="message") from None


def _message_v03(params: Mapping[str, Any]) -> Message:
    try:
        return message_from_v03(raw_message(params))
    except V03FormatError as exc:
        raise A2AError.invalid_params(str(exc), "message") from None


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
