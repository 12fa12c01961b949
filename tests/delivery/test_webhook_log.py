"""The webhook log (``a2a_push.webhooks``): one line per retry, dead letter, disabled
config and late success; the URL's origin only; throttled per config; and never able to
change what happens to a delivery (a failing handler, a failing outcome write)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tenacity import wait_fixed

from a2a_push.delivery import dispatcher as dispatcher_module
from a2a_push.delivery.dispatcher import WEBHOOK_OUTCOME
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.errors import StoreBusyError
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.store import DeliveryState, SQLiteStore
from a2a_push.testing import SinkResponse, WebhookSink

ISSUER = "http://agent.test"
QUICK = RetryPolicy(quick_attempts=2, quick_wait=wait_fixed(0), schedule=(0.1,))
SLOW_RETRY = RetryPolicy(quick_attempts=1, quick_wait=wait_fixed(0), schedule=(30.0,))

Make = Callable[..., Awaitable[PushNotifier]]


def status(task_id: str, state: TaskState = TaskState.WORKING) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=task_id, context_id="ctx", status=TaskStatus(state=state))


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Make]:
    made: list[PushNotifier] = []

    async def make(store: SQLiteStore | None = None, **kw: Any) -> PushNotifier:
        kw.setdefault("address_policy", AddressPolicy(allow_loopback=True))
        kw.setdefault("retry", QUICK)
        n = PushNotifier(store or SQLiteStore(tmp_path / "push.db"), issuer=ISSUER, **kw)
        await n.start()
        made.append(n)
        return n

    yield make
    for n in made:
        await n.stop()


async def state_of(n: PushNotifier, delivery_id: str) -> DeliveryState | None:
    d = await n.store.get_delivery(delivery_id)
    return d.state if d else None


async def until(n: PushNotifier, delivery_id: str, *states: DeliveryState) -> None:
    deadline = time.monotonic() + 10
    while await state_of(n, delivery_id) not in states:
        assert time.monotonic() < deadline, f"{delivery_id}: never {states}"
        await asyncio.sleep(0.02)


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "a2a_push.webhooks"]


async def test_one_line_per_outcome_with_the_origin_only(
    make: Make, sink: WebhookSink, caplog: pytest.LogCaptureFixture
) -> None:
    """Retries and late successes at INFO, dead letters and disabled configs at WARNING;
    the URL shown as its origin and the config's id, never its path or query (a webhook
    URL's secret is often there: /services/T0/B0/XXXX, ?token=...)."""
    caplog.set_level(logging.INFO, logger="a2a_push.webhooks")
    n = await make()
    sink.script("/late", [503, 503, 200])
    secret_path = "/services/T000/B000/PATHSECRET"
    sink.set_default(secret_path, 500)
    sink.set_default("/gone", SinkResponse(410))
    urls = {
        "t1": sink.url("/late"),
        "t2": sink.url(secret_path + "?key=QUERYSECRET"),
        "t3": sink.url("/gone"),
    }
    for task_id, url in urls.items():
        await n.register_config(
            TaskPushNotificationConfig(id=f"cfg-{task_id}", url=url), owner="o", task_id=task_id
        )
    ids = {t: (await n.publish(t, status(t))).delivery_ids[0] for t in urls}
    await until(n, ids["t1"], DeliveryState.DELIVERED)
    await until(n, ids["t2"], DeliveryState.DEAD)
    await until(n, ids["t3"], DeliveryState.DEAD)
    by_task: dict[str, list[tuple[str, str, str]]] = {}
    for r in lines(caplog):
        task_id = next(t for t in urls if f"task {t}" in r.getMessage())
        by_task.setdefault(task_id, []).append(
            (getattr(r, WEBHOOK_OUTCOME), r.levelname, r.getMessage())
        )
    assert [(o, lvl) for o, lvl, _ in by_task["t1"]] == [("retry", "INFO"), ("delivered", "INFO")]
    assert "failed after 2 attempts (HTTP 503); retrying in" in by_task["t1"][0][2]
    assert "delivered after 3 attempts" in by_task["t1"][1][2]
    assert [(o, lvl) for o, lvl, _ in by_task["t2"]] == [("retry", "INFO"), ("dead", "WARNING")]
    dead = by_task["t2"][1][2]
    origin = sink.url("/").rstrip("/")
    assert f"webhook to {origin} (push config cfg-t2) dead-lettered after 3 attempts" in dead
    assert "retries exhausted" in dead and "deliveries replay" in dead
    assert [(o, lvl) for o, lvl, _ in by_task["t3"]] == [
        ("dead", "WARNING"),
        ("disabled", "WARNING"),
    ]
    assert "HTTP 410" in by_task["t3"][0][2] and "configs enable" in by_task["t3"][1][2]
    text = "\n".join(r.getMessage() for r in lines(caplog))
    assert "PATHSECRET" not in text and "QUERYSECRET" not in text and "/late" not in text


async def test_lines_are_throttled_per_config_and_say_how_many_were_left_out(
    make: Make, sink: WebhookSink, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint that refuses every event (or anyone who registers one) cannot flood
    the log: one line per config and outcome per LOG_EVERY, then a count."""
    monkeypatch.setattr(dispatcher_module, "LOG_EVERY", 0.5)
    caplog.set_level(logging.INFO, logger="a2a_push.webhooks")
    n = await make()
    sink.set_default("/refuses", 400)
    sink.set_default("/other", 400)
    await n.register_config(
        TaskPushNotificationConfig(url=sink.url("/refuses")), owner="o", task_id="t1"
    )
    await n.register_config(
        TaskPushNotificationConfig(url=sink.url("/other")), owner="o", task_id="t2"
    )
    burst = [(await n.publish("t1", status("t1"))).delivery_ids[0] for _ in range(5)]
    other = (await n.publish("t2", status("t2"))).delivery_ids[0]
    for delivery_id in [*burst, other]:
        await until(n, delivery_id, DeliveryState.DEAD)
    dead = [r.getMessage() for r in lines(caplog) if getattr(r, WEBHOOK_OUTCOME) == "dead"]
    # One line for t1's config (the first of five; the burst takes well under 0.5 s),
    # and another config is not held back by it.
    assert sum("task t1" in m for m in dead) == 1
    assert sum("task t2" in m for m in dead) == 1
    await asyncio.sleep(0.6)
    late = (await n.publish("t1", status("t1", TaskState.COMPLETED))).delivery_ids[0]
    await until(n, late, DeliveryState.DEAD)
    dead = [r.getMessage() for r in lines(caplog) if getattr(r, WEBHOOK_OUTCOME) == "dead"]
    assert sum("task t1" in m for m in dead) == 2
    assert "4 more like this for this config in the last" in dead[-1]


class _RaisingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        raise RuntimeError("a broken log handler")


async def test_a_failing_log_handler_does_not_change_what_happens_to_a_delivery(
    make: Make, sink: WebhookSink
) -> None:
    log = logging.getLogger("a2a_push.webhooks")
    broken = _RaisingFilter()
    level = log.level
    log.setLevel(logging.INFO)
    log.addFilter(broken)
    try:
        n = await make(retry=SLOW_RETRY)
        sink.set_default("/hook", 503)
        await n.register_config(
            TaskPushNotificationConfig(url=sink.url("/hook")), owner="o", task_id="t1"
        )
        (delivery_id,) = (await n.publish("t1", status("t1"))).delivery_ids
        await sink.wait_for(1)
        await n.dispatcher.wait_idle(5)
    finally:
        log.removeFilter(broken)
        log.setLevel(level)
    d = await n.store.get_delivery(delivery_id)
    # Rescheduled as the policy says, not dead-lettered as an "internal error".
    assert d is not None and d.state is DeliveryState.PENDING and d.attempts == 1
    assert d.next_attempt_at > time.time() + 20


class _OutcomeWriteTimesOut(SQLiteStore):
    """Writing an outcome fails once with the store's "try again", not an outage (as a
    lock or statement timeout on PostgreSQL does)."""

    failures = 1

    async def complete_and_claim_next(self, *args: Any, **kw: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise StoreBusyError("canceling statement due to lock timeout")
        return await super().complete_and_claim_next(*args, **kw)


async def test_an_outcome_write_that_fails_leaves_the_delivery_to_its_lease(
    make: Make, sink: WebhookSink, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The webhook went out; recording it failed. It must not be dead-lettered (that
    would need a replay by hand and send it twice): it stays pending under its lease,
    and goes again when the lease ends."""
    from a2a_push.delivery.dispatcher import DispatcherOptions
    from a2a_push.delivery.transport import Timeouts

    store = _OutcomeWriteTimesOut(tmp_path / "flaky.db")
    n = await make(
        store,
        dispatcher=DispatcherOptions(lease_seconds=1.0, poll_interval=0.1),
        retry=RetryPolicy(quick_attempts=1, quick_retry_after_max=0.1, schedule=(0.1,)),
        timeouts=Timeouts(connect=0.2, total=0.3),
    )
    await n.register_config(
        TaskPushNotificationConfig(url=sink.url("/hook")), owner="o", task_id="t1"
    )
    (delivery_id,) = (await n.publish("t1", status("t1"))).delivery_ids
    await sink.wait_for(1)
    await n.dispatcher.wait_idle(5)
    assert await state_of(n, delivery_id) is DeliveryState.PENDING
    assert any("recording its outcome failed" in r.getMessage() for r in caplog.records)
    await until(n, delivery_id, DeliveryState.DELIVERED)  # after the lease ran out
    assert [r.header("webhook-id") for r in sink.on("/hook")] == [delivery_id, delivery_id]


class _PurgeDuringOutage(SQLiteStore):
    async def purge(self, *args: Any, **kw: Any) -> int:
        from a2a_push.errors import StoreUnavailableError

        raise StoreUnavailableError("the database is unreachable")


async def test_the_background_purge_during_an_outage_logs_one_line_per_try(
    make: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from a2a_push.notifier import Retention

    caplog.set_level(logging.WARNING, logger="a2a_push.notifier")
    await make(_PurgeDuringOutage(tmp_path / "p.db"), retention=Retention(interval=0.05))
    await asyncio.sleep(0.3)
    tries = [r for r in caplog.records if "purging old deliveries failed" in r.getMessage()]
    assert len(tries) >= 2
    assert all(r.levelname == "WARNING" and r.exc_info is None for r in tries)
    assert "the database is unreachable" in tries[0].getMessage()


class _OutcomeWriteHasABug(SQLiteStore):
    """Writing an outcome fails once with an error that is not transient (a bug, bad
    data): trying again after the lease would fail the same way, for ever."""

    failures = 1

    async def complete_and_claim_next(self, *args: Any, **kw: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise sqlite3.IntegrityError("NOT NULL constraint failed: deliveries.state")
        return await super().complete_and_claim_next(*args, **kw)


async def test_an_outcome_write_failing_for_good_takes_the_internal_error_path(
    make: Make, sink: WebhookSink, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only transient errors (timeouts, deadlocks, a busy file) leave a delivery to its
    lease; a bug is logged with its traceback and the delivery is dead-lettered (to be
    replayed once fixed), not sent again every lease period."""
    n = await make(_OutcomeWriteHasABug(tmp_path / "bug.db"))
    await n.register_config(
        TaskPushNotificationConfig(url=sink.url("/hook")), owner="o", task_id="t1"
    )
    (delivery_id,) = (await n.publish("t1", status("t1"))).delivery_ids
    await until(n, delivery_id, DeliveryState.DEAD)
    d = await n.store.get_delivery(delivery_id)
    assert d is not None and d.last_error == "internal error: IntegrityError"
    failed = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert failed and failed[0].exc_info is not None


def test_which_outcome_write_errors_count_as_transient() -> None:
    """The store's "try again" (a lock, a timeout, a deadlock), a lost connection: yes
    (the lease brings the delivery back). Anything else, a backend's own error included:
    no (it would fail the same way after every lease, re-sending the webhook each time).
    Which backend errors are "try again" is each store's to say (the next test)."""
    from a2a_push.delivery.dispatcher import _transient

    transient = [StoreBusyError("database is locked"), TimeoutError(), ConnectionResetError()]
    permanent = [
        sqlite3.OperationalError("database is locked"),  # not raised as such by a store
        sqlite3.IntegrityError("NOT NULL constraint failed"),
        RuntimeError("a bug"),
    ]
    assert [_transient(e) for e in transient] == [True] * len(transient)
    assert [_transient(e) for e in permanent] == [False] * len(permanent)


def test_the_stores_say_which_of_their_errors_mean_try_again() -> None:
    """A lock, a timeout, a deadlock: StoreBusyError. A missing table or a read-only
    file: the backend's error as it is."""
    asyncpg = pytest.importorskip("asyncpg")
    from a2a_push.store import postgres, sqlite

    for busy in (
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("database table is locked"),
    ):
        assert isinstance(sqlite.busy_error(busy), StoreBusyError)
    for other in (
        sqlite3.OperationalError("no such table: deliveries"),
        sqlite3.OperationalError("attempt to write a readonly database"),
    ):
        assert sqlite.busy_error(other) is None
    for busy in (
        asyncpg.exceptions.LockNotAvailableError("lock timeout"),
        asyncpg.exceptions.QueryCanceledError("statement timeout"),
        asyncpg.exceptions.DeadlockDetectedError("deadlock"),
        asyncpg.exceptions.SerializationError("could not serialize"),
    ):
        found = postgres.busy_error(busy, "127.0.0.1:5432/test")
        assert isinstance(found, StoreBusyError) and found.__cause__ is busy
    for other in (
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.UndefinedTableError("no such relation"),
        RuntimeError("a bug"),
    ):
        assert postgres.busy_error(other, "127.0.0.1:5432/test") is None


def test_logs_and_events_show_an_endpoint_alike() -> None:
    """One form for the log lines' endpoint and the events': scheme://host:port, the
    default port written out (as `deliveries list --endpoint` and the console filter by),
    never user-info, path or query."""
    from a2a_push.endpoints import shown_endpoint

    assert shown_endpoint("https://user:PW@hooks.example.com/p/SECRET?k=Q") == (
        "https://hooks.example.com:443"
    )
    assert shown_endpoint("http://hooks.example.com:8080/x") == "http://hooks.example.com:8080"
    assert shown_endpoint("http://[::1/") == "(an unparsable URL)"


async def test_a_retry_line_writes_the_default_port_out(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    # The URL names no port: the attempt goes to 127.0.0.1:80, where nothing listens
    # (it is refused at once), and the line names that port.
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 80)) == 0:
            pytest.skip("something listens on 127.0.0.1:80 here; the test needs it refused")
    caplog.set_level(logging.INFO, logger="a2a_push.webhooks")
    n = await make(retry=SLOW_RETRY)
    await n.register_config(
        TaskPushNotificationConfig(id="c", url="http://127.0.0.1/hook?token=SECRET"),
        owner="o",
        task_id="t1",
    )
    await n.publish("t1", status("t1"))
    deadline = time.monotonic() + 10
    while not lines(caplog):
        assert time.monotonic() < deadline, "no outcome line"
        await asyncio.sleep(0.02)
    (line,) = lines(caplog)
    assert line.__dict__["endpoint"] == "http://127.0.0.1:80"
    message = line.getMessage()
    assert "webhook to http://127.0.0.1:80 (push config c)" in message
    assert "POST http://127.0.0.1:80 failed" in message
    assert "SECRET" not in message
