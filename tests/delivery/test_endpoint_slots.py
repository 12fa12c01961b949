"""The dispatcher's in-memory endpoint slots: at most ``per_endpoint`` requests on the
wire per endpoint, and the deliveries waiting for a slot served in turn, a freed slot
passing straight to the first of them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import pytest

from a2a_push.delivery.dispatcher import Dispatcher, DispatcherOptions
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Transport
from a2a_push.endpoints import endpoint_of
from a2a_push.ids import new_delivery_id
from a2a_push.store import Store
from a2a_push.store.memory import MemoryStore
from a2a_push.testing import SinkResponse, WebhookSink

from ..conftest import config

ENDPOINT = "http://127.0.0.1:9"


def _dispatcher(per_endpoint: int) -> Dispatcher:
    return Dispatcher(
        MemoryStore(),
        Transport(AddressPolicy(allow_loopback=True)),
        None,
        options=DispatcherOptions(per_endpoint=per_endpoint),
    )


def _wait(d: Dispatcher, seconds: float = 10.0) -> asyncio.Task[bool]:
    return asyncio.create_task(d._endpoint_slot(ENDPOINT, time.monotonic() + seconds))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _waiting(d: Dispatcher) -> int:
    waiting = d.debug_state()["waiting"]
    assert isinstance(waiting, dict)
    return int(waiting.get(ENDPOINT, 0))


def test_lanes_writing_outcomes_leave_the_endpoint_claimable_up_to_four_times_its_cap() -> None:
    d = _dispatcher(per_endpoint=2)
    held, writing = d._held, d._writing

    held[ENDPOINT] = 2  # both on the wire: nothing more is claimed for it
    assert ENDPOINT in d._unavailable_endpoints()
    # Outcomes being written do not hold the endpoint's slots: claims go on while
    # fewer than per_endpoint are not writing, up to four times per_endpoint in all.
    held[ENDPOINT], writing[ENDPOINT] = 7, 6
    assert ENDPOINT not in d._unavailable_endpoints()
    held[ENDPOINT], writing[ENDPOINT] = 8, 7
    assert ENDPOINT in d._unavailable_endpoints()
    held[ENDPOINT], writing[ENDPOINT] = 7, 5
    assert ENDPOINT in d._unavailable_endpoints()


async def test_a_freed_slot_goes_to_the_first_waiter_alone() -> None:
    d = _dispatcher(per_endpoint=1)
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    first, second = _wait(d), _wait(d)
    await _settle()
    assert _waiting(d) == 2 and not first.done() and not second.done()

    d._release_endpoint_slot(ENDPOINT)
    await _settle()
    assert first.done() and await first  # the slot passed on: still one on the wire
    assert not second.done()
    assert d.endpoint_load() == {ENDPOINT: 1} and _waiting(d) == 1

    d._release_endpoint_slot(ENDPOINT)
    assert await second
    assert d.endpoint_load() == {ENDPOINT: 1} and _waiting(d) == 0
    d._release_endpoint_slot(ENDPOINT)
    assert d.endpoint_load() == {}


async def test_a_new_delivery_queues_behind_waiters_instead_of_taking_the_slot() -> None:
    d = _dispatcher(per_endpoint=1)
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    waiter = _wait(d)
    await _settle()
    d._release_endpoint_slot(ENDPOINT)  # handed to the waiter: the count stays at the cap
    late = _wait(d)  # started after the release: it finds the slot taken and queues
    await _settle()
    assert await waiter and not late.done()
    d._release_endpoint_slot(ENDPOINT)
    assert await late


async def test_a_wait_that_runs_out_leaves_the_queue_and_the_count() -> None:
    d = _dispatcher(per_endpoint=1)
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    assert not await d._endpoint_slot(ENDPOINT, time.monotonic() + 0.05)
    assert _waiting(d) == 0
    d._release_endpoint_slot(ENDPOINT)
    assert d.endpoint_load() == {}  # nobody was handed the slot


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_it_on() -> None:
    d = _dispatcher(per_endpoint=1)
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    first, second = _wait(d), _wait(d)
    await _settle()
    d._release_endpoint_slot(ENDPOINT)  # handed to the first...
    first.cancel()  # ...which is cancelled before it runs
    await _settle()
    assert first.cancelled()
    assert second.done() and await second
    assert d.endpoint_load() == {ENDPOINT: 1}
    d._release_endpoint_slot(ENDPOINT)
    assert d.endpoint_load() == {}

    # With nobody else waiting, the slot it was handed is given back.
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    alone = _wait(d)
    await _settle()
    d._release_endpoint_slot(ENDPOINT)
    alone.cancel()
    await _settle()
    assert alone.cancelled() and d.endpoint_load() == {} and _waiting(d) == 0


async def test_at_most_twice_per_endpoint_wait_and_stop_turns_them_away() -> None:
    d = _dispatcher(per_endpoint=2)
    for _ in range(2):
        assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    waiters = [_wait(d) for _ in range(4)]
    await _settle()
    assert _waiting(d) == 4
    assert not await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)  # the queue is full
    d.start()
    await d.stop()
    await _settle()
    assert all(w.done() for w in waiters)  # answered by stop(), not by their deadlines
    assert [await w for w in waiters] == [False] * 4
    assert _waiting(d) == 0
    assert not await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)  # stopped
    for _ in range(2):
        d._release_endpoint_slot(ENDPOINT)
    assert d.endpoint_load() == {}


async def test_a_slot_handed_over_just_before_stop_starts_no_request() -> None:
    d = _dispatcher(per_endpoint=1)
    d.start()
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    waiter = _wait(d)
    await _settle()
    d._release_endpoint_slot(ENDPOINT)  # handed to the waiter, which has not run yet
    await d.stop()
    assert await waiter is False  # stop() began first: it sends nothing
    assert d.endpoint_load() == {} and _waiting(d) == 0


async def test_a_slot_handed_over_as_the_wait_runs_out_is_kept() -> None:
    d = _dispatcher(per_endpoint=1)
    assert await d._endpoint_slot(ENDPOINT, time.monotonic() + 10)
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(d._endpoint_slot(ENDPOINT, time.monotonic() + 0.05))
    await _settle()
    # The release, then the wait's timeout, in one turn of the loop before the waiter runs.
    loop.call_at(loop.time() + 0.04, d._release_endpoint_slot, ENDPOINT)
    loop.call_soon(time.sleep, 0.1)  # holds the loop past both
    assert await waiter is True  # the slot it was handed is its own
    assert d.endpoint_load() == {ENDPOINT: 1}
    d._release_endpoint_slot(ENDPOINT)
    assert d.endpoint_load() == {} and _waiting(d) == 0


async def test_a_delivery_claimed_again_before_its_hand_back_returns_goes_on_with_its_lane(
    store: Store, sink: WebhookSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery that finds its endpoint's queue full is handed back, due at once. The
    claim loop may take it again before the hand-back's answer reaches the first task
    (on PostgreSQL the claim runs on another connection): that task ending must leave
    the new one's delivery in flight, so the new one goes on to the lane's next event.
    (It took it out: the new task failed moving on, the delivery was dead-lettered and
    the lane's next event stayed leased, unsent, until its lease ran out.)"""
    sink.set_default("/hook", SinkResponse(status=200, delay=0.3))
    await store.put_config(config("t", url=sink.url("/hook")))
    for n in range(2):
        await store.enqueue(
            "t", "statusUpdate", lambda _v, n=n: f'{{"n": {n}}}'.encode(), new_id=new_delivery_id
        )
    transport = Transport(AddressPolicy(allow_loopback=True))
    await transport.start()
    d = Dispatcher(
        store, transport, None, options=DispatcherOptions(per_endpoint=2, poll_interval=0.05)
    )
    endpoint = endpoint_of(sink.url("/hook"))
    # Both slots taken and four deliveries waiting for one: the queue is full.
    for _ in range(2):
        assert await d._endpoint_slot(endpoint, time.monotonic() + 10)
    waiters = [
        asyncio.create_task(d._endpoint_slot(endpoint, time.monotonic() + 10)) for _ in range(4)
    ]
    await _settle()
    handed_back, answered = asyncio.Event(), asyncio.Event()
    release = store.release

    async def late_answer(delivery_ids: Sequence[str], *, worker_id: str) -> None:
        if handed_back.is_set():
            await release(delivery_ids, worker_id=worker_id)
            return
        for waiter in waiters:  # the endpoint frees up meanwhile
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        for _ in range(2):
            d._release_endpoint_slot(endpoint)
        await release(delivery_ids, worker_id=worker_id)  # written: the lane is due
        handed_back.set()
        await answered.wait()  # the answer comes late

    monkeypatch.setattr(store, "release", late_answer)
    d.start()
    try:
        await asyncio.wait_for(handed_back.wait(), 5)
        # Claimed again by a task of its own, which takes a slot and sends it...
        async with asyncio.timeout(5):
            while d.endpoint_load() != {endpoint: 1}:  # noqa: ASYNC110 (no event for it)
                await asyncio.sleep(0.01)
        answered.set()  # ...while the first task, answered at last, ends
        await sink.wait_for(2, timeout=5)
        assert [json.loads(h.body)["n"] for h in sink.on("/hook")] == [0, 1]
        await d.wait_idle(5)  # both outcomes written
        stats = await store.stats()
        assert stats.dead == 0 and stats.pending == 0, stats
    finally:
        await d.stop()
        await transport.close()
