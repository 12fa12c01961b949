"""The gateway's delivery policy: retry schedule, maximum delivery age, per-endpoint
in-flight cap and rate limit, from the file, the environment and flags; bad values stop
the start naming the setting; the rate limit holds across two replicas on PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from pathlib import Path

import pytest

from a2a_push.cli import main as cli_main
from a2a_push.delivery.ratelimit import RateLimits
from a2a_push.gateway.settings import load_gateway_settings
from a2a_push.store import DeliveryFilter, DeliveryState
from a2a_push.testing import WebhookSink

from ..gateway_support import AGENT_KEY, gateway_settings, running_gateway
from .test_gateway_postgres import _create_configs, _delivered_by, _publish, _wait, cluster

pytestmark = pytest.mark.timeout(180)


def test_policy_settings_from_file_environment_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        'retry_schedule = ["10s", 60, "1h"]\nmax_delivery_age = "2d"\n'
        "max_in_flight_per_endpoint = 4\nrate_limit = 50\n"
        '[endpoint_rate_limits]\n"https://slow.example" = 2\n"http://10.0.0.1:8080" = 0.5\n'
    )
    settings = load_gateway_settings(config_file=config, environ={})
    assert settings.retry_schedule == (10.0, 60.0, 3600.0)
    assert settings.max_delivery_age == 2 * 86400.0
    assert settings.max_in_flight_per_endpoint == 4
    assert settings.rate_limits == RateLimits(
        50.0, {"https://slow.example:443": 2.0, "http://10.0.0.1:8080": 0.5}
    )
    # The environment overrides the file, flags override both.
    environ = {
        "A2A_GATEWAY_RETRY_SCHEDULE": "1s, 2m",
        "A2A_GATEWAY_MAX_DELIVERY_AGE": "36h",
        "A2A_GATEWAY_MAX_IN_FLIGHT_PER_ENDPOINT": "8",
        "A2A_GATEWAY_RATE_LIMIT": "12.5",
        "A2A_GATEWAY_ENDPOINT_RATE_LIMITS": "https://a.example=5,http://b.example:81=1",
    }
    settings = load_gateway_settings(config_file=config, environ=environ)
    assert settings.retry_schedule == (1.0, 120.0)
    assert settings.max_delivery_age == 36 * 3600.0
    assert settings.max_in_flight_per_endpoint == 8
    assert settings.rate_limits == RateLimits(
        12.5, {"https://a.example:443": 5.0, "http://b.example:81": 1.0}
    )
    settings = load_gateway_settings(
        config_file=config,
        environ=environ,
        overrides={
            "retry_schedule": "30s",
            "max_delivery_age": "90m",
            "max_in_flight_per_endpoint": 2,
            "rate_limit": 3.0,
            "endpoint_rate_limits": ["https://c.example=7"],
        },
    )
    assert settings.retry_schedule == (30.0,)
    assert settings.max_delivery_age == 5400.0
    assert settings.max_in_flight_per_endpoint == 2
    assert settings.rate_limits == RateLimits(3.0, {"https://c.example:443": 7.0})
    # Unset: the dispatcher's defaults, no age limit, no rate limit.
    default = load_gateway_settings(environ={})
    assert default.max_delivery_age is None and not default.rate_limits.any
    assert default.max_in_flight_per_endpoint == 16


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--retry-schedule", "5s,soon"],
            "setting retry_schedule (from --retry-schedule): 'soon' is not a duration",
        ),
        (["--retry-schedule", "5s,0"], "setting retry_schedule (from --retry-schedule): '0'"),
        (
            ["--max-delivery-age=-1h"],
            "setting max_delivery_age (from --max-delivery-age): '-1h' is not a duration",
        ),
        (
            ["--max-in-flight-per-endpoint", "0"],
            "setting max_in_flight_per_endpoint (from --max-in-flight-per-endpoint): Input "
            "should be greater than or equal to 1",
        ),
        (
            ["--max-in-flight-per-endpoint", "1000"],
            "setting max_in_flight_per_endpoint (from --max-in-flight-per-endpoint): Input "
            "should be less than or equal to 256",
        ),
        (["--rate-limit", "0"], "setting rate_limit (from --rate-limit): Input should be greater"),
        (
            ["--rate-limit", "inf"],
            "setting rate_limit (from --rate-limit): Input should be a finite",
        ),
        (
            ["--endpoint-rate-limit", "ftp://h=5"],
            "setting endpoint_rate_limits (from --endpoint-rate-limit): 'ftp://h' is not an "
            "http(s) origin",
        ),
        (
            ["--endpoint-rate-limit", "https://h=fast"],
            "setting endpoint_rate_limits (from --endpoint-rate-limit): https://h: 'fast' is "
            "not a number of requests per second",
        ),
        (
            ["--endpoint-rate-limit", "https://h=-2"],
            "setting endpoint_rate_limits (from --endpoint-rate-limit): https://h: -2.0 is "
            "not a positive number",
        ),
        (
            ["--endpoint-rate-limit", "https://h"],
            "setting endpoint_rate_limits (from --endpoint-rate-limit): 'https://h': write "
            "ORIGIN=REQUESTS_PER_SECOND",
        ),
    ],
)
def test_a_bad_policy_value_stops_the_start_naming_the_setting(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith("A2A_GATEWAY_"):
            monkeypatch.delenv(name)
    code = cli_main(
        [
            "gateway",
            "--agent-key",
            f"agent-a:{AGENT_KEY}",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
            *argv,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"a2a-push: error: {expected}"), err
    assert "Traceback" not in err
    assert not (tmp_path / "data").exists()  # stopped before anything was created


def test_a_bad_policy_value_from_the_environment_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A2A_GATEWAY_RETRY_SCHEDULE", "5x")
    code = cli_main(["gateway", "--agent-key", f"agent-a:{AGENT_KEY}", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "setting retry_schedule (from A2A_GATEWAY_RETRY_SCHEDULE): '5x' is not a" in err


async def test_the_gateway_sends_by_its_schedule_and_dead_letters_at_the_maximum_age(
    tmp_path: Path,
) -> None:
    """A failing endpoint: retried at the configured waits (1 s, then 1 s), and
    dead-lettered once the delivery is max_delivery_age (3 s) old, well before its
    schedule (ten retries) would be used up."""
    settings = gateway_settings(
        str(tmp_path / "gw.db"),
        quick_attempts=1,
        retry_schedule="1s," * 9 + "1s",
        max_delivery_age="3s",
        request_timeout=1,
        lease_seconds=5,
    )
    async with WebhookSink() as sink, running_gateway(settings) as (url, gateway):
        sink.set_default("/fail", 500)
        await _create_configs(url, sink, ["fail"])
        started = time.time()
        await _publish([url], ["fail"], 1)
        store = gateway.notifier.store
        deadline = time.monotonic() + 20
        dead = []
        while time.monotonic() < deadline:
            dead = [
                d
                for d in await store.list_deliveries(DeliveryFilter(state=DeliveryState.DEAD))
                if d.task_id == "fail"
            ]
            if dead:
                break
            await asyncio.sleep(0.1)
        assert dead, "not dead-lettered"
        hooks = sink.on("/fail")
        # Attempts about a second apart (the schedule, jittered 20 %), none after 3 s
        # of age (plus the attempt's own time).
        gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(hooks)]
        assert 2 <= len(hooks) <= 5, gaps
        # The last retry is moved up to the maximum age, so it may follow the one
        # before it sooner than the schedule says; it is the attempt at 3 s of age.
        assert all(0.7 <= g <= 1.6 for g in gaps[:-1]), gaps
        assert 0 < gaps[-1] <= 1.6, gaps
        assert 2.8 <= hooks[-1].received_at - started < 4.5
        assert dead[0].last_error is not None
        assert dead[0].last_error.startswith("older than max_delivery_age (3 s)")


LIMIT = 20.0  # requests per second, both replicas together
WINDOW = 10.0


async def test_two_replicas_share_one_rate_limit_to_an_endpoint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two gateway processes on one PostgreSQL database, a backlog for one endpoint
    rate-limited to 20 requests/s: over any 10 s window the endpoint receives at most the
    documented bound, limit x (10 s + 1 s), not the 2x two separate buckets would let
    through; and the pace stays near the limit (both replicas send)."""
    tasks = [f"rl-{uuid.uuid4().hex[:8]}" for _ in range(40)]
    events = 8  # 320 deliveries: 16 s at the limit
    async with (
        WebhookSink() as sink,
        cluster(A2A_GATEWAY_RATE_LIMIT=str(LIMIT)) as (_db, replicas),
    ):
        a = await replicas.add()
        b = await replicas.add()
        await _create_configs(a.url, sink, tasks)
        await _publish([a.url, b.url], tasks, events)
        await _wait(sink, tasks, events, 90)
        times = sorted(h.received_at for t in tasks for h in sink.on(f"/{t}"))
        assert len(times) >= len(tasks) * events
        assert await _delivered_by(a.url) > 0 and await _delivered_by(b.url) > 0
    busiest = max(sum(1 for t in times[i:] if t < start + WINDOW) for i, start in enumerate(times))
    span = times[-1] - times[0]
    overall = (len(times) - 1) / span
    bound = LIMIT * (WINDOW + 1.0)
    with capsys.disabled():
        print(
            f"\n  rate limit {LIMIT:g}/s, two replicas: busiest {WINDOW:g} s window "
            f"{busiest} requests ({busiest / WINDOW:.2f}/s, {busiest / (LIMIT * WINDOW):.1%} "
            f"of the limit; bound {bound:g}); overall {overall:.2f}/s over {span:.1f} s"
        )
    assert busiest <= bound + 2  # (+ what a database round trip lets through)
    assert overall >= 0.6 * LIMIT  # paced at the limit, not far below it


def test_rate_limits_refuse_what_is_not_a_rate() -> None:
    with pytest.raises(ValueError, match="not a positive number"):
        RateLimits(0)
    with pytest.raises(ValueError, match="not an http"):
        RateLimits(endpoints={"hooks.example": 1})
    with pytest.raises(ValueError, match="not a positive number"):
        RateLimits(endpoints={"https://h": True})  # type: ignore[dict-item]
    assert RateLimits(1, {"https://h": 2}).rate_for("https://h:443") == 2
    assert RateLimits(1).rate_for("https://other:443") == 1
