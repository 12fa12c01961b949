"""Gateway replicas on one PostgreSQL database, as separate processes: a shared backlog
drained with no duplicate sends and per-task order kept; a replica killed with SIGKILL;
a PostgreSQL restart mid-load; a key rotation picked up by both replicas."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from a2a_push.gateway.client import GatewayClient
from a2a_push.protocol.types import TaskState
from a2a_push.store import DeliveryFilter
from a2a_push.testing import SinkResponse, WebhookSink

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import AGENT_KEY, free_port, gateway_command, rpc, status

pytestmark = pytest.mark.timeout(180)


@dataclass
class Replica:
    url: str
    proc: asyncio.subprocess.Process
    log: list[str] = field(default_factory=list)


class Cluster(list[Replica]):
    def __init__(self, start: Callable[[], Awaitable[Replica]]) -> None:
        super().__init__()
        self._start = start

    async def add(self) -> Replica:
        replica = await self._start()
        self.append(replica)
        return replica


async def _create_schema(dsn: str, schema: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def cluster(**env: str) -> AsyncIterator[tuple[str, Cluster]]:
    dsn = require_postgres()
    schema = postgres_schema()  # dropped after the test by conftest
    await _create_schema(dsn, schema)
    database = f"{dsn}?search_path={schema}"
    environ = {
        **os.environ,
        "A2A_GATEWAY_LEASE_SECONDS": "5",
        "A2A_GATEWAY_REQUEST_TIMEOUT": "1",
        "A2A_GATEWAY_QUICK_ATTEMPTS": "1",
        "A2A_GATEWAY_KEY_RELOAD_INTERVAL": "0.3",
        **env,
    }

    async def start() -> Replica:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *gateway_command(port, database, "--log-level", "WARNING"),
            env=environ,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        replica = Replica(f"http://127.0.0.1:{port}", proc)
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if proc.returncode is not None:
                    err = await proc.stderr.read() if proc.stderr else b""
                    raise AssertionError(f"gateway exited: {err.decode()[-2000:]}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(replica.url + "/healthz") as resp:
                        if resp.status == 200:
                            return replica
                await asyncio.sleep(0.05)
        raise AssertionError("gateway did not start")

    group = Cluster(start)
    try:
        yield database, group
    finally:
        for r in group:
            if r.proc.returncode is None:
                r.proc.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(r.proc.wait(), 15)
            if r.proc.returncode is None:
                r.proc.kill()
                await r.proc.wait()


async def _create_configs(url: str, sink: WebhookSink, tasks: list[str]) -> None:
    async with aiohttp.ClientSession() as session:
        for task in tasks:
            async with session.post(
                url + "/v1/rpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "CreateTaskPushNotificationConfig",
                    "params": {"taskId": task, "id": "cfg", "url": sink.url(f"/{task}")},
                },
                headers={"Authorization": f"Bearer {AGENT_KEY}"},
            ) as resp:
                body = await resp.json()
                assert "result" in body, body


async def _publish(
    urls: list[str],
    tasks: list[str],
    events: int,
    *,
    published: Callable[[], None] | None = None,
    before_last: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Publish ``events`` events to each task, tasks concurrently, through the replicas in
    turn. ``published`` is called after each event is accepted; each task awaits
    ``before_last`` before its last (completed) event."""
    clients = [GatewayClient(u, AGENT_KEY, deadline=90, attempts=100) for u in urls]
    try:

        async def one_task(i: int, task: str) -> None:
            for n in range(events):
                client = clients[(i + n) % len(clients)]
                state = TaskState.WORKING if n < events - 1 else TaskState.COMPLETED
                event = status(task, state)
                event.metadata = {"n": n}
                if n == events - 1 and before_last is not None:
                    await before_last()
                await client.publish(task, event)
                if published is not None:
                    published()

        await asyncio.gather(*(one_task(i, t) for i, t in enumerate(tasks)))
    finally:
        for c in clients:
            await c.close()


def _check_order(
    sink: WebhookSink, tasks: list[str], per_task: int, *, republished: bool = False
) -> tuple[int, int]:
    """Per task: every event arrived, first arrivals in order; (total received, duplicate
    sends). ``republished``: a client may have posted an event twice (its first answer was
    lost in an outage), so the events' own numbers, not their count, must be complete."""
    total = dups = 0
    for task in tasks:
        seqs: list[int] = []
        numbers: list[int] = []
        ids: set[str] = set()
        for hook in sink.on(f"/{task}"):
            total += 1
            webhook_id = hook.header("webhook-id") or ""
            if webhook_id in ids:
                dups += 1
                continue
            ids.add(webhook_id)
            claims = json.loads(_b64(hook.header("X-A2A-Signature") or ""))
            seqs.append(claims["seq"])
            update = json.loads(hook.body).get("statusUpdate")
            if update is not None:
                numbers.append(update["metadata"]["n"])
        assert seqs == sorted(seqs), f"{task}: out of order {seqs}"
        assert numbers == sorted(numbers), f"{task}: events out of order {numbers}"
        assert sorted(set(numbers)) == list(range(per_task)), f"{task}: lost {numbers}"
        if not republished:
            assert len(seqs) == per_task, f"{task}: {len(seqs)} of {per_task}"
    return total, dups


def _b64(jwt: str) -> bytes:
    import base64

    payload = jwt.split(".")[1]
    return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))


async def _wait(sink: WebhookSink, tasks: list[str], per_task: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if all(_complete(sink.on(f"/{t}"), per_task) for t in tasks):
            return
        await asyncio.sleep(0.1)


def _complete(hooks: list[Any], per_task: int) -> bool:
    # Order is kept, so the final (completed) event arrives after every other one.
    distinct = {h.header("webhook-id") for h in hooks}
    return len(distinct) >= per_task and any(b"TASK_STATE_COMPLETED" in h.body for h in hooks)


async def _delivered_by(url: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        text = await resp.text()
    found = re.findall(r'^a2a_push_deliveries_total\{outcome="delivered"\} (\S+)$', text, re.M)
    return float(found[0]) if found else 0.0


async def test_two_replicas_drain_a_shared_backlog_without_duplicates_in_order() -> None:
    tasks = [f"task-{uuid.uuid4().hex[:8]}" for _ in range(12)]
    events = 8
    # Each replica keeps at most 2 requests on the wire to the sink (one endpoint), each
    # taking 20 ms: one replica alone cannot hold the 12 lanes, nor drain them before the
    # other (woken by the events published to it) claims some, however the first claims go.
    async with (
        WebhookSink() as sink,
        cluster(A2A_GATEWAY_MAX_IN_FLIGHT_PER_ENDPOINT="2") as (_db, replicas),
    ):
        for t in tasks:
            sink.set_default(f"/{t}", SinkResponse(status=200, delay=0.02))
        a = await replicas.add()
        b = await replicas.add()
        await _create_configs(a.url, sink, tasks)
        await _publish([a.url, b.url], tasks, events)
        await _wait(sink, tasks, events, 60)
        total, dups = _check_order(sink, tasks, events)  # no event known at Create: no snapshot
        assert dups == 0 and total == len(tasks) * events
        assert await _delivered_by(a.url) > 0 and await _delivered_by(b.url) > 0
        a.proc.terminate()  # graceful: stop claiming, finish or release, exit 0
        assert await asyncio.wait_for(a.proc.wait(), 30) == 0


async def test_a_killed_replicas_leased_work_is_finished_by_the_other() -> None:
    tasks = [f"task-{uuid.uuid4().hex[:8]}" for _ in range(6)]
    events = 6
    async with WebhookSink() as sink, cluster() as (_db, replicas):
        for t in tasks:
            sink.set_default(f"/{t}", SinkResponse(status=200, delay=0.3))
        a = await replicas.add()
        await _create_configs(a.url, sink, tasks)
        await _publish([a.url], tasks, events)
        await sink.wait_for(6, timeout=20)
        a.proc.send_signal(signal.SIGKILL)  # mid-load: claims and requests in flight
        await a.proc.wait()
        for t in tasks:
            sink.set_default(f"/{t}", 200)
        await replicas.add()
        await _wait(sink, tasks, events, 60)
        _total, dups = _check_order(sink, tasks, events)
        assert dups <= len(tasks)  # at most what was in flight (one per lane) comes twice


def _restart_postgres() -> None:
    """Restart the server when this machine lets us; otherwise cut every connection of
    the gateways (what they see of a restart)."""
    if shutil.which("pg_ctlcluster") and os.geteuid() == 0:
        listed = subprocess.run(
            ["pg_lsclusters", "-h"], capture_output=True, text=True, check=False
        )
        fields = listed.stdout.split()
        if len(fields) >= 2:
            subprocess.run(
                ["pg_ctlcluster", fields[0], fields[1], "restart"], check=True, timeout=60
            )
            return
    import asyncpg

    async def cut() -> None:
        conn = await asyncpg.connect(require_postgres())
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'a2a-push%' AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()

    asyncio.run(cut())


async def test_a_postgresql_restart_mid_load_loses_nothing() -> None:
    tasks = [f"task-{uuid.uuid4().hex[:8]}" for _ in range(8)]
    events = 12
    async with WebhookSink() as sink, cluster() as (_db, replicas):
        a = await replicas.add()
        b = await replicas.add()
        await _create_configs(a.url, sink, tasks)
        accepted = 0
        under_way = asyncio.Event()  # a first event of each task (on average) is in
        restarted = asyncio.Event()

        def count() -> None:
            nonlocal accepted
            accepted += 1
            if accepted >= len(tasks):
                under_way.set()

        # The restart starts once publishing is under way, with most of the load still to
        # go (checked below), which goes on meanwhile. Each task's last event waits for the
        # restart to be over: publishing cannot be finished before it (however fast the
        # rest went), and some events are always published after it, to replicas whose
        # database connections it cut.
        publishing = asyncio.create_task(
            _publish([a.url, b.url], tasks, events, published=count, before_last=restarted.wait)
        )
        await asyncio.wait_for(under_way.wait(), 60)
        assert not publishing.done()
        assert accepted <= len(tasks) * events // 2, accepted  # most of the load is to come
        await asyncio.to_thread(_restart_postgres)
        assert not publishing.done()
        restarted.set()
        await publishing  # the client retried through the outage (503 + Retry-After)
        await _wait(sink, tasks, events, 90)
        # The client's retries carry one Idempotency-Key per event: even an event whose
        # answer was lost in the outage is queued once.
        _check_order(sink, tasks, events)
        async with aiohttp.ClientSession() as session:
            for r in (a, b):
                async with session.get(r.url + "/healthz") as resp:
                    assert resp.status == 200


async def test_a_rotated_key_is_used_by_both_replicas() -> None:
    async with cluster() as (database, replicas):
        a = await replicas.add()
        b = await replicas.add()

        async def active(url: str) -> str:
            async with aiohttp.ClientSession() as s, s.get(url + "/.well-known/jwks.json") as r:
                return str((await r.json())["keys"][0]["kid"])

        before = await active(a.url)
        assert await active(b.url) == before  # one key set for every replica
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "a2a_push",
            "keys",
            "rotate",
            "--database",
            database,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        new = re.search(r"new active kid: (\S+)", out.decode())
        assert new is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        kids: dict[str, Any] = {}
        while loop.time() < deadline:
            kids = {r.url: await active(r.url) for r in (a, b)}
            if set(kids.values()) == {new.group(1)}:
                break
            await asyncio.sleep(0.1)
        assert set(kids.values()) == {new.group(1)}, kids


async def test_a_database_outage_gets_503_with_retry_after_and_then_recovers() -> None:
    from a2a_push.gateway.app import GATEWAY, create_app

    from ..gateway_support import gateway_settings
    from ..store.test_store_postgres import TcpProxy, via

    dsn = require_postgres()
    schema = postgres_schema()
    await _create_schema(dsn, schema)
    upstream = urlsplit(dsn)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)
    await proxy.start()
    settings = gateway_settings(f"{via(dsn, proxy.port)}?search_path={schema}")
    server = TestServer(create_app(settings), host="127.0.0.1", port=settings.port)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    auth = {"Authorization": f"Bearer {AGENT_KEY}"}

    def event(n: int) -> dict[str, Any]:
        update = status("t-out", TaskState.WORKING).to_json_dict()
        update["metadata"] = {"n": n}
        return {"statusUpdate": update}

    try:
        async with aiohttp.ClientSession() as session:
            post = url + "/v1/tasks/t-out/events"
            config = {"taskId": "t-out", "id": "c", "url": "http://127.0.0.1:9/nobody"}
            created = await rpc(session, url, "CreateTaskPushNotificationConfig", config)
            assert "result" in created
            async with session.post(post, json=event(0), headers=auth) as resp:
                assert resp.status == 202
            await proxy.stop()  # the database goes away
            async with session.post(post, json=event(1), headers=auth) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"].isdigit()
                assert (await resp.json())["error"] == "unavailable"
            async with session.get(url + "/healthz") as resp:
                assert resp.status == 503
            await proxy.start()  # and comes back on the same address
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while True:
                async with session.post(post, json=event(2), headers=auth) as resp:
                    if resp.status == 202:
                        break
                    assert resp.status == 503 and loop.time() < deadline
                await asyncio.sleep(0.1)
            async with session.get(url + "/healthz") as resp:
                assert resp.status == 200
        # Nothing half-written: the event refused with 503 left no trace in the outbox.
        store = server.app[GATEWAY].notifier.store
        found = await store.list_deliveries(DeliveryFilter(task_id="t-out"))
        numbers = [
            json.loads(d.body)["statusUpdate"]["metadata"]["n"]
            for d in found
            if d.kind == "statusUpdate"
        ]
        assert numbers == [0, 2]
    finally:
        await server.close()
        await proxy.stop()


async def _cli(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2a_push",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def test_tools_pointed_at_a_schema_no_gateway_uses_create_nothing_there() -> None:
    """A typo'd database or search_path gets an error from the CLI, never our tables (nor
    a signing key no gateway signs with)."""
    import asyncpg

    dsn = require_postgres()
    schema = postgres_schema()  # dropped after the test by conftest
    await _create_schema(dsn, schema)
    database = f"{dsn}?search_path={schema}"
    code, output = await _cli("keys", "rotate", "--database", database)
    assert code != 0 and "no gateway has started on it" in output, output
    for argv in (
        ("deliveries", "list", "--database", database),
        ("configs", "disable", "some-key", "--database", database),
    ):
        code, output = await _cli(*argv)
        assert code != 0 and "no a2a-push outbox" in output, (argv, output)
        assert "Traceback" not in output
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema)
    finally:
        await conn.close()
    assert tables == 0


async def test_tools_name_a_database_that_does_not_exist_without_a_traceback() -> None:
    dsn = require_postgres()
    parts = urlsplit(dsn)
    missing = parts._replace(path="/no_such_db_" + uuid.uuid4().hex[:8]).geturl()
    for argv in (
        ("deliveries", "list", "--database", missing),
        ("keys", "rotate", "--database", missing),
    ):
        code, output = await _cli(*argv)
        assert code != 0, (argv, output)
        assert "does not exist" in output and "Traceback" not in output, (argv, output)


async def test_a_database_closed_to_connections_is_503_not_500() -> None:
    """ALTER DATABASE … ALLOW_CONNECTIONS false (maintenance) refuses new connections with
    SQLSTATE 55000: an outage to retry, like the server being down."""
    import asyncpg

    from a2a_push.gateway.app import create_app

    from ..gateway_support import gateway_settings

    dsn = require_postgres()
    name = f"a2a_push_closed_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(dsn)
        closed_dsn = parts._replace(path=f"/{name}").geturl()
        app = create_app(gateway_settings(closed_dsn))
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            url = str(server.make_url("")).rstrip("/")
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                name,
            )
            headers = {"Authorization": f"Bearer {AGENT_KEY}"}
            body = {"statusUpdate": status("t-closed", TaskState.WORKING).model_dump(by_alias=True)}
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"{url}/v1/tasks/t-closed/events", json=body, headers=headers
                ) as r:
                    assert r.status == 503, await r.text()
                    assert r.headers["Retry-After"]
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                async with session.post(
                    f"{url}/v1/tasks/t-closed/events", json=body, headers=headers
                ) as r:
                    assert r.status in (200, 202), await r.text()
        finally:
            await server.close()
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
        )
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.close()


def test_a_start_with_postgres_unreachable_is_one_line_saying_what_to_check(
    tmp_path: Any,
) -> None:
    pytest.importorskip("asyncpg")
    closed = free_port()  # nothing listens there
    database = f"postgresql://gw:s3cret-password@127.0.0.1:{closed}/gateway"
    proc = subprocess.run(
        [sys.executable, "-m", "a2a_push", "gateway", "--port", "0", "--database", database],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "A2A_GATEWAY_AGENTS": f"agent-a:{AGENT_KEY}"},
    )
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"a2a-push: error: cannot reach PostgreSQL at 127.0.0.1:{closed} (")
    assert lines[0].endswith(
        "); is the server running? check --database (or database, A2A_GATEWAY_DATABASE)"
    )
    assert "s3cret" not in proc.stderr and "reconnects" not in proc.stderr
