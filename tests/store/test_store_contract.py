"""One contract, every backend: the dispatcher and notifier rely on exactly this."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from a2a_push.errors import InvalidConfigError, TooManyConfigsError
from a2a_push.store import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    InitialDelivery,
    Outcome,
    Store,
    StoredConfig,
    StoreOptions,
)

from ..conftest import BACKENDS, config, ids, make_store

NOW = 1_700_000_000.0


def body_for(version: str) -> bytes:
    return f'{{"v":"{version}"}}'.encode()


async def enqueue(store: Store, task_id: str = "task-1", **kw: object) -> tuple[int, list[str]]:
    return await store.enqueue(task_id, "statusUpdate", body_for, new_id=ids(), now=NOW, **kw)  # type: ignore[arg-type]


def done(d, kind="delivered", **kw):  # type: ignore[no-untyped-def]
    return Outcome(d.id, d.config_key, d.task_id, kind, attempts=d.attempts + 1, **kw)


# ---- configs --------------------------------------------------------------------------


async def test_put_and_get_config_is_scoped_to_owner(store: Store) -> None:
    c = await store.put_config(
        config(id="a", token="tok", auth_scheme="Bearer", auth_credentials="s3")
    )
    assert await store.get_config("task-1", "a", "alice") == c
    assert await store.get_config("task-1", "a", "mallory") is None
    assert (await store.get_config_by_key(c.key)) == c


async def test_list_all_configs_pages_by_key_and_filters_enabled(store: Store) -> None:
    made = [
        await store.put_config(config(id=f"c{i}", task_id=f"task-{i % 3}", owner=f"o{i % 2}"))
        for i in range(7)
    ]
    assert await store.set_config_enabled(made[2].key, False, "operator")
    assert await store.set_config_enabled(made[5].key, False, "operator")
    keys = sorted(c.key for c in made)
    first = await store.list_all_configs(limit=4)
    rest = await store.list_all_configs(after_key=first[-1].key, limit=4)
    assert [c.key for c in first + rest] == keys
    disabled = await store.list_all_configs(enabled=False)
    assert sorted(c.key for c in disabled) == sorted([made[2].key, made[5].key])
    assert all(c.disabled_reason == "operator" for c in disabled)
    assert len(await store.list_all_configs(enabled=True)) == 5
    assert await store.count_configs() == 7
    assert await store.count_configs(enabled=False) == 2
    assert await store.count_configs(enabled=True) == 5
    with pytest.raises(InvalidConfigError):
        await store.list_all_configs(limit=0)


async def test_put_config_with_same_id_replaces_and_keeps_key(store: Store) -> None:
    first = await store.put_config(config(id="a", url="http://127.0.0.1:9/one"))
    second = await store.put_config(config(id="a", url="http://127.0.0.1:9/two"))
    assert second.key == first.key
    got = await store.get_config("task-1", "a", "alice")
    assert got is not None and got.url == "http://127.0.0.1:9/two"
    page, _ = await store.list_configs("task-1", "alice")
    assert len(page) == 1


async def test_put_config_keeps_a_config_ids_protocol_version(store: Store) -> None:
    first = await store.put_config(config(id="a", version="0.3"))
    with pytest.raises(InvalidConfigError) as refused:
        await store.put_config(config(id="a", url="http://127.0.0.1:9/other"))  # as 1.0
    assert refused.value.field == "id" and "0.3" in str(refused.value)
    assert await store.get_config("task-1", "a", "alice") == first  # unchanged


@pytest.mark.parametrize("kind", BACKENDS)
async def test_per_task_cap_is_enforced(kind: str, tmp_path: Path) -> None:
    async with make_store(kind, tmp_path, StoreOptions(max_configs_per_task=2)) as s:
        await s.put_config(config("t"))
        await s.put_config(config("t"))
        with pytest.raises(TooManyConfigsError) as err:
            await s.put_config(config("t"))
        assert isinstance(err.value, InvalidConfigError)
        await s.put_config(config("other-task"))  # the cap is per task


async def test_list_configs_pages_and_scopes(store: Store) -> None:
    for i in range(5):
        await store.put_config(config(id=f"c{i}"))
    await store.put_config(config(id="x", owner="bob"))
    page1, token = await store.list_configs("task-1", "alice", page_size=2)
    page2, token2 = await store.list_configs("task-1", "alice", page_size=2, page_token=token)
    page3, token3 = await store.list_configs("task-1", "alice", page_size=2, page_token=token2)
    assert [c.id for c in page1 + page2 + page3] == ["c0", "c1", "c2", "c3", "c4"]
    assert token3 is None
    with pytest.raises(InvalidConfigError):
        await store.list_configs("task-1", "alice", page_token="!!not-a-token")
    with pytest.raises(InvalidConfigError):
        await store.list_configs("task-1", "alice", page_token="%%%")


@pytest.mark.parametrize("size", [0, -1, True, 2.5])
async def test_list_configs_refuses_a_page_size_that_is_not_positive(
    store: Store, size: object
) -> None:
    # 0 gave an empty page with no token (the end of the list, it seemed); -1 gave
    # different answers on each backend.
    await store.put_config(config(id="c0"))
    with pytest.raises(InvalidConfigError, match="pageSize"):
        await store.list_configs("task-1", "alice", page_size=size)  # type: ignore[arg-type]


async def test_delete_config_dead_letters_its_pending_deliveries(store: Store) -> None:
    c = await store.put_config(config(id="a"))
    _, (delivery_id,) = await enqueue(store)
    assert await store.delete_config("task-1", "a", "mallory") is False
    assert await store.delete_config("task-1", "a", "alice") is True
    assert await store.delete_config("task-1", "a", "alice") is False
    d = await store.get_delivery(delivery_id)
    assert d is not None and d.state is DeliveryState.DEAD and d.last_error == "config deleted"
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW) == []
    assert await store.get_config_by_key(c.key) is None
    # A deleted config's deliveries can still be listed by its key.
    listed = await store.list_deliveries(DeliveryFilter(config_key=c.key))
    assert [x.id for x in listed] == [delivery_id]


# ---- enqueue --------------------------------------------------------------------------


async def test_enqueue_without_configs_is_a_no_op(store: Store) -> None:
    assert await enqueue(store) == (0, [])
    assert (await store.stats(now=NOW)).pending == 0


async def test_enqueue_fans_out_with_one_sequence_number_per_event(store: Store) -> None:
    await store.put_config(config(id="a"))
    await store.put_config(config(id="b", owner="bob", version="0.3"))
    seq1, ids1 = await enqueue(store)
    seq2, ids2 = await enqueue(store)
    assert (seq1, seq2) == (1, 2)
    assert len(ids1) == len(ids2) == 2
    bodies = {}
    for delivery_id in ids1:
        d = await store.get_delivery(delivery_id)
        assert d is not None
        bodies[d.config_key] = d.body
    assert sorted(bodies.values()) == [b'{"v":"0.3"}', b'{"v":"1.0"}']


async def test_enqueue_skips_disabled_configs_and_targets_one_config(store: Store) -> None:
    a = await store.put_config(config(id="a"))
    b = await store.put_config(config(id="b"))
    _, only = await enqueue(store, only_config_key=b.key)
    assert len(only) == 1
    assert (await store.get_delivery(only[0])).config_key == b.key  # type: ignore[union-attr]
    await store.set_config_enabled(a.key, False, "test")
    _, after = await enqueue(store)
    assert len(after) == 1


async def test_a_read_sees_every_write_acknowledged_before_it_began(store: Store) -> None:
    """Read-your-writes while other reads are under way (the dispatcher's, a console's): a
    delivery is found, and a listing shows it, as soon as its enqueue has returned."""
    await store.put_config(config(id="a"))
    stop = asyncio.Event()

    async def other_reads() -> None:
        while not stop.is_set():
            await store.next_due_at()
            await store.stats(now=NOW)

    readers = [asyncio.create_task(other_reads()) for _ in range(3)]
    missed = []
    try:
        for _ in range(150):
            _, (delivery_id,) = await enqueue(store)
            if await store.get_delivery(delivery_id) is None:
                missed.append(delivery_id)
            _, (delivery_id,) = await enqueue(store)
            listed = await store.list_deliveries(DeliveryFilter(limit=1000))
            if delivery_id not in [d.id for d in listed]:
                missed.append(delivery_id)
    finally:
        stop.set()
        await asyncio.gather(*readers)
    assert missed == []


# ---- registering a config with its first delivery -------------------------------------


def snapshot_of(version: str) -> bytes:
    return f'{{"snapshot":"{version}"}}'.encode()


def initial(now: float | None = NOW) -> InitialDelivery:
    return InitialDelivery("task", snapshot_of, ids(), now=now)


async def lane_of(store: Store, config_key: str) -> list[tuple[int, str, bytes]]:
    """(seq, kind, body) of the config's deliveries, in seq order."""
    found = await store.list_deliveries(DeliveryFilter(config_key=config_key, limit=1000))
    return sorted((d.seq, d.kind, d.body) for d in found)


async def test_put_config_queues_its_initial_delivery_for_it_alone(store: Store) -> None:
    a = await store.put_config(config(id="a"))
    seq, published = await enqueue(store)
    assert seq == 1 and len(published) == 1  # a only
    b = await store.put_config(config(id="b", owner="bob", version="0.3"), initial=initial())
    seq, _ = await enqueue(store)
    assert seq == 3  # the snapshot took seq 2
    assert await lane_of(store, b.key) == [
        (2, "task", b'{"snapshot":"0.3"}'),
        (3, "statusUpdate", b'{"v":"0.3"}'),
    ]
    assert [(s, kind) for s, kind, _ in await lane_of(store, a.key)] == [
        (1, "statusUpdate"),
        (3, "statusUpdate"),
    ]
    # b's lane starts with its snapshot; a's lane is not held up by it.
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert sorted((d.config_key == b.key, d.seq, d.kind) for d in claimed) == [
        (False, 1, "statusUpdate"),
        (True, 2, "task"),
    ]
    assert (await store.get_config("task-1", "b", "bob")) == b


async def test_put_config_replacing_queues_the_initial_delivery_in_the_same_lane(
    store: Store,
) -> None:
    first = await store.put_config(config(id="a"), initial=initial())
    await enqueue(store)
    second = await store.put_config(config(id="a", url="http://127.0.0.1:9/two"), initial=initial())
    assert second.key == first.key
    assert [(s, kind) for s, kind, _ in await lane_of(store, first.key)] == [
        (1, "task"),
        (2, "statusUpdate"),
        (3, "task"),
    ]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_put_config_over_the_cap_queues_nothing(kind: str, tmp_path: Path) -> None:
    async with make_store(kind, tmp_path, StoreOptions(max_configs_per_task=1)) as s:
        await s.put_config(config("t", id="a"), initial=initial())
        with pytest.raises(TooManyConfigsError):
            await s.put_config(config("t", id="b"), initial=initial())
        assert (await s.stats(now=NOW)).pending == 1
        seq, published = await s.enqueue("t", "statusUpdate", body_for, new_id=ids(), now=NOW)
        assert seq == 2 and len(published) == 1  # the refused config used no seq
        found = await s.list_deliveries(DeliveryFilter(task_id="t"))
        assert sorted(d.seq for d in found) == [1, 2]


async def test_a_disabled_config_gets_no_initial_delivery(store: Store) -> None:
    c = await store.put_config(config(id="a", enabled=False), initial=initial())
    assert await lane_of(store, c.key) == []
    assert await enqueue(store) == (0, [])


async def test_put_config_with_initial_is_atomic_with_concurrent_enqueues(store: Store) -> None:
    """Publishes racing registrations: each config's lane starts with its snapshot,
    and no event reaches a config ahead of it (the bug: an event slipped in between
    storing the config and queueing the snapshot, which then came after it)."""
    configs = [config(id=f"c{i}") for i in range(8)]

    async def publishes() -> None:
        for _ in range(12):
            await enqueue(store)
            await asyncio.sleep(0)

    stored = await asyncio.gather(
        *(store.put_config(c, initial=initial()) for c in configs),
        publishes(),
        publishes(),
    )
    seqs_seen: set[int] = set()
    for c in stored[: len(configs)]:
        assert isinstance(c, StoredConfig)
        lane = await lane_of(store, c.key)
        kinds = [kind for _, kind, _ in lane]
        assert kinds[0] == "task" and "task" not in kinds[1:], kinds
        seqs_seen.add(lane[0][0])
    assert len(seqs_seen) == len(configs)  # each snapshot took a seq of its own


# ---- claims, order, leases ------------------------------------------------------------


async def test_claim_returns_one_delivery_per_lane_in_order(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    await enqueue(store, "task-2")  # no config on task-2: nothing
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert [d.seq for d in claimed] == [1]
    assert claimed[0].config is not None and claimed[0].config.id == "a"
    # The lane is leased: its next event waits for the first to finish.
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW) == []
    await store.complete([done(claimed[0], status=200)], now=NOW)
    nxt = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert [d.seq for d in nxt] == [2]


async def test_lanes_are_independent(store: Store) -> None:
    await store.put_config(config("t1", id="a"))
    await store.put_config(config("t2", id="a"))
    await enqueue(store, "t1")
    await enqueue(store, "t2")
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert sorted(d.task_id for d in claimed) == ["t1", "t2"]


async def test_a_lane_that_finished_a_delivery_queues_behind_waiting_lanes(store: Store) -> None:
    # t1 has two events queued before t2's one. Once t1's first is delivered, t2 (waiting
    # since it was queued) comes before t1's second: lanes take turns.
    await store.put_config(config("t1", id="a"))
    await store.put_config(config("t2", id="a"))
    await store.enqueue("t1", "statusUpdate", body_for, new_id=ids(), now=NOW)
    await store.enqueue("t1", "statusUpdate", body_for, new_id=ids(), now=NOW)
    await store.enqueue("t2", "statusUpdate", body_for, new_id=ids(), now=NOW + 1)
    (first,) = await store.claim_due(1, lease_seconds=30, worker_id="w", now=NOW + 2)
    assert first.task_id == "t1" and first.seq == 1
    await store.complete([done(first, status=200)], now=NOW + 3)
    order = []
    for at in (NOW + 4, NOW + 5):
        (d,) = await store.claim_due(1, lease_seconds=30, worker_id="w", now=at)
        order.append((d.task_id, d.seq))
        await store.complete([done(d, status=200)], now=at)
    assert order == [("t2", 1), ("t1", 2)]


async def test_next_due_at_leaves_out_excluded_endpoints(store: Store) -> None:
    await store.put_config(config("t1", id="a", url="http://127.0.0.1:9/a"))
    await store.put_config(config("t2", id="b", url="http://127.0.0.1:10/b"))
    await store.enqueue("t1", "statusUpdate", body_for, new_id=ids(), now=NOW)
    await store.enqueue("t2", "statusUpdate", body_for, new_id=ids(), now=NOW + 5)
    assert await store.next_due_at() == pytest.approx(NOW, abs=1)
    busy = ["http://127.0.0.1:9"]
    assert await store.next_due_at(exclude_endpoints=busy) == pytest.approx(NOW + 5, abs=1)
    everything = [*busy, "http://127.0.0.1:10"]
    assert await store.next_due_at(exclude_endpoints=everything) is None


async def test_retry_reschedules_and_blocks_the_lane_until_due(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete(
        [done(d, "retry", status=503, error="HTTP 503", next_attempt_at=NOW + 60)], now=NOW
    )
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 59) == []
    assert await store.next_due_at() == pytest.approx(NOW + 60, abs=1)
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 60)
    assert again.id == d.id and again.attempts == 1 and again.last_status == 503
    assert again.rounds == 1


async def test_expired_lease_returns_work_to_the_queue(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="dead-worker", now=NOW)
    assert await store.claim_due(10, lease_seconds=30, worker_id="w2", now=NOW + 29) == []
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w2", now=NOW + 31)
    assert again.id == d.id


async def test_an_outcome_from_a_worker_whose_lease_was_taken_over_is_left_out(
    store: Store,
) -> None:
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    _, (second,) = await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="slow", now=NOW)
    (taken,) = await store.claim_due(10, lease_seconds=30, worker_id="other", now=NOW + 31)
    assert taken.id == d.id
    # The slow worker's late outcome: the delivery and the lane stay with "other".
    late = done(d, "retry", next_attempt_at=NOW + 3600, worker_id="slow")
    await store.complete([late], now=NOW + 32)
    assert (await store.get_delivery(d.id)).attempts == 0  # type: ignore[union-attr]
    assert await store.claim_due(10, lease_seconds=30, worker_id="third", now=NOW + 33) == []
    assert (
        await store.complete_and_claim_next(
            done(d, worker_id="slow"), lease_seconds=30, worker_id="slow", now=NOW + 33
        )
        is None
    )
    assert (await store.get_delivery(d.id)).state is DeliveryState.PENDING  # type: ignore[union-attr]
    assert await store.claim_due(10, lease_seconds=30, worker_id="third", now=NOW + 34) == []
    # The owner's outcome counts and streams the lane on.
    nxt = await store.complete_and_claim_next(
        done(taken, worker_id="other"), lease_seconds=30, worker_id="other", now=NOW + 35
    )
    assert nxt is not None and nxt.id == second
    assert (await store.get_delivery(d.id)).state is DeliveryState.DELIVERED  # type: ignore[union-attr]
    # Config side effects are facts about the endpoint: they apply from a late outcome too.
    (t2,) = await store.claim_due(10, lease_seconds=30, worker_id="third", now=NOW + 66)
    assert t2.id == second
    await store.complete(
        [done(nxt, "dead", status=410, disable_config="HTTP 410 Gone", worker_id="other")],
        now=NOW + 67,
    )
    got = await store.get_config_by_key(c.key)
    assert got is not None and not got.enabled


async def test_an_outcome_after_the_lease_ran_out_counts_when_no_one_took_over(
    store: Store,
) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="slow", now=NOW)
    await store.complete([done(d, worker_id="slow")], now=NOW + 90)
    assert (await store.get_delivery(d.id)).state is DeliveryState.DELIVERED  # type: ignore[union-attr]
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 91) == []


async def test_listings_show_which_deliveries_a_worker_holds(store: Store) -> None:
    await store.put_config(config(id="a"))
    _, (first,) = await enqueue(store)
    _, (second,) = await enqueue(store)
    assert (await store.get_delivery(first)).leased_until is None  # type: ignore[union-attr]
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert (await store.get_delivery(first)).leased_until == pytest.approx(NOW + 30)  # type: ignore[union-attr]
    listed = {x.id: x.leased_until for x in await store.list_deliveries(DeliveryFilter())}
    assert listed == {first: pytest.approx(NOW + 30), second: None}
    await store.complete([done(d)], now=NOW + 1)
    listed = {x.id: x.leased_until for x in await store.list_deliveries(DeliveryFilter())}
    assert listed == {first: None, second: None}


async def test_release_gives_work_back_at_once(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=300, worker_id="w", now=NOW)
    await store.release([d.id], worker_id="someone-else")
    assert await store.claim_due(10, lease_seconds=300, worker_id="w", now=NOW + 1) == []
    await store.release([d.id], worker_id="w")
    (again,) = await store.claim_due(10, lease_seconds=300, worker_id="w", now=NOW + 1)
    assert again.id == d.id


async def test_release_finds_the_lane_after_a_replay_put_an_older_delivery_first(
    store: Store,
) -> None:
    # A graceful stop hands back the delivery in flight; a replay meanwhile made the
    # lane's head an older one. The lease used to stay until it ran out.
    await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=300, worker_id="w", now=NOW)
    await store.complete([done(d1, "dead", status=400, error="HTTP 400")], now=NOW)
    (d2,) = await store.claim_due(10, lease_seconds=300, worker_id="w", now=NOW + 1)
    assert await store.replay([d1.id], now=NOW + 2) == 1
    await store.release([d2.id], worker_id="someone-else")
    assert await store.claim_due(10, lease_seconds=300, worker_id="x", now=NOW + 3) == []
    await store.release([d2.id], worker_id="w")
    (head,) = await store.claim_due(10, lease_seconds=300, worker_id="x", now=NOW + 3)
    assert head.id == d1.id


async def test_claim_limit_is_respected(store: Store) -> None:
    for i in range(5):
        await store.put_config(config(f"t{i}", id="a"))
        await enqueue(store, f"t{i}")
    assert len(await store.claim_due(3, lease_seconds=30, worker_id="w", now=NOW)) == 3
    assert len(await store.claim_due(3, lease_seconds=30, worker_id="w", now=NOW)) == 2


# ---- dead letters and replay ----------------------------------------------------------


async def test_dead_letter_unblocks_the_lane_and_can_be_replayed(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d1, "dead", status=400, error="HTTP 400")], now=NOW)
    (d2,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert d2.seq == 2
    dead = await store.list_deliveries(DeliveryFilter(state=DeliveryState.DEAD))
    assert [d.id for d in dead] == [d1.id]
    assert dead[0].last_error == "HTTP 400"
    await store.complete([done(d2, status=204)], now=NOW)
    assert await store.replay([d1.id, "msg_unknown"], now=NOW + 5) == 1
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 5)
    assert again.id == d1.id and again.attempts == 0
    assert await store.replay([d2.id], now=NOW) == 0  # delivered, not dead


async def test_replay_puts_the_older_event_first(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d1, "dead", error="x")], now=NOW)
    await enqueue(store)
    await store.replay([d1.id], now=NOW)
    (head,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert head.seq == 1


async def test_a_late_outcomes_config_side_effects_still_apply(store: Store) -> None:
    # Worker A's lease ran out, B delivered; A's outcome comes late. Its delivery part is
    # dropped, but what it says about the endpoint (410 Gone, failing since) stands, on
    # every backend alike.
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="a", now=NOW)
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="b", now=NOW + 31)
    await store.complete([done(again, worker_id="b")], now=NOW + 32)
    late = done(d, "retry", status=503, next_attempt_at=NOW + 60, worker_id="a")
    late = replace(late, config_failing_since=NOW)
    await store.complete([late], now=NOW + 33)
    got = await store.get_config_by_key(c.key)
    assert got is not None and got.failing_since == NOW
    gone = done(d, "dead", status=410, disable_config="HTTP 410 Gone", worker_id="a")
    await store.complete([gone], now=NOW + 34)
    got = await store.get_config_by_key(c.key)
    assert got is not None and not got.enabled and got.disabled_reason == "HTTP 410 Gone"
    delivered = await store.get_delivery(d.id)
    assert delivered is not None and delivered.state is DeliveryState.DELIVERED


@pytest.mark.parametrize("how", ["disabled", "deleted"])
async def test_a_delivery_in_flight_when_its_config_goes_keeps_its_real_outcome(
    store: Store, how: str
) -> None:
    # Its webhook may well be answered 200: recorded as dead, it was replayed twice.
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    _, (queued,) = await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    if how == "disabled":
        assert await store.set_config_enabled(c.key, False, "operator")
    else:
        assert await store.delete_config("task-1", "a", "alice")
    behind = await store.get_delivery(queued)
    assert behind is not None and behind.state is DeliveryState.DEAD
    assert f"config {how}" in (behind.last_error or "")
    in_flight = await store.get_delivery(d.id)
    assert in_flight is not None and in_flight.state is DeliveryState.PENDING
    assert (
        await store.complete_and_claim_next(
            done(d, status=200, worker_id="w"), lease_seconds=30, worker_id="w", now=NOW + 1
        )
        is None
    )
    got = await store.get_delivery(d.id)
    assert got is not None and got.state is DeliveryState.DELIVERED and got.last_status == 200
    assert (await store.stats(now=NOW + 2)).pending == 0


async def test_a_delivery_in_flight_when_its_config_went_is_claimed_again_if_its_worker_died(
    store: Store,
) -> None:
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="gone", now=NOW)
    assert await store.set_config_enabled(c.key, False, "operator")
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 1) == []
    # After the lease: claimed with its config disabled (the dispatcher dead-letters it).
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 31)
    assert again.id == d.id and again.config is not None and not again.config.enabled


async def test_a_dead_letter_that_leaves_nothing_pending_stops_the_failure_clock(
    store: Store,
) -> None:
    # Else, when work came back weeks later, the old clock disabled the config at its
    # first failed attempt.
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    failing = replace(
        done(d1, "retry", status=503, next_attempt_at=NOW, worker_id="w"),
        config_failing_since=NOW,
    )
    await store.complete([failing], now=NOW)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 1)
    await store.complete([done(d1, "dead", status=503, worker_id="w")], now=NOW + 2)
    got = await store.get_config_by_key(c.key)
    assert got is not None and got.failing_since == NOW  # the second event is pending
    (d2,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 3)
    await store.complete([done(d2, "dead", status=503, worker_id="w")], now=NOW + 4)
    got = await store.get_config_by_key(c.key)
    assert got is not None and got.failing_since is None


async def test_outcome_can_disable_the_config(store: Store) -> None:
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    _, (later,) = await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d, "dead", status=410, disable_config="HTTP 410 Gone")], now=NOW)
    got = await store.get_config_by_key(c.key)
    assert got is not None and not got.enabled and got.disabled_reason == "HTTP 410 Gone"
    d2 = await store.get_delivery(later)
    assert d2 is not None and d2.state is DeliveryState.DEAD
    assert "disabled" in (d2.last_error or "")
    assert await store.configs_for_task("task-1") == []
    assert await enqueue(store) == (0, [])


async def test_failing_since_is_recorded_and_cleared(store: Store) -> None:
    c = await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete(
        [done(d, "retry", next_attempt_at=NOW, config_failing_since=NOW - 5)], now=NOW
    )
    assert (await store.get_config_by_key(c.key)).failing_since == NOW - 5  # type: ignore[union-attr]
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d, clear_config_failing=True)], now=NOW)
    assert (await store.get_config_by_key(c.key)).failing_since is None  # type: ignore[union-attr]


async def test_completing_twice_is_harmless(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d)], now=NOW)
    await store.complete([done(d, "dead", error="late")], now=NOW)
    got = await store.get_delivery(d.id)
    assert got is not None and got.state is DeliveryState.DELIVERED


async def test_list_deliveries_filters_and_pages(store: Store) -> None:
    a = await store.put_config(config(id="a"))
    await store.put_config(config("task-2", id="a"))
    for _ in range(3):
        await enqueue(store)
    await enqueue(store, "task-2")
    by_task = await store.list_deliveries(DeliveryFilter(task_id="task-1"))
    assert len(by_task) == 3
    by_config = await store.list_deliveries(DeliveryFilter(config_key=a.key, limit=2))
    rest = await store.list_deliveries(DeliveryFilter(config_key=a.key, after_id=by_config[-1].id))
    assert len(by_config) == 2 and len(rest) == 1
    assert {d.config_key for d in [*by_config, *rest]} == {a.key}
    both = await store.list_deliveries(DeliveryFilter(task_id="task-1", config_key=a.key))
    assert [d.id for d in both] == [d.id for d in [*by_config, *rest]]
    assert await store.list_deliveries(DeliveryFilter(task_id="task-2", config_key=a.key)) == []
    assert await store.list_deliveries(DeliveryFilter(created_after=NOW + 1)) == []


async def test_stats(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    await enqueue(store)
    stats = await store.stats(now=NOW)
    assert stats.pending == 2 and stats.due == 1 and stats.oldest_pending_created_at == NOW
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert (await store.stats(now=NOW)).leased == 1
    await store.complete([done(d, "dead", error="x")], now=NOW)
    stats = await store.stats(now=NOW)
    assert stats.dead == 1 and stats.pending == 1


async def test_claim_limits_lanes_per_endpoint_and_skips_excluded(store: Store) -> None:
    for i in range(4):
        await store.put_config(config(f"a{i}", id="x", url="http://127.0.0.1:1001/h"))
        await enqueue(store, f"a{i}")
        await store.put_config(config(f"b{i}", id="x", url="http://127.0.0.1:1002/h"))
        await enqueue(store, f"b{i}")
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW, per_endpoint=2)
    assert sorted(d.task_id[0] for d in claimed) == ["a", "a", "b", "b"]
    rest = await store.claim_due(
        10,
        lease_seconds=30,
        worker_id="w",
        now=NOW,
        exclude_endpoints={"http://127.0.0.1:1001"},
    )
    first_b = {d.task_id for d in claimed if d.task_id.startswith("b")}
    assert {d.task_id for d in rest} == {"b0", "b1", "b2", "b3"} - first_b


async def test_replacing_a_config_moves_its_lanes_to_the_new_endpoint(store: Store) -> None:
    await store.put_config(config(id="x", url="http://127.0.0.1:1001/h"))
    await enqueue(store)
    await store.put_config(config(id="x", url="http://127.0.0.1:1002/h"))
    assert (
        await store.claim_due(
            10,
            lease_seconds=30,
            worker_id="w",
            now=NOW,
            exclude_endpoints={"http://127.0.0.1:1002"},
        )
        == []
    )
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert d.config is not None and d.config.url.endswith(":1002/h")


async def test_complete_and_claim_next_streams_a_lane(store: Store) -> None:
    await store.put_config(config(id="a"))
    for _ in range(3):
        await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    d2 = await store.complete_and_claim_next(done(d1), lease_seconds=30, worker_id="w", now=NOW)
    assert d2 is not None and d2.seq == 2 and d2.config is not None
    # Leased to us: nobody else can claim the lane now.
    assert await store.claim_due(10, lease_seconds=30, worker_id="x", now=NOW) == []
    d3 = await store.complete_and_claim_next(
        done(d2, "retry", next_attempt_at=NOW + 60), lease_seconds=30, worker_id="w", now=NOW
    )
    assert d3 is None  # the lane is not due: its head waits for its retry
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 60)
    assert again.id == d2.id
    last = await store.complete_and_claim_next(
        done(again), lease_seconds=30, worker_id="w", now=NOW + 60
    )
    assert last is not None and last.seq == 3
    assert (
        await store.complete_and_claim_next(
            done(last), lease_seconds=30, worker_id="w", now=NOW + 60
        )
        is None
    )
    assert (await store.stats(now=NOW + 60)).pending == 0


async def _late_and_busy_lanes(
    store: Store, busy: list[str], *, depth: int
) -> tuple[Delivery, dict[str, Delivery]]:
    """A late claim (the lane "late" claimed by w, then taken over by x once w's lease
    ran out), and w's claims of the lanes of ``busy`` (``depth`` deliveries each) and of
    "single" (one delivery), by task."""
    await store.put_config(config("late", id="a"))
    late_id = (await enqueue(store, "late"))[1][0]
    (late,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    (taken,) = await store.claim_due(10, lease_seconds=30, worker_id="x", now=NOW + 31)
    assert taken.id == late_id
    for task in [*busy, "single"]:
        await store.put_config(config(task, id="a"))
        for _ in range(1 if task == "single" else depth):
            await enqueue(store, task)
    claimed = {
        d.task_id: d
        for d in await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 31)
    }
    assert sorted(claimed) == sorted([*busy, "single"])
    return late, claimed


async def test_outcomes_arriving_together_each_advance_their_own_lane(store: Store) -> None:
    """Outcomes that arrive at once share one transaction where statements cost a round
    trip (on PostgreSQL the finished ones are written, and their lanes' next deliveries
    leased, by one statement). Each still does exactly what it would alone: delivered
    and dead ones lease their lane's next delivery, a lane with nothing left goes, and a
    late outcome (its lane taken over by another worker) changes nothing."""
    streamed = [f"t{i}" for i in range(5)]
    late, claimed = await _late_and_busy_lanes(store, streamed, depth=3)
    late_id = late.id
    kinds = {"t0": "dead", "t1": "delivered", "t2": "delivered", "t3": "dead", "t4": "delivered"}
    outcomes = [
        done(
            claimed[task], kinds[task], worker_id="w", status=500 if kinds[task] == "dead" else 200
        )
        for task in streamed
    ]
    outcomes.append(done(claimed["single"], worker_id="w", status=200))
    outcomes.append(done(late, worker_id="w", status=200))
    trips = store.round_trips
    nexts = await asyncio.gather(
        *(
            # No now=: outcomes timed by the store (the database's clock) are the ones
            # that share transactions.
            store.complete_and_claim_next(o, lease_seconds=30, worker_id="w")
            for o in outcomes
        )
    )
    if store.__class__.__name__ == "PostgresStore":
        # One transaction: BEGIN, the locks, every outcome written and the next
        # deliveries leased (one statement), the two dead ones' failure clocks (one
        # each), the lane of "single" dropped (its head, its delete), the leased
        # deliveries read, COMMIT. One statement per outcome would make it 15.
        assert store.round_trips - trips <= 9
    for task, nxt in zip(streamed, nexts, strict=False):
        assert nxt is not None and nxt.task_id == task and nxt.seq == 2
        assert nxt.config is not None
        first = await store.get_delivery(claimed[task].id)
        assert first is not None and first.state.value == kinds[task]
    assert nexts[len(streamed)] is None  # "single" had nothing after it
    assert nexts[-1] is None  # the late outcome leases nothing
    still = await store.get_delivery(late_id)
    assert still is not None and still.state is DeliveryState.PENDING
    # The leases went to w (and x keeps the late lane): nobody else claims now.
    assert await store.claim_due(10, lease_seconds=30, worker_id="y", now=NOW + 32) == []
    stats = await store.stats(now=NOW + 32)
    assert stats.pending == 5 * 2 + 1 and stats.leased == 6


async def test_delivered_outcomes_together_hand_out_their_lanes_next_deliveries(
    store: Store,
) -> None:
    """The common case of a busy outbox: delivered outcomes arrive together, each lane
    has a next delivery due. Each worker gets its lane's next delivery with its config;
    on PostgreSQL the whole batch is one statement after the locks."""
    tasks = [f"t{i}" for i in range(6)]
    for task in tasks:
        await store.put_config(config(task, id="a", url=f"http://127.0.0.1:9001/{task}"))
        for _ in range(2):
            await enqueue(store, task)
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert sorted(d.task_id for d in claimed) == tasks
    trips = store.round_trips
    nexts = await asyncio.gather(
        *(
            store.complete_and_claim_next(
                done(d, worker_id="w", status=200), lease_seconds=30, worker_id="w"
            )
            for d in claimed
        )
    )
    if store.__class__.__name__ == "PostgresStore":
        # BEGIN, the locks, the outcomes written and the next deliveries leased and
        # read (one statement), COMMIT.
        assert store.round_trips - trips == 4
    for d, nxt in zip(claimed, nexts, strict=True):
        assert nxt is not None and nxt.task_id == d.task_id and nxt.seq == 2
        assert nxt.state is DeliveryState.PENDING and nxt.attempts == 0
        assert nxt.config is not None and nxt.config.url.endswith(f"/{d.task_id}")
        assert nxt.body == (await store.get_delivery(nxt.id)).body  # type: ignore[union-attr]
        first = await store.get_delivery(d.id)
        assert first is not None and first.state is DeliveryState.DELIVERED
    assert await store.claim_due(10, lease_seconds=30, worker_id="y", now=NOW) == []


async def test_outcomes_that_end_a_chain_hand_their_lanes_back_together(
    store: Store,
) -> None:
    """Outcomes recorded without leasing the next delivery (a worker's chain of a lane
    ends, and the lane goes back behind the others) also share a transaction: each lane
    points at its next delivery, due now and leased to no one; a lane with nothing
    left goes; a late outcome changes nothing. On PostgreSQL the finished ones, and
    their lanes, are one statement."""
    busy = [f"t{i}" for i in range(4)]
    late, claimed = await _late_and_busy_lanes(store, busy, depth=2)
    late_id = late.id
    kinds = {"t0": "delivered", "t1": "dead", "t2": "delivered", "t3": "delivered"}
    outcomes = [
        done(claimed[t], kinds[t], worker_id="w", status=200 if kinds[t] == "delivered" else 500)
        for t in busy
    ]
    outcomes.append(done(claimed["single"], worker_id="w", status=200))
    trips = store.round_trips
    # No now=: outcomes timed by the store (the database's clock) share transactions.
    await asyncio.gather(*(store.complete([o]) for o in outcomes))
    if store.__class__.__name__ == "PostgresStore":
        # BEGIN, the locks, the outcomes written and their lanes moved on (one
        # statement), the dead one's failure clock, the lane of "single" dropped (its
        # head, its delete), COMMIT. Alone, each would be a transaction of its own.
        assert store.round_trips - trips == 7
    await store.complete([done(late, worker_id="w", status=200)])
    still = await store.get_delivery(late_id)
    assert still is not None and still.state is DeliveryState.PENDING
    for task in busy:
        first = await store.get_delivery(claimed[task].id)
        assert first is not None and first.state.value == kinds[task]
    # The lanes are due at once and leased to no one: another worker claims each
    # lane's next delivery ("single" has nothing left; x's lease on the late lane, on
    # the test's clock, ran out long before the real one).
    now = time.time() + 1
    nexts = await store.claim_due(10, lease_seconds=30, worker_id="y", now=now)
    assert sorted((d.task_id, d.seq) for d in nexts) == [("late", 1)] + [(t, 2) for t in busy]
    assert all(d.config is not None for d in nexts)
    stats = await store.stats(now=now)
    assert stats.pending == len(busy) + 1 and stats.leased == len(busy) + 1


async def test_a_fan_out_writes_its_seq_deliveries_and_lanes_together(store: Store) -> None:
    """A publish to three configs: one seq, a delivery each, a lane each (opened once).
    Where statements cost a round trip (PostgreSQL), the seq, the deliveries and the
    lanes are one statement, and the wake-up goes with the commit."""
    for name in ("a", "b", "c"):
        await store.put_config(config(id=name, url=f"http://127.0.0.1:{9000 + ord(name)}/h"))
    trips = store.round_trips
    seq, first = await enqueue(store)
    if store.__class__.__name__ == "PostgresStore":
        # BEGIN, the task's lock, its configs, the fan-out, the notification + COMMIT.
        assert store.round_trips - trips == 5
    seq2, second = await enqueue(store)
    assert (seq, seq2) == (1, 2) and len(first) == len(second) == 3
    for delivery_id in first + second:
        d = await store.get_delivery(delivery_id)
        assert d is not None and d.state is DeliveryState.PENDING and d.task_id == "task-1"
    claimed = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert sorted(d.id for d in claimed) == sorted(first)  # each lane's head: seq 1
    assert {d.seq for d in claimed} == {1}


async def test_purge_removes_only_old_finished_deliveries(store: Store) -> None:
    await store.put_config(config(id="a"))
    for _ in range(3):
        await enqueue(store)
    (d1,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d1)], now=NOW)
    (d2,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d2, "dead", error="x")], now=NOW + 100)
    assert await store.purge(DeliveryState.DELIVERED, updated_before=NOW) == 0
    assert await store.purge(DeliveryState.DELIVERED, updated_before=NOW + 1) == 1
    assert await store.get_delivery(d1.id) is None
    assert await store.purge(DeliveryState.DEAD, updated_before=NOW + 50) == 0
    assert await store.purge(DeliveryState.DEAD, updated_before=NOW + 101) == 1
    with pytest.raises(ValueError):
        await store.purge(DeliveryState.PENDING, updated_before=NOW + 1000)
    stats = await store.stats(now=NOW)
    assert stats.pending == 1 and stats.dead == 0 and stats.delivered == 0


async def test_a_late_outcome_from_a_configs_old_url_leaves_its_new_registration_alone(
    store: Store,
) -> None:
    # The client moved its webhook (same config id, new URL) while a request to the old
    # URL was on the wire: that request's 410 (or its failure clock) is about the old
    # URL, and must not disable the new registration (which would dead-letter what is
    # queued for it, and queue nothing more).
    old = "http://127.0.0.1:9/old"
    await store.put_config(config(id="a", url=old))
    await enqueue(store)
    await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.put_config(config(id="a", url="http://127.0.0.1:9/new"))
    await store.complete(
        [
            done(
                d,
                "dead",
                status=410,
                disable_config="receiver answered 410 Gone",
                config_failing_since=NOW - 100,
                config_url=old,
            )
        ],
        now=NOW,
    )
    moved = await store.get_config("task-1", "a", "alice")
    assert moved is not None and moved.enabled and moved.failing_since is None
    (nxt,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    assert nxt.seq == 2 and nxt.state is DeliveryState.PENDING
    # From the URL it has now, the same answer does disable it.
    await store.complete(
        [done(nxt, "dead", status=410, disable_config="gone", config_url=moved.url)], now=NOW
    )
    gone = await store.get_config("task-1", "a", "alice")
    assert gone is not None and not gone.enabled


async def test_a_config_moved_to_another_url_is_tried_there_at_once(store: Store) -> None:
    # The old URL's backoff (up to 10 h with the default schedule) and retry steps are
    # not the new URL's: what waits for the config is due now, its steps reset. The
    # same URL registered again (a client that re-registers each session) keeps them.
    # (On the real clock: registration takes no ``now``.)
    base = time.time()
    await store.put_config(config(id="a", url="http://127.0.0.1:9/old"))
    for _ in range(2):
        await store.enqueue("task-1", "statusUpdate", body_for, new_id=ids(), now=base)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=base)
    await store.complete(
        [done(d, "retry", status=503, error="HTTP 503", next_attempt_at=base + 36_000)],
        now=base,
    )
    await store.put_config(config(id="a", url="http://127.0.0.1:9/old"))
    assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=base + 60) == []
    await store.put_config(config(id="a", url="http://127.0.0.1:9/new"))
    (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=base + 60)
    assert again.id == d.id and again.rounds == 0 and again.attempts == 1
    assert again.config is not None and again.config.url.endswith("/new")


async def test_stats_can_leave_the_delivered_count_out(store: Store) -> None:
    # The metrics scrape and the health check: every other count, not the delivered one
    # (it reads every retained delivered row).
    await store.put_config(config(id="a"))
    for _ in range(3):
        await enqueue(store)
    (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
    await store.complete([done(d)], now=NOW)
    full = await store.stats(now=NOW)
    queue = await store.stats(now=NOW, count_delivered=False)
    assert full.delivered == 1 and queue.delivered is None
    assert (
        (queue.pending, queue.due, queue.leased, queue.dead)
        == (
            full.pending,
            full.due,
            full.leased,
            full.dead,
        )
        == (2, 1, 0, 0)
    )
    assert queue.oldest_pending_created_at == full.oldest_pending_created_at


async def test_configs_of_tasks_finished_long_ago_are_purged_once_settled(store: Store) -> None:
    """The retention of push configs: a task whose final event is older than the cut-off
    loses its configs and counter, unless a delivery is pending or dead (a dead letter
    keeps its config to be replayed)."""
    for task in ("done", "dead", "pending", "working", "recent"):
        await store.put_config(config(task, id="a"))
        await store.put_config(config(task, id="b", owner="bob"))
    for task in ("done", "dead", "pending"):
        await store.enqueue(task, "statusUpdate", body_for, new_id=ids(), now=NOW)
        await store.enqueue(task, "statusUpdate", body_for, new_id=ids(), now=NOW, final=True)
    await store.enqueue("working", "statusUpdate", body_for, new_id=ids(), now=NOW)
    await store.enqueue("recent", "task", body_for, new_id=ids(), now=NOW + 500, final=True)
    # Settle everything of "done" and "recent", dead-letter one delivery of "dead".
    for _ in range(4):
        claimed = await store.claim_due(100, lease_seconds=30, worker_id="w", now=NOW + 1000)
        outcomes = [
            done(d, "dead", error="x") if d.task_id == "dead" and d.seq == 2 else done(d)
            for d in claimed
            if d.task_id != "pending"
        ]
        await store.complete(outcomes, now=NOW + 1000)
    assert await store.purge_final_tasks(final_before=NOW) == 0  # finished at NOW
    assert await store.purge_final_tasks(final_before=NOW + 1, limit=5) == 1
    assert await store.configs_for_task("done") == []
    assert await store.get_config("done", "a", "alice") is None
    assert await store.list_configs("done", "bob") == ([], None)
    for task in ("dead", "pending", "working", "recent"):
        assert len(await store.configs_for_task(task)) == 2, task
    # A dead letter replayed and delivered, the task's configs go too.
    dead = await store.list_deliveries(DeliveryFilter(state=DeliveryState.DEAD))
    assert len(dead) == 2  # seq 2 to both configs
    assert await store.replay([d.id for d in dead], now=NOW + 2000) == 2
    again = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 2000)
    await store.complete([done(d) for d in again], now=NOW + 2000)
    assert await store.purge_final_tasks(final_before=NOW + 1) == 1
    assert await store.configs_for_task("dead") == []
    # The delivered deliveries stay until their own retention; an event published
    # after the purge (none should come after a final one) goes nowhere.
    assert await store.list_deliveries(DeliveryFilter(task_id="done"))
    assert await store.enqueue("done", "statusUpdate", body_for, new_id=ids(), now=NOW) == (
        0,
        [],
    )
    assert await store.purge_final_tasks(final_before=NOW + 10_000) == 1  # "recent"
    assert len(await store.configs_for_task("pending")) == 2
    # The counter stays: a config registered again gets its snapshot after the old seqs.
    again_config = await store.put_config(
        config("done", id="c"),
        initial=InitialDelivery("task", body_for, ids(), now=NOW + 20_000, final=True),
    )
    (snapshot,) = await store.list_deliveries(
        DeliveryFilter(task_id="done", config_key=again_config.key)
    )
    assert snapshot.seq == 3
    for d in await store.claim_due(100, lease_seconds=30, worker_id="w", now=NOW + 20_000):
        if d.task_id == "done":
            await store.complete([done(d)], now=NOW + 20_000)
    assert await store.purge_final_tasks(final_before=NOW + 20_000) == 0  # final just now
    assert await store.purge_final_tasks(final_before=NOW + 20_001) == 1  # its snapshot
    # A task id used again after its end: a non-final event forgets the end.
    await store.put_config(config("reused", id="a"))
    await store.enqueue("reused", "statusUpdate", body_for, new_id=ids(), now=NOW, final=True)
    await store.enqueue("reused", "statusUpdate", body_for, new_id=ids(), now=NOW + 1)
    for at in (NOW + 30_000, NOW + 30_100):  # both events delivered, one lane
        for d in await store.claim_due(100, lease_seconds=30, worker_id="w", now=at):
            if d.task_id == "reused":
                await store.complete([done(d)], now=at)
    assert (
        await store.list_deliveries(DeliveryFilter(task_id="reused", state=DeliveryState.PENDING))
        == []
    )
    assert await store.purge_final_tasks(final_before=NOW + 40_000) == 0
    assert len(await store.configs_for_task("reused")) == 1


async def test_a_final_event_counts_when_every_config_of_the_task_is_disabled(
    store: Store,
) -> None:
    """Nothing is queued (and no seq used) for a task whose configs are all disabled,
    but its final event starts their retention all the same, and a later event that is
    not final forgets it; a task with no configs records nothing."""
    keys = {}
    for task in ("disabled", "reused"):
        keys[task] = (await store.put_config(config(task, id="a"))).key
        assert await store.set_config_enabled(keys[task], False, "endpoint gone")
        assert await store.enqueue(
            task, "statusUpdate", body_for, new_id=ids(), now=NOW, final=True
        ) == (0, [])
    await store.enqueue("disabled", "task", body_for, new_id=ids(), now=NOW + 50, final=True)
    await store.enqueue("reused", "statusUpdate", body_for, new_id=ids(), now=NOW + 1)
    await store.enqueue("none", "statusUpdate", body_for, new_id=ids(), now=NOW, final=True)
    assert await store.purge_final_tasks(final_before=NOW) == 0  # finished at NOW
    assert await store.purge_final_tasks(final_before=NOW + 1) == 1
    assert await store.get_config("disabled", "a", "alice") is None
    assert await store.get_config("reused", "a", "alice") is not None
    # Enabled again, the config gets the task's first seq.
    assert await store.set_config_enabled(keys["reused"], True)
    assert (await store.enqueue("reused", "statusUpdate", body_for, new_id=ids(), now=NOW))[0] == 1


async def test_an_idempotency_key_makes_a_repeated_enqueue_return_the_first_result(
    store: Store,
) -> None:
    await store.put_config(config(id="a"))
    first = await enqueue(store, idempotency_key="agent/task-1/k1")
    again = await enqueue(store, idempotency_key="agent/task-1/k1")
    assert again == first
    other = await enqueue(store, idempotency_key="agent/task-1/k2")
    assert other[0] == first[0] + 1
    listed = await store.list_deliveries(DeliveryFilter(task_id="task-1"))
    assert len(listed) == 2  # the repeat queued nothing
    assert await store.purge_idempotency_keys(created_before=NOW + 1, limit=1) == 1
    assert await store.purge_idempotency_keys(created_before=NOW + 1, limit=5) == 1
    after = await enqueue(store, idempotency_key="agent/task-1/k1")
    assert after[0] == other[0] + 1  # forgotten: a new event


async def test_an_expired_idempotency_key_counts_as_new_before_any_purge(store: Store) -> None:
    # The window held only as long as the hourly purge took to run (or for ever, with
    # the purge turned off).
    await store.put_config(config(id="a"))
    first = await enqueue(store, idempotency_key="agent/task-1/k1", idempotency_since=NOW - 60)
    again = await enqueue(store, idempotency_key="agent/task-1/k1", idempotency_since=NOW)
    assert again == first  # first seen at NOW: still held
    later = await enqueue(store, idempotency_key="agent/task-1/k1", idempotency_since=NOW + 1)
    assert later[0] == first[0] + 1  # expired: a new event, and the key's new result
    repeat = await enqueue(store, idempotency_key="agent/task-1/k1", idempotency_since=NOW)
    assert repeat == later


async def test_a_task_whose_versions_are_known_is_rendered_before_its_transaction(
    store: Store,
) -> None:
    """The first publish of a task renders inside the transaction (the store learns its
    configs' protocol versions there); later ones render those versions ahead of it, in
    the caller's task (SQLite's transactions run in its writer's task), once per version."""
    await store.put_config(config("t-render"))
    await store.put_config(config("t-render", version="0.3"))
    calls: list[tuple[str, asyncio.Task[object] | None]] = []

    def render(version: str) -> bytes:
        calls.append((version, asyncio.current_task()))
        return b"{}"

    await store.enqueue("t-render", "statusUpdate", render, new_id=ids())
    assert sorted(v for v, _ in calls) == ["0.3", "1.0"]
    calls.clear()
    seq, delivered = await store.enqueue("t-render", "statusUpdate", render, new_id=ids())
    assert seq == 2 and len(delivered) == 2
    assert sorted(v for v, _ in calls) == ["0.3", "1.0"]
    assert {task for _, task in calls} == {asyncio.current_task()}


async def test_a_body_that_fails_ahead_fails_only_where_it_would_be_queued(store: Store) -> None:
    """A body rendered ahead that cannot be rendered is left to the transaction: with no
    enabled config left, nothing is queued and nothing fails, as before any was known."""
    stored = await store.put_config(config("t-bad"))
    await store.enqueue("t-bad", "statusUpdate", lambda v: b"{}", new_id=ids())
    await store.set_config_enabled(stored.key, False, "test")

    def broken(version: str) -> bytes:
        raise ValueError("the event cannot be sent as JSON")

    assert await store.enqueue("t-bad", "statusUpdate", broken, new_id=ids()) == (0, [])
    await store.set_config_enabled(stored.key, True)
    with pytest.raises(ValueError, match="cannot be sent as JSON"):
        await store.enqueue("t-bad", "statusUpdate", broken, new_id=ids())


async def test_a_rate_bucket_hands_out_its_capacity_then_its_refill(store: Store) -> None:
    """The shared token bucket (one row per endpoint): full at first, never more than
    asked or held, refilled at its rate; when empty, the wait until the next token."""
    t = 1_000_000.0
    take = store.take_tokens
    assert await take("https://a:443", rate=2.0, capacity=3.0, want=2, now=t) == (2, 0.0)
    assert await take("https://a:443", rate=2.0, capacity=3.0, want=5, now=t) == (1, 0.0)
    granted, wait = await take("https://a:443", rate=2.0, capacity=3.0, want=1, now=t)
    assert granted == 0 and wait == pytest.approx(0.5)
    granted, wait = await take("https://a:443", rate=2.0, capacity=3.0, want=1, now=t + 0.25)
    assert granted == 0 and wait == pytest.approx(0.25)
    assert await take("https://a:443", rate=2.0, capacity=3.0, want=4, now=t + 0.5) == (1, 0.0)
    # Idle for long: refilled up to its capacity only.
    assert await take("https://a:443", rate=2.0, capacity=3.0, want=9, now=t + 100) == (3, 0.0)
    # Buckets are per endpoint; a clock that steps back refills nothing.
    assert await take("https://b:443", rate=1.0, capacity=1.0, want=1, now=t + 100) == (1, 0.0)
    granted, _ = await take("https://b:443", rate=1.0, capacity=1.0, want=1, now=t + 50)
    assert granted == 0
    with pytest.raises(ValueError, match="rate > 0"):
        await take("https://a:443", rate=0.0, capacity=1.0, want=1)
