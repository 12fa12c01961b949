"""The dispatcher: claims due deliveries from the outbox and sends them.

- FIFO per (config, task): the outbox hands out one delivery per lane at a time.
- Bounded: at most ``concurrency`` deliveries in flight, at most ``per_endpoint`` to
  one endpoint, and at most its rate limit's requests a second (``rate_limits``, shared
  by every process on the store); an endpoint at its cap, out of tokens, or with an
  open breaker, has its work deferred so slow or dead endpoints never hold the slots
  others need.
- Graceful: ``stop()`` stops claiming, lets in-flight work finish for ``drain_timeout``,
  then releases what is left; no request starts once stop() has begun (work waiting
  for an endpoint slot, or for its next quick attempt, is released or rescheduled).
  After a crash, leases expire and the work returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import time
from collections import Counter as _Counter
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

from yarl import URL

from .. import tracing
from ..endpoints import shown_endpoint
from ..errors import A2APushError, StoreBusyError, StoreUnavailableError
from ..events import Events
from ..metrics import Metrics
from ..protocol.constants import (
    HEADER_AUTHORIZATION,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_SIGNATURE,
)
from ..signing import WebhookSigner
from ..store import (
    MAX_ATTEMPT_RESPONSE_BYTES,
    Attempt,
    AttemptVerdict,
    Delivery,
    Outcome,
    Store,
    StoredConfig,
)
from .health import EndpointHealth, endpoint_of
from .ratelimit import MAX_WAIT, EndpointRateLimiter, RateLimits
from .retry import RetryPolicy, Verdict, classify, parse_retry_after
from .transport import (
    AddressRefused,
    ConnectError,
    HTTPResult,
    RequestTimeout,
    Transport,
    TransportError,
)
from .webhook import webhook_headers

log = logging.getLogger("a2a_push.dispatcher")
# What happens to webhooks that fail: each retry at INFO, each dead letter and each
# disabled config at WARNING, a webhook delivered after earlier failures at INFO. Every
# record carries its outcome ("retry", "dead", "disabled", "delivered") as the attribute
# named WEBHOOK_OUTCOME, for a handler or filter that wants to pick them out.
webhook_log = logging.getLogger("a2a_push.webhooks")
WEBHOOK_OUTCOME: Final = "webhook_outcome"

# A delivery that succeeds leases its lane's next event at once (no claim round), at
# most this many times in a row; then the lane goes back to the outbox behind the lanes
# already waiting, so a few busy tasks cannot keep an endpoint's slots from the others.
CHAIN_LIMIT = 16
# The share of lease_seconds one claim may spend waiting for endpoint slots.
SLOT_WAIT_SHARE = 0.25
# The webhook log writes at most one line per push config and outcome in this many
# seconds; the next one says how many it left out (an endpoint answering 4xx to every
# event, or a burst of retries, cannot flood the log).
LOG_EVERY = 60.0
_LOG_THROTTLE_SIZE = 10_000


# An endpoint holds at most this many times ``per_endpoint`` claimed deliveries, those
# writing their outcomes included (see Dispatcher._unavailable_endpoints).
ALL_HELD = 4


class _BookkeepingError(Exception):
    """Writing a delivery's outcome (or handing it back) failed with a transient error
    the store does not call an outage (``StoreBusyError``: a lock or statement timeout,
    a deadlock, a serialization failure, a busy SQLite file). Treated like an outage: nothing is
    decided, the lease runs out and the lane is claimed again; the delivery is never
    dead-lettered for it (it may have been delivered). Any other error is a bug or bad
    data, and takes the dispatcher's internal-error path (logged with its traceback)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause_type = type(cause).__name__


def _transient(exc: Exception) -> bool:
    # A connection lost or a call timed out mid-write; or the store saying "try again"
    # (it raises StoreBusyError for its backend's locks, timeouts and deadlocks).
    return isinstance(exc, TimeoutError | ConnectionError | StoreBusyError)


def _time_up(waiter: asyncio.Future[bool]) -> None:
    """A slot wait's deadline: it ends without a slot, unless one came first."""
    if not waiter.done():
        waiter.set_result(False)


def _slot_handed(waiter: asyncio.Future[bool]) -> bool:
    """Whether an endpoint slot was handed to ``waiter`` (it then holds one)."""
    return waiter.done() and not waiter.cancelled() and waiter.result()


class _bookkeeping:
    """Around a store write of the dispatcher's own: a transient error becomes a
    ``_BookkeepingError``; outages, cancellation and anything else pass unchanged. (A
    class, not a generator context manager: it is entered for every delivery.)"""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if (
            isinstance(exc, Exception)
            and not isinstance(exc, StoreUnavailableError)
            and _transient(exc)
        ):
            raise _BookkeepingError(exc) from None


def longest_claim(
    *, lease_seconds: float, quick_attempts: int, total_timeout: float, quick_pause: float
) -> float:
    """The longest one claim can take: every quick attempt timing out, the pauses between
    them, and the endpoint-slot waits. A lease must be longer, or the lane could be
    claimed again while the first claim is still sending."""
    return quick_attempts * (total_timeout + quick_pause) + lease_seconds * SLOT_WAIT_SHARE


@dataclass(frozen=True)
class DispatcherOptions:
    concurrency: int = 256
    per_endpoint: int = 16
    claim_batch: int = 64
    lease_seconds: float = 120.0
    poll_interval: float = 1.0
    # Longer than a request's total timeout, so a graceful stop never cuts one short.
    drain_timeout: float = 20.0
    # A config whose deliveries have failed without a success for this long is disabled.
    disable_after: float = 5 * 24 * 3600.0
    # A failing delivery is retried until it is this old (seconds since its publish),
    # then dead-lettered; None: until the retry schedule is used up.
    max_delivery_age: float | None = None
    # Requests per second per endpoint (see a2a_push.delivery.ratelimit); none by default.
    rate_limits: RateLimits = field(default_factory=RateLimits)

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.per_endpoint < 1 or self.claim_batch < 1:
            raise ValueError("concurrency, per_endpoint and claim_batch must be at least 1")
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        if self.max_delivery_age is not None and not self.max_delivery_age > 0:
            raise ValueError("max_delivery_age must be positive (or None)")


class Dispatcher:
    """Sends the outbox's deliveries; run one per process (several share a database)."""

    def __init__(
        self,
        store: Store,
        transport: Transport,
        signer: WebhookSigner | None,
        *,
        retry: RetryPolicy | None = None,
        health: EndpointHealth | None = None,
        metrics: Metrics | None = None,
        options: DispatcherOptions | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.signer = signer
        self.retry = retry or RetryPolicy()
        self.health = health or EndpointHealth()
        self.metrics = metrics or Metrics()
        self.options = options or DispatcherOptions()
        self.worker_id = worker_id or f"{os.uname().nodename}:{os.getpid()}:{id(self):x}"
        self.rate = EndpointRateLimiter(store, self.options.rate_limits)
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._per_endpoint: _Counter[str] = _Counter()
        # Deliveries claimed and not yet finished, per endpoint (chained lanes included).
        self._held: _Counter[str] = _Counter()
        self._writing: _Counter[str] = _Counter()  # held deliveries writing outcomes
        # Per endpoint, the deliveries waiting for one of its slots, first come first
        # served: a freed slot passes to the first of them (see _endpoint_slot).
        self._slot_queues: dict[str, deque[asyncio.Future[bool]]] = {}
        # (config key, outcome) -> (when its last line was written, lines left out since)
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}
        self._runner: asyncio.Task[None] | None = None
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()
        # Told of every dead letter and disabled config (the notifier's operational events).
        self.events: Events | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._runner is None:
            self._stopping = False
            # Work published by other processes (a shared database) wakes us too.
            self.store.set_wakeup(self.wake)
            self._runner = asyncio.create_task(self._run(), name="a2a-push-dispatcher")

    async def stop(self) -> None:
        """Stop claiming, finish in-flight work (up to drain_timeout), release the rest.
        No request starts from here on: deliveries waiting for an endpoint slot are
        released now, and a quick retry not yet sent becomes a durable retry."""
        if self._runner is None:
            return
        self._stopping = True
        self._wake.set()
        self._slot_freed.set()
        for queue in self._slot_queues.values():
            for waiter in queue:
                if not waiter.done():
                    waiter.set_result(False)  # no slot: they release their lanes
        with contextlib.suppress(asyncio.CancelledError):
            await self._runner
        self._runner = None
        pending = dict(self._in_flight)
        if pending:
            _, still = await asyncio.wait(pending.values(), timeout=self.options.drain_timeout)
            unfinished = [delivery_id for delivery_id, task in pending.items() if task in still]
            for task in still:
                task.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)
            if unfinished:
                # Give the work back now rather than when the lease runs out.
                await self.store.release(unfinished, worker_id=self.worker_id)
            self._in_flight.clear()

    def wake(self) -> None:
        """New work may be due now (called by the notifier after a publish)."""
        self._wake.set()

    def debug_state(self) -> dict[str, object]:
        """Internals, for diagnosing a stuck dispatcher."""
        runner = self._runner
        return {
            "running": runner is not None and not runner.done(),
            "in_flight": len(self._in_flight),
            "per_endpoint": dict(self._per_endpoint),
            "held": dict(self._held),
            "waiting": {e: len(queue) for e, queue in self._slot_queues.items() if queue},
            "stopping": self._stopping,
        }

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def endpoint_load(self) -> dict[str, int]:
        """Deliveries holding one of each endpoint's slots (scheme://host:port): their
        requests on the wire, or about to be."""
        return {endpoint: n for endpoint, n in self._per_endpoint.items() if n > 0}

    # ---- the claim loop ----------------------------------------------------------------

    async def _run(self) -> None:
        opts = self.options
        while not self._stopping:
            free = opts.concurrency - len(self._in_flight)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            self._wake.clear()
            excluded = self._unavailable_endpoints()
            try:
                claimed = await self.store.claim_due(
                    min(free, opts.claim_batch),
                    lease_seconds=opts.lease_seconds,
                    worker_id=self.worker_id,
                    per_endpoint=opts.per_endpoint,
                    exclude_endpoints=excluded,
                )
            except StoreUnavailableError as exc:
                # Expected while the database restarts: one line, no traceback.
                log.warning("claiming due deliveries failed (%s); retrying shortly", exc)
                await self._sleep(opts.poll_interval)
                continue
            except Exception:
                log.exception("claiming due deliveries failed; retrying shortly")
                await self._sleep(opts.poll_interval)
                continue
            for delivery in claimed:
                held = _endpoint_or_none(delivery)
                if held is not None:
                    self._held[held] += 1
                task = asyncio.create_task(self._deliver(delivery, held))
                self._in_flight[delivery.id] = task
                self._idle.clear()
            self.metrics.in_flight.set(len(self._in_flight))
            if len(claimed) == min(free, opts.claim_batch):
                continue  # there may be more due right now
            timeout = opts.poll_interval
            if not claimed:
                # Idle: sleep until the earliest scheduled retry, or until an open breaker
                # lets a probe through, or a wake-up. Lanes of the endpoints the claim
                # skipped do not count: a saturated endpoint wakes the loop when one of
                # its deliveries finishes (counting them would spin on empty claims).
                now = time.time()
                try:
                    due = await self.store.next_due_at(exclude_endpoints=excluded)
                except Exception:
                    due = None
                for at in (due, self.health.next_reopen(), self.rate.next_token_at()):
                    if at is not None:
                        timeout = max(0.0, min(timeout, at - now))
            await self._sleep(timeout)

    async def _sleep(self, timeout: float) -> None:
        if timeout <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Wait until nothing is in flight (for tests and demos)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    # ---- one delivery ------------------------------------------------------------------

    async def _deliver(self, delivery: Delivery, held: str | None) -> None:
        current = delivery
        try:
            config = delivery.config
            if config is None or not config.enabled:
                await self._drop_unsendable(delivery)
                return
            # Parsed once, by the claim loop (None only for a URL that does not parse:
            # parsing again raises, and the delivery is dead-lettered below).
            endpoint = held if held is not None else endpoint_of(config.url)
            admitted = time.monotonic()
            retry_at = self.health.admit(endpoint, admitted)
            if retry_at is not None:
                await self._defer(delivery, retry_at)
                return
            chained = 0
            while True:
                chained += 1
                nxt = await self._attempt_and_record(
                    current, config, endpoint, admitted, claim_next=chained < CHAIN_LIMIT
                )
                if nxt is None:
                    break
                # The lane's next event was due and is leased to us: send it now, without
                # a claim round.
                self._forget(current.id)
                self._in_flight[nxt.id] = _this_task()
                current = nxt
                if self._stopping:
                    with _bookkeeping():
                        await self.store.release([nxt.id], worker_id=self.worker_id)
                    break
                config = nxt.config
                if config is None or not config.enabled:
                    await self._drop_unsendable(nxt)
                    break
                endpoint = endpoint_of(config.url)  # the config may have been replaced
                if endpoint != held:
                    self._unhold(held)
                    held = endpoint
                    self._held[endpoint] += 1
                admitted = time.monotonic()
                retry_at = self.health.admit(endpoint, admitted)
                if retry_at is not None:
                    await self._defer(nxt, retry_at)
                    break
        except asyncio.CancelledError:
            raise
        except (StoreUnavailableError, _BookkeepingError) as exc:
            # The outcome could not be written (the database is down, a disk error, a
            # lock timeout). Nothing is decided: the lease runs out and the lane is
            # claimed again (the webhook may then go twice, which receivers deduplicate).
            log.warning(
                "delivery %s: recording its outcome failed (%s); it returns to the "
                "outbox when its lease ends",
                current.id,
                exc,
            )
        except Exception as exc:  # never let one delivery stop the dispatcher
            log.exception("delivery %s failed unexpectedly", current.id)
            with contextlib.suppress(Exception):
                await self._finish(
                    current,
                    "dead",
                    current.attempts,
                    error=f"internal error: {type(exc).__name__}",
                )
                self.metrics.child(self.metrics.deliveries, "dead").inc()
        finally:
            self._unhold(held)
            self._forget(current.id)
            self.metrics.in_flight.set(len(self._in_flight))
            self._slot_freed.set()
            self._wake.set()  # the lane's next event may be due right now
            if not self._in_flight:
                self._idle.set()

    def _forget(self, delivery_id: str) -> None:
        """Take ``delivery_id`` off the in-flight deliveries, if this task is the one
        sending it. A delivery this task handed back (its endpoint had no slot free) may
        have been claimed again before the hand-back's answer came (on PostgreSQL the
        claim runs on another connection), by a task of its own: that entry stays. (It
        used to be dropped, and that task then failed as it moved on to the lane's next
        delivery, which stayed leased and unsent until its lease ran out.)"""
        if self._in_flight.get(delivery_id) is _this_task():
            del self._in_flight[delivery_id]

    async def _drop_unsendable(self, delivery: Delivery) -> None:
        config = delivery.config
        reason = delivery.config_error or (
            "config no longer exists" if config is None else "config disabled"
        )
        await self._finish(delivery, "dead", delivery.attempts, error=reason)
        self.metrics.child(self.metrics.deliveries, "dead").inc()

    def _unavailable_endpoints(self) -> set[str]:
        """Endpoints not to claim for now: saturated here, with an open breaker, or
        with no rate-limit token before a time still to come.

        An endpoint is saturated when it holds ``per_endpoint`` claimed deliveries that
        are not writing their outcomes, or four times ``per_endpoint`` in all. Lanes
        whose outcomes are being written (their next deliveries leased in the same
        transaction) do not keep other lanes from the endpoint's free slots, so a
        healthy endpoint keeps ``per_endpoint`` requests on the wire while the outcomes
        of others are written (what a database a round trip away needs: B6 measured
        one gateway on PostgreSQL 9-15 % faster than with twice, where the writes of
        16 outcomes often outlasted 16 requests); an endpoint whose requests hang is
        saturated at ``per_endpoint``. One claim hands out at most ``per_endpoint``
        more lanes per endpoint, and fewer than twice ``per_endpoint`` may wait for a
        slot (see ``_endpoint_slot``): lanes that come back from writing with their next
        deliveries can find that queue full, and are then handed back, due at once (in
        B6, 15-36 of 4,000 deliveries).
        """
        cap = self.options.per_endpoint
        busy = {
            e for e, n in self._held.items() if n - self._writing[e] >= cap or n >= ALL_HELD * cap
        }
        return busy | self.health.open_endpoints() | self.rate.waiting_endpoints()

    def _unhold(self, endpoint: str | None) -> None:
        if endpoint is None:
            return
        self._held[endpoint] -= 1
        if self._held[endpoint] <= 0:
            del self._held[endpoint]

    def _release_endpoint_slot(self, endpoint: str) -> None:
        queue = self._slot_queues.get(endpoint)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():  # (one whose wait ended is skipped)
                waiter.set_result(True)  # the slot passes on: the endpoint's count stays
                return
        self._per_endpoint[endpoint] -= 1
        if self._per_endpoint[endpoint] <= 0:
            del self._per_endpoint[endpoint]

    def _stop_begun(self) -> bool:
        return self._stopping  # (a call: read afresh after an await, mypy agreeing)

    async def _endpoint_slot(self, endpoint: str, deadline: float) -> bool:
        """Take one of the endpoint's in-flight slots, waiting in memory (not in the
        database) behind fewer than twice ``per_endpoint`` others, until ``deadline``
        (monotonic); False when the queue is full, the deadline passes or ``stop()`` has
        begun (requests on the wire then finish, and none starts: the claim is released,
        unsent).

        Waiters are served in turn: a slot that frees passes straight to the first of
        them, which alone wakes (not every waiter, to find all but one slot taken)."""
        if self._stopping:
            return False
        cap = self.options.per_endpoint
        queue = self._slot_queues.get(endpoint)
        if not queue and self._per_endpoint[endpoint] < cap:
            self._per_endpoint[endpoint] += 1
            return True
        if queue is None:
            queue = self._slot_queues[endpoint] = deque()
        remaining = deadline - time.monotonic()
        if len(queue) >= 2 * cap or remaining <= 0:
            if not queue:
                del self._slot_queues[endpoint]
            return False
        loop = asyncio.get_running_loop()
        handed: asyncio.Future[bool] = loop.create_future()
        queue.append(handed)
        # A bare timer rather than asyncio.timeout(): this wait happens for most
        # deliveries under load, and the deadline is seldom reached. Whichever comes
        # first settles the future: a slot (True) or the deadline (False).
        timer = loop.call_later(remaining, _time_up, handed)
        got = False
        try:
            got = await handed
            if got and self._stop_begun():
                got = False  # handed over just before stop(): no request starts now
            return got
        finally:
            timer.cancel()
            if not handed.done():
                handed.cancel()
            elif not got and _slot_handed(handed):
                # Handed over as this wait was cancelled: pass it on.
                self._release_endpoint_slot(endpoint)
            # Mostly the releaser took it out already. (Not remove() and a ValueError:
            # deque's message holds the future's repr, which costs microseconds.)
            if handed in queue:
                queue.remove(handed)
            if not queue and self._slot_queues.get(endpoint) is queue:
                del self._slot_queues[endpoint]

    async def _attempt_and_record(
        self,
        delivery: Delivery,
        config: StoredConfig,
        endpoint: str,
        admitted: float,
        *,
        claim_next: bool,
    ) -> Delivery | None:
        """One claim's attempts and their outcome (``admitted``: when the breaker let the
        delivery through); with ``claim_next``, returns the lane's next delivery when it
        was due and could be leased at once."""
        attempts = delivery.attempts
        first_round = delivery.rounds == 0
        tried: list[_Tried] = []  # this claim's HTTP attempts, for the attempt history
        # All of this claim's waits for an endpoint slot share one budget, so the claim
        # ends before its lease (see the lease check in the notifier).
        started = time.monotonic()
        slot_deadline = started + self.options.lease_seconds * SLOT_WAIT_SHARE

        async def attempt() -> HTTPResult:
            # An endpoint slot is held only for the HTTP exchange itself, not while the
            # outcome is written: the next request to the endpoint need not wait for it.
            nonlocal attempts
            if not await self._endpoint_slot(endpoint, slot_deadline):
                raise _EndpointBusy
            try:
                if self.rate.limited(endpoint):
                    # Taken with the slot held: a token is spent on a request sent now.
                    wait_until = min(slot_deadline, time.monotonic() + MAX_WAIT)
                    until = await self.rate.acquire(endpoint, wait_until)
                    if until is not None:
                        raise _RateLimited(until)
                    if self._stop_begun():
                        raise _EndpointBusy  # no request starts once stop() has begun
                attempts += 1
                return await self._post(delivery, config, tried)
            finally:
                self._release_endpoint_slot(endpoint)

        # Failures are kept as values without their tracebacks: a traceback holds this
        # frame, which holds the failure (a reference cycle, freed only by a full
        # garbage collection: tens of ms with the event loop stopped).
        result: HTTPResult | BaseException
        try:
            result = await attempt()
        except A2APushError as exc:
            result = exc.with_traceback(None)
        except _EndpointBusy:
            # Nothing was sent: if this was the breaker's probe, the next delivery probes
            # instead (it would otherwise hold the endpoint until probe_timeout).
            self.health.withdraw(endpoint, admitted)
            # Hand the lane back, due at once: the claim loop skips saturated endpoints
            # and picks it up again as soon as this one has room (after a stop, the next
            # start does).
            with _bookkeeping():
                await self.store.release([delivery.id], worker_id=self.worker_id)
            self.metrics.child(self.metrics.deliveries, "deferred").inc()
            return None
        except _RateLimited as limited:
            # Nothing was sent; the lane waits in the outbox until a token is due.
            self.health.withdraw(endpoint, admitted)
            await self._defer(delivery, limited.until)
            return None
        if first_round and self.retry.quick_attempts > 1 and classify(result) is Verdict.RETRY:
            # Only now pay for tenacity's loop; it sees the first outcome as its first try.
            first: list[HTTPResult | BaseException] = [result]

            async def again() -> HTTPResult:
                if first:
                    earlier = first.pop()
                    if isinstance(earlier, BaseException):
                        try:
                            raise earlier
                        finally:
                            del earlier  # its traceback holds this frame: no cycle
                    return earlier
                return await attempt()

            # The attempts end within the rest of the lease, whatever the pauses between
            # them are (the notifier's lease check assumes quick_retry_after_max at most).
            retrying = self.retry.quick(
                first_round=True,
                deadline=started + self.options.lease_seconds * (1 - SLOT_WAIT_SHARE),
                attempt_time=self.transport.timeouts.total,
            )
            try:
                result = await retrying(again)
            except A2APushError as exc:
                result = exc.with_traceback(None)
            except (_EndpointBusy, _RateLimited):
                # Retry later through the outbox, as after the quick attempts.
                result = first[0] if first else result
                if isinstance(result, BaseException):
                    result = result.with_traceback(None)  # re-raised by again()
            finally:
                # tenacity keeps bound methods of the loop in its state: a cycle.
                retrying.iter_state.reset()
        # Writing the outcome: the lane no longer keeps other lanes from the endpoint's
        # free slots (see _unavailable_endpoints).
        self._writing[endpoint] += 1
        try:
            return await self._record(
                delivery, config, endpoint, attempts, result, tried, claim_next=claim_next
            )
        finally:
            self._writing[endpoint] -= 1
            if self._writing[endpoint] <= 0:
                del self._writing[endpoint]

    async def _record(
        self,
        delivery: Delivery,
        config: StoredConfig,
        endpoint: str,
        attempts: int,
        result: HTTPResult | BaseException,
        tried: list[_Tried],
        *,
        claim_next: bool,
    ) -> Delivery | None:
        """Write the outcome of a claim's attempts (``result``, the last); with
        ``claim_next``, returns the lane's next delivery when it was due and could be
        leased at once."""
        verdict = classify(result)
        now = time.time()
        status = result.status if isinstance(result, HTTPResult) else None
        error = _describe(result)

        sent = _Sent(endpoint, tried)
        nxt: Delivery | None = None
        if verdict is Verdict.DELIVERED:
            self.health.record_success(endpoint)
            nxt = await self._finish(
                delivery,
                "delivered",
                attempts,
                status=status,
                clear_failing=config.failing_since is not None,
                claim_next=claim_next and not self._stopping,
                sent=sent,
            )
            self.metrics.end_to_end_latency.observe(max(0.0, now - delivery.created_at))
        elif verdict is Verdict.GONE:
            self.health.record_success(endpoint)  # the endpoint works; it just wants no more
            await self._finish(
                delivery,
                "dead",
                attempts,
                status=status,
                error=error,
                disable="receiver answered 410 Gone",
                sent=sent,
                verdict="gone",
            )
            self.metrics.child(self.metrics.configs_disabled, "gone").inc()
        elif verdict is Verdict.DEAD:
            if status is not None:
                self.health.record_success(endpoint)  # it answered: reachable, just refusing
            else:
                self.health.record_failure(endpoint)
            await self._finish(delivery, "dead", attempts, status=status, error=error, sent=sent)
        else:
            self.health.record_failure(endpoint)
            await self._reschedule(delivery, config, attempts, result, status, error, now, sent)
            return None
        self.metrics.child(self.metrics.deliveries, verdict.value).inc()
        return nxt

    async def _reschedule(
        self,
        delivery: Delivery,
        config: StoredConfig,
        attempts: int,
        result: HTTPResult | BaseException,
        status: int | None,
        error: str,
        now: float,
        sent: _Sent,
    ) -> None:
        failing_since = config.failing_since or now
        if now - failing_since >= self.options.disable_after:
            await self._finish(
                delivery,
                "dead",
                attempts,
                status=status,
                error=error,
                disable=f"failing without a success since {time.ctime(failing_since)}",
                sent=sent,
            )
            self.metrics.child(self.metrics.configs_disabled, "failing").inc()
            self.metrics.child(self.metrics.deliveries, "dead").inc()
            return
        retry_after = parse_retry_after(result.headers) if isinstance(result, HTTPResult) else None
        delay = self.retry.durable_delay(delivery.rounds, retry_after)
        exhausted = "retries exhausted"
        max_age = self.options.max_delivery_age
        if delay is not None and max_age is not None:
            # The last retry is due when the delivery reaches its maximum age; one that
            # fails at that age or later is the last.
            left = delivery.created_at + max_age - now
            if left <= 0:
                delay = None
                exhausted = f"older than max_delivery_age ({max_age:g} s)"
            else:
                delay = min(delay, left)
        if delay is None:
            await self._finish(
                delivery,
                "dead",
                attempts,
                status=status,
                error=f"{exhausted}; last: {error}",
                sent=sent,
            )
            self.metrics.child(self.metrics.deliveries, "dead").inc()
            return
        outcome = Outcome(
            delivery.id,
            delivery.config_key,
            delivery.task_id,
            "retry",
            attempts=attempts,
            status=status,
            error=error,
            next_attempt_at=now + delay,
            config_failing_since=None if config.failing_since else now,
            config_url=config.url,
            worker_id=self.worker_id,
            history=self._history(delivery, sent, "retry", now + delay),
        )
        with _bookkeeping():
            await self.store.complete([outcome])
        self._count_verdicts(sent, "retry")
        self.metrics.child(self.metrics.deliveries, "retry").inc()
        self._log_outcome(delivery, outcome, sent)

    async def _post(
        self, delivery: Delivery, config: StoredConfig, tried: list[_Tried]
    ) -> HTTPResult:
        headers = webhook_headers(delivery, config, self.signer)
        span, traceparent = (
            tracing.start_attempt(
                delivery.traceparent,
                url=URL(config.url),
                delivery_id=delivery.id,
                task_id=delivery.task_id,
                config_id=config.id,
                attempt=delivery.attempts + len(tried) + 1,
            )
            if tracing.enabled()
            else (None, delivery.traceparent)
        )
        if traceparent is not None:
            headers[tracing.TRACEPARENT] = traceparent
        started_at = time.time()
        started = time.perf_counter()
        try:
            result = await self.transport.post(config.url, delivery.body, headers)
        except TransportError as exc:
            took = time.perf_counter() - started
            self.metrics.attempt_latency.observe(took)
            if isinstance(exc, RequestTimeout):
                self.metrics.child(self.metrics.attempts, "timeout").inc()
            elif isinstance(exc, AddressRefused):
                self.metrics.child(self.metrics.attempts, "refused").inc()
            elif isinstance(exc, ConnectError):
                self.metrics.child(self.metrics.attempts, "connect_error").inc()
            error_class = exc.error_class
            self.metrics.child(self.metrics.attempt_errors, error_class).inc()
            # Strings only: the exception's traceback holds this frame (a cycle).
            tried.append(_Tried(started_at, took, None, error_class, _describe(exc), span=span))
            raise
        took = time.perf_counter() - started
        self.metrics.attempt_latency.observe(took)
        self.metrics.child(self.metrics.attempts, f"{result.status // 100}xx").inc()
        response = b""
        if result.body and self._history_on:
            response = _redacted(result.body, headers, config)
        tried.append(_Tried(started_at, took, result.status, None, None, response, span))
        return result

    @property
    def _history_on(self) -> bool:
        return self.store.options.attempt_history

    def _history(
        self,
        delivery: Delivery,
        sent: _Sent | None,
        verdict: AttemptVerdict,
        retry_at: float | None = None,
    ) -> tuple[Attempt, ...]:
        """The claim's attempts for the attempt history: each but the last was followed
        by another quick attempt (a retry at its start); the last ends as the outcome
        does."""
        if sent is None or not sent.tried or not self._history_on:
            return ()
        tried = sent.tried
        last = len(tried) - 1
        return tuple(
            Attempt(
                delivery_id=delivery.id,
                number=delivery.attempts + 1 + i,
                started_at=t.started_at,
                duration=t.duration,
                endpoint=sent.endpoint,
                verdict=verdict if i == last else "retry",
                status=t.status,
                error_class=t.error_class,
                error=t.error,
                retry_at=retry_at if i == last else tried[i + 1].started_at,
                response=t.response,
            )
            for i, t in enumerate(tried)
        )

    def _count_verdicts(self, sent: _Sent | None, verdict: AttemptVerdict) -> None:
        if sent is None or not sent.tried:
            return
        if tracing.enabled():
            _end_spans(sent, verdict)
        metrics = self.metrics
        if len(sent.tried) > 1:
            metrics.child(metrics.attempt_verdicts, "retry").inc(len(sent.tried) - 1)
        metrics.child(metrics.attempt_verdicts, verdict).inc()

    async def _defer(self, delivery: Delivery, until: float) -> None:
        outcome = Outcome(
            delivery.id,
            delivery.config_key,
            delivery.task_id,
            "defer",
            attempts=delivery.attempts,
            next_attempt_at=until,
            worker_id=self.worker_id,
        )
        with _bookkeeping():
            await self.store.complete([outcome])
        self.metrics.child(self.metrics.deliveries, "deferred").inc()

    async def _finish(
        self,
        delivery: Delivery,
        kind: str,
        attempts: int,
        *,
        status: int | None = None,
        error: str | None = None,
        disable: str | None = None,
        clear_failing: bool = False,
        claim_next: bool = False,
        sent: _Sent | None = None,
        verdict: AttemptVerdict | None = None,
    ) -> Delivery | None:
        """Record a delivered or dead outcome; ``sent``: the claim's HTTP attempts, the
        last of which ends with ``verdict`` (default: ``kind``)."""
        verdict = verdict or ("delivered" if kind == "delivered" else "dead")
        outcome = Outcome(
            delivery.id,
            delivery.config_key,
            delivery.task_id,
            "delivered" if kind == "delivered" else "dead",
            attempts=attempts,
            status=status,
            error=error,
            disable_config=disable,
            clear_config_failing=clear_failing,
            config_url=delivery.config.url if delivery.config is not None else None,
            worker_id=self.worker_id,
            history=self._history(delivery, sent, verdict),
        )
        with _bookkeeping():
            if claim_next:
                nxt = await self.store.complete_and_claim_next(
                    outcome, lease_seconds=self.options.lease_seconds, worker_id=self.worker_id
                )
            else:
                await self.store.complete([outcome])
                nxt = None
        self._count_verdicts(sent, verdict)
        if kind == "dead" or attempts > 1:
            self._log_outcome(delivery, outcome, sent)
        if kind == "dead" and self.events is not None:
            self.events.dead_lettered(delivery, outcome, gone=verdict == "gone")
        return nxt

    def _log_outcome(self, delivery: Delivery, outcome: Outcome, sent: _Sent | None = None) -> None:
        """One log line for a retry, a dead letter, a disabled config, or a delivery
        that needed more than one attempt (see ``webhook_log``). Never raises: the
        outcome is already recorded, and a failing log handler must not undo that."""
        try:
            self._write_outcome_line(delivery, outcome, sent)
        except Exception:
            log.debug("could not log the outcome of delivery %s", delivery.id, exc_info=True)

    def _throttled(self, config_key: str, kind: str) -> str | None:
        """None when this config's ``kind`` line was written less than LOG_EVERY ago
        (counted as left out); else the note on the lines left out before it ("" for
        none)."""
        now = time.monotonic()
        key = (config_key, kind)
        last = self._logged.get(key)
        if last is not None and now - last[0] < LOG_EVERY:
            self._logged[key] = (last[0], last[1] + 1)
            return None
        if len(self._logged) >= _LOG_THROTTLE_SIZE:
            self._logged.clear()
        self._logged[key] = (now, 0)
        if last is None or last[1] == 0:
            return ""
        n = last[1]
        return f"; {n} more like this for this config in the last {now - last[0]:.0f} s not logged"

    def _write_outcome_line(self, delivery: Delivery, outcome: Outcome, sent: _Sent | None) -> None:
        kind = outcome.kind
        level = logging.WARNING if kind == "dead" else logging.INFO
        if not webhook_log.isEnabledFor(level):
            return
        note = self._throttled(delivery.config_key, kind)
        if note is None and not outcome.disable_config:
            return  # left out (counted): no work for a line nobody sees
        config = delivery.config
        # The URL's origin and the config's id: a webhook URL's path and query often hold
        # its secret (…/services/T0/B0/XXXX, ?token=…).
        where = (
            f"webhook to {shown_endpoint(config.url)} (push config {config.id})"
            if config is not None
            else "webhook to a deleted push config"
        )
        n = outcome.attempts
        tries = f"{n} attempt{'' if n == 1 else 's'}"
        ids = f"delivery {delivery.id}, task {delivery.task_id}"
        why = outcome.error or f"HTTP {outcome.status}"
        fields = _log_fields(delivery, outcome, sent)
        if note is None:
            pass
        elif kind == "retry":
            wait = max(0.0, (outcome.next_attempt_at or 0.0) - time.time())
            webhook_log.info(
                "%s failed after %s (%s); retrying in %.1f s (%s%s)",
                where,
                tries,
                why,
                wait,
                ids,
                note,
                extra={WEBHOOK_OUTCOME: "retry", **fields},
            )
        elif kind == "dead":
            webhook_log.warning(
                "%s dead-lettered after %s (%s; %s%s); %s",
                where,
                tries,
                why,
                ids,
                note,
                dead_letter_hint(self.store),
                extra={WEBHOOK_OUTCOME: "dead", **fields},
            )
        else:
            webhook_log.info(
                "%s delivered after %s (%s%s)",
                where,
                tries,
                ids,
                note,
                extra={WEBHOOK_OUTCOME: kind, **fields},
            )
        if outcome.disable_config:
            webhook_log.warning(
                "push config %s of task %s disabled: %s; nothing more is sent to it until "
                "`a2a-push configs enable` (or the client registers it again)",
                config.id if config else delivery.config_key,
                delivery.task_id,
                outcome.disable_config,
                extra={WEBHOOK_OUTCOME: "disabled", **fields, "verdict": "disabled"},
            )


def _log_fields(delivery: Delivery, outcome: Outcome, sent: _Sent | None) -> dict[str, Any]:
    """The structured fields of an outcome's log line (see a2a_push.logs.FIELDS): ids,
    the endpoint's origin, the attempt count, the last attempt's status and latency,
    the verdict and the publish's trace id. Never a URL's path or query."""
    config = delivery.config
    last = sent.tried[-1] if sent is not None and sent.tried else None
    return {
        "delivery_id": delivery.id,
        "task_id": delivery.task_id,
        "config_id": config.id if config is not None else None,
        "endpoint": shown_endpoint(config.url) if config is not None else None,
        "attempt": outcome.attempts,
        "status": outcome.status,
        "latency_ms": round(last.duration * 1000, 1) if last is not None else None,
        "error_class": last.error_class if last is not None else None,
        "verdict": outcome.kind,
        "trace_id": tracing.trace_id_of(delivery.traceparent),
    }


def _this_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None  # (deliveries are sent by tasks)
    return task


def _endpoint_or_none(delivery: Delivery) -> str | None:
    config = delivery.config
    if config is None:
        return None
    try:
        return endpoint_of(config.url)
    except Exception:  # a malformed stored URL: _deliver dead-letters it, uncounted
        return None


class _EndpointBusy(Exception):
    """The endpoint's in-flight cap and its waiting queue are both full."""


class _RateLimited(Exception):
    """The endpoint's rate limit has no token before ``until`` (epoch seconds)."""

    def __init__(self, until: float) -> None:
        super().__init__(until)
        self.until = until


def dead_letter_hint(store: Store) -> str:
    """The commands that list and replay ``store``'s dead letters, ready to run (a
    password in a DSN shown as ``***``, to be put back)."""
    database = store.command_database
    if database is None:
        return f"dead letters are kept in {store.location}: the a2a-push commands cannot read them"
    option = f"--database {shlex.quote(database)}"
    hint = (
        f"`a2a-push deliveries list --state dead {option}` lists dead letters (in "
        f"{store.location}) and `a2a-push deliveries replay {option} ID` sends one again"
    )
    return hint + (" (*** stands for the database password)" if "***" in database else "")


@dataclass(frozen=True, slots=True)
class _Tried:
    """One HTTP attempt as it happened, before its verdict is known."""

    started_at: float
    duration: float
    status: int | None
    error_class: str | None
    error: str | None
    response: bytes = b""
    span: Any = None  # its trace span, ended once its verdict is known (see tracing)


def _end_spans(sent: _Sent, verdict: AttemptVerdict) -> None:
    """End the claim's attempt spans: each but the last was followed by another quick
    attempt (a retry); the last ends as the outcome does (as the attempt history says)."""
    last = len(sent.tried) - 1
    for i, t in enumerate(sent.tried):
        if t.span is not None:
            tracing.end_attempt(
                t.span,
                status=t.status,
                error_class=t.error_class,
                verdict=verdict if i == last else "retry",
                ended_at=t.started_at + t.duration,
            )


@dataclass(frozen=True, slots=True)
class _Sent:
    """A claim's HTTP attempts, all to one endpoint (scheme://host:port)."""

    endpoint: str
    tried: list[_Tried]


_CREDENTIAL_HEADERS: Final = (
    HEADER_AUTHORIZATION,
    HEADER_SIGNATURE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_WEBHOOK_SIGNATURE,
)
_REDACTED: Final = b"[redacted]"


def _redacted(body: bytes, headers: dict[str, str], config: StoredConfig) -> bytes:
    """The first KiB of an answer's body for the attempt history, with what the request
    carried that must not be stored cut out should the receiver echo it: its
    credentials (token, authorization, signatures, the JWT) and the URL's path and
    query. Cut after the redaction, so that no secret is kept in part."""
    secrets: set[str] = set()
    for name in _CREDENTIAL_HEADERS:
        value = headers.get(name)
        if value:
            secrets.add(value)
            secrets.update(part for part in value.split(" ") if len(part) >= 8)
    for value in (config.token, config.auth_credentials):
        if value:
            secrets.add(value)
    try:
        url = URL(config.url)
        for part in (url.raw_path_qs, url.path_qs, url.raw_query_string, url.query_string):
            if part and part != "/":
                secrets.add(part)
        if len(url.raw_path) > 1:
            secrets.add(url.raw_path)
    except (ValueError, TypeError):
        pass
    for secret in sorted(secrets, key=len, reverse=True):  # the longest first
        encoded = secret.encode("utf-8", "replace")
        if encoded in body:
            body = body.replace(encoded, _REDACTED)
    return body[:MAX_ATTEMPT_RESPONSE_BYTES]


def _describe(result: HTTPResult | BaseException) -> str:
    if isinstance(result, HTTPResult):
        return f"HTTP {result.status}"
    return f"{type(result).__name__}: {result}"
