"""PushNotifier end to end: real aiohttp sinks on 127.0.0.1, real SQLite files."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from standardwebhooks.webhooks import Webhook
from tenacity import wait_fixed

from a2a_push.delivery.dispatcher import CHAIN_LIMIT, DispatcherOptions
from a2a_push.delivery.health import BreakerState, EndpointHealth, endpoint_of
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts
from a2a_push.errors import (
    InvalidConfigError,
    NotifierNotStartedError,
    StoreUnavailableError,
    TooManyConfigsError,
    UnsafeURLError,
)
from a2a_push.notifier import TRUNCATED_FLAG, PushNotifier, Retention
from a2a_push.protocol.constants import A2A_MEDIA_TYPE, webhook_media_type
from a2a_push.protocol.types import (
    Artifact,
    AuthenticationInfo,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.signing import verify_webhook_jwt
from a2a_push.store import (
    DeliveryFilter,
    DeliveryState,
    MemoryStore,
    SQLiteStore,
    Store,
    StoredConfig,
    StoreOptions,
    generate_key,
)
from a2a_push.testing import SinkResponse, WebhookSink

FAST = RetryPolicy(quick_attempts=3, quick_wait=wait_fixed(0.05), schedule=(0.3, 0.3, 0.3))
ISSUER = "http://agent.test"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

MakeNotifier = Callable[..., Awaitable[PushNotifier]]


def status(task_id: str, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id,
        context_id="ctx",
        status=TaskStatus(state=state),
        metadata={"n": text} if text is not None else None,
    )


def task(task_id: str = "t1", state: TaskState = TaskState.SUBMITTED) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=state))


def hook(sink: WebhookSink, path: str = "/hook", **kw: Any) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(url=sink.url(path), **kw)


@pytest.fixture
async def make_notifier(tmp_path: Path) -> AsyncIterator[MakeNotifier]:
    made: list[PushNotifier] = []

    async def make(store: Store | None = None, **kw: Any) -> PushNotifier:
        kw.setdefault("address_policy", AddressPolicy(allow_loopback=True))
        kw.setdefault("retry", FAST)
        n = PushNotifier(store or SQLiteStore(tmp_path / "push.db"), issuer=ISSUER, **kw)
        await n.start()
        made.append(n)
        return n

    yield make
    for n in made:
        await n.stop()


def seqs(sink: WebhookSink, path: str = "/hook") -> list[int]:
    out = []
    for r in sink.on(path):
        token = r.header("X-A2A-Signature")
        assert token is not None
        payload = token.split(".")[1]
        claims = json.loads(
            __import__("base64").urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        )
        out.append(claims["seq"])
    return out


async def wait_until(predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def delivery_state(n: PushNotifier, delivery_id: str) -> DeliveryState | None:
    d = await n.store.get_delivery(delivery_id)
    return d.state if d else None


# ---- the webhook request ------------------------------------------------------------------


async def test_publish_without_configs_is_a_no_op(make_notifier: MakeNotifier) -> None:
    n = await make_notifier()
    result = await n.publish("nobody", status("nobody", TaskState.WORKING))
    assert result.delivery_ids == [] and result.seq == 0


async def test_webhook_is_signed_exactly_as_the_protocol_says(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    cfg = await n.register_config(
        hook(sink, id="c1", token="opaque-token"), owner="o", task_id="t1"
    )
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(1)
    (r,) = sink.received
    assert r.header("Content-Type") == "application/a2a+json"
    assert r.header("A2A-Version") == "1.0"
    assert r.header("X-A2A-Notification-Token") == "opaque-token"
    assert r.header("webhook-signature") is None
    webhook_id = r.header("webhook-id")
    assert webhook_id and webhook_id.startswith("msg_")
    assert abs(int(r.header("webhook-timestamp") or 0) - time.time()) < 5
    jwt = r.header("X-A2A-Signature")
    assert r.header("Authorization") == f"Bearer {jwt}"
    claims = verify_webhook_jwt(
        jwt or "", jwks=n.jwks(), body=r.body, audience=sink.url("/hook"), issuer=ISSUER
    )
    assert claims["jti"] == webhook_id
    assert claims["taskId"] == "t1" and claims["configId"] == cfg.id == "c1"
    assert claims["seq"] == 1 and claims["exp"] - claims["iat"] == 300
    assert json.loads(r.body) == {
        "statusUpdate": {
            "taskId": "t1",
            "contextId": "ctx",
            "status": {"state": "TASK_STATE_WORKING"},
        }
    }


async def test_credentials_go_in_authorization_and_whsec_tokens_sign(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    await n.register_config(
        hook(
            sink, "/auth", authentication=AuthenticationInfo(scheme="Basic", credentials="dXNlcg==")
        ),
        owner="o",
        task_id="t1",
    )
    await n.register_config(hook(sink, "/sw", token=WHSEC), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(2)
    (auth,) = sink.on("/auth")
    assert auth.header("Authorization") == "Basic dXNlcg=="
    assert auth.header("X-A2A-Signature")  # still signed
    (sw,) = sink.on("/sw")
    assert sw.header("X-A2A-Notification-Token") is None  # the secret never travels
    Webhook(WHSEC).verify(sw.body, {k.lower(): v for k, v in sw.headers.items()})


async def test_first_webhook_to_a_new_config_is_a_task_snapshot(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    await n.register_config(hook(sink), owner="o", task_id="t1", task=task("t1", TaskState.WORKING))
    await n.publish("t1", status("t1", TaskState.COMPLETED))
    await sink.wait_for(2)
    first, second = (json.loads(r.body) for r in sink.received)
    assert first["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert second["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seqs(sink) == [1, 2]


async def test_task_provider_supplies_the_snapshot(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    async def provider(task_id: str) -> Task | None:
        return task(task_id, TaskState.INPUT_REQUIRED)

    n = await make_notifier(task_provider=provider)
    await n.register_config(hook(sink), owner="o", task_id="t9")
    await sink.wait_for(1)
    assert json.loads(sink.received[0].body)["task"]["id"] == "t9"


async def test_v03_configs_get_the_v03_task(make_notifier: MakeNotifier, sink: WebhookSink) -> None:
    n = await make_notifier()
    await n.register_config(hook(sink), owner="o", task_id="t1", protocol_version="0.3")
    snapshot = task("t1", TaskState.WORKING)
    await n.publish("t1", status("t1", TaskState.WORKING), task=snapshot)
    await sink.wait_for(1)
    (r,) = sink.received
    assert r.header("A2A-Version") == "0.3"
    body = json.loads(r.body)
    assert body["kind"] == "task" and body["status"]["state"] == "working"


async def test_each_config_gets_the_media_type_of_its_protocol_version(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # v0.3 senders and receivers speak application/json; a v0.3 config got
    # application/a2a+json, which v0.3 receivers may refuse (415).
    n = await make_notifier()
    await n.register_config(hook(sink, "/v10"), owner="o", task_id="t1")
    await n.register_config(hook(sink, "/v03"), owner="o", task_id="t1", protocol_version="0.3")
    await n.publish("t1", status("t1", TaskState.WORKING), task=task("t1", TaskState.WORKING))
    await sink.wait_for(2)
    [v10] = sink.on("/v10")
    [v03] = sink.on("/v03")
    assert (v10.header("Content-Type"), v10.header("A2A-Version")) == (A2A_MEDIA_TYPE, "1.0")
    assert (v03.header("Content-Type"), v03.header("A2A-Version")) == ("application/json", "0.3")
    assert webhook_media_type("0.3") == "application/json"
    assert webhook_media_type("1.0") == A2A_MEDIA_TYPE


async def test_oversized_events_are_sent_slimmed_and_flagged(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier(max_payload_bytes=2048)
    await n.register_config(hook(sink), owner="o", task_id="t1")
    big = TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="ctx",
        artifact=Artifact(artifact_id="a1", parts=[Part(text="x" * 10_000)]),
    )
    await n.publish("t1", big)
    await sink.wait_for(1)
    body = json.loads(sink.received[0].body)
    assert len(sink.received[0].body) < 2048
    assert body["artifactUpdate"]["metadata"][TRUNCATED_FLAG] is True
    assert body["artifactUpdate"]["artifact"]["artifactId"] == "a1"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_slimmed_artifact_update_leaves_out_a_large_name_too(
    make_notifier: MakeNotifier, sink: WebhookSink, version: str
) -> None:
    # Slimmed, it kept the name: 300 kB over a 2 kB limit.
    n = await make_notifier(max_payload_bytes=2048)
    await n.register_config(hook(sink), owner="o", task_id="t1", protocol_version=version)
    small_name = TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="ctx",
        artifact=Artifact(artifact_id="a1", name="report", parts=[Part(text="x" * 10_000)]),
    )
    large_name = TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="ctx",
        artifact=Artifact(artifact_id="a2", name="n" * 300_000, parts=[Part(text="x")]),
    )
    await n.publish("t1", small_name)
    await n.publish("t1", large_name)
    await sink.wait_for(2)
    first, second = (r.body for r in sink.received)
    assert len(first) < 2048 and b'"report"' in first  # a small name stays
    assert len(second) < 2048 and b"nnnn" not in second and TRUNCATED_FLAG.encode() in second


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_an_event_that_cannot_be_rendered_queues_nothing(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path, backend: str
) -> None:
    # A lone surrogate in metadata passes the models but no UTF-8 body can carry it.
    # With a v1.0 and a v0.3 config, the memory store kept the first body's delivery and
    # the seq it had taken; a publish tried again then sent a duplicate.
    store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "x.db")
    n = await make_notifier(store)
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.register_config(hook(sink, "/v03"), owner="o", task_id="t1", protocol_version="0.3")
    bad = TaskStatusUpdateEvent(
        task_id="t1",
        context_id="ctx",
        status=TaskStatus(state=TaskState.WORKING),
        metadata={"note": "a\ud800b"},
    )
    with pytest.raises(ValueError, match="cannot be sent as JSON"):
        await n.publish("t1", bad)
    assert (await n.store.stats()).pending == 0
    result = await n.publish("t1", status("t1", TaskState.WORKING))
    assert result.seq == 1


async def test_event_for_another_task_is_refused(make_notifier: MakeNotifier) -> None:
    n = await make_notifier()
    with pytest.raises(ValueError, match="not 't2'"):
        await n.publish("t2", status("t1", TaskState.WORKING))


async def test_a_snapshot_of_another_task_is_never_sent(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    async def wrong_provider(task_id: str) -> Task | None:
        return task("someone-elses-task", TaskState.COMPLETED)

    n = await make_notifier()
    with pytest.raises(ValueError, match=r"from task= is not the Task 't1'.*someone-elses"):
        await n.register_config(hook(sink), owner="o", task_id="t1", task=task("someone-elses"))
    p = await make_notifier(task_provider=wrong_provider)
    with pytest.raises(ValueError, match="from task_provider is not the Task 't2'"):
        await p.register_config(hook(sink), owner="o", task_id="t2")
    with pytest.raises(ValueError, match="task= must be the Task 't1'"):
        await n.publish("t1", status("t1", TaskState.WORKING), task=task("t9"))
    # Nothing was stored or sent.
    assert await n.list_configs("t1", "o") == ([], None)
    assert await p.list_configs("t2", "o") == ([], None)
    await asyncio.sleep(0.2)
    assert sink.received == []


async def test_wrong_argument_types_get_errors_that_say_what_to_pass(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    with pytest.raises(TypeError, match=r"TaskPushNotificationConfig, not dict.*model_validate"):
        await n.register_config({"url": sink.url("/hook")}, owner="o", task_id="t1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="owner must be a non-empty str"):
        await n.register_config(hook(sink), owner=None, task_id="t1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="owner must be a non-empty str"):
        await n.register_config(hook(sink), owner="", task_id="t1")
    with pytest.raises(TypeError, match=r"event must be a Task.*not dict.*model_validate"):
        await n.publish("t1", {"statusUpdate": {}})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task_id must be a non-empty str"):
        await n.publish(status("t1", TaskState.WORKING), "t1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"a list of keys.*encryption_keys=\[key\]"):
        PushNotifier.open("memory://", issuer=ISSUER, encryption_keys=generate_key())  # type: ignore[arg-type]


@pytest.mark.parametrize("database", ["memory://", "sqlite"])
async def test_a_notifier_used_before_start_or_after_stop_says_so(
    database: str, tmp_path: Path, sink: WebhookSink, aiohttp_client: Any
) -> None:
    from aiohttp import web

    url = str(tmp_path / "push.db") if database == "sqlite" else database
    n = PushNotifier.open(url, issuer=ISSUER, address_policy=AddressPolicy(allow_loopback=True))
    says = r"not started: run it in `async with notifier:` or call `await notifier.start\(\)`"
    with pytest.raises(NotifierNotStartedError, match=says):
        await n.register_config(hook(sink), owner="o", task_id="t1")
    with pytest.raises(NotifierNotStartedError, match=says):
        await n.publish("t1", status("t1", TaskState.WORKING))
    app = web.Application()
    n.add_routes(app)
    client = await aiohttp_client(app)
    async with n:
        await n.register_config(hook(sink), owner="o", task_id="t1")
        await n.publish("t1", status("t1", TaskState.WORKING))
        await sink.wait_for(1)
    for call in (
        n.publish("t1", status("t1", TaskState.COMPLETED)),
        n.list_configs("t1", "o"),
        n.dead_letters(),
    ):
        with pytest.raises(NotifierNotStartedError):
            await call
    # A scrape after stop() still answers, with the counters so far.
    response = await client.get("/metrics")
    assert response.status == 200
    assert "a2a_push_events_published_total" in await response.text()


async def test_the_jwks_route_is_mounted_once_and_the_error_says_how(
    make_notifier: MakeNotifier, aiohttp_client: Any
) -> None:
    from aiohttp import web

    from a2a_push.server import PushConfigService, mount

    async def no_tasks(task_id: str, owner: str) -> Task | None:
        return None

    n = await make_notifier()
    service = PushConfigService(n, task_lookup=no_tasks)
    app = web.Application()
    mount(app, service)
    with pytest.raises(
        ValueError, match=r"already serves GET /\.well-known/jwks\.json.*jwks=False"
    ):
        n.add_routes(app)
    n.add_routes(app, jwks=False)  # the metrics only
    other = web.Application()
    n.add_routes(other)
    with pytest.raises(
        ValueError, match=r"already serves GET /\.well-known/jwks\.json.*jwks=False"
    ):
        mount(other, service)
    mount(other, service, jwks=False)
    for served in (app, other):
        client = await aiohttp_client(served)
        assert (await (await client.get("/.well-known/jwks.json")).json()) == n.jwks()
        assert (await client.get("/metrics")).status == 200


# ---- order ----------------------------------------------------------------------------------


async def test_per_task_order_holds_under_concurrent_publishes(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    tasks = [f"t{i}" for i in range(6)]
    for t in tasks:
        await n.register_config(hook(sink, f"/{t}"), owner="o", task_id=t)
        sink.script(f"/{t}", [SinkResponse(200, delay=0.01 * (i % 3)) for i in range(30)])
    per_task = 25

    async def publish_all(t: str) -> None:
        for i in range(per_task):
            await n.publish(t, status(t, TaskState.WORKING, text=str(i)))

    await asyncio.gather(*(publish_all(t) for t in tasks))
    await sink.wait_for(per_task * len(tasks), timeout=30)
    for t in tasks:
        got = [json.loads(r.body)["statusUpdate"]["metadata"]["n"] for r in sink.on(f"/{t}")]
        assert got == [str(i) for i in range(per_task)]
        assert seqs(sink, f"/{t}") == list(range(1, per_task + 1))


async def test_a_slow_endpoint_does_not_delay_others(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    sink.set_default("/slow", SinkResponse(200, delay=3))
    for i in range(12):
        await n.register_config(hook(sink, "/slow"), owner="o", task_id=f"slow{i}")
        await n.publish(f"slow{i}", status(f"slow{i}", TaskState.WORKING))
    async with WebhookSink() as fast:  # another endpoint (host:port)
        await n.register_config(hook(fast, "/fast"), owner="o", task_id="fast")
        # Every slow request is in flight (held 3 s by the sink) ...
        await wait_until(lambda: asyncio.sleep(0, n.dispatcher.in_flight == 12), timeout=5)
        await n.publish("fast", status("fast", TaskState.WORKING))
        await fast.wait_for(1, timeout=5)
        # ... and the fast webhook did not wait for any of them.
        assert sink.on("/slow") == []


async def test_a_registration_snapshot_counts_as_an_enqueued_delivery(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    await n.register_config(hook(sink), owner="o", task_id="t1", task=task("t1"))
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(2)
    enqueued = n.metrics.registry.get_sample_value("a2a_push_deliveries_enqueued_total")
    assert enqueued == 2  # the snapshot and the update


async def test_a_repeated_publish_is_counted_once_and_its_key_expires_with_the_window(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier(retention=Retention(idempotency_keys=0.5, interval=0))
    await n.register_config(hook(sink), owner="o", task_id="t1")
    first = await n.publish("t1", status("t1", TaskState.WORKING), idempotency_key="k")
    again = await n.publish("t1", status("t1", TaskState.WORKING), idempotency_key="k")
    assert again == first
    metrics = n.metrics.registry
    assert metrics.get_sample_value("a2a_push_deliveries_enqueued_total") == 1
    published = {"kind": "statusUpdate"}
    assert metrics.get_sample_value("a2a_push_events_published_total", published) == 1
    await asyncio.sleep(0.6)  # past the window; no purge ran (interval=0)
    later = await n.publish("t1", status("t1", TaskState.COMPLETED), idempotency_key="k")
    assert later.seq == first.seq + 1
    await sink.wait_for(2)


async def test_claimed_work_waits_for_its_endpoint_instead_of_going_back(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # Many lanes to one slow endpoint with a small cap: the dispatcher claims no more
    # than the endpoint can take, so none of it is handed back to the outbox (each
    # hand-back costs a write and a later claim). claim_batch=2: back-to-back claims.
    n = await make_notifier(dispatcher=DispatcherOptions(per_endpoint=2, claim_batch=2))
    sink.set_default("/slow", SinkResponse(200, delay=0.02))
    tasks = [f"t{i}" for i in range(30)]
    for t in tasks:
        await n.register_config(hook(sink, "/slow"), owner="o", task_id=t)
    for round_ in range(2):
        await asyncio.gather(
            *(n.publish(t, status(t, TaskState.WORKING, str(round_))) for t in tasks)
        )
    await sink.wait_for(60, timeout=20, path="/slow")
    await n.dispatcher.wait_idle(5)
    samples = n.metrics.registry
    delivered = samples.get_sample_value("a2a_push_deliveries_total", {"outcome": "delivered"})
    deferred = samples.get_sample_value("a2a_push_deliveries_total", {"outcome": "deferred"})
    assert delivered == 60
    assert not deferred


async def test_an_endpoint_down_for_a_while_gets_everything_in_order_once_back(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    from a2a_push.delivery.health import EndpointHealth

    n = await make_notifier(
        retry=RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.2,) * 100),
        health=EndpointHealth(failure_threshold=3, cool_down=0.2, max_cool_down=0.5),
    )
    sink.set_default("/down", SinkResponse(503))
    tasks, per_task = [f"t{i}" for i in range(5)], 8
    for t in tasks:
        await n.register_config(hook(sink, "/down"), owner="o", task_id=t)
    for i in range(per_task):
        await asyncio.gather(*(n.publish(t, status(t, TaskState.WORKING, str(i))) for t in tasks))
    await sink.wait_for(15, timeout=10)  # failing for a while: retries, the breaker opened
    assert all(r.status == 503 for r in sink.received)
    sink.set_default("/down", SinkResponse(200))
    await wait_until(
        lambda: asyncio.sleep(0, sum(r.status == 200 for r in sink.received) >= 40), timeout=30
    )
    for t in tasks:
        numbers = [
            int(json.loads(r.body)["statusUpdate"]["metadata"]["n"])
            for r in sink.received
            if r.status == 200 and json.loads(r.body)["statusUpdate"]["taskId"] == t
        ]
        assert numbers == list(range(per_task)), (t, numbers)
    assert not await n.store.list_deliveries(DeliveryFilter(state=DeliveryState.DEAD))


async def test_busy_tasks_take_turns_with_others_at_a_saturated_endpoint(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # Two tasks with a deep backlog fill the endpoint's two slots, each chaining through
    # its own lane. A third task's event, queued after both backlogs, must not wait for
    # them to drain: chains hand their lane back after CHAIN_LIMIT events, and a lane
    # handed back queues behind the lanes that were already waiting. Everything is
    # queued before the dispatcher starts, so no machine is too slow to test this.
    n = await make_notifier(dispatcher=DispatcherOptions(per_endpoint=2), run_dispatcher=False)
    sink.set_default("/busy", SinkResponse(200, delay=0.01))
    for t in ("hot1", "hot2", "cold"):
        await n.register_config(hook(sink, "/busy"), owner="o", task_id=t)
    backlog = 150
    for i in range(backlog):
        await asyncio.gather(
            *(n.publish(t, status(t, TaskState.WORKING, str(i))) for t in ("hot1", "hot2"))
        )
    await n.publish("cold", status("cold", TaskState.WORKING, "cold"))
    n.dispatcher.start()

    def cold_seen() -> bool:
        return any(json.loads(r.body)["statusUpdate"]["taskId"] == "cold" for r in sink.on("/busy"))

    await wait_until(lambda: asyncio.sleep(0, cold_seen()), timeout=10)
    hot_before_cold = len(sink.on("/busy")) - 1
    # At most a chain per slot (plus a claim's worth in flight) before the lanes rotate.
    bound = 2 * (CHAIN_LIMIT + 2)
    assert hot_before_cold <= bound < 2 * backlog, f"the cold task waited for {hot_before_cold}"
    await sink.wait_for(2 * backlog + 1, timeout=20, path="/busy")
    for t in ("hot1", "hot2"):  # and each busy task's order held throughout
        numbers = [
            int(json.loads(r.body)["statusUpdate"]["metadata"]["n"])
            for r in sink.on("/busy")
            if json.loads(r.body)["statusUpdate"]["taskId"] == t
        ]
        assert numbers == list(range(backlog))


class _CountingClaims(SQLiteStore):
    """Counts claim transactions."""

    claims = 0

    async def claim_due(self, *args: Any, **kw: Any) -> Any:
        self.claims += 1
        return await super().claim_due(*args, **kw)


async def test_a_saturated_endpoint_does_not_make_the_dispatcher_spin(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path
) -> None:
    # Five lanes due to an endpoint that takes one request at a time and answers slowly:
    # the claim skips it, and the dispatcher must then wait, not claim in a loop.
    store = _CountingClaims(tmp_path / "counted.db")
    n = await make_notifier(store, dispatcher=DispatcherOptions(per_endpoint=1))
    sink.set_default("/slow", SinkResponse(200, delay=0.4))
    for i in range(5):
        await n.register_config(hook(sink, "/slow"), owner="o", task_id=f"s{i}")
        await n.publish(f"s{i}", status(f"s{i}", TaskState.WORKING))
    await asyncio.sleep(0.1)
    before = store.claims
    await asyncio.sleep(1.0)
    assert store.claims - before < 20, f"{store.claims - before} claims in 1 s"
    await sink.wait_for(5, timeout=10, path="/slow")


class _OutcomesFail(SQLiteStore):
    """Recording outcomes fails, as while the database is unreachable."""

    async def complete_and_claim_next(self, *args: Any, **kw: Any) -> Any:
        raise StoreUnavailableError("the database is down")


async def test_an_outcome_that_cannot_be_recorded_is_not_dead_lettered(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path
) -> None:
    n = await make_notifier(_OutcomesFail(tmp_path / "down.db"))
    await n.register_config(hook(sink), owner="o", task_id="t1")
    result = await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(1, timeout=5)
    await n.dispatcher.wait_idle(5)
    # Still pending (leased): it comes back when the lease ends, it is not dead.
    assert await delivery_state(n, result.delivery_ids[0]) is DeliveryState.PENDING


def _assert_snapshot_first_and_in_order(sink: WebhookSink, paths: list[str]) -> None:
    """Every config's first webhook is the task snapshot, and its seq never goes back."""
    for path in paths:
        got = sink.on(path)
        assert got, f"{path}: nothing received"
        kinds = [next(iter(json.loads(r.body))) for r in got]
        assert kinds[0] == "task", f"{path}: first webhook was {kinds}, seq {seqs(sink, path)}"
        assert "task" not in kinds[1:], f"{path}: a snapshot after events: {kinds}"
        numbers = seqs(sink, path)
        assert all(a < b for a, b in itertools.pairwise(numbers)), f"{path}: seq {numbers}"


class _PublishesRightAfterPut(SQLiteStore):
    """Lands a publish for the task the moment a config is stored: the window in which
    the old ``register_config`` (store the config, then queue its snapshot) let one in."""

    notifier: PushNotifier | None = None

    async def put_config(self, config: StoredConfig, **kw: Any) -> StoredConfig:
        stored = await super().put_config(config, **kw)
        if self.notifier is not None:
            event = status(config.task_id, TaskState.WORKING, text="racing")
            await self.notifier.publish(config.task_id, event)
        return stored


async def test_a_publish_landing_during_registration_never_precedes_the_snapshot(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path
) -> None:
    store = _PublishesRightAfterPut(tmp_path / "race.db")
    n = await make_notifier(store)
    store.notifier = n
    for i in range(3):
        await n.register_config(
            hook(sink, f"/c{i}"), owner="o", task_id="t1", task=task("t1", TaskState.SUBMITTED)
        )
    # c0: snapshot, racing x3; c1: snapshot, racing x2; c2: snapshot, racing.
    await sink.wait_for(3 + 3 + 2 + 1)
    _assert_snapshot_first_and_in_order(sink, [f"/c{i}" for i in range(3)])
    assert seqs(sink, "/c0") == [1, 2, 4, 6]
    assert seqs(sink, "/c2") == [5, 6]


async def test_registering_under_concurrent_publishes_keeps_the_snapshot_first(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path
) -> None:
    """Found under load: with publishes for a task streaming in while configs register
    for it, a config got an event first and the (older) snapshot after it, seq going up
    but the content going back. Group commit puts the racing ops in one batch."""
    n = await make_notifier(
        SQLiteStore(tmp_path / "load.db", StoreOptions(max_configs_per_task=32))
    )
    configs = [f"/c{i}" for i in range(24)]
    registered = asyncio.Event()
    results: list[int] = []

    async def register(path: str) -> None:
        await n.register_config(
            hook(sink, path), owner="o", task_id="t1", task=task("t1", TaskState.SUBMITTED)
        )

    async def publish_until_registered() -> None:
        i = 0
        while not registered.is_set() or i < 5:
            result = await n.publish("t1", status("t1", TaskState.WORKING, text=str(i)))
            results.append(len(result.delivery_ids))
            i += 1

    async def register_all() -> None:
        await asyncio.gather(*(register(p) for p in configs))
        registered.set()

    await asyncio.gather(register_all(), *(publish_until_registered() for _ in range(4)))
    await sink.wait_for(len(configs) + sum(results), timeout=30)
    _assert_snapshot_first_and_in_order(sink, configs)


# ---- retries and failures ---------------------------------------------------------------------


async def test_retry_then_success(make_notifier: MakeNotifier, sink: WebhookSink) -> None:
    n = await make_notifier()
    sink.script("/hook", [503, 500, 200])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await sink.wait_for(3)
    await wait_until(lambda: _is(n, delivery_id, DeliveryState.DELIVERED))
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.attempts == 3 and d.last_status == 200
    assert {r.header("webhook-id") for r in sink.received} == {delivery_id}  # stable id


async def test_retryable_failures_are_rescheduled_durably(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    sink.script("/hook", [503, 503, 503, 502, 200])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await sink.wait_for(3)
    await wait_until(lambda: _rounds(n, delivery_id, 1))
    d = await n.store.get_delivery(delivery_id)
    assert (
        d is not None and d.state is DeliveryState.PENDING and d.next_attempt_at > time.time() - 1
    )
    await wait_until(lambda: _is(n, delivery_id, DeliveryState.DELIVERED))
    assert sink.count == 5


async def test_retry_after_is_honoured(make_notifier: MakeNotifier, sink: WebhookSink) -> None:
    n = await make_notifier()
    sink.script("/hook", [SinkResponse(429, headers={"Retry-After": "1"}), 200])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(2)
    gap = sink.received[1].received_at - sink.received[0].received_at
    assert gap >= 0.95


async def test_long_retry_after_moves_the_wait_to_the_outbox(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    sink.script("/hook", [SinkResponse(503, headers={"Retry-After": "120"})])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _rounds(n, delivery_id, 1))
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.attempts == 1  # no quick retry against the server's wish
    assert 110 < d.next_attempt_at - time.time() <= 120


async def test_410_disables_the_config(make_notifier: MakeNotifier, sink: WebhookSink) -> None:
    n = await make_notifier()
    sink.set_default("/hook", SinkResponse(410))
    cfg = await n.register_config(hook(sink), owner="o", task_id="t1")
    first = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids[0]
    await wait_until(lambda: _is(n, first, DeliveryState.DEAD))
    stored = await n.store.get_config_by_key(cfg.key)
    assert stored is not None and not stored.enabled and "410" in (stored.disabled_reason or "")
    assert (await n.publish("t1", status("t1", TaskState.COMPLETED))).delivery_ids == []
    assert sink.count == 1


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422, 301, 302])
async def test_other_4xx_and_3xx_are_dead_lettered_at_once(
    make_notifier: MakeNotifier, sink: WebhookSink, code: int
) -> None:
    n = await make_notifier()
    sink.script("/hook", [SinkResponse(code, headers={"Location": sink.url("/elsewhere")})])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    dead = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids[0]
    nxt = (await n.publish("t1", status("t1", TaskState.COMPLETED))).delivery_ids[0]
    await wait_until(lambda: _is(n, nxt, DeliveryState.DELIVERED))
    d = await n.store.get_delivery(dead)
    assert d is not None and d.state is DeliveryState.DEAD and d.attempts == 1
    assert d.last_error == f"HTTP {code}"
    assert sink.on("/elsewhere") == []  # redirects are never followed
    # Dead letters are listed and can be replayed.
    assert [x.id for x in await n.dead_letters()] == [dead]
    assert await n.replay([dead]) == 1
    await wait_until(lambda: _is(n, dead, DeliveryState.DELIVERED))
    assert [r.header("webhook-id") for r in sink.on("/hook")] == [dead, nxt, dead]


async def test_timeouts_are_retried(make_notifier: MakeNotifier, sink: WebhookSink) -> None:
    n = await make_notifier(timeouts=Timeouts(connect=1, total=0.3))
    sink.script("/hook", [SinkResponse(200, delay=1.0)])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _is(n, delivery_id, DeliveryState.DELIVERED))
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.attempts == 2


async def test_connection_refused_is_retried(
    make_notifier: MakeNotifier, unused_tcp_port: int
) -> None:
    n = await make_notifier()
    url = f"http://127.0.0.1:{unused_tcp_port}/hook"
    await n.register_config(TaskPushNotificationConfig(url=url), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _rounds(n, delivery_id, 1))
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.attempts == 3 and "ConnectError" in (d.last_error or "")


async def test_retries_exhausted_dead_letters(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    policy = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.1, 0.1))
    n = await make_notifier(retry=policy)
    sink.set_default("/hook", 500)
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _is(n, delivery_id, DeliveryState.DEAD))
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.attempts == 3 and "retries exhausted" in (d.last_error or "")


async def test_a_config_failing_for_too_long_is_disabled(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    policy = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.2,) * 20)
    n = await make_notifier(retry=policy, dispatcher=DispatcherOptions(disable_after=0.5))
    sink.set_default("/hook", 503)
    cfg = await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))

    async def disabled() -> bool:
        c = await n.store.get_config_by_key(cfg.key)
        return c is not None and not c.enabled

    await wait_until(disabled)
    c = await n.store.get_config_by_key(cfg.key)
    assert c is not None and "failing" in (c.disabled_reason or "")


async def test_work_coming_back_after_a_dead_letter_starts_a_new_failure_clock(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # The first event's retries run out; the config is quiet for longer than
    # disable_after; then one 503. It used to disable the config at once (the clock of
    # the old outage was still running), with no retry.
    policy = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.2,))
    n = await make_notifier(retry=policy, dispatcher=DispatcherOptions(disable_after=1.0))
    cfg = await n.register_config(hook(sink), owner="o", task_id="t1")
    sink.script("/hook", [503, 503])
    (first,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _is(n, first, DeliveryState.DEAD))
    c = await n.store.get_config_by_key(cfg.key)
    assert c is not None and c.failing_since is None
    await asyncio.sleep(1.2)
    sink.script("/hook", [503])  # then 200s
    (second,) = (await n.publish("t1", status("t1", TaskState.WORKING, "2"))).delivery_ids
    await wait_until(lambda: _is(n, second, DeliveryState.DELIVERED))
    c = await n.store.get_config_by_key(cfg.key)
    assert c is not None and c.enabled


async def test_quick_attempts_stop_before_the_claims_lease_would_end(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # The lease check assumes pauses of at most quick_retry_after_max; a quick_wait of
    # 2.5 s made a claim outlive its 4 s lease, and the lane was claimed again while it
    # was still being sent: event 1 arrived again after event 2.
    policy = RetryPolicy(
        quick_attempts=3,
        quick_wait=wait_fixed(2.5),
        quick_retry_after_max=0.1,
        schedule=(0.2,) * 3,
    )
    n = await make_notifier(
        retry=policy,
        timeouts=Timeouts(connect=0.5, total=0.5),
        dispatcher=DispatcherOptions(lease_seconds=4, drain_timeout=1),
    )
    sink.script("/hook", [503, 503, 503])
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (first,) = (await n.publish("t1", status("t1", TaskState.WORKING, "1"))).delivery_ids
    (second,) = (await n.publish("t1", status("t1", TaskState.WORKING, "2"))).delivery_ids
    await wait_until(lambda: _is(n, second, DeliveryState.DELIVERED), timeout=20)
    await asyncio.sleep(3.0)  # the first claim's late attempt would land meanwhile
    # Two quick attempts (a third would have ended past the lease), then the schedule.
    assert seqs(sink) == [1, 1, 1, 1, 2]
    d = await n.store.get_delivery(first)
    assert d is not None and d.state is DeliveryState.DELIVERED and d.attempts == 4


async def test_breaker_defers_work_for_a_failing_endpoint(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    from a2a_push.delivery.health import EndpointHealth

    policy = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.05,) * 50)
    health = EndpointHealth(failure_threshold=3, cool_down=60)
    n = await make_notifier(retry=policy, health=health)
    sink.set_default("/hook", 503)
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(3)
    await asyncio.sleep(0.5)
    assert sink.count == 3  # the breaker is open: no more requests for a minute
    assert health.state(f"http://127.0.0.1:{sink.port}") == "open"


# ---- bad configs and SSRF -----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:127.0.0.1]/hook",
        "http://localhost/hook",  # a host name that resolves to loopback
    ],
)
async def test_private_addresses_are_refused_without_the_allowlist(
    make_notifier: MakeNotifier, url: str
) -> None:
    n = await make_notifier(address_policy=AddressPolicy())
    with pytest.raises(UnsafeURLError) as err:
        await n.register_config(TaskPushNotificationConfig(url=url), owner="o", task_id="t1")
    assert err.value.field == "url"
    page, _ = await n.list_configs("t1", "o")
    assert page == []


async def test_refused_at_connect_time_too(tmp_path: Path, sink: WebhookSink) -> None:
    db = tmp_path / "push.db"
    permissive = PushNotifier(
        SQLiteStore(db),
        issuer=ISSUER,
        address_policy=AddressPolicy(allow_loopback=True),
        run_dispatcher=False,
    )
    async with permissive:
        await permissive.register_config(hook(sink), owner="o", task_id="t1")
        (delivery_id,) = (
            await permissive.publish("t1", status("t1", TaskState.WORKING))
        ).delivery_ids
    strict = PushNotifier(SQLiteStore(db), issuer=ISSUER, address_policy=AddressPolicy())
    async with strict:
        await wait_until(lambda: _is(strict, delivery_id, DeliveryState.DEAD))
        d = await strict.store.get_delivery(delivery_id)
        assert d is not None and "AddressRefused" in (d.last_error or "")
    assert sink.count == 0


@pytest.mark.parametrize(
    ("url", "field"),
    [("ftp://example.com/x", "url"), ("http://user:pw@example.com/", "url"), ("not a url", "url")],
)
async def test_invalid_urls_name_the_field(
    make_notifier: MakeNotifier, url: str, field: str
) -> None:
    n = await make_notifier()
    with pytest.raises(InvalidConfigError) as err:
        await n.register_config(TaskPushNotificationConfig(url=url), owner="o", task_id="t1")
    assert err.value.field == field


def test_crlf_in_header_bound_values_is_refused() -> None:
    from pydantic import ValidationError

    for kwargs in (
        {"token": "a\r\nX-Evil: 1"},
        {"authentication": {"scheme": "Bearer", "credentials": "x\ny"}},
        {"authentication": {"scheme": "Bea\rrer"}},
    ):
        with pytest.raises(ValidationError) as err:
            TaskPushNotificationConfig.model_validate({"url": "https://example.com/h", **kwargs})
        assert "\r" not in str(err.value) and "\n" not in str(err.value).split("\n")[1]


async def test_per_task_cap(make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path) -> None:
    n = await make_notifier(SQLiteStore(tmp_path / "cap.db", StoreOptions(max_configs_per_task=2)))
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.register_config(hook(sink), owner="o", task_id="t1")
    with pytest.raises(TooManyConfigsError) as err:
        await n.register_config(hook(sink), owner="o", task_id="t1")
    assert err.value.field == "taskId"


async def test_a_broken_row_is_dead_lettered_and_the_dispatcher_goes_on(
    tmp_path: Path, sink: WebhookSink
) -> None:
    from a2a_push.store import generate_key

    db = tmp_path / "push.db"
    opts = StoreOptions(encryption_keys=[generate_key()])
    first = PushNotifier(
        SQLiteStore(db, opts),
        issuer=ISSUER,
        address_policy=AddressPolicy(allow_loopback=True),
        run_dispatcher=False,
    )
    async with first:
        await first.register_config(hook(sink, "/a", token="t"), owner="o", task_id="t1")
        (broken,) = (await first.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    # Reopened with a different key: that config's secrets cannot be read any more.
    second = PushNotifier(
        SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])),
        issuer=ISSUER,
        address_policy=AddressPolicy(allow_loopback=True),
        retry=FAST,
    )
    async with second:
        await second.register_config(hook(sink, "/b"), owner="o", task_id="t2")
        await second.publish("t2", status("t2", TaskState.WORKING))
        await sink.wait_for(1, path="/b")
        await wait_until(lambda: _is(second, broken, DeliveryState.DEAD))
        d = await second.store.get_delivery(broken)
        assert d is not None and "decrypt" in (d.last_error or "")
    assert sink.on("/a") == []


# ---- restarts -------------------------------------------------------------------------------


async def test_scheduled_retries_resume_after_restart(tmp_path: Path, sink: WebhookSink) -> None:
    db = tmp_path / "push.db"
    policy = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(1.0,))
    sink.script("/hook", [503])
    first = PushNotifier(
        SQLiteStore(db),
        issuer=ISSUER,
        retry=policy,
        address_policy=AddressPolicy(allow_loopback=True),
    )
    async with first:
        await first.register_config(hook(sink), owner="o", task_id="t1")
        (delivery_id,) = (await first.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
        await wait_until(lambda: _rounds(first, delivery_id, 1))
    second = PushNotifier(
        SQLiteStore(db),
        issuer=ISSUER,
        retry=policy,
        address_policy=AddressPolicy(allow_loopback=True),
    )
    async with second:
        await wait_until(lambda: _is(second, delivery_id, DeliveryState.DELIVERED))
    assert [r.status for r in sink.received] == [503, 200]
    assert sink.received[1].received_at - sink.received[0].received_at >= 0.75


async def test_graceful_stop_releases_claims(tmp_path: Path, sink: WebhookSink) -> None:
    db = tmp_path / "push.db"
    sink.script("/hook", [SinkResponse(200, delay=2)])
    opts = DispatcherOptions(drain_timeout=0.1, lease_seconds=300)
    first = PushNotifier(
        SQLiteStore(db),
        issuer=ISSUER,
        dispatcher=opts,
        address_policy=AddressPolicy(allow_loopback=True),
    )
    async with first:
        await first.register_config(hook(sink), owner="o", task_id="t1")
        (delivery_id,) = (await first.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
        # Claimed and in flight (held 2 s by the sink) when the notifier stops.
        await wait_until(lambda: asyncio.sleep(0, first.dispatcher.in_flight == 1), timeout=5)
    second = PushNotifier(
        SQLiteStore(db),
        issuer=ISSUER,
        dispatcher=opts,
        address_policy=AddressPolicy(allow_loopback=True),
    )
    async with second:
        # Released, not leased for 300 s: the new process picks it up at once.
        await wait_until(lambda: _is(second, delivery_id, DeliveryState.DELIVERED), timeout=5)


class _Gated:
    """An endpoint on 127.0.0.1 that holds POSTs to /hang until ``open()`` and answers
    every POST 200; records the path of each request as it arrives."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.server: TestServer | None = None
        self._open = asyncio.Event()
        self._arrived = asyncio.Condition()

    async def start(
        self, aiohttp_server: Callable[[web.Application], Awaitable[TestServer]]
    ) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self.server = await aiohttp_server(app)

    def url(self, path: str = "/hang") -> str:
        assert self.server is not None
        return str(self.server.make_url(path))

    @property
    def endpoint(self) -> str:
        return endpoint_of(self.url())

    def open(self) -> None:
        self._open.set()

    async def wait_for(self, count: int, path: str = "/hang") -> None:
        async with asyncio.timeout(10):
            async with self._arrived:
                await self._arrived.wait_for(lambda: self.paths.count(path) >= count)

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        async with self._arrived:
            self.paths.append(request.path)
            self._arrived.notify_all()
        if request.path == "/hang":
            await asyncio.wait_for(self._open.wait(), 30)
        return web.Response()


@pytest.fixture
async def gated(aiohttp_server: Any) -> AsyncIterator[Callable[[], Awaitable[_Gated]]]:
    made: list[_Gated] = []

    async def make() -> _Gated:
        gate = _Gated()
        await gate.start(aiohttp_server)
        made.append(gate)
        return gate

    yield make
    for gate in made:  # held requests end, so the servers shut down promptly
        gate.open()


async def test_no_quick_retry_starts_once_stop_has_begun(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # The first attempt fails; stop() begins during the pause before the second. That
    # one is not sent: the delivery goes back to the outbox as a durable retry.
    sink.set_default("/down", SinkResponse(503))
    n = await make_notifier(
        retry=RetryPolicy(quick_attempts=3, quick_wait=wait_fixed(1.0), schedule=(0.3,))
    )
    await n.register_config(hook(sink, "/down"), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await sink.wait_for(1, path="/down")
    await n.dispatcher.stop()
    assert len(sink.on("/down")) == 1
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.state is DeliveryState.PENDING and d.attempts == 1


async def test_stop_releases_deliveries_still_waiting_for_an_endpoint_slot(
    make_notifier: MakeNotifier, gated: Callable[[], Awaitable[_Gated]]
) -> None:
    # Requests on the wire when stop() begins may finish; a delivery still waiting for
    # one of its endpoint's slots starts none: it goes back to the outbox at once, and
    # the next start sends it.
    slow = await gated()
    n = await make_notifier(dispatcher=DispatcherOptions(per_endpoint=2))
    await n.register_config(TaskPushNotificationConfig(url=slow.url()), owner="o", task_id="t0")
    await n.publish("t0", status("t0", TaskState.WORKING))
    await slow.wait_for(1)
    # Two configs of one task: one publish, two lanes, claimed together (a claim hands
    # out up to per_endpoint lanes of an endpoint below its cap). One of them takes the
    # endpoint's second slot, the other waits for a slot.
    for config_id in ("a", "b"):
        await n.register_config(
            TaskPushNotificationConfig(url=slow.url(), id=config_id), owner="o", task_id="t1"
        )
    ids = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await slow.wait_for(2)
    await wait_until(
        lambda: asyncio.sleep(0, n.dispatcher.debug_state()["waiting"] == {slow.endpoint: 1})
    )
    stopping = asyncio.create_task(n.dispatcher.stop())

    async def one_released() -> bool:
        leases = [(await n.store.get_delivery(i)) for i in ids]
        return any(d is not None and d.leased_until is None for d in leases)

    await wait_until(one_released)  # at once: both requests are still on the wire
    slow.open()
    await stopping
    assert slow.paths == ["/hang"] * 2  # the two on the wire finished; no third was sent
    states = {i: await n.store.get_delivery(i) for i in ids}
    (waited,) = [d for d in states.values() if d is not None and d.state is DeliveryState.PENDING]
    assert waited.attempts == 0 and waited.leased_until is None
    n.dispatcher.start()
    await wait_until(lambda: _is(n, waited.id, DeliveryState.DELIVERED))
    assert slow.paths == ["/hang"] * 3


async def test_a_probe_that_finds_no_endpoint_slot_lets_the_next_delivery_probe(
    make_notifier: MakeNotifier, gated: Callable[[], Awaitable[_Gated]]
) -> None:
    # A half-open breaker lets one delivery through as its probe. If that delivery then
    # finds its endpoint's slots taken until its wait ends, it goes back to the outbox
    # unsent: it must give the probe's turn back (as neither a success nor a failure),
    # or every delivery to the endpoint waits for probe_timeout.
    first, busy = await gated(), await gated()
    health = EndpointHealth(failure_threshold=1, cool_down=0, probe_timeout=600)
    n = await make_notifier(
        dispatcher=DispatcherOptions(per_endpoint=2, lease_seconds=12),  # slot waits: 3 s
        retry=RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), quick_retry_after_max=0.1),
        timeouts=Timeouts(total=8),
        health=health,
    )
    # A lane of two events, the first held on the wire to the first endpoint.
    await n.register_config(
        TaskPushNotificationConfig(url=first.url(), id="c"), owner="o", task_id="x"
    )
    (_, second) = [
        (await n.publish("x", status("x", TaskState.WORKING, str(i)))).delivery_ids[0]
        for i in range(2)
    ]
    await first.wait_for(1)
    # The other endpoint: both its slots held by requests on the wire.
    for t in ("h1", "h2"):
        await n.register_config(TaskPushNotificationConfig(url=busy.url()), owner="o", task_id=t)
        await n.publish(t, status(t, TaskState.WORKING))
    await busy.wait_for(2)
    # The lane's config now points at the busy endpoint, and that endpoint's breaker is
    # half-open (cool_down=0): the lane's second event, leased as soon as the first is
    # delivered, is let through as the probe and then waits for a slot in vain.
    await n.register_config(
        TaskPushNotificationConfig(url=busy.url("/ok"), id="c"), owner="o", task_id="x"
    )
    health.record_failure(busy.endpoint)
    first.open()

    def deferred() -> float:
        labels = {"outcome": "deferred"}
        return n.metrics.registry.get_sample_value("a2a_push_deliveries_total", labels) or 0

    await wait_until(lambda: asyncio.sleep(0, deferred() == 1))
    d = await n.store.get_delivery(second)
    assert d is not None and d.state is DeliveryState.PENDING and d.attempts == 0
    assert busy.paths == ["/hang"] * 2  # the probe was never sent
    assert health.state(busy.endpoint) is BreakerState.HALF_OPEN  # no verdict either way
    assert health.admit(busy.endpoint) is None  # the next delivery may probe now


async def test_metrics_route(
    make_notifier: MakeNotifier, sink: WebhookSink, aiohttp_client: Any
) -> None:
    from aiohttp import web

    n = await make_notifier()
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(1)
    await wait_until(lambda: _stats_delivered(n))
    app = web.Application()
    n.add_routes(app)
    client = await aiohttp_client(app)
    text = await (await client.get("/metrics")).text()  # gauges refreshed at scrape time
    jwks = await (await client.get("/.well-known/jwks.json")).json()
    assert jwks == n.jwks() and jwks["keys"][0]["kty"] == "EC"
    assert 'a2a_push_deliveries_total{outcome="delivered"} 1.0' in text
    assert 'a2a_push_attempts_total{result="2xx"} 1.0' in text
    assert "a2a_push_queue_depth 0.0" in text
    assert "a2a_push_attempt_duration_seconds_bucket" in text
    # Series that saw nothing yet are there, at 0: an alert on them sees 0, not no data.
    assert 'a2a_push_deliveries_total{outcome="dead"} 0.0' in text
    assert 'a2a_push_attempts_total{result="timeout"} 0.0' in text
    assert 'a2a_push_configs_disabled_total{reason="gone"} 0.0' in text
    assert 'a2a_push_delivery_latency_seconds_bucket{le="86400.0"} 1.0' in text


async def test_metrics_count_the_stores_fsyncs_at_each_scrape(
    make_notifier: MakeNotifier, sink: WebhookSink, tmp_path: Path
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from a2a_push.store import MemoryStore

    def scraped(n: PushNotifier) -> dict[str, float]:
        text = n.metrics.render().decode()
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.startswith("a2a_push_store_")
            and "fsync" in sample.name
            and sample.name.endswith("_total")
        }

    n = await make_notifier()  # SQLite, synchronous FULL
    await n.register_config(hook(sink), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(1)
    await n.refresh_metrics()
    first = scraped(n)
    counts = n.store.fsync_counts()
    # The config and the publish were each fsynced; the outcome is bookkeeping (no fsync).
    assert first["a2a_push_store_fsyncs_total"] == counts.count >= 2
    assert first["a2a_push_store_fsync_seconds_total"] == pytest.approx(counts.seconds)
    assert first["a2a_push_store_fsync_seconds_total"] > 0
    assert first["a2a_push_store_slow_fsyncs_total"] == counts.slow
    await n.publish("t1", status("t1", TaskState.WORKING, "again"))
    await sink.wait_for(2)
    await n.refresh_metrics()
    second, now = scraped(n), n.store.fsync_counts()
    assert now.count > counts.count
    # Each scrape adds only what is new since the last: the counters equal the store's.
    assert second["a2a_push_store_fsyncs_total"] == now.count
    assert second["a2a_push_store_fsync_seconds_total"] == pytest.approx(now.seconds)
    assert second["a2a_push_store_slow_fsyncs_total"] == now.slow
    await n.refresh_metrics()  # nothing new: nothing added
    assert scraped(n) == second

    memory = await make_notifier(MemoryStore())  # commits without fsync
    await memory.register_config(hook(sink), owner="o", task_id="t2")
    await memory.publish("t2", status("t2", TaskState.WORKING))
    await sink.wait_for(3)
    await memory.refresh_metrics()
    assert set(scraped(memory).values()) == {0.0}


async def test_metrics_gauges_show_a_backlog_and_an_open_breaker(
    make_notifier: MakeNotifier, sink: WebhookSink, aiohttp_client: Any
) -> None:
    from aiohttp import web
    from prometheus_client.parser import text_string_to_metric_families

    from a2a_push.delivery.health import EndpointHealth

    n = await make_notifier(
        dispatcher=DispatcherOptions(drain_timeout=0.1),
        retry=RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(0.05,) * 50),
        health=EndpointHealth(failure_threshold=3, cool_down=60),
    )
    sink.set_default("/hold", SinkResponse(200, delay=3))  # the first one is held in flight
    await n.register_config(hook(sink, "/hold"), owner="o", task_id="t1")
    for i in range(3):
        await n.publish("t1", status("t1", TaskState.WORKING, str(i)))
    async with WebhookSink() as down:  # another endpoint, failing until its breaker opens
        down.set_default("/down", SinkResponse(503))
        await n.register_config(hook(down, "/down"), owner="o", task_id="t2")
        await n.publish("t2", status("t2", TaskState.WORKING))

        async def breaker_open() -> bool:
            return "open" in {s.value for s in n.dispatcher.health.states().values()}

        await wait_until(breaker_open, timeout=15)
        app = web.Application()
        n.add_routes(app)
        client = await aiohttp_client(app)
        text = await (await client.get("/metrics")).text()  # gauges refreshed at scrape time
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert values[("a2a_push_queue_depth", ())] >= 4  # t1's three and t2's retry
    assert values[("a2a_push_oldest_pending_age_seconds", ())] > 0
    assert values[("a2a_push_endpoint_breakers", (("state", "open"),))] == 1


async def test_logs_never_hold_tokens_credentials_or_signatures(
    make_notifier: MakeNotifier, sink: WebhookSink, caplog: pytest.LogCaptureFixture
) -> None:
    """Every log record, at DEBUG, of deliveries that succeed, are retried, dead-lettered
    and refused (connection errors): no token, credential, whsec secret or JWT."""
    caplog.set_level(logging.DEBUG)
    token, credentials = "tok-SECRET-0123456789", "cred-SECRET-0123456789"
    n = await make_notifier()
    sink.script("/a", [SinkResponse(500), SinkResponse(503), SinkResponse(200)])
    sink.set_default("/b", SinkResponse(400))
    configs = [
        hook(sink, "/a", token=token),
        hook(
            sink,
            "/b",
            authentication=AuthenticationInfo(scheme="Bearer", credentials=credentials),
        ),
        hook(sink, "/c", token=WHSEC),
    ]
    for i, config in enumerate(configs):
        await n.register_config(config, owner="o", task_id=f"t{i}")
    refused = TaskPushNotificationConfig(url="http://127.0.0.1:9/x", token=token)
    await n.register_config(refused, owner="o", task_id="t9")
    for t in ("t0", "t1", "t2", "t9"):
        await n.publish(t, status(t, TaskState.WORKING))
    await sink.wait_for(5)
    await n.dispatcher.wait_idle(10)
    signatures = [r.header("X-A2A-Signature") or "" for r in sink.received]
    assert all(signatures)
    text = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    assert caplog.records  # the failures were logged
    for secret in (token, credentials, WHSEC, *signatures):
        assert secret not in text
    assert "eyJ" not in text  # no JWT (header segment) in any form


async def test_timed_out_attempts_leave_no_reference_cycles_through_our_frames(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    """A failure kept with its traceback holds the frames it passed through, and they
    hold it: garbage only a full collection frees (a pause of tens of ms under load).
    Timeouts (and their quick retries) must not leave any such cycle in our code."""
    import gc

    n = await make_notifier(timeouts=Timeouts(connect=1.0, total=0.2))
    sink.set_default("/hold", SinkResponse(200, delay=1))  # never answers in time
    await n.register_config(hook(sink, "/hold"), owner="o", task_id="t1")
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
        await wait_until(lambda: _rounds(n, delivery_id, 1), timeout=10)  # 3 attempts
        await n.dispatcher.wait_idle(5)
        gc.collect()
        ours = [
            o.f_code.co_filename
            for o in gc.garbage
            if type(o).__name__ == "frame" and "a2a_push" in o.f_code.co_filename
        ]
        retrying = [o for o in gc.garbage if type(o).__name__ == "AsyncRetrying"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert ours == []
    assert retrying == []  # the quick-retry loop's own state is let go too


async def _is(n: PushNotifier, delivery_id: str, state: DeliveryState) -> bool:
    return await delivery_state(n, delivery_id) is state


async def _rounds(n: PushNotifier, delivery_id: str, rounds: int) -> bool:
    d = await n.store.get_delivery(delivery_id)
    return d is not None and d.rounds >= rounds


async def _stats_delivered(n: PushNotifier) -> bool:
    return bool(await n.store.list_deliveries(DeliveryFilter(state=DeliveryState.DELIVERED)))


async def test_a_malformed_whsec_secret_is_refused_at_registration(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    with pytest.raises(InvalidConfigError) as err:
        await n.register_config(hook(sink, token="whsec_not*base64!"), owner="o", task_id="t1")
    assert err.value.field == "token"


async def test_retention_purges_old_deliveries(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    from a2a_push.notifier import Retention

    n = await make_notifier(retention=Retention(delivered=60, dead=None, interval=0))
    await n.register_config(hook(sink), owner="o", task_id="t1")
    (delivery_id,) = (await n.publish("t1", status("t1", TaskState.WORKING))).delivery_ids
    await wait_until(lambda: _is(n, delivery_id, DeliveryState.DELIVERED))
    assert await n.purge_old_deliveries() == 0
    assert await n.purge_old_deliveries(now=time.time() + 61) == 1
    assert await n.store.get_delivery(delivery_id) is None


async def test_retention_deletes_the_configs_of_tasks_finished_long_ago(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    from a2a_push.notifier import Retention

    n = await make_notifier(retention=Retention(final_tasks=3600, interval=0))
    for task in ("finished", "working"):
        await n.register_config(hook(sink), owner="o", task_id=task)
    sent = [
        *(await n.publish("finished", status("finished", TaskState.COMPLETED))).delivery_ids,
        *(await n.publish("working", status("working", TaskState.INPUT_REQUIRED))).delivery_ids,
    ]

    async def all_delivered() -> bool:
        return all([await _is(n, d, DeliveryState.DELIVERED) for d in sent])

    await wait_until(all_delivered)
    await n.purge_old_deliveries(now=time.time() + 60)
    assert len(await n.store.configs_for_task("finished")) == 1  # finished only now
    await n.purge_old_deliveries(now=time.time() + 3601)
    assert await n.store.configs_for_task("finished") == []
    assert len(await n.store.configs_for_task("working")) == 1  # may still go on


def test_a_lease_shorter_than_a_claim_is_refused() -> None:
    from a2a_push.store import MemoryStore

    with pytest.raises(ValueError, match="lease_seconds"):
        PushNotifier(MemoryStore(), issuer=ISSUER, dispatcher=DispatcherOptions(lease_seconds=30))
    PushNotifier(MemoryStore(), issuer=ISSUER)  # the defaults are consistent


def test_the_jwks_publishes_a_key_another_process_rotated_in(tmp_path: Path) -> None:
    # Another process sharing the key folder may already sign with the new key; this
    # one (which would reload its keys only in an hour) must publish it when asked.
    from a2a_push.signing import KeySet

    other = KeySet.load_or_create(tmp_path / "keys")

    def notifier(reload_interval: float) -> PushNotifier:
        keys = KeySet.load_or_create(tmp_path / "keys")
        return PushNotifier(
            MemoryStore(), issuer=ISSUER, keyset=keys, key_reload_interval=reload_interval
        )

    n, fixed = notifier(3600), notifier(0)
    before = n.keyset.active.kid
    rotated = other.rotate()
    assert [k["kid"] for k in n.jwks()["keys"]] == [rotated.kid, before]
    # key_reload_interval=0 turns reloading off, for the JWKS too.
    assert [k["kid"] for k in fixed.jwks()["keys"]] == [before]


def test_the_jwks_never_waits_for_the_key_folder_lock(tmp_path: Path) -> None:
    # Another process holding the lock (rotating): the JWKS answers with the set in
    # memory at once, with the event loop's thread never blocked on the lock.
    import fcntl
    import os

    from a2a_push.signing import KeySet

    other = KeySet.load_or_create(tmp_path / "keys")
    n = PushNotifier(MemoryStore(), issuer=ISSUER, keyset=KeySet.load_or_create(tmp_path / "keys"))
    before = n.keyset.active.kid
    other.rotate()
    fd = os.open(tmp_path / "keys" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert [k["kid"] for k in n.jwks()["keys"]] == [before]
    finally:
        os.close(fd)


async def test_one_metrics_object_serves_one_running_notifier() -> None:
    # Shared, the second notifier's queue gauges overwrote the first's at every scrape.
    # A notifier made anew after the first one stopped may take them over.
    from a2a_push.errors import NotifierNotStartedError
    from a2a_push.metrics import Metrics

    metrics = Metrics()
    first = PushNotifier(MemoryStore(), issuer=ISSUER, metrics=metrics)
    second = PushNotifier(MemoryStore(), issuer=ISSUER, metrics=metrics)
    async with first:
        with pytest.raises(NotifierNotStartedError, match="its own"):
            await second.start()
    async with PushNotifier(MemoryStore(), issuer=ISSUER, metrics=metrics):
        pass


async def test_register_config_checks_a_task_id_given_apart_from_the_config(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # register_config(config, task_id=...): the id did not go through the model's check.
    n = await make_notifier()
    for bad in ("t" * 257, "t\nforged log line"):
        with pytest.raises(InvalidConfigError) as caught:
            await n.register_config(hook(sink), owner="o", task_id=bad)
        assert caught.value.field == "taskId"
    assert await n.store.configs_for_task("t" * 257) == []


async def test_a_late_410_from_the_old_url_does_not_disable_a_moved_config(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    # The client re-registers its config at a new URL while a request to the old one is
    # on the wire; the old URL's 410, arriving after, is about the old URL only.
    sink.set_default("/old", SinkResponse(410, delay=1.0))
    n = await make_notifier()
    await n.register_config(hook(sink, "/old", id="c"), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.SUBMITTED))
    await n.publish("t1", status("t1", TaskState.WORKING))
    await sink.wait_for(1, path="/old")
    await n.register_config(hook(sink, "/new", id="c"), owner="o", task_id="t1")
    await n.publish("t1", status("t1", TaskState.COMPLETED))
    await sink.wait_for(2, path="/new", timeout=15)
    stored = await n.get_config("t1", "c", "o")
    assert stored is not None and stored.enabled and stored.url.endswith("/new")
    assert seqs(sink, "/new") == [2, 3]


async def test_wait_settled_returns_once_delivered_or_dead_and_says_what_is_pending(
    make_notifier: MakeNotifier, sink: WebhookSink
) -> None:
    n = await make_notifier()
    await n.register_config(hook(sink, "/ok"), owner="o", task_id="t1", task=task("t1"))
    await n.register_config(hook(sink, "/gone"), owner="o", task_id="t1")
    sink.script("/ok", [503, 200])  # one retry first
    sink.set_default("/gone", 404)  # dead at once
    published = await n.publish("t1", status("t1", TaskState.WORKING))
    settled = await n.wait_settled(published.delivery_ids, timeout=10)
    assert [d.id for d in settled] == published.delivery_ids
    assert sorted(d.state for d in settled) == [DeliveryState.DEAD, DeliveryState.DELIVERED]
    assert len(sink.on("/ok")) == 3  # the snapshot, the 503, then the event

    sink.set_default("/ok", 503)
    pending = await n.publish("t1", status("t1", TaskState.COMPLETED))
    with pytest.raises(TimeoutError, match=r"1 of 2 deliveries still pending .* HTTP 503"):
        await n.wait_settled(pending.delivery_ids, timeout=0.3)
    with pytest.raises(KeyError, match="no delivery 'nope'"):
        await n.wait_settled(["nope"], timeout=0.1)
