"""B7: the console's deliveries page on a big outbox, while B2's load runs beside it.

On SQLite and on PostgreSQL: 1,000,000 deliveries (20,000 tasks, one config each, 200
endpoints, spread over 30 days; 7 % dead) and 3,000,000 attempts are written straight
into the tables. A notifier then runs on that database with the console mounted, and
publishes B2's load (500 events/s, 50 tasks, to a sink in its own process) while a
signed-in client asks the console for filtered pages of 50 (by task, config, endpoint,
state, time, and combinations, some of them the next page) one after another over HTTP.
Latency = the page's whole answer (query and HTML), read by the client.

Target: p99 <= 100 ms on each backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.ids import _ALPHABET
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import TaskPushNotificationConfig
from a2a_push.signing import KeySet
from a2a_push.store import Store

from .b2_latency import paced_publish
from .b6_gateway import _postgres_problem
from .common import (
    Sink,
    header,
    machine_line,
    percentile,
    progress,
    say,
    table,
    temp_dir,
    verdict,
)

TAG = "b7"
DSN = os.environ.get("A2A_PUSH_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
ADMIN_KEY = "bench-console-admin-key-0123456789"
DAY = 86400.0


@dataclass
class B7Params:
    deliveries: int = 1_000_000
    attempts_per_delivery: int = 3
    tasks: int = 20_000
    endpoints: int = 200
    dead_share: float = 0.07
    days: float = 30.0
    requests: int = 300  # pages asked per backend
    load_rate: float = 500.0  # B2's load
    target_p99_ms: float = 100.0


# ---- the data ---------------------------------------------------------------------------


def _delivery_id(at: float, rng: random.Random) -> str:
    """As a2a_push.ids.new_delivery_id makes them at time ``at``."""
    value = (int(at * 1000) << 80) | rng.getrandbits(80)
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "msg_" + "".join(reversed(chars))


@dataclass
class Data:
    tasks: list[str]
    configs: list[str]
    endpoints: list[str]
    start: float
    end: float


def _configs(p: B7Params, now: float) -> tuple[Data, list[tuple[Any, ...]]]:
    endpoints = [f"https://hooks-{e}.example:443" for e in range(p.endpoints)]
    tasks = [f"task-{t:06d}" for t in range(p.tasks)]
    configs = [uuid.uuid4().hex for _ in tasks]
    rows = [
        (
            configs[t],
            "cfg",
            tasks[t],
            "bench",
            f"{endpoints[t % p.endpoints]}/hook",
            endpoints[t % p.endpoints],
            "1.0",
            now - p.days * DAY,
        )
        for t in range(p.tasks)
    ]
    return Data(tasks, configs, endpoints, now - p.days * DAY, now), rows


def _batches(p: B7Params, data: Data, batch: int = 50_000):  # type: ignore[no-untyped-def]
    """(delivery rows, attempt rows) in batches, in creation order."""
    rng = random.Random(7)
    span = data.end - data.start
    per_task = max(1, p.deliveries // p.tasks)
    seqs = [0] * p.tasks
    deliveries: list[tuple[Any, ...]] = []
    attempts: list[tuple[Any, ...]] = []
    for n in range(p.deliveries):
        at = data.start + span * n / p.deliveries
        t = rng.randrange(p.tasks) if n % per_task else n // per_task % p.tasks
        seqs[t] += 1
        dead = rng.random() < p.dead_share
        d_id = _delivery_id(at, rng)
        endpoint = data.endpoints[t % p.endpoints]
        body = (
            f'{{"statusUpdate":{{"taskId":"{data.tasks[t]}","contextId":"c",'
            f'"status":{{"state":"TASK_STATE_WORKING"}},"metadata":{{"n":{n}}}}}}}'
        ).encode()
        state = "dead" if dead else "delivered"
        deliveries.append(
            (
                d_id,
                data.configs[t],
                data.tasks[t],
                seqs[t],
                "statusUpdate",
                body,
                state,
                p.attempts_per_delivery,
                at + 60,
                at,
                at + 60,
                410 if dead else 200,
                "HTTP 410" if dead else None,
                endpoint,
            )
        )
        for a in range(p.attempts_per_delivery):
            last = a == p.attempts_per_delivery - 1
            verdict_ = ("dead" if dead else "delivered") if last else "retry"
            attempts.append(
                (
                    d_id,
                    at + 20 * a,
                    a + 1,
                    0.05 + rng.random() / 10,
                    endpoint,
                    verdict_,
                    (410 if dead else 200) if last else 503,
                    None,
                    None,
                    None if last else at + 20 * (a + 1),
                    b'{"ok": false}' if not last else b"",
                )
            )
        if len(deliveries) >= batch:
            yield deliveries, attempts
            deliveries, attempts = [], []
    if deliveries:
        yield deliveries, attempts


_DELIVERY_COLUMNS = (
    "id",
    "config_key",
    "task_id",
    "seq",
    "kind",
    "body",
    "state",
    "attempts",
    "next_attempt_at",
    "created_at",
    "updated_at",
    "last_status",
    "last_error",
    "endpoint",
)
_ATTEMPT_COLUMNS = (
    "delivery_id",
    "started_at",
    "number",
    "duration",
    "endpoint",
    "verdict",
    "status",
    "error_class",
    "error",
    "retry_at",
    "response",
)
_CONFIG_COLUMNS = (
    "key",
    "id",
    "task_id",
    "owner",
    "url",
    "endpoint",
    "protocol_version",
    "created_at",
)


def _seed_sqlite(path: Path, p: B7Params, now: float) -> Data:
    data, configs = _configs(p, now)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA journal_mode = WAL")
    with conn:
        conn.executemany(
            f"INSERT INTO configs ({', '.join(_CONFIG_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(_CONFIG_COLUMNS))})",
            configs,
        )
    written = 0
    for deliveries, attempts in _batches(p, data):
        with conn:
            conn.executemany(
                f"INSERT INTO deliveries ({', '.join(_DELIVERY_COLUMNS)}) VALUES "
                f"({', '.join('?' * len(_DELIVERY_COLUMNS))})",
                deliveries,
            )
            conn.executemany(
                f"INSERT INTO attempts ({', '.join(_ATTEMPT_COLUMNS)}) VALUES "
                f"({', '.join('?' * len(_ATTEMPT_COLUMNS))})",
                attempts,
            )
        written += len(deliveries)
        if written % 200_000 == 0:
            progress(TAG, f"SQLite: {written:,}/{p.deliveries:,} deliveries written")
    conn.execute("ANALYZE")
    conn.close()
    return data


async def _seed_postgres(schema: str, p: B7Params, now: float) -> Data:
    import asyncpg

    data, configs = _configs(p, now)
    conn = await asyncpg.connect(DSN)
    try:
        await conn.copy_records_to_table(
            "configs", records=configs, columns=list(_CONFIG_COLUMNS), schema_name=schema
        )
        written = 0
        for deliveries, attempts in _batches(p, data):
            await conn.copy_records_to_table(
                "deliveries",
                records=deliveries,
                columns=list(_DELIVERY_COLUMNS),
                schema_name=schema,
            )
            await conn.copy_records_to_table(
                "attempts", records=attempts, columns=list(_ATTEMPT_COLUMNS), schema_name=schema
            )
            written += len(deliveries)
            if written % 200_000 == 0:
                progress(TAG, f"PostgreSQL: {written:,}/{p.deliveries:,} deliveries written")
        # As a database whose rows were written over 30 days would be: vacuumed (visibility
        # map set, hint bits written) and analysed. Without it, PostgreSQL's autovacuum of
        # 4,000,000 fresh rows runs during the measurement and measures itself.
        progress(TAG, "PostgreSQL: VACUUM (ANALYZE), as autovacuum would have by now")
        for table_name in ("configs", "deliveries", "attempts"):
            await conn.execute(f'VACUUM (ANALYZE) "{schema}".{table_name}')
    finally:
        await conn.close()
    return data


# ---- the measurement -------------------------------------------------------------------


def _queries(data: Data, rng: random.Random) -> list[tuple[str, dict[str, str]]]:
    def when(at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(at))

    span = data.end - data.start
    return [
        ("task", {"task": rng.choice(data.tasks)}),
        ("config", {"config": rng.choice(data.configs)}),
        ("endpoint", {"endpoint": rng.choice(data.endpoints)}),
        ("state=dead", {"state": "dead"}),
        ("endpoint + dead", {"endpoint": rng.choice(data.endpoints), "state": "dead"}),
        ("since (time)", {"since": when(data.start + rng.random() * span)}),
        (
            "time range + dead",
            {
                "since": when(t := data.start + rng.random() * (span - DAY)),
                "until": when(t + DAY),
                "state": "dead",
            },
        ),
        ("task + delivered", {"task": rng.choice(data.tasks), "state": "delivered"}),
    ]


NEXT = re.compile(r'href="/console/deliveries\?([^"]+)" rel="next"')


async def _measure(base: str, data: Data, p: B7Params) -> dict[str, list[float]]:
    """Filtered pages asked one after another; latencies (ms) by filter kind."""
    from html import unescape

    rng = random.Random(11)
    jar = aiohttp.CookieJar(unsafe=True)
    found: dict[str, list[float]] = {}
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        async with session.get(f"{base}/console/login") as resp:
            token = re.search(r'name="login" value="([0-9a-f]+)"', await resp.text())
        assert token is not None
        async with session.post(
            f"{base}/console/login", data={"login": token.group(1), "key": ADMIN_KEY}
        ) as resp:
            assert resp.status == 200, await resp.text()
        asked = 0
        while asked < p.requests:
            for kind, query in _queries(data, rng):
                started = time.perf_counter()
                async with session.get(f"{base}/console/deliveries", params=query) as resp:
                    text = await resp.text()
                    assert resp.status == 200, text[:300]
                found.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
                asked += 1
                following = NEXT.search(text)
                if following and rng.random() < 0.5:  # the next page, as a user would
                    started = time.perf_counter()
                    url = f"{base}/console/deliveries?{unescape(following.group(1))}"
                    async with session.get(url) as resp:
                        await resp.read()
                    found.setdefault("next page", []).append((time.perf_counter() - started) * 1000)
                    asked += 1
            if asked and asked % 100 < 10:
                progress(TAG, f"{asked}/{p.requests} pages asked")
    return found


async def _run_backend(
    store: Store, data: Data, p: B7Params, sink: Sink
) -> tuple[dict[str, list[float]], float]:
    notifier = PushNotifier(
        store,
        issuer="http://bench.local",
        keyset=KeySet.generate(),
        address_policy=AddressPolicy(allow_loopback=True),
    )
    app = web.Application()
    notifier.add_console(app, admin_keys=[ADMIN_KEY])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with notifier:
            load_tasks = [f"load-{t}" for t in range(50)]
            for task_id in load_tasks:
                await notifier.register_config(
                    TaskPushNotificationConfig(url=sink.url("/b7"), token="bench-token"),
                    owner="bench",
                    task_id=task_id,
                )
            published: list[float] = []
            load = asyncio.create_task(
                paced_publish(
                    notifier,
                    load_tasks,
                    rate=p.load_rate,
                    seconds=600,
                    starts={},
                    publish_ms=published,
                    tag=TAG,
                    label="B2 load",
                )
            )
            await asyncio.sleep(1.0)  # the load is running
            started = time.perf_counter()
            try:
                found = await _measure(base, data, p)
            finally:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load  # its publishes in flight end before the notifier stops
            elapsed = time.perf_counter() - started
            rate = len(published) / max(elapsed, 1e-9)
    finally:
        await runner.cleanup()
    return found, rate


def _rows(backend: str, found: dict[str, list[float]]) -> list[list[object]]:
    rows: list[list[object]] = []
    every: list[float] = []
    for kind, values in found.items():
        values.sort()
        every += values
        rows.append(
            [backend, kind, len(values), percentile(values, 50), percentile(values, 99), values[-1]]
        )
    every.sort()
    rows.append(
        [backend, "all pages", len(every), percentile(every, 50), percentile(every, 99), every[-1]]
    )
    return rows


async def run(p: B7Params | None = None) -> dict[str, Any]:
    p = p or B7Params()
    header(
        "B7  the console's filtered deliveries page on a big outbox, under B2's load",
        [
            machine_line(),
            f"{p.deliveries:,} deliveries ({p.tasks:,} tasks, {p.endpoints} endpoints, "
            f"{p.days:.0f} days, {p.dead_share:.0%} dead) and "
            f"{p.deliveries * p.attempts_per_delivery:,} attempts, per backend",
            f"while a notifier on the same database publishes {p.load_rate:.0f} events/s "
            "(B2's load) to a sink; pages of 50 over HTTP, one after another",
        ],
    )
    rows: list[list[object]] = []
    p99s: dict[str, float] = {}
    loads: dict[str, float] = {}
    now = time.time()
    async with Sink() as sink:
        with temp_dir("a2a-push-b7-") as tmp:
            from a2a_push.store.sqlite import SQLiteStore

            path = tmp / "b7.db"
            store: Store = SQLiteStore(path)
            await store.open()
            await store.close()
            progress(TAG, "SQLite: writing the outbox")
            t0 = time.perf_counter()
            data = _seed_sqlite(path, p, now)
            progress(TAG, f"SQLite: written in {time.perf_counter() - t0:.0f} s")
            found, loads["SQLite"] = await _run_backend(SQLiteStore(path), data, p, sink)
            rows += _rows("SQLite", found)
            p99s["SQLite"] = percentile(sorted(v for vs in found.values() for v in vs), 99)

        problem = await _postgres_problem()
        if problem is None:
            import asyncpg

            from a2a_push.store.postgres import PostgresStore

            schema = f"a2a_push_bench_{uuid.uuid4().hex[:12]}"
            conn = await asyncpg.connect(DSN)
            await conn.execute(f'CREATE SCHEMA "{schema}"')
            await conn.close()
            try:
                store = PostgresStore(DSN, schema=schema)
                await store.open()
                await store.close()
                progress(TAG, "PostgreSQL: writing the outbox")
                t0 = time.perf_counter()
                data = await _seed_postgres(schema, p, now)
                progress(TAG, f"PostgreSQL: written in {time.perf_counter() - t0:.0f} s")
                found, loads["PostgreSQL"] = await _run_backend(
                    PostgresStore(DSN, schema=schema), data, p, sink
                )
                rows += _rows("PostgreSQL", found)
                p99s["PostgreSQL"] = percentile(sorted(v for vs in found.values() for v in vs), 99)
            finally:
                conn = await asyncpg.connect(DSN)
                await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
                await conn.close()
        else:
            say(f"  PostgreSQL not reachable ({problem}): its rows are not measured")

    say()
    say(table(["backend", "filter", "pages", "p50 ms", "p99 ms", "max ms"], rows))
    say(
        "  B2's load while measured: "
        + ", ".join(f"{name} {rate:.0f} events/s published" for name, rate in loads.items())
    )
    ok = bool(p99s) and all(v <= p.target_p99_ms for v in p99s.values())
    say()
    say(
        f"  target: a filtered page of 50 in <= {p.target_p99_ms:.0f} ms p99 on each backend: "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in p99s.items())
        + f"   {verdict(ok and len(p99s) == 2)}"
    )
    say()
    return {"p99_ms": p99s, "pass": ok and len(p99s) == 2}
