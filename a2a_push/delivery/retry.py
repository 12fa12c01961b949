"""Retry policy, composed from tenacity's strategies.

Two stages, as webhook platforms do: a few quick attempts inside the process (a blip
should not cost minutes), then durable rescheduling on a readable schedule stored in
the outbox (``next_attempt_at``), so long waits survive restarts and hold no memory.
"""

from __future__ import annotations

import email.utils
import enum
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_base,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from .transport import HTTPResult, TransportError

# Statuses worth trying again (RFC 9110 and common practice).
RETRYABLE_STATUSES = frozenset({408, 425, 429}) | frozenset(range(500, 600))

DEFAULT_SCHEDULE: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
"""Seconds before each durable retry: 5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h (≈ 28 h in all)."""


class Verdict(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD = "dead"
    GONE = "gone"  # 410: the receiver wants no more; the config is disabled


def is_retryable_exception(exc: BaseException) -> bool:
    return isinstance(exc, TransportError) and exc.retryable


def is_retryable_result(result: HTTPResult) -> bool:
    return result.status in RETRYABLE_STATUSES


def classify(result: HTTPResult | BaseException) -> Verdict:
    """What a final attempt means for the delivery."""
    if isinstance(result, BaseException):
        return Verdict.RETRY if is_retryable_exception(result) else Verdict.DEAD
    if 200 <= result.status < 300:
        return Verdict.DELIVERED
    if result.status == 410:
        return Verdict.GONE
    if is_retryable_result(result):
        return Verdict.RETRY
    return Verdict.DEAD  # other 4xx, 3xx (redirects are not followed), 1xx


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP-date), or None."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²".isdigit() is true, float("²") fails
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:
            # The asctime form and "-0000" come back naive; every HTTP-date is GMT (RFC
            # 9110), and timestamp() would read a naive one as local time.
            when = when.replace(tzinfo=UTC)
        at = when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        # OverflowError: a year, hour or offset beyond what datetime holds (the endpoint
        # chose it): no usable date, so the schedule decides.
        return None
    return max(0.0, at - (time.time() if now is None else now))


class wait_retry_after(wait_base):
    """Wait what the server asked (Retry-After), else fall back to another strategy."""

    def __init__(self, fallback: wait_base, maximum: float) -> None:
        self.fallback = fallback
        self.maximum = maximum

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        if outcome is not None and not outcome.failed:
            result = outcome.result()
            if isinstance(result, HTTPResult):
                asked = parse_retry_after(result.headers)
                if asked is not None:
                    return min(asked, self.maximum)
        return float(self.fallback(retry_state))


class wait_schedule(wait_base):
    """The n-th wait is ``delays[n-1]`` (the last repeats), with ± ``jitter`` spread."""

    def __init__(self, delays: Sequence[float], jitter: float = 0.2) -> None:
        if not delays:
            raise ValueError("retry schedule needs at least one delay")
        self.delays = tuple(float(d) for d in delays)
        self.jitter = jitter

    def __call__(self, retry_state: RetryCallState) -> float:
        index = min(retry_state.attempt_number, len(self.delays)) - 1
        base = self.delays[index]
        return base * (1 + random.uniform(-self.jitter, self.jitter))


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often to try a delivery again. Every field can be overridden.

    ``quick_attempts`` attempts are made in the process on the first claim, waiting
    ``quick_wait`` between them (or what ``Retry-After`` asks, if at most
    ``quick_retry_after_max``). After that, each durable retry waits ``schedule[n]``
    (± ``jitter``) — or ``Retry-After`` clamped to ``retry_after_bounds`` — and once the
    schedule is used up the delivery is dead-lettered.
    """

    quick_attempts: int = 3
    quick_wait: wait_base = field(
        default_factory=lambda: (
            wait_exponential(multiplier=0.25, min=0.25, max=2) + wait_random(0, 0.1)
        )
    )
    quick_retry_after_max: float = 2.0
    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    jitter: float = 0.2
    retry_after_bounds: tuple[float, float] = (1.0, 6 * 3600.0)

    def __post_init__(self) -> None:
        if self.quick_attempts < 1:
            raise ValueError("quick_attempts must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    @property
    def retry(self) -> retry_base:
        return retry_if_exception(is_retryable_exception) | retry_if_result(is_retryable_result)

    def quick(
        self, *, first_round: bool, deadline: float | None = None, attempt_time: float = 0.0
    ) -> AsyncRetrying:
        """The in-process retrying loop for one claim (one attempt after the first round).

        ``deadline`` (``time.monotonic()``): no attempt starts whose pause before it plus
        ``attempt_time`` (the longest an attempt can take) would end past it; the loop
        stops instead, and the delivery goes to the outbox's schedule. It keeps a claim
        within its lease whatever ``quick_wait`` is."""
        stop = stop_after_attempt(self.quick_attempts if first_round else 1) | (
            _stop_on_long_retry_after(self.quick_retry_after_max)
        )
        if deadline is not None:
            stop = stop | _stop_past_deadline(deadline, attempt_time)
        return AsyncRetrying(
            stop=stop,
            wait=wait_retry_after(self.quick_wait, self.quick_retry_after_max),
            retry=self.retry,
            reraise=True,
            retry_error_callback=_last_outcome,
        )

    def durable_delay(self, rounds: int, retry_after: float | None = None) -> float | None:
        """Seconds until the next durable attempt after ``rounds`` reschedules, or None
        when the schedule is exhausted (the delivery is then dead-lettered)."""
        if rounds >= len(self.schedule):
            return None
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = rounds + 1
        delay = wait_schedule(self.schedule, self.jitter)(state)
        if retry_after is not None:
            # Never sooner than the receiver asked (within bounds), nor sooner than the
            # schedule: a short Retry-After must not use up the whole schedule in minutes.
            low, high = self.retry_after_bounds
            delay = max(delay, min(max(retry_after, low), high))
        return delay

    def describe(self) -> str:
        """The schedule in words, for docs and logs."""
        return ", ".join(_human(s) for s in self.schedule)


class _stop_on_long_retry_after(stop_base):
    """Stop the quick loop when the server asks for a longer pause than we hold in memory."""

    def __init__(self, maximum: float) -> None:
        self.maximum = maximum

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        if outcome is None or outcome.failed:
            return False
        result = outcome.result()
        if not isinstance(result, HTTPResult):
            return False
        asked = parse_retry_after(result.headers)
        return asked is not None and asked > self.maximum


class _stop_past_deadline(stop_base):
    """Stop when the next attempt, after its pause, could end past ``deadline``."""

    def __init__(self, deadline: float, attempt_time: float) -> None:
        self.deadline = deadline
        self.attempt_time = attempt_time

    def __call__(self, retry_state: RetryCallState) -> bool:
        # (tenacity works out the pause before it asks whether to stop.)
        ends = time.monotonic() + retry_state.upcoming_sleep + self.attempt_time
        return ends > self.deadline


def _last_outcome(retry_state: RetryCallState) -> HTTPResult:
    outcome = retry_state.outcome
    assert outcome is not None
    return outcome.result()  # type: ignore[no-any-return]


def _human(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:g} s"
    if seconds < 3600:
        return f"{seconds / 60:g} m"
    return f"{seconds / 3600:g} h"
