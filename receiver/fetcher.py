"""Background GetTask: coalesced per task, retried with tenacity, never going backwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from a2a_push import tracing
from a2a_push.errors import StoreUnavailableError
from a2a_push.protocol.types import TaskState

from .agent_client import AgentCallError, AgentClient
from .metrics import ReceiverMetrics
from .store import ReceiverStore, SubscriptionState, TaskEvent, TaskSnapshot

log = logging.getLogger(__name__)

DEFAULT_COALESCE_SECONDS: Final = 0.02
DEFAULT_MIN_INTERVAL_SECONDS: Final = 1.0
_LAST_FETCHES_KEPT: Final = 100_000
DEFAULT_RETRY_LATER_SECONDS: Final = 30.0
# A task whose fetches keep failing is tried again later and later, doubling from
# retry_later up to this; a success starts it over.
MAX_RETRY_LATER_SECONDS: Final = 3600.0

Key = tuple[str, str]  # (agent key, task id)


def _logged_url(url: str) -> str:
    """``url`` for a log line: scheme, host, port and path only (no user-info, query or
    fragment, which may carry credentials)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(an unparseable URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, AgentCallError) and exc.retryable


def snapshot_of(agent_url: str, task: Mapping[str, Any], generation: int) -> TaskSnapshot:
    """A storable snapshot of a v1.0 Task object."""
    status = task.get("status") if isinstance(task.get("status"), dict) else {}
    assert isinstance(status, dict)
    raw_state = status.get("state")
    state: str | None = None
    final = False
    if isinstance(raw_state, str):
        try:
            parsed = TaskState(raw_state)
        except ValueError:
            state = raw_state
        else:
            state = parsed.value
            final = parsed.is_terminal
    timestamp = status.get("timestamp")
    context_id = task.get("contextId")
    return TaskSnapshot(
        agent_url=agent_url,
        task_id=str(task["id"]),
        context_id=context_id if isinstance(context_id, str) else None,
        state=state,
        final=final,
        status_timestamp=timestamp if isinstance(timestamp, str) else None,
        generation=generation,
        task=dict(task),
        updated_at=time.time(),
    )


class TaskFetcher:
    """Fetches tasks after their notifications, one fetch per task at a time.

    ``want(agent, task, up_to)`` asks for a snapshot covering notifications up to
    ``up_to``. Requests for a task that arrive within ``coalesce`` seconds, or while its
    fetch runs, are served by one (more) fetch. A fetch that keeps failing is tried
    again ``retry_later`` seconds after its retries are spent, then later and later;
    the notifications stay pending in the store meanwhile, so a restart picks them up.
    A task that has kept failing for longer than ``give_up_after`` seconds (the
    receiver: its retention period) is given up on: one WARNING, counted in
    ``a2a_receiver_fetch_give_ups_total``, nothing kept for it in memory; its
    notifications stay unfetched until the purge drops them. A task resumed after a
    restart has been waiting since its oldest pending notification arrived.
    """

    def __init__(
        self,
        store: ReceiverStore,
        clients: Mapping[str, AgentClient],
        *,
        on_snapshot: Callable[[TaskEvent], Awaitable[None]],
        metrics: ReceiverMetrics,
        concurrency: int = 32,
        attempts: int = 5,
        coalesce: float = DEFAULT_COALESCE_SECONDS,
        min_interval: float = DEFAULT_MIN_INTERVAL_SECONDS,
        retry_later: float = DEFAULT_RETRY_LATER_SECONDS,
        max_wait: float = 10.0,
        give_up_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._clients = clients
        self._on_snapshot = on_snapshot
        self._metrics = metrics
        self._slots = asyncio.Semaphore(concurrency)
        self._attempts = attempts
        self._coalesce = coalesce
        self._min_interval = min_interval
        # When each task was last fetched (monotonic), for the minimum interval; bounded.
        self._last: OrderedDict[Key, float] = OrderedDict()
        self._urgent: dict[Key, asyncio.Event] = {}
        self._waiting: set[Key] = set()  # fetches waiting out their minimum interval
        self._retry_later = retry_later
        self._failures: dict[Key, int] = {}  # consecutive failed rounds per task
        # Since when (wall clock, as notifications' received_at) each task has failed
        # (or, resumed at start, waited): given up on past give_up_after.
        self._failing_since: dict[Key, float] = {}
        self._give_up_after = give_up_after
        self._clock = clock
        self._max_wait = max_wait
        self._wanted: dict[Key, int] = {}
        self._running: dict[Key, asyncio.Task[None]] = {}
        # Each failing task's scheduled retry, and the notification id it covers.
        self._timers: dict[Key, tuple[asyncio.TimerHandle, int]] = {}
        self._closed = False
        self.calls = 0
        # Per task, the trace context of the latest webhook that wanted it fetched (only
        # while tracing): its GetTask continues that trace.
        self._traced: dict[Key, Any] = {}

    async def start(self) -> None:
        """Resume fetches for notifications stored before a restart."""
        for pending in await self._store.pending_fetches(limit=100_000):
            if pending.since is not None:
                key = (pending.agent_url, pending.task_id)
                self._failing_since.setdefault(key, pending.since)
            self.want(pending.agent_url, pending.task_id, pending.up_to)

    async def stop(self) -> None:
        self._closed = True
        for timer, _ in self._timers.values():
            timer.cancel()
        self._timers.clear()
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def busy(self) -> int:
        return len(self._running)

    def waiting(self, agent_url: str, task_id: str) -> bool:
        """Whether the task's next fetch is waiting out its minimum interval."""
        return (agent_url, task_id) in self._waiting

    def want(self, agent_url: str, task_id: str, up_to: int, *, urgent: bool = False) -> None:
        """Ask for a snapshot covering notifications up to ``up_to``; ``urgent`` skips the
        per-task minimum interval (a terminal or input-required state, a new subscription).
        Never urgent for what a caller can repeat at will: see ``refresh``."""
        if self._closed:
            return
        key = (agent_url, task_id)
        if up_to > self._wanted.get(key, -1):
            self._wanted[key] = up_to
        if tracing.enabled():
            self._traced[key] = tracing.current_context()
        if urgent:
            self._urgent.setdefault(key, asyncio.Event()).set()
        if key not in self._running:
            self._running[key] = asyncio.create_task(self._run(key), name=f"fetch {task_id}")
            self._count_running()

    def refresh(self, agent_url: str, task_id: str, up_to: int) -> None:
        """Fetch the task again because someone asked (a repeated subscribe), never
        sooner than its fetches are allowed: after its minimum interval since the last
        one (coalesced with any fetch under way or waiting), and not at all while its
        fetches are failing and it waits to be tried again (the retry scheduled then
        fetches it). So however often it is asked, a task is fetched at most once per
        minimum interval, and an agent that keeps failing is called no more often than
        the task's backoff allows."""
        key = (agent_url, task_id)
        if self._closed or key in self._failures:
            # In _failures: the last round failed and a retry is scheduled (or running);
            # a success removes it.
            return
        self.want(agent_url, task_id, up_to)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no fetch is running or wanted (for tests and demos)."""
        deadline = time.monotonic() + timeout
        while self._running and time.monotonic() < deadline:
            await asyncio.wait(
                list(self._running.values()), timeout=max(0.0, deadline - time.monotonic())
            )

    async def _run(self, key: Key) -> None:
        try:
            await asyncio.sleep(self._coalesce)
            done = -1
            while not self._closed and self._wanted.get(key, -1) > done:
                await self._respect_interval(key)
                up_to = self._wanted[key]
                async with self._slots:
                    ok = await self._fetch_once(key, up_to)
                self._last[key] = time.monotonic()
                self._last.move_to_end(key)
                if len(self._last) > _LAST_FETCHES_KEPT:
                    self._last.popitem(last=False)
                if not ok:
                    self._later(key, up_to)
                    return
                done = up_to
            self._wanted.pop(key, None)
        except asyncio.CancelledError:
            raise
        except StoreUnavailableError as exc:
            # An outage (PostgreSQL down or restarting): one line, not a traceback.
            log.warning(
                "fetching task %s: the receiver's database is unavailable (%s); will try "
                "again later",
                key[1],
                exc,
            )
            self._later(key, self._wanted.get(key, 0))
        except Exception:
            log.exception("fetch loop for task %s failed", key[1])
            self._later(key, self._wanted.get(key, 0))
        finally:
            self._running.pop(key, None)
            self._urgent.pop(key, None)
            self._traced.pop(key, None)
            self._count_running()

    def _count_running(self) -> None:
        # Kept current (not set at scrape time): with several workers a scrape reaches
        # one of them, and shows the others' values as they last set them.
        self._metrics.fetches_in_progress.set(len(self._running))

    async def _respect_interval(self, key: Key) -> None:
        """Wait out the task's minimum interval since its last fetch, unless urgent."""
        urgent = self._urgent.get(key)
        if urgent is not None and urgent.is_set():
            urgent.clear()
            return
        wait = self._last.get(key, float("-inf")) + self._min_interval - time.monotonic()
        if wait <= 0:
            return
        urgent = self._urgent.setdefault(key, asyncio.Event())
        self._waiting.add(key)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(urgent.wait(), wait)
        finally:
            self._waiting.discard(key)
        urgent.clear()

    def _later(self, key: Key, up_to: int) -> None:
        # Notifications that arrived during the failed fetch are covered by the retry
        # too, and so are those of a retry scheduled before (this one replaces it).
        up_to = max(up_to, self._wanted.pop(key, -1))
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous[0].cancel()
            up_to = max(up_to, previous[1])
        if self._closed:
            return
        failures = self._failures.get(key, 0)
        now = self._clock()
        since = self._failing_since.setdefault(key, now)
        if self._give_up_after is not None and now - since >= self._give_up_after:
            self._give_up(key, failures + 1, now - since)
            return
        loop = asyncio.get_running_loop()

        def again() -> None:
            self._timers.pop(key, None)
            self.want(key[0], key[1], up_to)

        self._failures[key] = failures + 1
        delay = min(self._retry_later * 2 ** min(failures, 20), MAX_RETRY_LATER_SECONDS)
        self._timers[key] = (loop.call_later(delay, again), up_to)

    def _succeeded(self, key: Key, up_to: int) -> None:
        """The task's notifications up to ``up_to`` are covered (fetched, final, or
        nothing left to fetch): its failures are forgotten, and a retry still scheduled
        for no more than that is cancelled."""
        self._failures.pop(key, None)
        self._failing_since.pop(key, None)
        scheduled = self._timers.get(key)
        if scheduled is not None and scheduled[1] <= up_to:
            scheduled[0].cancel()
            del self._timers[key]

    def _give_up(self, key: Key, rounds: int, failing_for: float) -> None:
        """Stop trying ``key``: everything kept for it goes; its notifications stay
        unfetched (a restart tries once more; the purge drops them after retention)."""
        self._failures.pop(key, None)
        self._failing_since.pop(key, None)
        self._wanted.pop(key, None)
        self._metrics.fetch_give_ups.inc()
        log.warning(
            "GetTask %s on %s has failed for %.1f hours (%d rounds); giving up on it "
            "(its notifications stay unfetched until the purge)",
            key[1],
            _logged_url(key[0]),
            failing_for / 3600,
            rounds,
        )

    async def _get_task(self, client: AgentClient, task_id: str) -> dict[str, Any]:
        """GetTask; tenacity (backoff with jitter) only once a first attempt failed."""
        self.calls += 1
        try:
            return await client.get_task(task_id)
        except AgentCallError as exc:
            if not exc.retryable or self._attempts < 2:
                raise
        await asyncio.sleep(0.2)  # the backoff's first step
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self._attempts - 1),
            wait=wait_exponential_jitter(multiplier=0.2, max=self._max_wait),
            retry=retry_if_exception(_retryable),
            reraise=True,
        ):
            with attempt:
                self.calls += 1
                return await client.get_task(task_id)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _fetch_once(self, key: Key, up_to: int) -> bool:
        """One covered fetch (with retries); False when it should be tried again later."""
        agent_url, task_id = key
        if await self._store.is_final(agent_url, task_id):
            # Terminal tasks are final: nothing a later GetTask says can change them.
            await self._store.mark_fetched(agent_url, task_id, up_to)
            self._succeeded(key, up_to)
            return True
        client = self._clients.get(agent_url)
        if client is None:
            log.warning("no agent %s configured any more; notifications kept", agent_url)
            return False
        started = time.perf_counter()
        try:
            with tracing.client_span(
                "a2a_receiver GetTask",
                self._traced.get(key),
                **{"a2a_receiver.task_id": task_id, "rpc.method": "GetTask"},
            ):
                task = await self._get_task(client, task_id)
        except AgentCallError as exc:
            self._metrics.fetches.labels("error").inc()
            if exc.task_not_found:
                # The agent no longer has the task: there is nothing left to fetch.
                log.warning("GetTask %s on %s: %s; giving up on it", task_id, agent_url, exc)
                await self._store.mark_fetched(agent_url, task_id, up_to)
                self._succeeded(key, up_to)
                return True
            subs = await self._store.subscriptions_for_task(agent_url, task_id)
            if not any(s.state is SubscriptionState.ACTIVE for s in subs):
                # Nobody is subscribed any more: nothing would read the result.
                log.info(
                    "GetTask %s on %s: %s; no subscription left, dropped", task_id, agent_url, exc
                )
                await self._store.mark_fetched(agent_url, task_id, up_to)
                self._succeeded(key, up_to)
                return True
            # Anything else (the agent down, refusing our credentials, answering nonsense)
            # may be fixed on its side: the accepted notifications stay pending, and the
            # task is tried again later and later (see MAX_RETRY_LATER_SECONDS).
            log.warning("GetTask %s on %s: %s; will try again later", task_id, agent_url, exc)
            return False
        self._succeeded(key, up_to)
        self._metrics.fetch_latency.observe(time.perf_counter() - started)
        self._metrics.fetches.labels("ok").inc()
        event = await self._store.save_snapshot(
            snapshot_of(agent_url, task, up_to), fetched_up_to=up_to
        )
        if event is not None:
            await self._on_snapshot(event)
        return True
