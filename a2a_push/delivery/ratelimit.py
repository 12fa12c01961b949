"""Per-endpoint rate limits: a token bucket per endpoint, shared through the store.

Every process sending from one outbox (gateway replicas on one PostgreSQL database,
notifiers on one SQLite file) takes its tokens from the same bucket row
(``Store.take_tokens``), so N processes together send at the limit, not N times it.

Each process takes tokens in small batches (a tenth of a second's worth, at least
one) and uses them within :data:`HOLD` seconds or gives them up; a bucket holds at
most :func:`capacity` tokens (half a second's worth, at least one). So over any window
of W seconds an endpoint is sent at most ``capacity + rate * (W + HOLD)`` requests:
at most ``rate * (W + 1)`` for a rate of 2/s or more; within 10 % of the limit over
any 10 s window, whatever the number of processes.

A process refused a token waits until the bucket has one, that wait stretched by up to
:data:`JITTER` of it at random. Endpoints limited alike would otherwise send in step:
their requests go out, and time out, at the same instants, and each such burst delays
the deliveries to every other endpoint. The stretch costs nothing to an endpoint whose
bucket is not full when the wait ends (a limit above 2/s); at 1/s, a steadily saturated
endpoint is sent about 9 % under its limit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ..endpoints import parse_endpoint
from ..store import Store

log = logging.getLogger("a2a_push.dispatcher")

HOLD: Final = 0.5
"""Seconds a process keeps tokens it took and has not used yet; then they are dropped."""
BATCH_SECONDS: Final = 0.1
"""A process takes this many seconds' worth of tokens at a time (at least one)."""
CAPACITY_SECONDS: Final = 0.5
"""A bucket holds this many seconds' worth of tokens (at least one): the burst."""
MAX_WAIT: Final = 1.0
"""The longest a delivery waits in memory for a token; longer, and it is deferred in
the outbox until one is due."""
JITTER: Final = 0.2
"""A wait for a token is stretched by up to this share of it, at random: endpoints
limited alike and started together do not keep sending (and timing out) at the same
instants, in bursts that delay every other endpoint's deliveries on the event loop."""
_UNAVAILABLE_WAIT: Final = 1.0  # the store failed: try its bucket again after this
_PRUNE_EVERY: Final = 60.0  # seconds between two sweeps of endpoints gone idle


def capacity(rate: float) -> float:
    """How many tokens an endpoint's bucket holds at most (its burst)."""
    return max(1.0, rate * CAPACITY_SECONDS)


def batch(rate: float) -> int:
    """How many tokens a process takes from the shared bucket at a time."""
    return max(1, min(math.floor(capacity(rate)), math.ceil(rate * BATCH_SECONDS)))


@dataclass(frozen=True)
class RateLimits:
    """Requests per second allowed to each endpoint (``scheme://host:port``).

    ``default``: the limit of every endpoint not in ``endpoints`` (None: no limit);
    ``endpoints``: limits of particular endpoints, keyed by origin (``https://h``,
    ``http://h:8080``; the default port may be left out). A limit applies to every HTTP
    attempt to the endpoint, retries included."""

    default: float | None = None
    endpoints: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default is not None and not (math.isfinite(self.default) and self.default > 0):
            raise ValueError(f"default: {self.default!r} is not a positive number of requests/s")
        normalised: dict[str, float] = {}
        for origin, rate in self.endpoints.items():
            key = parse_endpoint(origin)  # a ValueError naming what is expected
            if isinstance(rate, bool) or not (
                isinstance(rate, int | float) and math.isfinite(rate) and rate > 0
            ):
                raise ValueError(f"{origin}: {rate!r} is not a positive number of requests/s")
            normalised[key] = float(rate)
        object.__setattr__(self, "endpoints", normalised)

    def rate_for(self, endpoint: str) -> float | None:
        return self.endpoints.get(endpoint, self.default)

    @property
    def any(self) -> bool:
        return self.default is not None or bool(self.endpoints)


@dataclass(slots=True)
class _Local:
    tokens: int = 0
    expires: float = 0.0  # time.monotonic(): the tokens held are dropped then
    next_at: float = 0.0  # time.monotonic(): the shared bucket has no token before then
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EndpointRateLimiter:
    """Hands out tokens for the endpoints with a limit, taken from the store's shared
    buckets in batches (see the module docstring for how close that keeps to it)."""

    def __init__(self, store: Store, limits: RateLimits) -> None:
        self.store = store
        self.limits = limits
        self._local: dict[str, _Local] = {}
        self._pruned_at = time.monotonic()

    def limited(self, endpoint: str) -> bool:
        return self.limits.rate_for(endpoint) is not None

    async def acquire(self, endpoint: str, deadline: float) -> float | None:
        """Take a token to send one request to ``endpoint`` now, waiting for one until
        ``deadline`` (``time.monotonic()``) at most. None: taken (or no limit). Else the
        epoch time from which one may be had: the caller defers its delivery to then."""
        rate = self.limits.rate_for(endpoint)
        if rate is None:
            return None
        local = self._local.get(endpoint)
        if local is None:
            local = self._local[endpoint] = _Local()
        while True:
            async with local.lock:
                now = time.monotonic()
                if local.tokens > 0 and now < local.expires:
                    local.tokens -= 1
                    return None
                local.tokens = 0
                if now >= local.next_at:
                    try:
                        granted, wait = await self.store.take_tokens(
                            endpoint, rate=rate, capacity=capacity(rate), want=batch(rate)
                        )
                        wait *= 1.0 + JITTER * random.random()  # (see JITTER)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        # No token without the shared bucket: sending anyway could exceed
                        # the limit many times over (every replica would).
                        log.warning(
                            "rate limit of %s: the store's bucket could not be read (%s); "
                            "holding its deliveries for %g s",
                            endpoint,
                            exc,
                            _UNAVAILABLE_WAIT,
                        )
                        granted, wait = 0, _UNAVAILABLE_WAIT
                    now = time.monotonic()
                    if granted:
                        local.tokens = granted - 1
                        local.expires = now + HOLD
                        return None
                    local.next_at = now + wait
                at = local.next_at
            if at > deadline:
                return time.time() + (at - time.monotonic())
            await asyncio.sleep(max(0.0, at - time.monotonic()))

    def waiting_endpoints(self) -> set[str]:
        """Endpoints with no token to hand out before a time still to come: a claim
        skips them (their deliveries would only wait)."""
        now = time.monotonic()
        if now - self._pruned_at > _PRUNE_EVERY:
            self._pruned_at = now
            self.forget_idle()
        return {
            endpoint
            for endpoint, local in self._local.items()
            if now < local.next_at and not (local.tokens > 0 and now < local.expires)
        }

    def next_token_at(self) -> float | None:
        """When (epoch seconds) the first of :meth:`waiting_endpoints` has a token again."""
        now = time.monotonic()
        times = [local.next_at for local in self._local.values() if now < local.next_at]
        return time.time() + (min(times) - now) if times else None

    def forget_idle(self) -> None:
        """Drop the state of endpoints neither holding tokens nor waiting for any."""
        now = time.monotonic()
        for endpoint in [
            e
            for e, local in self._local.items()
            if now >= local.next_at and now >= local.expires and not local.lock.locked()
        ]:
            del self._local[endpoint]
