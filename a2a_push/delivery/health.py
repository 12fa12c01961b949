"""Endpoint health: a circuit breaker per endpoint (scheme://host:port).

Consecutive failures open the breaker; while open, deliveries to that endpoint are
deferred without spending attempts. After a cool-down one probe is let through
(half-open): success closes the breaker, failure re-opens it with a longer cool-down.

Cool-downs and probes run on ``time.monotonic()`` (every ``now`` argument here is a
reading of it): a step of the wall clock (NTP) neither holds a breaker open nor closes
it early. The times handed out (when to try again) are epoch seconds, as the outbox
schedules work.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..endpoints import endpoint_of

__all__ = ["BreakerState", "EndpointHealth", "endpoint_of"]


_PRUNE_EVERY = 60.0  # seconds

log = logging.getLogger(__name__)

BreakerListener = Callable[[str, "BreakerState", int], None]
"""Told of a breaker that opens (closed before) or closes: (endpoint, new state, the
consecutive failures that opened it)."""


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class _Endpoint:
    failures: int = 0
    open_until: float = 0.0  # this and the other times: time.monotonic()
    trips: int = 0
    probing_since: float | None = None
    last_failure: float = 0.0


class EndpointHealth:
    """Per-endpoint breakers, in memory (each process judges what it sees)."""

    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        cool_down: float = 10.0,
        max_cool_down: float = 600.0,
        probe_timeout: float = 60.0,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        self.failure_threshold = failure_threshold
        self.cool_down = cool_down
        self.max_cool_down = max_cool_down
        self.probe_timeout = probe_timeout
        self._endpoints: dict[str, _Endpoint] = {}
        self._pruned_at = float("-inf")
        # Told when a breaker opens after being closed, and when it closes (the notifier's
        # operational events). A re-opening after a failed probe is not a change.
        self.listener: BreakerListener | None = None

    def admit(self, endpoint: str, now: float | None = None) -> float | None:
        """None if a request may go now, else the time (epoch seconds) at which to try
        again."""
        e = self._endpoints.get(endpoint)
        if e is None or e.failures < self.failure_threshold:
            return None
        now = _reading(now)
        if now < e.open_until:
            return _epoch(e.open_until, now)
        if e.probing_since is not None and now - e.probing_since < self.probe_timeout:
            # One probe at a time; the rest wait for its verdict (or for it to be lost:
            # a probe that was cancelled never reports back).
            return _epoch(now + min(self.cool_down, 5.0), now)
        e.probing_since = now
        return None

    def withdraw(self, endpoint: str, admitted: float) -> None:
        """A request ``admit`` let through at ``admitted`` (the ``now`` it was given) was
        not sent after all. If it was the half-open probe, the next request may probe at
        once instead of after ``probe_timeout``; it counts as neither success nor
        failure."""
        e = self._endpoints.get(endpoint)
        if e is not None and e.probing_since == admitted:
            e.probing_since = None

    def record_success(self, endpoint: str) -> None:
        e = self._endpoints.pop(endpoint, None)
        if e is not None and e.failures >= self.failure_threshold:
            self._tell(endpoint, BreakerState.CLOSED, e.failures)

    def record_failure(self, endpoint: str, now: float | None = None) -> None:
        now = _reading(now)
        e = self._endpoints.setdefault(endpoint, _Endpoint())
        e.failures += 1
        e.probing_since = None
        e.last_failure = now
        if e.failures >= self.failure_threshold and now >= e.open_until:
            # Closed until now, or half-open (a probe failed): (re-)open, for longer each
            # time. Failures while open come from requests sent before it opened (up to
            # per_endpoint of them at once): counting them as trips would send the
            # breaker to its longest cool-down on its first opening.
            e.trips += 1
            e.open_until = now + min(self.cool_down * 2 ** (e.trips - 1), self.max_cool_down)
            if e.trips == 1:
                self._tell(endpoint, BreakerState.OPEN, e.failures)

    def _tell(self, endpoint: str, state: BreakerState, failures: int) -> None:
        if self.listener is None:
            return
        try:
            self.listener(endpoint, state, failures)
        except Exception:  # a listener never breaks the delivery that reported to it
            log.exception("the breaker listener failed on %s (%s)", endpoint, state.value)

    def state(self, endpoint: str, now: float | None = None) -> BreakerState:
        e = self._endpoints.get(endpoint)
        if e is None or e.failures < self.failure_threshold:
            return BreakerState.CLOSED
        now = _reading(now)
        return BreakerState.OPEN if now < e.open_until else BreakerState.HALF_OPEN

    def open_endpoints(self, now: float | None = None) -> set[str]:
        """Endpoints whose breaker is open (not yet due for a probe)."""
        now = _reading(now)
        self._prune(now)
        return {
            key
            for key, e in self._endpoints.items()
            if e.failures >= self.failure_threshold and now < e.open_until
        }

    def next_reopen(self, now: float | None = None) -> float | None:
        """When (epoch seconds) the first open breaker lets a probe through (None when
        none is open)."""
        now = _reading(now)
        self._prune(now)
        times = [
            e.open_until
            for e in self._endpoints.values()
            if e.failures >= self.failure_threshold and now < e.open_until
        ]
        return _epoch(min(times), now) if times else None

    def states(self, now: float | None = None) -> dict[str, BreakerState]:
        now = _reading(now)
        self._prune(now)
        return {key: self.state(key, now) for key in self._endpoints}

    def _prune(self, now: float) -> None:
        """Forget endpoints that have not failed for longer than any breaker stays open
        plus a probe's time (at most once a minute). Without this every endpoint that
        ever failed and was never tried again (a client gone for good, its config
        disabled) would stay, and the claim loop walks them all on every claim."""
        if now - self._pruned_at < _PRUNE_EVERY:
            return
        self._pruned_at = now
        quiet = self.max_cool_down + self.probe_timeout
        stale = [
            key
            for key, e in self._endpoints.items()
            # A probe in flight keeps its endpoint: its failure must re-open the breaker.
            if now - max(e.last_failure, e.probing_since or 0.0) > quiet
        ]
        for key in stale:
            del self._endpoints[key]


# A time.monotonic() reading is the time since boot (Linux) or a similar origin: far
# below this, where epoch seconds (time.time()) have been since 2001.
_EPOCH_SECONDS = 1e9


def _reading(now: float | None) -> float:
    """``now`` as given (a ``time.monotonic()`` reading), or read. An epoch time given by
    mistake (``time.time()``, as before this clock changed) is refused: it would hold a
    breaker open for decades."""
    if now is None:
        return time.monotonic()
    if now >= _EPOCH_SECONDS and time.monotonic() < _EPOCH_SECONDS:
        raise ValueError(
            f"EndpointHealth: now={now} looks like time.time() (epoch seconds); pass a "
            "time.monotonic() reading, or leave now out"
        )
    return now


def _epoch(at: float, now: float) -> float:
    """``at`` on the monotonic clock (``now`` read from it) as epoch seconds."""
    return time.time() + (at - now)
