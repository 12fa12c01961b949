"""B6: the gateway on PostgreSQL with 1 and 2 worker processes, beside embedded SQLite.

One backlog (tasks x events, one config per task, one sink endpoint in its own process)
is enqueued, then drained: by an embedded notifier on SQLite, by one ``a2a-push gateway``
process on PostgreSQL, and by two such processes on the same database. The sink counts
every request by ``webhook-id``: duplicates (the same id twice) and lost deliveries (ids
never seen) must both be 0 when nothing crashes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import TaskPushNotificationConfig
from a2a_push.signing import KeySet
from a2a_push.store import Store
from a2a_push.store.sqlite import SQLiteStore

from .common import (
    ROOT,
    Sink,
    bounded,
    header,
    machine_line,
    progress,
    say,
    status_event,
    table,
    temp_dir,
    verdict,
)
from .lifetime import stop_process

TAG = "b6"
DSN = os.environ.get("A2A_PUSH_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
AGENT_KEY = "bench-agent-key-0123456789"


@dataclass
class B6Params:
    tasks: int = 100
    events_per_task: int = 40
    concurrency: int = 32
    drain_limit: float = 60.0

    @property
    def deliveries(self) -> int:
        return self.tasks * self.events_per_task


async def _enqueue(store: Store, sink: Sink, p: B6Params, keyset: KeySet) -> list[str]:
    """The backlog, written without a dispatcher; the delivery ids."""
    ids: list[str] = []
    async with PushNotifier(
        store,
        issuer="http://bench.local",
        keyset=keyset,
        address_policy=AddressPolicy(allow_loopback=True),
        run_dispatcher=False,
    ) as notifier:
        for t in range(p.tasks):
            await notifier.register_config(
                TaskPushNotificationConfig(url=sink.url("/b6"), token="bench-token"),
                owner="bench",
                task_id=f"task-{t}",
            )

        async def publish(item: tuple[str, int]) -> None:
            result = await notifier.publish(item[0], status_event(item[0], item[1]))
            ids.extend(result.delivery_ids)

        items = [(f"task-{t}", n) for n in range(p.events_per_task) for t in range(p.tasks)]
        await bounded(items, p.concurrency, publish)
        # The first delivery to each new config is a task snapshot: count those too.
        stats = await notifier.store.stats()
        progress(TAG, f"enqueued {stats.pending:,} deliveries")
    return ids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _gateway(database: str) -> tuple[asyncio.subprocess.Process, str]:
    port = _free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2a_push",
        "gateway",
        "--port",
        str(port),
        "--database",
        database,
        "--agent-key",
        f"bench:{AGENT_KEY}",
        "--allow-webhook-host",
        "127.0.0.1",
        "--log-level",
        "WARNING",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}"


async def _stop(procs: list[asyncio.subprocess.Process]) -> None:
    # Gateways drain in-flight work on SIGTERM: give them time.
    await asyncio.gather(*(stop_process(proc, grace=25) for proc in procs))


async def _drain_postgres(
    workers: int, sink: Sink, p: B6Params, keyset: KeySet
) -> tuple[float, int, int, int]:
    """(deliveries/s, expected, duplicates, lost) for ``workers`` gateway processes."""
    import asyncpg

    from a2a_push.store.postgres import PostgresStore

    schema = f"a2a_push_bench_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(DSN)
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.close()
    try:
        ids = await _enqueue(PostgresStore(DSN, schema=schema), sink, p, keyset)
        await sink.reset()
        database = f"{DSN}?search_path={schema}"
        started = time.time()
        procs = [(await _gateway(database))[0] for _ in range(workers)]
        try:
            stats = await sink.wait_count(
                len(ids), limit=p.drain_limit, tag=TAG, label=f"{workers} gateway(s)", every=5
            )
            end = stats.last or time.time()
            first = stats.first or started
            await asyncio.sleep(1.0)  # anything sent twice arrives now
            stats = await sink.stats(times=True)
        finally:
            await _stop(procs)
        seen = set(stats.times)
        lost = len(set(ids) - seen)
        duplicates = stats.count - len(seen)
        rate = len(seen) / (end - first) if end > first else 0.0
        return rate, len(ids), duplicates, lost
    finally:
        conn = await asyncpg.connect(DSN)
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await conn.close()


async def _drain_sqlite(sink: Sink, p: B6Params, keyset: KeySet) -> tuple[float, int, int, int]:
    with temp_dir("a2a-push-b6-") as tmp:
        db = tmp / "b6.db"
        ids = await _enqueue(SQLiteStore(db), sink, p, keyset)
        await sink.reset()
        started = time.time()
        async with PushNotifier(
            SQLiteStore(db),
            issuer="http://bench.local",
            keyset=keyset,
            address_policy=AddressPolicy(allow_loopback=True),
        ):
            stats = await sink.wait_count(
                len(ids), limit=p.drain_limit, tag=TAG, label="embedded SQLite", every=5
            )
            end = stats.last or time.time()
            first = stats.first or started
            await asyncio.sleep(1.0)
            stats = await sink.stats(times=True)
    seen = set(stats.times)
    rate = len(seen) / (end - first) if end > first else 0.0
    return rate, len(ids), stats.count - len(seen), len(set(ids) - seen)


async def _postgres_problem() -> str | None:
    try:
        import asyncpg

        conn = await asyncpg.connect(DSN, timeout=3)
        await conn.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def run(p: B6Params | None = None) -> dict[str, Any]:
    p = p or B6Params()
    header(
        f"B6  gateway on PostgreSQL, 1 and 2 workers, beside embedded SQLite "
        f"({p.deliveries:,} events)",
        [
            machine_line(),
            f"{p.tasks} tasks x {p.events_per_task} events, 1 config each; the backlog is "
            "enqueued first, then drained to one sink endpoint (separate process); ES256",
            "PostgreSQL rows: `a2a-push gateway` processes (dispatcher defaults) on one "
            f"database ({DSN.rsplit('@', 1)[-1]}); the PostgreSQL server shares these cores",
            "rate = distinct deliveries received / seconds from the first receipt to the last "
            "(process start-up not counted)",
        ],
    )
    problem = await _postgres_problem()
    keyset = KeySet.generate()
    rows: list[list[object]] = []
    results: dict[str, Any] = {}
    async with Sink() as sink:
        rate, expected, dups, lost = await _drain_sqlite(sink, p, keyset)
        rows.append(["embedded notifier, SQLite", 1, rate, expected, dups, lost, ""])
        results["sqlite"] = rate
        if problem is None:
            for workers in (1, 2):
                rate, expected, dups, lost = await _drain_postgres(workers, sink, p, keyset)
                note = "" if lost == 0 else "drain did not finish within the limit"
                rows.append(["gateway, PostgreSQL", workers, rate, expected, dups, lost, note])
                results[f"pg{workers}"] = rate
                results[f"pg{workers}_duplicates"] = dups
                results[f"pg{workers}_lost"] = lost
        else:
            rows.append(["gateway, PostgreSQL", "-", None, None, None, None, f"skipped: {problem}"])
    say()
    say(
        table(
            ["system", "workers", "deliveries/s", "expected", "duplicates", "lost", "note"],
            rows,
        )
    )
    ok = problem is None and all(
        results.get(f"pg{w}_duplicates") == 0 and results.get(f"pg{w}_lost") == 0 for w in (1, 2)
    )
    say()
    if problem is None:
        say(f"  target: no duplicate sends and nothing lost without crashes   {verdict(ok)}")
        if results.get("pg1"):
            say(f"  2 workers / 1 worker: {results['pg2'] / results['pg1']:.2f}x")
    else:
        say(f"  PostgreSQL not reachable at {DSN}: B6 not measured")
    say()
    results["pass"] = ok
    return results
