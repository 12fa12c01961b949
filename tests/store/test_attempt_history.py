"""The attempt history's contract, on every backend: what an outcome's attempts become,
how they are read back, cut, purged, and turned off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from a2a_push.store import (
    ATTEMPT_ERROR_CLASSES,
    MAX_ATTEMPT_RESPONSE_BYTES,
    Attempt,
    AttemptVerdict,
    Delivery,
    DeliveryFilter,
    DeliveryState,
    Outcome,
    Store,
    StoreOptions,
)

from ..conftest import BACKENDS, config, ids, make_store

NOW = 1_700_000_000.0
ENDPOINT = "http://127.0.0.1:9"


async def enqueue(store: Store, task_id: str = "task-1") -> str:
    _, (delivery_id,) = await store.enqueue(
        task_id, "statusUpdate", lambda v: b"{}", new_id=ids(), now=NOW
    )
    return delivery_id


async def claim(store: Store, now: float = NOW, worker: str = "w") -> Delivery:
    (d,) = await store.claim_due(1, lease_seconds=30, worker_id=worker, now=now)
    return d


def tried(
    d: Delivery, verdict: AttemptVerdict, n: int = 1, at: float = NOW, **kw: object
) -> Attempt:
    return Attempt(
        delivery_id=d.id,
        number=d.attempts + n,
        started_at=at,
        duration=0.125,
        endpoint=ENDPOINT,
        verdict=verdict,
        **kw,  # type: ignore[arg-type]
    )


def outcome(d: Delivery, kind: str, *history: Attempt, **kw: object) -> Outcome:
    return Outcome(
        d.id,
        d.config_key,
        d.task_id,
        kind,  # type: ignore[arg-type]
        attempts=d.attempts + max(1, len(history)),
        history=history,
        worker_id="w",
        **kw,  # type: ignore[arg-type]
    )


async def test_every_verdict_and_error_class_is_kept_as_written(store: Store) -> None:
    await store.put_config(config(id="a"))
    first = await enqueue(store)
    d = await claim(store)
    # One claim's quick attempts, each without an answer for another reason, then a
    # 503 that ends it with a durable retry.
    failures = [
        tried(
            d,
            "retry",
            n=i + 1,
            at=NOW + i,
            error_class=cls,
            error=f"ConnectError: {cls}",
            retry_at=NOW + i + 1,
        )
        for i, cls in enumerate(ATTEMPT_ERROR_CLASSES)
    ]
    last = tried(
        d,
        "retry",
        n=len(failures) + 1,
        at=NOW + len(failures),
        status=503,
        retry_at=NOW + 300,
        response=b"busy",
    )
    await store.complete(
        [outcome(d, "retry", *failures, last, status=503, next_attempt_at=NOW + 300)], now=NOW
    )
    d = await claim(store, now=NOW + 300)
    delivered = tried(d, "delivered", at=NOW + 300, status=204)
    await store.complete([outcome(d, "delivered", delivered, status=204)], now=NOW + 300)
    assert await store.list_attempts(first) == [*failures, last, delivered]

    await enqueue(store)
    d = await claim(store)
    dead = tried(d, "dead", status=400, response=b'{"error":"bad"}')
    await store.complete([outcome(d, "dead", dead, status=400, error="HTTP 400")], now=NOW)
    assert await store.list_attempts(d.id) == [dead]

    await enqueue(store)
    d = await claim(store)
    gone = tried(d, "gone", status=410)
    await store.complete(
        [outcome(d, "dead", gone, status=410, disable_config="receiver answered 410 Gone")],
        now=NOW,
    )
    assert await store.list_attempts(d.id) == [gone]


async def test_an_unknown_delivery_has_no_attempts(store: Store) -> None:
    assert await store.list_attempts("msg_nothing") == []
    await store.put_config(config(id="a"))
    assert await store.list_attempts(await enqueue(store)) == []  # not tried yet


async def test_the_response_kept_is_its_first_kib_as_received(store: Store) -> None:
    await store.put_config(config(id="a"))
    await enqueue(store)
    d = await claim(store)
    # Compressed bytes stay as they came (gzip's magic first), never decoded.
    body = b"\x1f\x8b\x08\x00" + bytes(range(256)) * 16
    await store.complete(
        [outcome(d, "delivered", tried(d, "delivered", status=200, response=body))]
    )
    (kept,) = await store.list_attempts(d.id)
    assert len(kept.response) == MAX_ATTEMPT_RESPONSE_BYTES == 1024
    assert kept.response == body[:1024]


async def test_attempts_go_when_their_delivery_is_purged(store: Store) -> None:
    await store.put_config(config(id="a"))
    for _ in range(3):
        await enqueue(store)
    d1 = await claim(store)
    await store.complete([outcome(d1, "delivered", tried(d1, "delivered", status=200))], now=NOW)
    d2 = await claim(store)
    await store.complete(
        [outcome(d2, "dead", tried(d2, "dead", status=404), error="HTTP 404")], now=NOW + 100
    )
    d3 = await claim(store, now=NOW + 100)
    await store.complete(
        [outcome(d3, "retry", tried(d3, "retry", status=500), next_attempt_at=NOW + 200)],
        now=NOW + 100,
    )
    assert await store.purge(DeliveryState.DELIVERED, updated_before=NOW + 1) == 1
    assert await store.list_attempts(d1.id) == []
    assert len(await store.list_attempts(d2.id)) == 1  # kept as long as its delivery
    assert await store.purge(DeliveryState.DEAD, updated_before=NOW + 101) == 1
    assert await store.list_attempts(d2.id) == []
    assert len(await store.list_attempts(d3.id)) == 1  # pending: never purged


async def test_a_replayed_delivery_keeps_its_earlier_attempts(store: Store) -> None:
    await store.put_config(config(id="a"))
    delivery_id = await enqueue(store)
    d = await claim(store)
    dead = tried(d, "dead", status=400)
    await store.complete([outcome(d, "dead", dead)], now=NOW)
    assert await store.replay([delivery_id], now=NOW + 10) == 1
    d = await claim(store, now=NOW + 10)
    assert d.attempts == 0  # a replay starts the count again
    again = tried(d, "delivered", at=NOW + 10, status=200)
    await store.complete([outcome(d, "delivered", again)], now=NOW + 10)
    assert await store.list_attempts(delivery_id) == [dead, again]
    assert [a.number for a in await store.list_attempts(delivery_id)] == [1, 1]


async def test_attempts_ride_with_a_lanes_next_lease(store: Store) -> None:
    # The streaming path (complete_and_claim_next, batched on PostgreSQL) records them too.
    await store.put_config(config(id="a"))
    first, second = await enqueue(store), await enqueue(store)
    d = await claim(store, now=None)  # type: ignore[arg-type]
    outcomes = []
    for _ in range(2):
        a = tried(d, "delivered", status=200)
        outcomes.append(a)
        nxt = await store.complete_and_claim_next(
            outcome(d, "delivered", a), lease_seconds=30, worker_id="w"
        )
        if nxt is None:
            break
        d = nxt
    assert await store.list_attempts(first) == outcomes[:1]
    assert await store.list_attempts(second) == outcomes[1:]


async def test_a_late_outcomes_attempt_is_still_recorded(store: Store) -> None:
    # The request was sent, whatever became of the lease: the history says so, while the
    # delivery's state stays the taker's to decide.
    await store.put_config(config(id="a"))
    delivery_id = await enqueue(store)
    late = await claim(store, worker="w")
    await claim(store, now=NOW + 31, worker="x")  # w's lease ran out; x took the lane
    await store.complete([outcome(late, "delivered", tried(late, "delivered", status=200))])
    d = await store.get_delivery(delivery_id)
    assert d is not None and d.state is DeliveryState.PENDING
    assert [a.verdict for a in await store.list_attempts(delivery_id)] == ["delivered"]


async def test_concurrent_outcomes_each_record_their_attempts(store: Store) -> None:
    for t in range(20):
        await store.put_config(config(f"task-{t}"))
        await enqueue(store, f"task-{t}")
    claimed = await store.claim_due(20, lease_seconds=30, worker_id="w")
    await asyncio.gather(
        *(
            store.complete_and_claim_next(
                outcome(d, "delivered", tried(d, "delivered", status=200)),
                lease_seconds=30,
                worker_id="w",
            )
            for d in claimed
        )
    )
    for d in claimed:
        assert len(await store.list_attempts(d.id)) == 1


@pytest.mark.parametrize("kind", BACKENDS)
async def test_the_history_can_be_turned_off(kind: str, tmp_path: Path) -> None:
    async with make_store(kind, tmp_path, StoreOptions(attempt_history=False)) as store:
        await store.put_config(config(id="a"))
        delivery_id = await enqueue(store)
        d = await claim(store)
        trips = store.round_trips
        await store.complete([outcome(d, "delivered", tried(d, "delivered", status=200))])
        off = store.round_trips - trips
        assert await store.list_attempts(delivery_id) == []
        got = await store.get_delivery(delivery_id)
        assert got is not None and got.state is DeliveryState.DELIVERED
    async with make_store(kind, tmp_path / "on") as store:
        await store.put_config(config(id="a"))
        delivery_id = await enqueue(store)
        d = await claim(store)
        trips = store.round_trips
        await store.complete([outcome(d, "delivered", tried(d, "delivered", status=200))])
        # On PostgreSQL the attempts ride in a statement the outcome makes anyway.
        assert store.round_trips - trips == off
        assert len(await store.list_attempts(delivery_id)) == 1


async def test_deliveries_keep_their_endpoint_and_list_by_it(store: Store) -> None:
    a = await store.put_config(config("task-1", url="http://127.0.0.1:9/one?token=x"))
    await store.put_config(config("task-2", url="https://127.0.0.1/two"))
    one, two = await enqueue(store, "task-1"), await enqueue(store, "task-2")
    got = await store.get_delivery(one)
    assert got is not None and got.endpoint == "http://127.0.0.1:9"
    listed = await store.list_deliveries(DeliveryFilter(endpoint="https://127.0.0.1:443"))
    assert [d.id for d in listed] == [two] and listed[0].endpoint == "https://127.0.0.1:443"
    listed = await store.list_deliveries(
        DeliveryFilter(endpoint="http://127.0.0.1:9", state=DeliveryState.PENDING)
    )
    assert [d.id for d in listed] == [one]
    assert await store.list_deliveries(DeliveryFilter(endpoint="http://127.0.0.1:10")) == []
    # The endpoint is the one at enqueue: a config moved elsewhere later keeps its
    # earlier deliveries under the old one.
    await store.put_config(config("task-1", id=a.id, url="http://127.0.0.1:10/moved"))
    again = await store.get_delivery(one)
    assert again is not None and again.endpoint == "http://127.0.0.1:9"


# ---- upgrading a store made before the history -----------------------------------------

INSERT_CONFIG = (
    "INSERT INTO configs (key, id, task_id, owner, url, endpoint, protocol_version, "
    "created_at) VALUES ('k1', 'c1', 't1', 'o', 'https://hooks.example.com/x?token=s', "
    "'https://hooks.example.com:443', '1.0', 1)"
)
INSERT_DELIVERY = (
    "INSERT INTO deliveries (id, config_key, task_id, seq, kind, body, state, "
    "next_attempt_at, created_at, updated_at) VALUES "
    "('msg_old', 'k1', 't1', 1, 'task', {body}, 'dead', 1, 1, 1)"
)


async def test_a_sqlite_store_from_before_the_history_is_upgraded(tmp_path: Path) -> None:
    import sqlite3

    from a2a_push.database import migrations
    from a2a_push.database.sql import _split_statements
    from a2a_push.store import SQLiteStore

    db = tmp_path / "old.db"
    with sqlite3.connect(db, isolation_level=None) as conn:
        for version, script in migrations("sqlite"):
            if version <= 4:
                for statement in _split_statements(script):
                    conn.execute(statement)
        conn.execute("PRAGMA user_version = 4")
        conn.execute(INSERT_CONFIG)
        conn.execute(INSERT_DELIVERY.format(body="x'7b7d'"))
    async with SQLiteStore(db) as store:
        old = await store.get_delivery("msg_old")
        assert old is not None and old.endpoint == "https://hooks.example.com:443"
        assert await store.list_attempts("msg_old") == []
        listed = await store.list_deliveries(
            DeliveryFilter(endpoint="https://hooks.example.com:443")
        )
        assert [d.id for d in listed] == ["msg_old"]


async def test_a_postgresql_store_from_before_the_history_is_upgraded() -> None:
    import asyncpg

    from a2a_push.database import migrations
    from a2a_push.store.postgres import PostgresStore

    from ..conftest import postgres_schema, require_postgres

    dsn, schema = require_postgres(), postgres_schema()
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        for version, script in migrations("postgres"):
            if version <= 3:
                await conn.execute(script)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
        await conn.execute(INSERT_CONFIG)
        await conn.execute(INSERT_DELIVERY.format(body="'\\x7b7d'::bytea"))
    finally:
        await conn.close()
    async with PostgresStore(dsn, schema=schema) as store:
        old = await store.get_delivery("msg_old")
        assert old is not None and old.endpoint == "https://hooks.example.com:443"
        assert await store.list_attempts("msg_old") == []
        assert await store.purge(DeliveryState.DEAD, updated_before=2) == 1
