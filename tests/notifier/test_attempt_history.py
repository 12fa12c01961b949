"""The attempt history end to end: a notifier on each backend sends to real servers on
127.0.0.1 (answering, echoing, failing in each way) and records what happened."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer
from tenacity import wait_fixed

from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts, Transport
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    AuthenticationInfo,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.store import Attempt, DeliveryState, Store, StoreOptions
from a2a_push.testing import SinkResponse, WebhookSink

from ..conftest import BACKENDS, config, ids, make_store

FAST = RetryPolicy(quick_attempts=3, quick_wait=wait_fixed(0.05), schedule=(30.0,))
ISSUER = "http://agent.test"

Make = Callable[..., Awaitable[PushNotifier]]


@pytest.fixture(params=BACKENDS)
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    made: list[PushNotifier] = []

    async def make_one(
        options: StoreOptions | None = None, *, store: Store | None = None, **kw: Any
    ) -> PushNotifier:
        kw.setdefault("address_policy", AddressPolicy(allow_loopback=True))
        kw.setdefault("retry", FAST)
        n = PushNotifier(store or make_store(request.param, tmp_path, options), issuer=ISSUER, **kw)
        await n.start()
        made.append(n)
        return n

    yield make_one
    for n in made:
        await n.stop()


def status(task_id: str) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING)
    )


async def publish_one(n: PushNotifier, url: str, task_id: str = "t1", **kw: Any) -> str:
    await n.register_config(TaskPushNotificationConfig(url=url, **kw), owner="o", task_id=task_id)
    (delivery_id,) = (await n.publish(task_id, status(task_id))).delivery_ids
    return delivery_id


async def attempts_of(n: PushNotifier, delivery_id: str, count: int) -> list[Attempt]:
    deadline = time.monotonic() + 10
    while True:
        found = await n.store.list_attempts(delivery_id)
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"only {found}"
        await asyncio.sleep(0.02)


async def test_each_verdict_is_recorded_with_its_attempts(make: Make, sink: WebhookSink) -> None:
    n = await make()
    endpoint = f"http://127.0.0.1:{sink.port}"
    sink.script("/ok", [503, SinkResponse(500, body=b"oops"), 200])
    started = time.time()
    ok = await publish_one(n, sink.url("/ok"), "t-ok")
    first, second, third = await attempts_of(n, ok, 3)
    assert [a.number for a in (first, second, third)] == [1, 2, 3]
    assert [a.verdict for a in (first, second, third)] == ["retry", "retry", "delivered"]
    assert [a.status for a in (first, second, third)] == [503, 500, 200]
    assert second.response == b"oops"
    # A quick retry is due when the next attempt started; the last has no retry.
    assert first.retry_at == second.started_at and second.retry_at == third.started_at
    assert third.retry_at is None
    for a in (first, second, third):
        assert a.endpoint == endpoint and a.error_class is None
        assert started - 1 <= a.started_at <= time.time() and 0 <= a.duration < 5

    sink.set_default("/busy", 503)
    busy = await publish_one(n, sink.url("/busy"), "t-busy")
    *quick, last = await attempts_of(n, busy, 3)
    assert [a.verdict for a in quick] == ["retry", "retry"] and last.verdict == "retry"
    d = await n.store.get_delivery(busy)
    assert d is not None and last.retry_at is not None
    # The durable retry, 30 s on (± the schedule's jitter).
    assert 20 < last.retry_at - last.started_at < 40

    sink.set_default("/bad", 400)
    bad = await publish_one(n, sink.url("/bad"), "t-bad")
    (dead,) = await attempts_of(n, bad, 1)
    assert dead.verdict == "dead" and dead.status == 400 and dead.retry_at is None

    sink.set_default("/gone", 410)
    gone_id = await publish_one(n, sink.url("/gone"), "t-gone")
    (gone,) = await attempts_of(n, gone_id, 1)
    assert gone.verdict == "gone" and gone.status == 410

    text = n.metrics.render().decode()
    assert 'a2a_push_attempt_verdicts_total{verdict="delivered"} 1.0' in text
    assert 'a2a_push_attempt_verdicts_total{verdict="retry"} 5.0' in text
    assert 'a2a_push_attempt_verdicts_total{verdict="dead"} 1.0' in text
    assert 'a2a_push_attempt_verdicts_total{verdict="gone"} 1.0' in text


class _NoAddresses(AbstractResolver):
    """A DNS that knows no name (no network needed to fail a lookup)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise OSError(f"{host}: Name or service not known")

    async def close(self) -> None:
        return None


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(100)
    writer.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # free once closed: nothing listens there


async def test_each_error_class_is_recorded(make: Make, sink: WebhookSink) -> None:
    hang_up = await asyncio.start_server(_hang_up, "127.0.0.1", 0)
    hang_up_port = hang_up.sockets[0].getsockname()[1]
    # Well past the 0.3 s total timeout; the sink holds it until its teardown.
    sink.set_default("/slow", SinkResponse(200, delay=1.0))
    policy = AddressPolicy(allow_loopback=True)
    timeouts = Timeouts(connect=1.0, total=0.3)
    transport = Transport(policy, timeouts, dns_resolver=_NoAddresses())
    await transport.start()
    one_try = RetryPolicy(quick_attempts=1, schedule=(30.0,))
    n = await make(address_policy=policy, timeouts=timeouts, transport=transport, retry=one_try)
    cases = {
        "timeout": sink.url("/slow"),
        "refused": f"http://127.0.0.1:{_free_port()}/hook",
        "tls": f"https://127.0.0.1:{sink.port}/hook",  # TLS to a plain HTTP server
        "reset": f"http://127.0.0.1:{hang_up_port}/hook",
        "dns": "http://webhooks.example.test:8080/hook",
    }
    try:
        for i, (expected, url) in enumerate(cases.items()):
            # Stored directly: registering would resolve the name first.
            c = await n.store.put_config(config(f"t{i}", url=url))
            _, (delivery_id,) = await n.store.enqueue(
                c.task_id, "statusUpdate", lambda v: b"{}", new_id=ids()
            )
            n.dispatcher.wake()
            (a,) = await attempts_of(n, delivery_id, 1)
            assert (a.error_class, a.status, a.verdict) == (expected, None, "retry"), a
            assert a.error and a.response == b""
            assert a.endpoint == url.rsplit("/", 1)[0]
    finally:
        hang_up.close()
        await hang_up.wait_closed()
        await transport.close()
    text = n.metrics.render().decode()
    for cls in cases:
        assert f'a2a_push_attempt_errors_total{{error_class="{cls}"}} 1.0' in text


async def test_an_ssrf_refusal_is_recorded(make: Make, tmp_path: Path) -> None:
    # Registered while loopback was allowed; the policy no longer allows it.
    n = await make(address_policy=AddressPolicy())
    c = await n.store.put_config(config("t1", url="http://127.0.0.1:9/hook"))
    _, (delivery_id,) = await n.store.enqueue("t1", "statusUpdate", lambda v: b"{}", new_id=ids())
    n.dispatcher.wake()
    (a,) = await attempts_of(n, delivery_id, 1)
    assert (a.error_class, a.verdict, a.endpoint) == ("ssrf", "dead", "http://127.0.0.1:9")
    assert c.key  # (the config stays; the delivery is dead-lettered)


SECRET_PATH = "/hooks/T0SECRETPATH/B1"
SECRET_QUERY = "token=SECRETQUERY42"


async def _echo(request: web.Request) -> web.Response:
    """Answers with everything the request carried: its path and query, every header."""
    lines = [request.path_qs, *(f"{k}: {v}" for k, v in request.headers.items())]
    return web.Response(status=500, text="\n".join(lines))


async def test_no_secret_and_no_url_path_or_query_is_stored(make: Make) -> None:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _echo)
    async with TestServer(app, host="127.0.0.1") as server:
        n = await make(retry=RetryPolicy(quick_attempts=1, schedule=(30.0,)))
        url = f"http://127.0.0.1:{server.port}{SECRET_PATH}?{SECRET_QUERY}"
        delivery_id = await publish_one(
            n,
            url,
            token="tok-SECRET-0123456789",
            authentication=AuthenticationInfo(
                scheme="Bearer", credentials="cred-SECRET-abcdefghij"
            ),
        )
        (a,) = await attempts_of(n, delivery_id, 1)
        port = server.port
    assert a.endpoint == f"http://127.0.0.1:{port}"
    text = a.response.decode()
    assert "[redacted]" in text and "a2a-push" in text  # the rest of the echo is kept
    for secret in (
        "SECRETPATH",
        "SECRETQUERY42",
        "tok-SECRET",
        "cred-SECRET",
        "eyJ",  # a JWT's header (X-A2A-Signature)
    ):
        assert secret not in text
        assert all(secret not in str(v) for v in vars_of(a))


def vars_of(a: Attempt) -> list[object]:
    return [getattr(a, name) for name in a.__slots__]


async def test_no_history_is_kept_when_it_is_off(make: Make, sink: WebhookSink) -> None:
    n = await make(StoreOptions(attempt_history=False))
    delivery_id = await publish_one(n, sink.url("/hook"))
    await sink.wait_for(1)
    deadline = time.monotonic() + 10
    while (d := await n.store.get_delivery(delivery_id)) is None or d.state is not (
        DeliveryState.DELIVERED
    ):
        assert time.monotonic() < deadline, d
        await asyncio.sleep(0.02)
    assert await n.store.list_attempts(delivery_id) == []
    # The metrics count the attempts all the same.
    assert 'a2a_push_attempt_verdicts_total{verdict="delivered"} 1.0' in n.metrics.render().decode()


def test_every_verdict_and_error_class_series_exists_from_the_start() -> None:
    from a2a_push.metrics import Metrics
    from a2a_push.store import ATTEMPT_ERROR_CLASSES, ATTEMPT_VERDICTS

    text = Metrics().render().decode()
    for verdict in ATTEMPT_VERDICTS:
        assert f'a2a_push_attempt_verdicts_total{{verdict="{verdict}"}} 0.0' in text
    for cls in ATTEMPT_ERROR_CLASSES:
        assert f'a2a_push_attempt_errors_total{{error_class="{cls}"}} 0.0' in text
