"""What only the PostgreSQL backend must show: several processes on one database.

Two ``PostgresStore`` instances (two pools) stand for two processes. Each test works in
a fresh schema of its own (``postgres_schema``), dropped afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from a2a_push.database import migrations
from a2a_push.errors import SecretDecryptionError, StoreUnavailableError, TooManyConfigsError
from a2a_push.store import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    InitialDelivery,
    Outcome,
    Store,
    StoreOptions,
    generate_key,
    open_store,
)
from a2a_push.store import postgres as postgres_module
from a2a_push.store.postgres import (
    LISTENER_APPLICATION_NAME,
    PostgresPoolOptions,
    PostgresStore,
)

from ..conftest import config, ids, postgres_schema, require_postgres

NOW = 1_700_000_000.0
FAST_POOL = PostgresPoolOptions(connect_timeout=2.0, command_timeout=5.0, close_timeout=2.0)

OpenStores = Callable[..., Awaitable[list[PostgresStore]]]


@pytest.fixture
async def open_stores() -> AsyncIterator[OpenStores]:
    """``await open_stores(n, ...)``: n stores ("processes") sharing one fresh schema."""
    dsn = require_postgres()
    made: list[PostgresStore] = []

    async def make(
        n: int = 2,
        options: StoreOptions | None = None,
        *,
        schema: str | None = None,
        dsn: str = dsn,
    ) -> list[PostgresStore]:
        schema = schema or postgres_schema()
        stores = [PostgresStore(dsn, options, schema=schema, pool=FAST_POOL) for _ in range(n)]
        made.extend(stores)
        for s in stores:
            await s.open()
        return stores

    yield make
    for s in made:
        await s.close()


async def enqueue(store: Store, task_id: str = "task-1", now: float | None = NOW) -> int:
    seq, _ = await store.enqueue(task_id, "statusUpdate", lambda v: b"{}", new_id=ids(), now=now)
    return seq


def delivered(d: Delivery) -> Outcome:
    return Outcome(d.id, d.config_key, d.task_id, "delivered", attempts=d.attempts + 1)


async def raw(sql: str, *args: object) -> list[dict[str, object]]:
    import asyncpg

    conn = await asyncpg.connect(require_postgres())
    try:
        return [dict(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def wait_set(event: asyncio.Event, timeout: float) -> None:
    """Wait for the event (fails the test after ``timeout``)."""
    await asyncio.wait_for(event.wait(), timeout)


# ---- many processes, one queue ----------------------------------------------------------


async def test_two_processes_never_lease_one_lane_at_once_and_keep_per_task_order(
    open_stores: OpenStores,
) -> None:
    a, b = await open_stores(2)
    tasks, events = 12, 8
    for t in range(tasks):
        await a.put_config(config(f"t{t}", id="x", url="http://127.0.0.1:1001/h"))
        await a.put_config(config(f"t{t}", id="y", url="http://127.0.0.1:1002/h"))
    for _ in range(events):
        await asyncio.gather(*(enqueue(a if t % 2 else b, f"t{t}") for t in range(tasks)))
    total = tasks * 2 * events

    held: dict[tuple[str, str], str] = {}  # lane -> worker holding its lease right now
    sent_seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    claimed_ids: list[str] = []
    problems: list[str] = []

    def take(d: Delivery, worker: str) -> None:
        lane = (d.config_key, d.task_id)
        if lane in held:
            problems.append(f"{worker} leased {lane} while {held[lane]} held it")
        held[lane] = worker
        claimed_ids.append(d.id)
        sent_seqs[lane].append(d.seq)

    async def worker(store: PostgresStore, name: str, stream: bool) -> None:
        deadline = time.monotonic() + 20
        while len(claimed_ids) < total and time.monotonic() < deadline:
            batch = await store.claim_due(3, lease_seconds=60, worker_id=name, now=NOW)
            if not batch:
                await asyncio.sleep(0.005)
                continue
            for d in batch:
                take(d, name)
            for d in batch:
                current: Delivery | None = d
                while current is not None:
                    await asyncio.sleep(0)  # let the other "process" run meanwhile
                    del held[(current.config_key, current.task_id)]
                    if not stream:
                        await store.complete([delivered(current)], now=NOW)
                        break
                    current = await store.complete_and_claim_next(
                        delivered(current), lease_seconds=60, worker_id=name, now=NOW
                    )
                    if current is not None:
                        take(current, name)

    await asyncio.gather(
        *(
            worker(store, f"{label}{i}", stream=i % 2 == 0)
            for label, store in (("a", a), ("b", b))
            for i in range(3)
        )
    )
    assert problems == []
    assert len(claimed_ids) == total
    assert len(set(claimed_ids)) == total  # nothing was handed out twice
    assert all(seqs == list(range(1, events + 1)) for seqs in sent_seqs.values())
    assert len(sent_seqs) == tasks * 2
    stats = await b.stats(now=NOW)
    assert stats.pending == 0 and stats.delivered == total


async def test_an_expired_lease_returns_work_to_another_process(
    open_stores: OpenStores,
) -> None:
    crashed, survivor = await open_stores(2)
    await crashed.put_config(config(id="a"))
    await enqueue(crashed)
    (d,) = await crashed.claim_due(10, lease_seconds=30, worker_id="crashed", now=NOW)
    assert (await survivor.stats(now=NOW)).leased == 1
    assert await survivor.claim_due(10, lease_seconds=30, worker_id="s", now=NOW + 29) == []
    (again,) = await survivor.claim_due(10, lease_seconds=30, worker_id="s", now=NOW + 31)
    assert again.id == d.id
    # The late worker cannot give back what is no longer its lease.
    await crashed.release([d.id], worker_id="crashed")
    assert await crashed.claim_due(10, lease_seconds=30, worker_id="x", now=NOW + 32) == []


@contextlib.contextmanager
def clock_off_by(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Iterator[None]:
    """The wall clock the PostgreSQL store reads (``time.time`` in its module) runs
    ``seconds`` ahead (or behind): a replica on a host whose clock is wrong."""
    real = time.time
    with monkeypatch.context() as m:
        m.setattr(postgres_module, "time", SimpleNamespace(time=lambda: real() + seconds))
        yield


async def test_a_retry_or_deferral_waits_its_pause_whatever_the_workers_clock_says(
    open_stores: OpenStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker a minute behind the database reschedules by its own clock: 30 s from its
    # now. Claims go by the database's clock, so written as given, that time would be
    # due at once (claimed, deferred and claimed again in a loop, or a retry sent early).
    (store,) = await open_stores(1)
    for task in ("task-1", "task-2"):
        await store.put_config(config(task, id="a"))
        await enqueue(store, task, now=None)
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="behind")
    assert len(claimed) == 2
    retry, defer = sorted(claimed, key=lambda d: d.task_id)
    with clock_off_by(monkeypatch, -60):
        pause_ends = time.time() - 60 + 30  # on the worker's clock
        await store.complete(
            [
                Outcome(
                    retry.id,
                    retry.config_key,
                    retry.task_id,
                    "retry",
                    attempts=1,
                    next_attempt_at=pause_ends,
                    worker_id="behind",
                ),
            ]
        )
        assert (
            await store.complete_and_claim_next(
                Outcome(
                    defer.id,
                    defer.config_key,
                    defer.task_id,
                    "defer",
                    attempts=0,
                    next_attempt_at=pause_ends,
                    worker_id="behind",
                ),
                lease_seconds=30,
                worker_id="behind",
            )
            is None
        )
        assert await store.claim_due(10, lease_seconds=30, worker_id="behind") == []
    assert await store.claim_due(10, lease_seconds=30, worker_id="on-time") == []
    due = await store.next_due_at()
    assert due == pytest.approx(time.time() + 30, abs=5)


async def test_leases_follow_the_database_clock_whatever_a_replicas_clock_says(
    open_stores: OpenStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_time, skewed = await open_stores(2)
    await on_time.put_config(config(id="a"))
    for _ in range(3):
        await enqueue(on_time, now=None)
    (first,) = await on_time.claim_due(10, lease_seconds=30, worker_id="on-time")
    with clock_off_by(monkeypatch, 60):
        # A replica a minute ahead sees the lease as live: it does not send the
        # delivery a second time, nor the lane's next one before it.
        assert await skewed.claim_due(10, lease_seconds=30, worker_id="ahead") == []
        stats = await skewed.stats()
        assert (stats.leased, stats.due) == (1, 0)
        # It sleeps until the lease ends, on its own clock (no claims that find nothing).
        due = await skewed.next_due_at()
        assert due == pytest.approx(time.time() + 60 + 30, abs=5)
    await on_time.complete([delivered(first)])
    with clock_off_by(monkeypatch, -60):
        # A replica a minute behind sees what is due, and leases for the 30 s it asks.
        (second,) = await skewed.claim_due(10, lease_seconds=30, worker_id="behind")
        third = await skewed.complete_and_claim_next(
            delivered(second), lease_seconds=30, worker_id="behind"
        )
    assert (second.seq, third.seq if third else None) == (2, 3)
    assert await on_time.claim_due(10, lease_seconds=30, worker_id="on-time") == []
    with clock_off_by(monkeypatch, 60):
        assert await skewed.claim_due(10, lease_seconds=30, worker_id="ahead") == []
    # An explicit ``now`` is still the time the store goes by.
    (again,) = await on_time.claim_due(
        10, lease_seconds=30, worker_id="on-time", now=time.time() + 31
    )
    assert again.seq == 3


async def test_sequence_numbers_increase_across_processes(open_stores: OpenStores) -> None:
    a, b = await open_stores(2)
    await a.put_config(config(id="a"))
    seqs = await asyncio.gather(*(enqueue(a if i % 2 else b) for i in range(40)))
    assert sorted(seqs) == list(range(1, 41))
    # ...and the lane hands them out in that order.
    (d,) = await a.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    order = [d.seq]
    current: Delivery | None = d
    while current is not None:
        current = await b.complete_and_claim_next(
            delivered(current), lease_seconds=30, worker_id="w", now=NOW
        )
        if current is not None:
            order.append(current.seq)
    assert order == list(range(1, 41))


async def test_config_cap_holds_across_processes(open_stores: OpenStores) -> None:
    a, b = await open_stores(2, StoreOptions(max_configs_per_task=3))
    results = await asyncio.gather(
        *((a if i % 2 else b).put_config(config("t", id=f"c{i}")) for i in range(10)),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, BaseException) for r in results) == 3
    assert all(isinstance(r, TooManyConfigsError) for r in results if isinstance(r, Exception))
    page, _ = await a.list_configs("t", "alice")
    assert len(page) == 3


async def test_initial_delivery_is_atomic_with_publishes_from_another_process(
    open_stores: OpenStores,
) -> None:
    """Configs registered (with their snapshot) in one process while another publishes
    for the task: every config's lane starts with its snapshot."""
    registrar, publisher = await open_stores(2, StoreOptions(max_configs_per_task=20))

    async def publishes() -> None:
        for _ in range(15):
            await publisher.enqueue("t", "statusUpdate", lambda v: b"{}", new_id=ids(), now=NOW)

    results = await asyncio.gather(
        *(
            registrar.put_config(
                config("t", id=f"c{i}"),
                initial=InitialDelivery("task", lambda v: b"{}", ids(), now=NOW),
            )
            for i in range(12)
        ),
        publishes(),
        publishes(),
    )
    for stored in results[:12]:
        assert stored is not None
        lane = await publisher.list_deliveries(DeliveryFilter(config_key=stored.key, limit=100))
        kinds = [d.kind for d in sorted(lane, key=lambda d: d.seq)]
        assert kinds[0] == "task" and "task" not in kinds[1:], kinds


# ---- wake-ups ---------------------------------------------------------------------------


# A store polls nothing: its wake-up callback is called only for a NOTIFY on its schema
# and once each time its listener (re)connects. So a wake-up, however late it comes, was
# a NOTIFY as long as the listener kept its connection (``listener_backend`` is unchanged):
# the wait can be generous, and no test asserts how fast it is (that is for benchmarks).
WAKE_TIMEOUT = 10.0


async def listening(store: PostgresStore) -> asyncio.Event:
    """Register a wake-up callback; returns its event once the listener is connected."""
    woken = asyncio.Event()
    store.set_wakeup(woken.set)
    await wait_set(woken, WAKE_TIMEOUT)  # the listener wakes once when it (re)connects
    woken.clear()
    return woken


async def listener_backend(store: PostgresStore) -> int:
    """The server process of the store's listening connection (the newest, should an old
    one killed by a test still be on its way out)."""
    rows = await raw(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
        "ORDER BY backend_start DESC LIMIT 1",
        f"{LISTENER_APPLICATION_NAME}:{store.schema}",
    )
    assert rows, "the store has no listening connection"
    pid = rows[0]["pid"]
    assert isinstance(pid, int)
    return pid


async def wait_notified(store: PostgresStore, woken: asyncio.Event, backend: int) -> None:
    """Wait for a wake-up, and check it came from a NOTIFY: the listener is still on
    ``backend``, so no reconnection woke it."""
    await wait_set(woken, WAKE_TIMEOUT)
    assert await listener_backend(store) == backend, "the listener reconnected meanwhile"


async def test_a_publish_wakes_another_process(open_stores: OpenStores) -> None:
    idle, publisher = await open_stores(2)
    await publisher.put_config(config(id="a"))
    woken = await listening(idle)
    backend = await listener_backend(idle)
    await enqueue(publisher)
    await wait_notified(idle, woken, backend)


async def test_release_and_replay_wake_other_processes(open_stores: OpenStores) -> None:
    idle, other = await open_stores(2)
    await other.put_config(config(id="a"))
    await enqueue(other)
    (d,) = await other.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    woken = await listening(idle)
    backend = await listener_backend(idle)
    await other.release([d.id], worker_id="w")
    await wait_notified(idle, woken, backend)
    woken.clear()
    (d,) = await other.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await other.complete([Outcome(d.id, d.config_key, d.task_id, "dead", attempts=1)], now=NOW)
    await other.replay([d.id], now=NOW)
    await wait_notified(idle, woken, backend)


async def test_other_schemas_do_not_wake_each_other(open_stores: OpenStores) -> None:
    mine, my_publisher = await open_stores(2)
    (theirs,) = await open_stores(1)
    for s in (theirs, my_publisher):
        await s.put_config(config(id="a"))
    wakeups = 0
    woken = asyncio.Event()

    def wake() -> None:
        nonlocal wakeups
        wakeups += 1
        woken.set()

    mine.set_wakeup(wake)
    await wait_set(woken, WAKE_TIMEOUT)  # the listener is connected
    woken.clear()
    wakeups = 0
    await enqueue(theirs)
    # A publish in my schema, committed after theirs: notifications reach a listener in
    # commit order, so by the time this one wakes me, theirs has been handled too.
    await enqueue(my_publisher)
    await wait_set(woken, WAKE_TIMEOUT)
    assert wakeups == 1


async def test_listener_reconnects_after_its_connection_is_killed(
    open_stores: OpenStores,
) -> None:
    idle, publisher = await open_stores(2)
    await publisher.put_config(config(id="a"))
    woken = await listening(idle)
    killed_backend = await listener_backend(idle)
    killed = await raw(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1",
        f"{LISTENER_APPLICATION_NAME}:{idle.schema}",
    )
    assert [r["ok"] for r in killed] == [True]
    await wait_set(woken, WAKE_TIMEOUT)  # reconnected (and woke, for what it may have missed)
    woken.clear()
    backend = await listener_backend(idle)
    assert backend != killed_backend
    await enqueue(publisher)
    await wait_notified(idle, woken, backend)


async def test_connections_killed_under_load_surface_only_as_store_unavailable(
    open_stores: OpenStores,
) -> None:
    """Backends killed while writes run (some just after their commit, when the pool's
    reset on release trips): callers see StoreUnavailableError and nothing else, so a
    dispatcher never mistakes a lost connection for a broken delivery."""
    (store,) = await open_stores(1)
    await store.put_config(config(id="a"))
    errors: defaultdict[str, int] = defaultdict(int)
    stop = time.monotonic() + 3.0

    async def publish() -> None:
        while time.monotonic() < stop:
            try:
                await store.enqueue("task-1", "statusUpdate", lambda v: b"{}", new_id=ids())
                errors["ok"] += 1
            except StoreUnavailableError:
                errors["unavailable"] += 1
            except Exception as exc:
                errors[type(exc).__name__] += 1

    async def kill() -> None:
        while time.monotonic() < stop:
            await asyncio.sleep(0.05)
            await raw(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1 AND state <> 'idle'",
                f"a2a-push:{store.schema}",
            )

    await asyncio.gather(kill(), *(publish() for _ in range(8)))
    assert set(errors) <= {"ok", "unavailable"}, dict(errors)
    assert errors["ok"] > 0 and errors["unavailable"] > 0, dict(errors)


async def test_a_claim_looks_past_backlogged_endpoints_that_fill_its_window(
    open_stores: OpenStores,
) -> None:
    """The claim ranks a window of the earliest due lanes (4x the batch); when a few
    backlogged endpoints fill it, it looks again past them, and no endpoint gets more
    than its cap."""
    (store,) = await open_stores(1)
    for endpoint, lanes, first_due in (("a", 30, 0.0), ("b", 30, 100.0), ("c", 1, 200.0)):
        for i in range(lanes):
            task = f"{endpoint}-{i}"
            await store.put_config(config(task, url=f"http://{endpoint}.test:9/hook"))
            await enqueue(store, task, now=NOW - 1000 + first_due + i)
    claimed = await store.claim_due(8, lease_seconds=30, worker_id="w", per_endpoint=2, now=NOW)
    per: defaultdict[str, int] = defaultdict(int)
    for d in claimed:
        assert d.config is not None
        per[d.config.url.split("//")[1].split(".")[0]] += 1
    assert dict(per) == {"a": 2, "b": 2, "c": 1}


async def test_a_claim_looks_past_any_number_of_backlogged_endpoints(
    open_stores: OpenStores,
) -> None:
    (store,) = await open_stores(1)
    endpoints = [f"e{n}" for n in range(10)]
    for n, endpoint in enumerate(endpoints):
        for i in range(50):  # each fills a window of 4 x 12 by itself
            task = f"{endpoint}-{i}"
            await store.put_config(config(task, url=f"http://{endpoint}.test:9/hook"))
            await enqueue(store, task, now=NOW - 10_000 + n * 100 + i)
    await store.put_config(config("z-0", url="http://z.test:9/hook"))
    await enqueue(store, "z-0", now=NOW - 1)
    claimed = await store.claim_due(12, lease_seconds=30, worker_id="w", per_endpoint=1, now=NOW)
    hosts = sorted(d.config.url.split("//")[1].split(".")[0] for d in claimed if d.config)
    assert hosts == sorted([*endpoints, "z"])


async def test_a_dispatcher_in_another_process_is_woken_by_a_publish(
    open_stores: OpenStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2a_push.delivery.dispatcher import DispatcherOptions
    from a2a_push.delivery.ssrf import AddressPolicy
    from a2a_push.notifier import PushNotifier
    from a2a_push.protocol.types import TaskPushNotificationConfig, TaskState, TaskStatus
    from a2a_push.protocol.types import TaskStatusUpdateEvent as Status
    from a2a_push.testing import WebhookSink

    sender_store, gateway_store = await open_stores(2)
    # What the sender's dispatcher does, in order: "wake" when its store's listener calls
    # it back, "claim" when it claims, "asleep" when it found nothing to do and goes to
    # sleep until the next wake-up or poll.
    steps: list[str] = []
    real_set_wakeup = sender_store.set_wakeup
    real_claim_due = sender_store.claim_due
    real_next_due_at = sender_store.next_due_at

    def set_wakeup(callback: Callable[[], None] | None) -> None:
        def wake() -> None:
            steps.append("wake")
            assert callback is not None
            callback()

        real_set_wakeup(None if callback is None else wake)

    async def claim_due(*args: Any, **kwargs: Any) -> list[Delivery]:
        steps.append("claim")
        return await real_claim_due(*args, **kwargs)

    async def next_due_at(*args: Any, **kwargs: Any) -> float | None:
        due = await real_next_due_at(*args, **kwargs)
        steps.append("asleep")
        return due

    monkeypatch.setattr(sender_store, "set_wakeup", set_wakeup)
    monkeypatch.setattr(sender_store, "claim_due", claim_due)
    monkeypatch.setattr(sender_store, "next_due_at", next_due_at)

    def sender_asleep() -> bool:
        """Its listener is connected (it woke the dispatcher once), and the dispatcher
        has claimed since its last wake-up, found nothing and gone to sleep."""
        if "wake" not in steps or steps[-1] != "asleep":
            return False
        back = steps[::-1]
        return back.index("claim") < back.index("wake")

    # Polls only every 30 s: only the NOTIFY can make it deliver within the test.
    sender = PushNotifier(
        sender_store,
        issuer="http://agent.test",
        address_policy=AddressPolicy(allow_loopback=True),
        dispatcher=DispatcherOptions(poll_interval=30.0),
    )
    gateway = PushNotifier(
        gateway_store,
        issuer="http://agent.test",
        address_policy=AddressPolicy(allow_loopback=True),
        run_dispatcher=False,
    )
    async with WebhookSink() as sink, sender, gateway:
        await gateway.register_config(
            TaskPushNotificationConfig(url=sink.url("/hook")), owner="o", task_id="t1"
        )
        # Not before the sender sleeps: its first claims (at start, and when its listener
        # connects) would send the event without any NOTIFY.
        deadline = time.monotonic() + WAKE_TIMEOUT
        while not sender_asleep():
            assert time.monotonic() < deadline, f"the sender never settled: {steps}"
            await asyncio.sleep(0.01)
        backend = await listener_backend(sender_store)
        assert sink.count == 0  # no snapshot was queued: the publish is the first webhook
        asleep_at = len(steps)
        await gateway.publish(
            "t1", Status(task_id="t1", context_id="c", status=TaskStatus(state=TaskState.WORKING))
        )
        # Well within the 30 s poll: the dispatcher was woken, by its listener, which kept
        # its connection (a reconnection would wake it too): by the NOTIFY.
        await sink.wait_for(1, timeout=WAKE_TIMEOUT)
        assert steps[asleep_at] == "wake", steps
        assert await listener_backend(sender_store) == backend


# ---- the database going away and coming back --------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the PostgreSQL server; ``stop()`` is the server going
    down (every connection cut, nothing listening), ``start()`` it coming back."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()
        self._writers.clear()
        self._pipes.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(pipe)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.close()


def via(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


async def test_the_store_survives_the_database_going_away_and_coming_back(
    open_stores: OpenStores,
) -> None:
    dsn = require_postgres()
    upstream = urlsplit(dsn)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)
    await proxy.start()
    try:
        (store,) = await open_stores(1, dsn=via(dsn, proxy.port))
        await store.put_config(config(id="a"))
        woken = await listening(store)

        await proxy.stop()
        with pytest.raises(StoreUnavailableError) as err:
            await enqueue(store)
        message = str(err.value)
        assert f"127.0.0.1:{proxy.port}" in message and "running" in message
        assert "retry" in message

        await proxy.start()  # same port: the server is back
        deadline = time.monotonic() + 5
        while True:
            try:
                assert await enqueue(store) == 1
                break
            except StoreUnavailableError:
                assert time.monotonic() < deadline, "the pool never reconnected"
                await asyncio.sleep(0.05)
        await wait_set(woken, 5)  # the listener is back too
        (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
        assert d.seq == 1
        await store.close()  # before the proxy goes: no reconnect attempts in between
    finally:
        await proxy.stop()


async def test_opening_an_unreachable_database_says_what_to_do() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    store = PostgresStore(f"postgresql://postgres:hunter2@127.0.0.1:{port}/test", pool=FAST_POOL)
    with pytest.raises(StoreUnavailableError) as err:
        await store.open()
    message = str(err.value)
    assert f"127.0.0.1:{port}/test" in message and "running" in message
    assert "hunter2" not in message
    await store.close()


# ---- schema and secrets -----------------------------------------------------------------


async def test_migrations_are_versioned_idempotent_and_safe_to_run_concurrently(
    open_stores: OpenStores,
) -> None:
    schema = postgres_schema()
    await open_stores(3, schema=schema)  # three processes starting at once
    (later,) = await open_stores(1, schema=schema)  # and one restarting later
    await later.put_config(config(id="a"))
    rows = await raw(f'SELECT version FROM "{schema}".schema_migrations ORDER BY version')
    assert [r["version"] for r in rows] == [v for v, _ in migrations("postgres")]
    assert [r["version"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]  # applied once each, in order


async def test_secrets_are_encrypted_at_rest(open_stores: OpenStores) -> None:
    token, credentials = "tok-SECRET-1234567890", "cred-SECRET-abcdefghij"
    key = generate_key()
    (store,) = await open_stores(1, StoreOptions(encryption_keys=[key]))
    c = await store.put_config(
        config(token=token, auth_scheme="Bearer", auth_credentials=credentials)
    )
    got = await store.get_config_by_key(c.key)
    assert got is not None and got.token == token and got.auth_credentials == credentials
    (row,) = await raw(f'SELECT * FROM "{store.schema}".configs')
    assert token not in repr(row) and credentials not in repr(row)
    assert row["auth_scheme"] == "Bearer"
    (other_key,) = await open_stores(
        1, StoreOptions(encryption_keys=[generate_key()]), schema=store.schema
    )
    with pytest.raises(SecretDecryptionError):
        await other_key.get_config_by_key(c.key)


async def test_key_rotation_reencrypts_every_secret(open_stores: OpenStores) -> None:
    (plain,) = await open_stores(1)
    c = await plain.put_config(config(token="tok-plain"))
    k1 = generate_key()
    (encrypting,) = await open_stores(1, StoreOptions(encryption_keys=[k1]), schema=plain.schema)
    assert await encrypting.reencrypt_secrets(previous_keys=None) == 1
    got = await encrypting.get_config_by_key(c.key)
    assert got is not None and got.token == "tok-plain"


async def test_bodies_and_times_round_trip_through_postgres_types(open_stores: OpenStores) -> None:
    (store,) = await open_stores(1)
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([delivered(d)], now=NOW)
    (got,) = await store.list_deliveries(
        DeliveryFilter(state=DeliveryState.DELIVERED, created_after=NOW, created_before=NOW + 1)
    )
    assert got.id == d.id and got.body == b"{}"
    assert await store.purge(DeliveryState.DELIVERED, updated_before=NOW + 1) == 1


# ---- opening ------------------------------------------------------------------------------


def test_open_store_picks_postgres_for_its_urls() -> None:
    for url in ("postgresql://u@127.0.0.1:5432/db", "postgres://u@127.0.0.1/db"):
        store = open_store(url)
        assert isinstance(store, PostgresStore) and store.dsn == url
    with pytest.raises(ValueError, match="schema"):
        PostgresStore("postgresql://127.0.0.1/db", schema="Robert'); DROP TABLE x;--")


def test_without_asyncpg_the_package_imports_and_the_error_names_the_extra() -> None:
    script = (
        "import sys; sys.modules['asyncpg'] = None\n"
        "import a2a_push, a2a_push.store, a2a_push.notifier\n"
        "from a2a_push.store import open_store\n"
        "try:\n"
        "    open_store('postgresql://127.0.0.1/db')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "'postgres' extra" in out and "a2a-push[postgres]" in out


async def test_only_sqlstate_55000_of_its_class_counts_as_an_outage() -> None:
    """A row lock that is not available (55P03, class 55 like 'database closed to
    connections') is an answer about one statement: it reaches the caller as itself,
    not as a StoreUnavailableError that would make a gateway answer 503 and retry."""
    import asyncpg

    from a2a_push.database.postgres import pooled_connection

    dsn = require_postgres()
    table = f"lock55_{uuid.uuid4().hex[:12]}"
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=2)
    try:
        await pool.execute(f"CREATE TABLE {table} (id int); INSERT INTO {table} VALUES (1)")
        async with pool.acquire() as holder, holder.transaction():
            await holder.execute(f"SELECT id FROM {table} FOR UPDATE")
            with pytest.raises(asyncpg.exceptions.LockNotAvailableError):
                async with pooled_connection(pool, StoreUnavailableError) as conn:
                    await conn.execute(f"SELECT id FROM {table} FOR UPDATE NOWAIT")
    finally:
        await pool.execute(f"DROP TABLE IF EXISTS {table}")
        await pool.close()


async def test_a_delivery_in_a_state_of_another_tool_is_dead_lettered_with_the_reason(
    open_stores: OpenStores,
) -> None:
    (store,) = await open_stores(1)
    await store.put_config(config(task_id="bad", id="a"))
    await store.put_config(config(task_id="good", id="a"))
    await enqueue(store, "bad")
    await enqueue(store, "good")
    await raw(f"UPDATE \"{store.schema}\".deliveries SET state = 'PENDING' WHERE task_id = 'bad'")
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 1)
    assert [d.task_id for d in claimed] == ["good"]
    (bad,) = await store.list_deliveries(DeliveryFilter(task_id="bad"))
    assert bad.state is DeliveryState.DEAD and "its state is 'PENDING'" in (bad.last_error or "")


async def test_round_trips_are_counted_each_statement_and_transaction(
    open_stores: OpenStores,
) -> None:
    """What B6 and the a2a_push_store_round_trips_total metric report: a read is one
    round trip; a transaction adds its BEGIN and COMMIT to its statements (a bookkeeping
    one is begun and told not to wait for the flush in one round trip)."""
    (store,) = await open_stores(1)
    before = store.round_trips
    assert await store.get_config("task-1", "nope", "o") is None
    assert store.round_trips == before + 1
    await store.put_config(config("task-1"))
    # BEGIN, lock_tasks, find_config_key, count_task_configs, insert_config, COMMIT.
    assert store.round_trips == before + 1 + 6
    before = store.round_trips
    await store.purge_idempotency_keys(created_before=NOW)
    # BEGIN with SET LOCAL synchronous_commit, the DELETE, COMMIT.
    assert store.round_trips == before + 3


async def test_the_round_trips_metric_follows_the_store() -> None:
    from a2a_push.notifier import PushNotifier
    from a2a_push.signing import KeySet

    store = PostgresStore(require_postgres(), schema=postgres_schema(), pool=FAST_POOL)
    notifier = PushNotifier(
        store, issuer="http://agent.test", keyset=KeySet.generate(), run_dispatcher=False
    )
    async with notifier:
        await notifier.refresh_metrics()
        first = notifier.metrics.store_round_trips._value.get()
        assert 0 < first <= store.round_trips  # the notifier's own work may go on
        await store.get_config("t", "c", "o")
        await notifier.refresh_metrics()
        # At least the read, and the stats query of the refresh.
        counted = notifier.metrics.store_round_trips._value.get()
        assert first + 2 <= counted <= store.round_trips
