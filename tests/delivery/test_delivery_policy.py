"""Retry classification, breakers and redaction: small pure pieces, tested directly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from a2a_push.delivery.health import BreakerState, EndpointHealth
from a2a_push.delivery.ratelimit import JITTER, EndpointRateLimiter, RateLimits
from a2a_push.delivery.retry import RetryPolicy, Verdict, classify, parse_retry_after
from a2a_push.delivery.transport import AddressRefused, ConnectError, HTTPResult, RequestTimeout
from a2a_push.store import StoredConfig
from a2a_push.store.sqlite import SQLiteStore


def result(status: int, **headers: str) -> HTTPResult:
    return HTTPResult(status=status, headers=headers, body=b"", elapsed=0.01)


def wait_of(at: float | None) -> float | None:
    """How long (whole seconds) to wait until ``at``, an epoch time a breaker handed out:
    the breakers run on the monotonic clock (the ``now`` the tests give), and say when
    to try again in epoch seconds."""
    return None if at is None else round(at - time.time())


@pytest.mark.parametrize("status", [408, 425, 429, 500, 501, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert classify(result(status)) is Verdict.RETRY


@pytest.mark.parametrize("status", [301, 302, 307, 400, 401, 403, 404, 409, 422])
def test_permanent_failures(status: int) -> None:
    assert classify(result(status)) is Verdict.DEAD


def test_gone_and_success() -> None:
    assert classify(result(410)) is Verdict.GONE
    assert classify(result(204)) is Verdict.DELIVERED


def test_transport_errors() -> None:
    assert classify(ConnectError("refused")) is Verdict.RETRY
    assert classify(RequestTimeout("slow")) is Verdict.RETRY
    assert classify(AddressRefused("private")) is Verdict.DEAD


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "7"}) == 7
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470) == 10
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Tokyo"])
@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:00 GMT",  # IMF-fixdate
        "Wednesday, 21-Oct-15 07:28:00 GMT",  # RFC 850
        "Wed Oct 21 07:28:00 2015",  # asctime: GMT too, though it does not say so
        "Wed, 21 Oct 2015 07:28:00 -0000",
    ],
)
def test_every_http_date_form_is_gmt_whatever_the_local_zone(
    monkeypatch: pytest.MonkeyPatch, zone: str, value: str
) -> None:
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        assert parse_retry_after({"Retry-After": value}, now=1445412470) == 10
    finally:
        monkeypatch.undo()
        time.tzset()


def test_durable_delays_are_jittered_across_the_whole_band() -> None:
    # +-20 %: retries of many deliveries that failed together spread out, rather than
    # coming back all at once. (Random, but 200 draws all landing in one half of the
    # band has a chance of 2**-199.)
    policy = RetryPolicy()
    base = policy.schedule[1]
    delays = [policy.durable_delay(1) for _ in range(200)]
    assert all(d is not None and base * 0.8 <= d <= base * 1.2 for d in delays)
    assert len(set(delays)) > 150
    assert any(d < base for d in delays if d is not None)
    assert any(d > base for d in delays if d is not None)
    assert max(d for d in delays if d is not None) - min(d for d in delays if d is not None) > (
        0.2 * base
    )


def test_default_schedule_reads_like_the_design() -> None:
    policy = RetryPolicy()
    assert policy.describe() == "5 s, 5 m, 30 m, 2 h, 5 h, 10 h, 10 h"
    for rounds, base in enumerate(policy.schedule):
        delay = policy.durable_delay(rounds)
        assert delay is not None and base * 0.8 <= delay <= base * 1.2
    assert policy.durable_delay(len(policy.schedule)) is None  # exhausted: dead-letter
    # Retry-After: clamped to its bounds, and never sooner than the schedule's step.
    assert policy.durable_delay(0, retry_after=99999) == policy.retry_after_bounds[1]
    first = policy.durable_delay(0, retry_after=0)
    assert first is not None and 4.0 <= first <= 6.0  # the schedule's 5 s, not 1 s
    later = policy.durable_delay(3, retry_after=1)
    assert later is not None and later >= 2 * 3600 * 0.8  # 2 h, not 1 s
    assert policy.durable_delay(0, retry_after=60) == 60
    assert parse_retry_after({"Retry-After": "\u00b2"}) is None  # a digit to isdigit()


def test_breaker_opens_probes_and_closes() -> None:
    h = EndpointHealth(failure_threshold=2, cool_down=10, probe_timeout=30)
    e = "http://x:80"
    h.record_failure(e, now=0)
    assert h.admit(e, now=0) is None  # below the threshold
    h.record_failure(e, now=0)
    assert h.state(e, now=1) is BreakerState.OPEN
    assert wait_of(h.admit(e, now=1)) == 9
    assert e in h.open_endpoints(now=1)
    assert h.admit(e, now=10) is None  # the probe
    assert h.admit(e, now=11) is not None  # one probe at a time
    h.record_success(e)
    assert h.state(e, now=12) is BreakerState.CLOSED and h.admit(e, now=12) is None


def test_a_lost_probe_does_not_wedge_the_breaker() -> None:
    h = EndpointHealth(failure_threshold=1, cool_down=10, probe_timeout=30)
    e = "http://x:80"
    h.record_failure(e, now=0)
    assert h.admit(e, now=10) is None  # probe sent, never reports back
    assert h.admit(e, now=20) is not None
    assert h.admit(e, now=41) is None  # a new probe after probe_timeout


def test_a_probe_that_was_not_sent_gives_its_turn_back() -> None:
    h = EndpointHealth(failure_threshold=1, cool_down=10, probe_timeout=30)
    e = "http://x:80"
    h.record_failure(e, now=0)
    assert h.admit(e, now=10) is None  # the probe, which finds no endpoint slot
    h.withdraw(e, admitted=10)
    assert h.state(e, now=11) is BreakerState.HALF_OPEN  # neither a success nor a failure
    assert h.admit(e, now=11) is None  # the next probe, at once
    h.withdraw(e, admitted=10)  # not the probe any more: changes nothing
    assert h.admit(e, now=12) is not None


def test_breakers_run_on_the_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # NTP steps the wall clock an hour ahead, then an hour back: the cool-down neither
    # ends early nor lasts an hour longer. The time to try again is still epoch seconds,
    # on the wall clock as it now reads.
    h = EndpointHealth(failure_threshold=1, cool_down=60)
    e = "http://x:80"
    h.record_failure(e)
    wall = time.time()
    for step in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda step=step: wall + step)
        assert h.state(e) is BreakerState.OPEN and h.open_endpoints() == {e}
        retry_at, reopen = h.admit(e), h.next_reopen()
        assert retry_at is not None and 50 < retry_at - (wall + step) <= 60
        assert reopen is not None and 50 < reopen - (wall + step) <= 60


def test_failures_of_requests_sent_before_the_breaker_opened_do_not_lengthen_it() -> None:
    # per_endpoint requests in flight fail together: the breaker opens once, for the
    # first cool-down, not for the longest one.
    h = EndpointHealth(failure_threshold=5, cool_down=10, max_cool_down=600)
    e = "http://x:80"
    for _ in range(16):
        h.record_failure(e, now=100)
    assert wait_of(h.admit(e, now=101)) == 9
    h.record_failure(e, now=105)  # a straggler, while open
    assert wait_of(h.admit(e, now=106)) == 4
    assert h.admit(e, now=110) is None  # the probe
    h.record_failure(e, now=111)
    assert wait_of(h.admit(e, now=112)) == 19  # the second cool-down: 20 s, from 111


def test_failed_probe_reopens_with_a_longer_cool_down() -> None:
    h = EndpointHealth(failure_threshold=1, cool_down=10, max_cool_down=25)
    e = "http://x:80"
    h.record_failure(e, now=0)
    assert h.admit(e, now=10) is None
    h.record_failure(e, now=10)
    assert wait_of(h.admit(e, now=11)) == 19  # 20 s now, from 10
    h.record_failure(e, now=30)
    assert wait_of(h.admit(e, now=31)) == 24  # capped at 25 s, from 30


def test_endpoints_that_stopped_failing_long_ago_are_forgotten() -> None:
    """Breakers of endpoints no longer tried (clients gone for good) do not pile up: the
    claim loop walks every entry on each claim."""
    h = EndpointHealth(failure_threshold=1, cool_down=10, max_cool_down=25, probe_timeout=30)
    gone = [f"http://gone-{i}.example:80" for i in range(1000)]
    for e in gone:
        h.record_failure(e, now=1000)
    still = "http://still-failing.example:80"
    h.record_failure(still, now=1000)
    assert len(h.states(now=1001)) == 1001
    assert h.admit(still, now=1010) is None  # its probe, which fails again
    h.record_failure(still, now=1100)
    # 25 s open at most + 30 s for a probe: quiet for longer than that, forgotten.
    assert set(h.states(now=1115)) == {still}
    assert h.open_endpoints(now=1115) == {still}  # open until 1120
    assert h.admit(gone[0], now=1115) is None
    # A probe let through long after the last failure keeps its breaker until it reports.
    late = "http://late-probe.example:80"
    h.record_failure(late, now=1115)
    assert h.admit(late, now=1700) is None  # the probe
    assert h.admit(late, now=1702) is not None  # not forgotten: the others still wait


def test_secrets_stay_out_of_reprs() -> None:
    c = StoredConfig(
        key="k",
        id="c",
        task_id="t",
        owner="o",
        url="https://x/h",
        token="tok-SECRET",
        auth_scheme="Bearer",
        auth_credentials="cred-SECRET",
    )
    assert "SECRET" not in repr(c) and "SECRET" not in str(c)


def test_an_epoch_time_given_as_a_breakers_now_is_refused() -> None:
    # Its times are time.monotonic() readings: time.time() would open it for decades.
    h = EndpointHealth(failure_threshold=1, cool_down=60)
    with pytest.raises(ValueError, match=r"time\.monotonic\(\)"):
        h.record_failure("http://x:80", time.time())
    h.record_failure("http://x:80")
    with pytest.raises(ValueError, match=r"time\.monotonic\(\)"):
        h.admit("http://x:80", time.time())
    assert h.admit("http://x:80", time.monotonic() + 61) is None  # the probe


@pytest.mark.parametrize(
    "value",
    [
        "Mon, 01 Jan 99999999999 00:00:00 GMT",  # a year datetime cannot hold
        "Mon, 01 Jan 2026 99999999999:00:00 GMT",
        "Mon, 01 Jan 2026 00:00:00 +99999999999",
    ],
)
def test_a_retry_after_date_beyond_what_datetime_holds_is_ignored(value: str) -> None:
    # It raised OverflowError, and the delivery was dead-lettered as an internal error
    # instead of retried on the schedule.
    assert parse_retry_after({"Retry-After": value}, now=0) is None


async def test_endpoints_refused_a_token_together_wait_for_the_next_one_apart(
    tmp_path: Path,
) -> None:
    """Twenty endpoints limited to 1/s, each refused its second token at the same moment:
    each is told to wait at least until its bucket has a token again, and at most 20 %
    longer (JITTER), and not all for the same time, so that they do not go on sending
    (and timing out) in step."""
    store = SQLiteStore(tmp_path / "a2a-push.db")
    await store.open()
    try:
        endpoints = [f"http://127.0.0.1:{9000 + n}" for n in range(20)]
        limiter = EndpointRateLimiter(store, RateLimits(endpoints=dict.fromkeys(endpoints, 1.0)))
        for endpoint in endpoints:  # the bucket's one token (its burst), taken at once
            assert await limiter.acquire(endpoint, time.monotonic() + 5) is None
        before = time.time()
        # A deadline already passed: the answer is when a token may be had, at once.
        due = [await limiter.acquire(e, time.monotonic()) for e in endpoints]
        after = time.time()
    finally:
        await store.close()
    assert all(d is not None for d in due)
    waits = [d - before for d in due if d is not None]
    # The bucket refills one token per second; its wait is at most stretched by JITTER.
    assert all(0.5 <= w <= (1.0 + JITTER) + (after - before) for w in waits), waits
    assert max(waits) - min(waits) > 0.01, waits  # apart: 20 draws within 10 ms is ~0
