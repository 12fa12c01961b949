"""Operational events end to end: real sinks on 127.0.0.1, real SQLite and PostgreSQL.

Every event type reaches the operator endpoint as a signed webhook (verified as a
receiver would: JWT against the JWKS, Standard Webhooks HMAC) and the callbacks; an
operator endpoint that is down gets every event later, in order; one that fails never
queues events about itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from tenacity import wait_fixed

from a2a_push.delivery.health import EndpointHealth
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.errors import InvalidConfigError
from a2a_push.events import EVENT_KIND, OPERATOR_TASK, EventType, OperationalEvent
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.signing import KeySet, verify_webhook_jwt
from a2a_push.store import DeliveryFilter, DeliveryState, Store
from a2a_push.testing import ReceivedWebhook, WebhookSink

from ..conftest import make_store

ISSUER = "http://agent.test"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FAST = RetryPolicy(quick_attempts=2, quick_wait=wait_fixed(0.02), schedule=(0.2, 0.2, 0.2))
# Retries for a while: an operator endpoint down for eight requests gets them all.
PATIENT = RetryPolicy(quick_attempts=2, quick_wait=wait_fixed(0.02), schedule=(0.2,) * 10)

MakeNotifier = Callable[..., Awaitable[PushNotifier]]


def status(task_id: str, state: TaskState = TaskState.WORKING) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id="ctx", status=TaskStatus(state=state))


def task(task_id: str) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.SUBMITTED))


@pytest.fixture
async def ops() -> AsyncIterator[WebhookSink]:
    """The operator's endpoint: a server of its own (its own breaker)."""
    async with WebhookSink() as s:
        yield s


@pytest.fixture(params=["sqlite", "postgres"])
async def make_notifier(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeNotifier]:
    async with contextlib.AsyncExitStack() as running:  # each stopped at the end

        async def make(**kw: Any) -> PushNotifier:
            kw.setdefault("address_policy", AddressPolicy(allow_loopback=True))
            kw.setdefault("retry", FAST)
            kw.setdefault("health", EndpointHealth(failure_threshold=2, cool_down=0.2))
            store: Store = make_store(request.param, tmp_path)
            return await running.enter_async_context(PushNotifier(store, issuer=ISSUER, **kw))

        yield make


def collect(n: PushNotifier) -> list[OperationalEvent]:
    got: list[OperationalEvent] = []
    n.on_event(got.append)
    return got


def verified(hook: ReceivedWebhook, jwks: dict[str, Any], url: str) -> dict[str, Any]:
    """The event body, once both signatures check out as a receiver checks them."""
    jwt = hook.header("X-A2A-Signature") or ""
    claims = verify_webhook_jwt(jwt, jwks=jwks, body=hook.body, audience=url, issuer=ISSUER)
    assert claims["taskId"] == OPERATOR_TASK
    Webhook(WHSEC).verify(hook.body, {k.lower(): v for k, v in hook.headers.items()})
    body: dict[str, Any] = json.loads(hook.body)
    assert claims["jti"] == hook.header("webhook-id")
    return body


def delivered_events(ops: WebhookSink, jwks: dict[str, Any]) -> list[dict[str, Any]]:
    return [verified(h, jwks, ops.url("/ops")) for h in ops.on("/ops") if h.status == 200]


async def subscribe_and_publish(n: PushNotifier, task_id: str, url: str, owner: str) -> None:
    """Register config ``c-`` + the task's name after ``t-`` for ``url``, and publish one
    event of the task."""
    config = TaskPushNotificationConfig(id="c-" + task_id.removeprefix("t-"), url=url)
    await n.register_config(config, owner=owner, task_id=task_id)
    await n.publish(task_id, status(task_id))


async def until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


async def test_every_event_type_reaches_the_operator_signed_and_the_callbacks(
    make_notifier: MakeNotifier, ops: WebhookSink, tmp_path: Path
) -> None:
    keys = KeySet.load_or_create(tmp_path / "keys")
    async with WebhookSink() as gone, WebhookSink() as flaky, WebhookSink() as failing:
        n = await make_notifier(
            operator_url=ops.url("/ops"),
            operator_token=WHSEC,
            keyset=keys,
            key_reload_interval=0.05,
            retry=PATIENT,
        )
        got = collect(n)
        # 410 Gone: the config is disabled, its delivery dead-lettered.
        gone.set_default("/hook", 410)
        await subscribe_and_publish(n, "t-gone", gone.url("/hook?secret=s3cr3t"), "alice")
        # An endpoint down for a while: its breaker opens, then closes on its recovery.
        flaky.set_default("/hook", 503)
        await subscribe_and_publish(n, "t-flaky", flaky.url("/hook"), "bob")
        await until(lambda: any(e.type == "endpoint.breaker_opened" for e in got))
        flaky.set_default("/hook", 200)
        await until(lambda: any(e.type == "endpoint.breaker_closed" for e in got))
        # An endpoint that keeps failing: the failure clock runs out and disables it
        # (a clock this short from here on only: the endpoint above was spared it).
        n.dispatcher.options = dataclasses.replace(n.dispatcher.options, disable_after=0.3)
        failing.set_default("/hook", 500)
        await subscribe_and_publish(n, "t-failing", failing.url("/hook"), "carol")
        await until(lambda: sum(e.type == "config.disabled" for e in got) == 2)
        # A rotation made by another process (a2a-push keys rotate), then the old key
        # leaving the set once its grace period is over.
        other = KeySet.load_or_create(tmp_path / "keys")
        old = other.active.kid
        old_jwks = n.jwks()["keys"]  # as a receiver caches it
        new = other.rotate()
        await until(lambda: any(e.type == "key.rotated" for e in got))
        other.prune(now=time.time() + other.grace_period + 1)
        await until(lambda: any(e.type == "key.retired" for e in got))

        types = {e.type for e in got}
        assert types == {t.value for t in EventType}, types
        jwks = {"keys": n.jwks()["keys"] + old_jwks}
        await until(lambda: len(delivered_events(ops, jwks)) == len(got))
        bodies = delivered_events(ops, jwks)
    # The operator got each event the callbacks got, in the same order, as emitted.
    assert [b["id"] for b in bodies] == [e.id for e in got]
    assert bodies == [e.to_json() for e in got]
    by_type: dict[str, dict[str, Any]] = {}
    for b in bodies:
        by_type.setdefault(b["type"], b)  # the first of each type
    assert all(b["version"] == 1 and b["time"].endswith("Z") for b in bodies)
    disabled = [b["data"] for b in bodies if b["type"] == "config.disabled"]
    assert {d["configId"]: d["reason"] for d in disabled} == {
        "c-gone": "gone",
        "c-failing": "failing",
    }
    gone_event = next(d for d in disabled if d["configId"] == "c-gone")
    assert gone_event["endpoint"] == gone.url("/")[:-1]
    assert gone_event["owner"] == "alice" and gone_event["taskId"] == "t-gone"
    dead = by_type["delivery.dead"]["data"]
    assert dead["taskId"] == "t-gone" and dead["lastStatus"] == 410
    opened = by_type["endpoint.breaker_opened"]["data"]
    assert opened["endpoint"] == flaky.url("/")[:-1] and opened["consecutiveFailures"] >= 2
    assert by_type["endpoint.breaker_closed"]["data"] == {"endpoint": flaky.url("/")[:-1]}
    assert by_type["key.rotated"]["data"] == {"kid": new.kid, "alg": new.alg, "previousKid": old}
    assert by_type["key.retired"]["data"] == {"kid": old, "alg": new.alg}
    # Never a webhook URL's path or query, nor a token.
    raw = b"".join(h.body for h in ops.on("/ops"))
    assert b"s3cr3t" not in raw and b"/hook" not in raw and WHSEC.encode() not in raw


async def test_an_operator_outage_loses_nothing_and_keeps_the_order(
    make_notifier: MakeNotifier, ops: WebhookSink, sink: WebhookSink
) -> None:
    ops.script("/ops", [503] * 8)  # down for the first eight requests
    n = await make_notifier(
        operator_url=ops.url("/ops"),
        operator_token=WHSEC,
        retry=PATIENT,
        health=EndpointHealth(failure_threshold=2, cool_down=0.2, max_cool_down=0.3),
    )
    got = collect(n)
    sink.set_default("/refuse", 400)  # each delivery is dead-lettered at once
    for i in range(6):
        await subscribe_and_publish(n, f"t{i}", sink.url("/refuse"), "o")
    await until(lambda: len(delivered_events(ops, n.jwks())) >= 6)
    bodies = delivered_events(ops, n.jwks())
    # Each dead letter once, in the order they happened (the callbacks' order).
    assert sorted(b["data"]["taskId"] for b in bodies) == [f"t{i}" for i in range(6)]
    assert [b["id"] for b in bodies] == [e.id for e in got if e.type == "delivery.dead"]
    assert sum(h.status == 503 for h in ops.on("/ops")) == 8
    # Every operator delivery was delivered in the end: nothing dead, nothing pending.
    lane = await n.store.list_deliveries(DeliveryFilter(task_id=OPERATOR_TASK))
    lane = await n.wait_settled([d.id for d in lane])
    assert {d.state for d in lane} == {DeliveryState.DELIVERED} and len(lane) == 6
    assert {d.kind for d in lane} == {EVENT_KIND}


@pytest.mark.parametrize("answer", [400, 410])
async def test_a_failing_operator_endpoint_queues_no_events_about_itself(
    make_notifier: MakeNotifier, ops: WebhookSink, sink: WebhookSink, answer: int
) -> None:
    ops.set_default("/ops", answer)
    n = await make_notifier(operator_url=ops.url("/ops"))
    got = collect(n)
    sink.set_default("/refuse", 400)
    await subscribe_and_publish(n, "t1", sink.url("/refuse"), "o")
    # The task's dead letter is queued for the operator, whose endpoint refuses it:
    # that dead letter (and, for 410, the operator config disabled) reach the
    # callbacks, and nothing more is queued for the operator.
    expected = 3 if answer == 410 else 2
    await until(lambda: len(got) >= expected)
    await asyncio.sleep(0.5)
    assert len(got) == expected, [e.type for e in got]
    assert [e.data["taskId"] for e in got[:2]] == ["t1", OPERATOR_TASK]
    if answer == 410:
        assert got[2].type == "config.disabled" and got[2].data["taskId"] == OPERATOR_TASK
    lane = await n.store.list_deliveries(DeliveryFilter(task_id=OPERATOR_TASK))
    assert len(lane) == 1 and lane[0].state is DeliveryState.DEAD
    assert len(ops.on("/ops")) == 1


async def test_the_operator_endpoints_own_breaker_is_not_sent_to_it(
    make_notifier: MakeNotifier, ops: WebhookSink, sink: WebhookSink
) -> None:
    ops.script("/ops", [503] * 4)
    n = await make_notifier(operator_url=ops.url("/ops"), retry=PATIENT)
    got = collect(n)
    sink.set_default("/refuse", 400)
    await subscribe_and_publish(n, "t1", sink.url("/refuse"), "o")
    await until(lambda: len(delivered_events_unsigned(ops)) == 1)
    await asyncio.sleep(0.3)
    types = [e.type for e in got]
    assert types == ["delivery.dead", "endpoint.breaker_opened", "endpoint.breaker_closed"]
    assert got[1].data["endpoint"] == ops.url("/")[:-1]
    assert [b["type"] for b in delivered_events_unsigned(ops)] == ["delivery.dead"]


def delivered_events_unsigned(ops: WebhookSink) -> list[dict[str, Any]]:
    return [json.loads(h.body) for h in ops.on("/ops") if h.status == 200]


async def test_a_callback_that_raises_never_breaks_delivery(
    make_notifier: MakeNotifier, sink: WebhookSink, caplog: pytest.LogCaptureFixture
) -> None:
    n = await make_notifier()  # no operator URL: callbacks only
    seen: list[str] = []
    awaited: list[str] = []

    def broken(event: OperationalEvent) -> None:
        raise RuntimeError("callback bug")

    async def slow(event: OperationalEvent) -> None:
        await asyncio.sleep(0.01)
        awaited.append(event.type)

    async def broken_too(event: OperationalEvent) -> None:
        raise RuntimeError("async callback bug")

    n.on_event(broken)
    n.on_event(broken_too)
    n.on_event(lambda e: seen.append(e.type))
    remove = n.on_event(slow)
    sink.set_default("/refuse", 400)
    for t in ("t1", "t2"):
        await n.register_config(
            TaskPushNotificationConfig(url=sink.url("/refuse" if t == "t1" else "/ok")),
            owner="o",
            task_id=t,
            task=task(t),
        )
    await until(lambda: seen == ["delivery.dead"] and awaited == ["delivery.dead"])
    (ok,) = await n.wait_settled(
        [d.id for d in await n.store.list_deliveries(DeliveryFilter(task_id="t2"))]
    )
    assert ok.state is DeliveryState.DELIVERED
    assert "an operational event callback failed on delivery.dead" in caplog.text
    remove()
    await n.publish("t1", status("t1"))
    await until(lambda: seen == ["delivery.dead"] * 2)
    assert awaited == ["delivery.dead"]


async def test_the_operator_task_is_reserved_and_the_operator_url_checked(
    make_notifier: MakeNotifier, ops: WebhookSink
) -> None:
    n = await make_notifier(operator_url=ops.url("/ops"))
    with pytest.raises(ValueError, match="reserved"):
        await n.publish(OPERATOR_TASK, status(OPERATOR_TASK))
    with pytest.raises(InvalidConfigError, match="reserved"):
        await n.register_config(
            TaskPushNotificationConfig(url=ops.url("/mine")), owner="o", task_id=OPERATOR_TASK
        )
    # The SSRF policy applies to the operator URL as to any webhook URL.
    with pytest.raises(ValueError, match="operator_url"):
        PushNotifier(n.store, issuer=ISSUER, operator_url=ops.url("/ops"))
    with pytest.raises(ValueError, match="operator_token"):
        PushNotifier(
            n.store,
            issuer=ISSUER,
            address_policy=AddressPolicy(allow_loopback=True),
            operator_url=ops.url("/ops"),
            operator_token="whsec_!!!",
        )
    with pytest.raises(ValueError, match="operator_url"):
        PushNotifier(n.store, issuer=ISSUER, operator_token=WHSEC)
