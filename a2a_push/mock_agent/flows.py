"""How the mock agent's tasks move: its skills, and every change published (to the
embedded notifier, or to an a2a-push gateway)."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import uuid
from collections.abc import Awaitable
from typing import Any, Final

import aiohttp

from a2a_push.gateway.app import HEADER_OWNER
from a2a_push.gateway.client import GatewayClient, GatewayError, describe_connection_error
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.constants import HEADER_A2A_VERSION
from a2a_push.protocol.jsonrpc import INTERNAL_ERROR, A2AError
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

from .streams import STREAM_QUEUE_LIMIT, StreamItem, Subscriber, TaskUpdate
from .tasks import TaskRecord, TaskStore, text_of

log = logging.getLogger("a2a_push.mock_agent")

DEFAULT_STEP_DELAY: Final = 0.5

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


GATEWAY_FAILURE: Final = "The push gateway did not take this task's events; see the agent's log."
"""The status message of a task failed because an event could not be handed over."""


# How long one event's hand-off to the gateway is retried (GatewayClient's deadline)
# before its task fails.
DEFAULT_GATEWAY_RETRY_FOR = 60.0


class GatewayHandoffError(A2AError):
    """An event the gateway did not take: it stayed unreachable, or refused it.

    An internal error for the A2A caller; ``detail`` is the line the agent logs, and
    ``error`` the gateway client's own.
    """

    def __init__(self, what: str, error: GatewayError) -> None:
        super().__init__(INTERNAL_ERROR, f"the push gateway did not take the event: {error}")
        tries = (
            f"; gave up after {error.tries} tries in {error.elapsed:.0f} s"
            if error.tries > 1
            else ""
        )
        self.detail = f"could not hand {what} to the push gateway: {error}{tries}"
        self.error = error


def describe_event(event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> str:
    """``its WORKING status update``, ``its artifact update``, ``the new task``."""
    if isinstance(event, TaskStatusUpdateEvent):
        return f"its {event.status.state.name} status update"
    if isinstance(event, TaskArtifactUpdateEvent):
        return "its artifact update"
    return "the new task"


class GatewayLink:
    """The agent's side of an a2a-push gateway: events through ``GatewayClient`` (retried
    until durable), push-config methods forwarded to the gateway's JSON-RPC endpoint
    with the caller as ``X-A2A-Owner``."""

    def __init__(
        self, url: str, api_key: str, *, retry_for: float = DEFAULT_GATEWAY_RETRY_FOR
    ) -> None:
        self.url = url.rstrip("/")
        self._api_key = api_key
        self._retry_for = retry_for
        self._session: aiohttp.ClientSession | None = None
        self._client: GatewayClient | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
            self._client = GatewayClient(
                self.url, self._api_key, session=self._session, deadline=self._retry_for
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def publish(
        self, task_id: str, event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    ) -> None:
        """Hand one event to the gateway (retried while it is unavailable); a
        :class:`GatewayHandoffError` when it was not taken."""
        self._http()
        assert self._client is not None
        try:
            await self._client.publish(task_id, event)
        except GatewayError as exc:
            raise GatewayHandoffError(describe_event(event), exc) from exc

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
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = describe_connection_error(exc)
            raise A2AError.internal_error(
                f"cannot reach the push gateway at {self.url} ({cause})"
            ) from exc
        except ValueError as exc:  # not JSON
            raise A2AError.internal_error(
                f"the push gateway at {self.url} answered no JSON ({exc})"
            ) from exc
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            raise A2AError.from_error_dict(data["error"])
        if not isinstance(data, dict) or "result" not in data:
            raise A2AError.internal_error("the push gateway sent no JSON-RPC result")
        return data["result"]


class TaskFlows:
    """The skills and the task changes of the mock agent: every change is published."""

    def __init__(
        self,
        notifier: PushNotifier,
        *,
        step_delay: float = DEFAULT_STEP_DELAY,
        gateway: GatewayLink | None = None,
    ) -> None:
        self.notifier = notifier
        # With a gateway, events and push configs go there; the embedded notifier then
        # only validates inline configs and sends nothing.
        self.gateway = gateway
        self.step_delay = step_delay
        self.tasks = TaskStore()
        self.stream_queue_limit = STREAM_QUEUE_LIMIT
        self._runners: set[asyncio.Task[None]] = set()

    async def _publish(
        self, task: Task, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    ) -> None:
        if self.gateway is not None:
            await self.hand_over(task.id, event)
        else:
            await self.notifier.publish(task.id, event, task=task)

    async def hand_over(
        self, task_id: str, event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    ) -> None:
        """Hand ``event`` to the gateway; one ERROR line (no traceback: the cause is
        outside the agent) when it was not taken, then the GatewayHandoffError."""
        assert self.gateway is not None
        try:
            await self.gateway.publish(task_id, event)
        except GatewayHandoffError as exc:
            log.error("task %s: %s", task_id, exc.detail)
            raise

    # ---- task changes: every one goes through notifier.publish ----------------------------

    async def _apply_status(
        self, record: TaskRecord, state: TaskState, message: Message | None = None
    ) -> None:
        """Set the task's status and publish it. The caller holds ``record.lock``."""
        event = self._set_status(record, state, message)
        try:
            await self._publish(record.task, event)
        finally:
            self._changed(record, event)  # the task changed here even when the publish failed

    def _set_status(
        self, record: TaskRecord, state: TaskState, message: Message | None = None
    ) -> TaskStatusUpdateEvent:
        """Set the task's status here; the event that says so."""
        status = TaskStatus(state=state, message=message, timestamp=utc_timestamp())
        update: dict[str, Any] = {"status": status}
        if message is not None:
            update["history"] = [*(record.task.history or []), message]
        record.task = record.task.model_copy(update=update)
        return TaskStatusUpdateEvent(
            task_id=record.task.id, context_id=record.task.context_id or "", status=status
        )

    def _fail_here(self, record: TaskRecord) -> TaskStatusUpdateEvent:
        """Fail a task whose event the gateway did not take, here only (the caller holds
        ``record.lock``; waiters wake at once); the event to hand over later."""
        event = self._set_status(record, TaskState.FAILED, self._say(record, GATEWAY_FAILURE))
        self._changed(record, event)
        return event

    async def _tell_gateway(self, task_id: str, event: TaskStatusUpdateEvent) -> None:
        """Try to hand over a failure the agent logged already: no second ERROR line."""
        assert self.gateway is not None
        try:
            await self.gateway.publish(task_id, event)
        except GatewayHandoffError as exc:
            log.info("task %s: %s", task_id, exc.detail)

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
            event = TaskArtifactUpdateEvent(
                task_id=record.task.id,
                context_id=record.task.context_id or "",
                artifact=artifact,
                append=True if append else None,
                last_chunk=True if last else None,
            )
            try:
                await self._publish(record.task, event)
            finally:
                self._changed(record, event)

    def _changed(self, record: TaskRecord, event: TaskUpdate) -> None:
        """The task changed (the caller holds ``record.lock``): wake the waiters, and
        offer ``event`` to its streams (never waiting for one)."""
        self.tasks.touch(record)
        woken, record.changed = record.changed, asyncio.Event()
        woken.set()
        if record.subscribers:
            item = StreamItem(event)
            for subscriber in list(record.subscribers):
                subscriber.offer(item)

    async def follow(self, record: TaskRecord) -> tuple[Task, Subscriber]:
        """The task as it is now and a subscriber to every change after it.

        Taken under the task's lock, where every change is made and offered: nothing
        falls between the snapshot and the first update, and nothing is in both."""
        async with record.lock:
            subscriber = Subscriber(record.subscribers, self.stream_queue_limit)
            return record.task, subscriber

    def close_streams(self) -> None:
        """End every open stream (the agent is stopping)."""
        for record in self.tasks.records():
            for subscriber in list(record.subscribers):
                subscriber.close()

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
        except GatewayHandoffError:
            # Logged where it failed (one line); retrying the failure there now would
            # only wait as long again: the task fails here, and the gateway hears of it
            # if it takes events again.
            async with record.lock:
                if record.state.is_terminal:
                    return
                event = self._fail_here(record)
            await self._tell_gateway(record.task.id, event)
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
        text = text_of((record.task.history or [])[0]) if record.task.history else ""
        await self._artifact(
            record,
            Artifact(artifact_id=str(uuid.uuid4()), name=ECHO, parts=[Part(text=text or " ")]),
        )
        await self._pause()
        await self._status(record, TaskState.COMPLETED)


def skill_of(message: Message) -> tuple[str, str]:
    """(skill, its argument) from the message's text: the first word picks the skill."""
    text = text_of(message)
    word, _, rest = text.partition(" ")
    skill = word.lower()
    if skill in ("roll", "book", "report", "fail", "reject", "login"):
        return skill, rest.strip()
    return ECHO, text
