"""Operational events: what an operator can act on (docs/events.md).

A config disabled, a delivery dead-lettered, an endpoint's breaker opening or closing,
a signing key rotated or retired. Each event goes to the Python callbacks registered
with ``PushNotifier.on_event`` at once, and, with an operator URL configured, into the
outbox as a webhook to it: one lane (an internal push config on the reserved task
:data:`OPERATOR_TASK`), so operator events get the retries, ordering and signing of
every other webhook, and wait in the outbox while the operator endpoint is down.

Events about the operator endpoint's own deliveries (its config disabled, one of its
deliveries dead-lettered, its breaker) go to the callbacks only: a failing operator
endpoint never queues events about itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import hashlib
import inspect
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from .endpoints import endpoint_of, shown_endpoint
from .errors import StoreUnavailableError
from .ids import new_delivery_id, new_key
from .store import Delivery, Outcome, Store, StoredConfig

log = logging.getLogger("a2a_push.events")

EVENT_VERSION: Final = 1
"""The version of the event bodies' shape (``version`` in each body)."""

OPERATOR_TASK: Final = "a2a-push:operator-events"
"""The reserved task id operator events are queued on (refused for any other use)."""
OPERATOR_OWNER: Final = "a2a-push:operator"
OPERATOR_CONFIG_ID: Final = "operator"
EVENT_KIND: Final = "operatorEvent"
"""The delivery kind of an operator event in the outbox."""

RECENT_EVENTS: Final = 50
"""How many events a notifier keeps in memory for the console's overview."""
_WRITE_RETRY_MAX: Final = 5.0  # seconds between two tries to queue an event, at most
_DRAIN_TIMEOUT: Final = 5.0  # how long stop() waits for queued events to be written


class EventType(enum.StrEnum):
    CONFIG_DISABLED = "config.disabled"
    DELIVERY_DEAD = "delivery.dead"
    BREAKER_OPENED = "endpoint.breaker_opened"
    BREAKER_CLOSED = "endpoint.breaker_closed"
    KEY_ROTATED = "key.rotated"
    KEY_RETIRED = "key.retired"


@dataclass(frozen=True, slots=True)
class OperationalEvent:
    """One event: ``type`` (an :class:`EventType` value), a unique ``id``, its ``time``
    (Unix seconds) and ``data`` (see docs/events.md for each type's fields)."""

    type: str
    id: str
    time: float
    data: Mapping[str, Any] = field(default_factory=dict)
    version: int = EVENT_VERSION

    def to_json(self) -> dict[str, Any]:
        """The body as sent: ``{"type", "version", "id", "time" (RFC 3339), "data"}``."""
        return {
            "type": self.type,
            "version": self.version,
            "id": self.id,
            "time": _rfc3339(self.time),
            "data": dict(self.data),
        }

    def body(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


EventCallback = Callable[[OperationalEvent], object]
"""Called with each event, on the event loop; may return an awaitable (it is awaited
in a task of its own). An exception is logged and changes nothing else."""


def new_event_id(stable: str | None = None) -> str:
    """``evt_`` + 32 hex digits: random, or derived from ``stable`` (the same event seen
    by several processes, such as a key rotation, gets one id and is queued once)."""
    if stable is None:
        return "evt_" + os.urandom(16).hex()
    return "evt_" + hashlib.sha256(stable.encode()).hexdigest()[:32]


def is_operator_task(task_id: str) -> bool:
    return task_id == OPERATOR_TASK


def operator_config(
    url: str, token: str | None = None, *, now: float | None = None
) -> StoredConfig:
    """The internal push config operator events are queued for."""
    return StoredConfig(
        key=new_key(),
        id=OPERATOR_CONFIG_ID,
        task_id=OPERATOR_TASK,
        owner=OPERATOR_OWNER,
        url=url,
        token=token,
        created_at=time.time() if now is None else now,
    )


async def enqueue_event(store: Store, event: OperationalEvent) -> list[str]:
    """Queue ``event`` for the operator config stored in ``store`` (nothing when there
    is none, or it is disabled); the delivery ids. Idempotent by event id: the same
    event queued twice (by two processes) is one delivery."""
    from .notifier import Retention  # (the notifier imports this module)

    body = event.body()
    _, ids = await store.enqueue(
        OPERATOR_TASK,
        EVENT_KIND,
        lambda _version: body,
        new_id=new_delivery_id,
        idempotency_key="op:" + event.id,
        # As long as the notifier's retention keeps idempotency keys by default.
        idempotency_since=time.time() - Retention.idempotency_keys,
    )
    return ids


def key_rotated(kid: str, alg: str | None, previous_kid: str | None) -> OperationalEvent:
    """The ``key.rotated`` event of the rotation that made ``kid`` active: one id for it
    wherever it is seen (the processes that adopt the new key, the command that made it)."""
    return OperationalEvent(
        EventType.KEY_ROTATED.value,
        new_event_id(f"key.rotated:{kid}"),
        time.time(),
        {"kid": kid, "alg": alg, "previousKid": previous_kid},
    )


async def queue_for_operator(store: Store, event: OperationalEvent) -> bool:
    """Queue ``event`` for the operator endpoint a service configured in ``store`` (a
    command run beside the gateway: the running gateways deliver it); False when there
    is no enabled operator config."""
    found = await store.get_config(OPERATOR_TASK, OPERATOR_CONFIG_ID, OPERATOR_OWNER)
    if found is None or not found.enabled:
        return False
    return bool(await enqueue_event(store, event))


class Events:
    """A notifier's operational events: callbacks, the operator lane, the recent ones."""

    def __init__(self) -> None:
        self._callbacks: list[EventCallback] = []
        self.recent: collections.deque[OperationalEvent] = collections.deque(maxlen=RECENT_EVENTS)
        self.operator_endpoint: str | None = None  # scheme://host:port, when configured
        self._store: Store | None = None
        self._wake: Callable[[], None] | None = None
        self._queue: asyncio.Queue[OperationalEvent] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._callback_tasks: set[asyncio.Task[Any]] = set()

    # ---- callbacks ------------------------------------------------------------------

    def on_event(self, callback: EventCallback) -> Callable[[], None]:
        if not callable(callback):
            raise TypeError(
                "on_event(callback): callback must be a function taking an OperationalEvent"
            )
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    # ---- lifecycle ------------------------------------------------------------------

    def start(self, store: Store, operator: StoredConfig | None, wake: Callable[[], None]) -> None:
        """Queue events for ``operator`` (stored in ``store``) from now on."""
        self._store = store
        self._wake = wake
        if operator is not None:
            self.operator_endpoint = endpoint_of(operator.url)
            self._queue = asyncio.Queue()
            self._writer = asyncio.create_task(self._write(), name="a2a-push-events")

    async def stop(self) -> None:
        """Write what is queued (for a few seconds at most), then stop."""
        writer, queue = self._writer, self._queue
        self._writer = self._queue = None
        if writer is not None and queue is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.join(), _DRAIN_TIMEOUT)
            if not queue.empty():
                log.warning(
                    "%d operational event(s) were not queued for the operator endpoint "
                    "before the stop",
                    queue.qsize(),
                )
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        if self._callback_tasks:
            await asyncio.gather(*self._callback_tasks, return_exceptions=True)

    # ---- emitting -------------------------------------------------------------------

    def emit(
        self,
        type_: EventType,
        data: Mapping[str, Any],
        *,
        webhook: bool = True,
        stable_id: str | None = None,
    ) -> OperationalEvent:
        """Hand an event to the callbacks now, and (``webhook``, and an operator URL
        configured) queue it for the operator endpoint. Never raises."""
        event = OperationalEvent(type_.value, new_event_id(stable_id), time.time(), data)
        self.publish(event, webhook=webhook)
        return event

    def publish(self, event: OperationalEvent, *, webhook: bool = True) -> None:
        """:meth:`emit` for an event already made."""
        self.recent.append(event)
        for callback in list(self._callbacks):
            self._call(callback, event)
        if webhook and self._queue is not None:
            self._queue.put_nowait(event)

    def about_operator(self, config: StoredConfig | None, endpoint: str | None = None) -> bool:
        """Whether an event concerns the operator endpoint itself (its config, or its
        endpoint): such events go to the callbacks only."""
        if config is not None and is_operator_task(config.task_id):
            return True
        return endpoint is not None and endpoint == self.operator_endpoint

    # ---- what happened (the dispatcher, the breakers, the key set call these) -----------

    def dead_lettered(self, delivery: Delivery, outcome: Outcome, *, gone: bool) -> None:
        """A delivery was dead-lettered by ``outcome``; and its config disabled, when the
        outcome says so (``gone``: because the receiver answered 410)."""
        config = delivery.config
        where = shown_endpoint(config.url) if config is not None else delivery.endpoint
        # (A delivery's config is its task's: a delivery to the operator is on its task.)
        webhook = not is_operator_task(delivery.task_id)
        self.emit(
            EventType.DELIVERY_DEAD,
            {
                "deliveryId": delivery.id,
                "taskId": delivery.task_id,
                "configId": config.id if config is not None else None,
                "owner": config.owner if config is not None else None,
                "endpoint": where,
                "kind": delivery.kind,
                "seq": delivery.seq,
                "attempts": outcome.attempts,
                "lastStatus": outcome.status,
                "lastError": outcome.error,
            },
            webhook=webhook,
        )
        if outcome.disable_config and config is not None:
            self.emit(
                EventType.CONFIG_DISABLED,
                {
                    "configId": config.id,
                    "taskId": config.task_id,
                    "owner": config.owner,
                    "endpoint": where,
                    "reason": "gone" if gone else "failing",
                    "detail": outcome.disable_config,
                    "failingSince": _rfc3339(config.failing_since),
                    "deliveryId": delivery.id,
                },
                webhook=webhook,
            )

    def breaker_changed(self, endpoint: str, state: str, failures: int) -> None:
        """An endpoint's breaker opened (``state`` "open") or closed ("closed")."""
        opened = state == "open"
        self.emit(
            EventType.BREAKER_OPENED if opened else EventType.BREAKER_CLOSED,
            {"endpoint": endpoint, "consecutiveFailures": failures}
            if opened
            else {"endpoint": endpoint},
            webhook=not self.about_operator(None, endpoint),
        )

    def keys_changed(
        self,
        before: tuple[str, Mapping[str, str]],
        after: tuple[str, Mapping[str, str]],
    ) -> None:
        """The signing keys went from ``before`` to ``after`` (each: the active kid, and
        every kid held with its algorithm): a new active key is a rotation, a kid gone is
        a key retired for good (no longer published). Each has an id derived from the
        kid, so processes that all see the change queue it once."""
        active_before, kids_before = before
        active, kids = after
        if active != active_before and active not in kids_before:
            self.publish(key_rotated(active, kids.get(active), active_before))
        for kid in kids_before:
            if kid not in kids:
                self.emit(
                    EventType.KEY_RETIRED,
                    {"kid": kid, "alg": kids_before[kid]},
                    stable_id=f"key.retired:{kid}",
                )

    def _call(self, callback: EventCallback, event: OperationalEvent) -> None:
        try:
            result = callback(event)
        except Exception:
            log.exception("an operational event callback failed on %s %s", event.type, event.id)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(_awaited(result, event))
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)

    async def _write(self) -> None:
        """Queue events in the outbox one at a time, in the order they were emitted; an
        outage of the store is retried (the event waits in memory meanwhile)."""
        assert self._queue is not None and self._store is not None
        queue, store = self._queue, self._store
        while True:
            event = await queue.get()
            pause = 0.1
            try:
                while True:
                    try:
                        if await enqueue_event(store, event) and self._wake is not None:
                            self._wake()
                        break
                    except StoreUnavailableError as exc:
                        log.warning(
                            "queuing operational event %s failed (%s); retrying", event.id, exc
                        )
                    except Exception:
                        log.exception("queuing operational event %s failed; retrying", event.id)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _WRITE_RETRY_MAX)
            finally:
                queue.task_done()


async def _awaited(result: Awaitable[Any], event: OperationalEvent) -> None:
    try:
        await result
    except Exception:
        log.exception("an operational event callback failed on %s %s", event.type, event.id)


def _rfc3339(at: float | None) -> str | None:
    if at is None:
        return None
    moment = datetime.fromtimestamp(at, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
