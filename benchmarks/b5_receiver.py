"""B5: receiver throughput: verified (ES256 JWT + replay check + persist) notifications/s.

Target: >= 2,000/s, with ``GetTask`` calls coalesced per task. Three processes:

- this one runs the receiver (``receiver.api.create_app``, SQLite store) on 127.0.0.1,
  so it has a core of its own while the load runs;
- ``benchmarks.loadgen`` posts pre-signed webhooks with a fixed concurrency over
  keep-alive connections (its own process, so signing and sending cost nothing here);
- ``benchmarks.agent_stub`` is the agent: it serves the JWK Set and answers the
  receiver's ``GetTask`` calls, counting them.

Every webhook is what a2a-push sends: the StreamResponse body, ``webhook-id`` /
``webhook-timestamp``, an ES256 JWT (``WebhookSigner``, fresh ``jti``, ``iat`` = now)
in ``X-A2A-Signature`` and ``Authorization: Bearer``, and the subscription's token.
Subscriptions are created directly in the receiver's store beforehand. The baseline, in
the same run and from the same load generator with the same requests, is a minimal
aiohttp handler that reads the body and answers 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web

from a2a_push.ids import new_delivery_id
from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_A2A_VERSION,
    HEADER_AUTHORIZATION,
    HEADER_CONTENT_TYPE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_TIMESTAMP,
    VERSION_1_0,
)
from a2a_push.protocol.types import StreamResponse
from a2a_push.signing import KeySet, WebhookSigner
from receiver.api import RECEIVER, create_app
from receiver.settings import WEBHOOK_PATH, ReceiverSettings
from receiver.sqlite_store import SQLiteReceiverStore
from receiver.store import Subscription, SubscriptionState
from receiver.verify import token_digest

from .common import (
    ROOT,
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

TAG = "b5"
ISSUER = "http://bench-agent.local"
CLIENT = "bench"

Order = Literal["round-robin", "bursts"]


@dataclass
class B5Params:
    tasks: int = 500
    per_task: int = 40
    concurrency: int = 64
    max_seconds: float = 30.0  # per load run: the load generator stops sending there
    fetch_wait: float = 15.0  # after the load: how long GetTask may take to catch up
    raw_repeats: int = 3
    target_rate: float = 2000.0

    @property
    def notifications(self) -> int:
        return self.tasks * self.per_task


@dataclass
class B5Row:
    system: str
    load: dict[str, Any]
    server_cpu: float
    receiver: bool = True
    get_task: int | None = None
    stub: dict[str, Any] = field(default_factory=dict)
    pending: int | None = None
    stored: int | None = None
    snapshots: int | None = None

    @property
    def ok(self) -> int:
        return sum(v for k, v in self.load["statuses"].items() if 200 <= int(k) < 300)

    @property
    def counted(self) -> int:
        """What the rate counts: accepted notifications (receiver) or 2xx replies (raw)."""
        return int(self.load["accepted"]) if self.receiver else self.ok

    @property
    def rate(self) -> float:
        seconds = float(self.load["seconds"])
        return self.counted / seconds if seconds > 0 else 0.0

    @property
    def server_cpu_pct(self) -> float:
        return 100 * self.server_cpu / float(self.load["seconds"])

    @property
    def server_cpu_us(self) -> float:
        """Server CPU per counted request: steadier than the rate when cores are shared."""
        return 1e6 * self.server_cpu / self.counted if self.counted else float("nan")

    @property
    def loadgen_cpu_pct(self) -> float:
        return 100 * float(self.load["cpu_seconds"]) / float(self.load["seconds"])

    @property
    def coalesced(self) -> bool:
        """One fetch per task at a time, never more fetches than notifications, all done."""
        if not self.receiver:
            return True
        return (
            self.stub.get("max_in_flight_per_task", 0) <= 1
            and self.get_task is not None
            and self.get_task <= self.counted
            and self.pending == 0
        )


# ---- helper processes ------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


class AgentStub:
    """``benchmarks.agent_stub`` in its own process, and a client for its counters."""

    def __init__(self, jwks_file: Path) -> None:
        self.jwks_file = jwks_file
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AgentStub:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.agent_stub",
            "--jwks",
            str(self.jwks_file),
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=_env(),
        )
        assert self._proc.stdout is not None
        try:
            async with asyncio.timeout(20):
                line = await self._proc.stdout.readline()
            if not line:
                raise RuntimeError("the agent stub exited before listening")
            self.port = int(json.loads(line)["port"])
        except BaseException:
            await stop_process(self._proc)
            raise
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._proc is not None:
            await stop_process(self._proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def reset(self) -> None:
        assert self._session is not None
        async with self._session.post(self.url + "_reset") as r:
            r.raise_for_status()

    async def stats(self) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.get(self.url + "_stats") as r:
            r.raise_for_status()
            data: dict[str, Any] = await r.json()
            return data


async def run_loadgen(
    requests_file: Path, url: str, p: B5Params, *, label: str
) -> tuple[dict[str, Any], float]:
    """Run ``benchmarks.loadgen`` against ``url``; its result and this process's CPU time."""
    cpu0 = _cpu()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.loadgen",
        "--requests",
        str(requests_file),
        "--url",
        url,
        "--concurrency",
        str(p.concurrency),
        "--max-seconds",
        str(p.max_seconds),
        "--label",
        label,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=_env(),
    )
    try:
        async with asyncio.timeout(p.max_seconds + 60):
            out, _ = await proc.communicate()
    finally:
        await stop_process(proc)
    cpu = _cpu() - cpu0
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"the load generator failed (exit code {proc.returncode})")
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    # The load generator's timed part is shorter than its life (it loads the file
    # first, while this process idles), so CPU / its timed seconds is a close bound.
    return result, cpu


def _cpu() -> float:
    """CPU seconds of this process, all threads (the receiver's fsync thread included)."""
    t = os.times()
    return t.user + t.system


# ---- requests --------------------------------------------------------------------------


def _order(p: B5Params, order: Order) -> list[tuple[int, int]]:
    if order == "round-robin":  # every task's notifications as far apart as they can be
        return [(t, n) for n in range(p.per_task) for t in range(p.tasks)]
    return [(t, n) for t in range(p.tasks) for n in range(p.per_task)]  # one task at a time


def _token(t: int) -> str:
    return f"bench-subscription-token-{t:05d}"


def signed_request(
    signer: WebhookSigner, audience: str, t: int, n: int, now: int
) -> tuple[dict[str, str], str]:
    """One webhook as a2a-push sends it (see a2a_push.delivery.webhook)."""
    task_id = f"task-{t}"
    body = StreamResponse.wrap(status_event(task_id, n)).to_json_bytes()
    webhook_id = new_delivery_id()
    jwt = signer.sign(
        body=body,
        audience=audience,
        webhook_id=webhook_id,
        task_id=task_id,
        config_id=f"sub-{t}",
        seq=n,
        now=now,
    )
    headers = {
        HEADER_CONTENT_TYPE: A2A_MEDIA_TYPE,
        HEADER_A2A_VERSION: VERSION_1_0,
        HEADER_WEBHOOK_ID: webhook_id,
        HEADER_WEBHOOK_TIMESTAMP: str(now),
        HEADER_SIGNATURE: jwt,
        HEADER_AUTHORIZATION: f"Bearer {jwt}",
        HEADER_NOTIFICATION_TOKEN: _token(t),
    }
    return headers, body.decode()


def write_requests(
    path: Path, signer: WebhookSigner, audience: str, p: B5Params, order: Order, label: str
) -> None:
    """Sign every webhook now (fresh jti, iat = now) and write them for the load generator."""
    pairs = _order(p, order)
    progress(TAG, f"{label}: signing {len(pairs):,} webhooks (ES256), {order} over tasks")
    started = time.perf_counter()
    now = int(time.time())
    requests = [signed_request(signer, audience, t, n, now) for t, n in pairs]
    path.write_text(json.dumps(requests))
    progress(TAG, f"{label}: signed in {time.perf_counter() - started:.1f} s")


# ---- servers ---------------------------------------------------------------------------


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serving(app: web.Application, sock: socket.socket) -> AsyncIterator[None]:
    """Serve ``app`` on the bound ``sock`` (its startup and cleanup hooks run here)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock, backlog=1024).start()
        yield
    finally:
        await runner.cleanup()


def raw_app() -> web.Application:
    async def receive(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post(WEBHOOK_PATH, receive)
    return app


def _count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


# ---- rows ------------------------------------------------------------------------------


async def run_receiver(
    stub: AgentStub,
    keyset: KeySet,
    p: B5Params,
    tmp: Path,
    *,
    label: str,
    synchronous: Literal["FULL", "NORMAL"] = "FULL",
    order: Order = "round-robin",
) -> tuple[B5Row, Path]:
    """One receiver run on a fresh database; the row and the requests file it used."""
    with _listening_socket() as sock:
        return await _run_receiver(
            stub, keyset, p, tmp, sock, label=label, synchronous=synchronous, order=order
        )


async def _run_receiver(
    stub: AgentStub,
    keyset: KeySet,
    p: B5Params,
    tmp: Path,
    sock: socket.socket,
    *,
    label: str,
    synchronous: Literal["FULL", "NORMAL"],
    order: Order,
) -> tuple[B5Row, Path]:
    work = tmp / f"receiver-{synchronous}-{order}"
    db = work / "receiver.db"
    port = int(sock.getsockname()[1])
    settings = ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": port,
            "data_dir": work,
            "database": str(db),
            "synchronous": synchronous,
            "agents": [
                {
                    "url": stub.url,
                    "issuer": ISSUER,
                    "jwks_url": stub.url + ".well-known/jwks.json",
                    "credentials": "Bearer bench-agent-credentials",
                }
            ],
            "api_keys": [{"client_id": CLIENT, "api_key": "bench-api-key-0123456789"}],
        }
    )
    agent_key = settings.agents[0].key

    # Subscriptions straight into the receiver's store, before it starts.
    store = SQLiteReceiverStore(db, synchronous=synchronous)
    await store.open()
    created = time.time()
    await asyncio.gather(
        *(
            store.add_subscription(
                Subscription(
                    id=f"sub-{t}",
                    client_id=CLIENT,
                    agent_url=agent_key,
                    task_id=f"task-{t}",
                    token_digest=token_digest(_token(t)),
                    state=SubscriptionState.ACTIVE,
                    created_at=created,
                )
            )
            for t in range(p.tasks)
        )
    )
    await store.close()

    signer = WebhookSigner(keyset, ISSUER)
    requests_file = work / "requests.json"
    write_requests(requests_file, signer, settings.webhook_url, p, order, label)

    app = create_app(settings)
    core = app[RECEIVER]
    async with serving(app, sock):
        fetcher = core.fetcher
        assert fetcher is not None
        # One probe first: fails fast on a misconfiguration, and fetches the JWK Set.
        probe_headers, probe_body = signed_request(
            signer, settings.webhook_url, 0, 10**6, int(time.time())
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                settings.webhook_url, data=probe_body.encode(), headers=probe_headers
            ) as resp,
        ):
            reply = await resp.text()
            if resp.status != 200 or '"accepted"' not in reply:
                raise RuntimeError(f"{label}: the probe webhook got {resp.status}: {reply}")
        await fetcher.idle(timeout=10)
        calls_before = fetcher.calls
        await stub.reset()

        progress(TAG, f"{label}: posting {p.notifications:,} webhooks, {p.concurrency} in flight")
        load, cpu = await run_loadgen(requests_file, settings.webhook_url, p, label=label)
        progress(
            TAG,
            f"{label}: {load['accepted']:,} accepted in {load['seconds']:.1f} s; "
            f"waiting for GetTask to catch up ({fetcher.busy} tasks busy)",
        )
        waited = time.monotonic()
        await fetcher.idle(timeout=p.fetch_wait)
        progress(TAG, f"{label}: fetches done in {time.monotonic() - waited:.1f} s")
        calls = fetcher.calls - calls_before
        pending = len(await core.store.pending_fetches(limit=1_000_000))
        stub_stats = await stub.stats()
    row = B5Row(
        label,
        load,
        cpu,
        get_task=calls,
        stub=stub_stats,
        pending=pending,
        stored=_count(db, "SELECT count(*) FROM notifications") - 1,  # minus the probe
        snapshots=_count(db, "SELECT count(*) FROM tasks"),
    )
    return row, requests_file


async def run_raw(requests_file: Path, p: B5Params) -> B5Row:
    """The same requests against a handler that reads the body and answers 200."""
    label = f"raw aiohttp handler (median of {p.raw_repeats})"
    runs: list[B5Row] = []
    for i in range(p.raw_repeats):
        with _listening_socket() as sock:
            url = f"http://127.0.0.1:{sock.getsockname()[1]}{WEBHOOK_PATH}"
            async with serving(raw_app(), sock):
                progress(TAG, f"{label}: run {i + 1}, posting {p.notifications:,} requests")
                load, cpu = await run_loadgen(requests_file, url, p, label=f"raw run {i + 1}")
        runs.append(B5Row(label, load, cpu, receiver=False))
    runs.sort(key=lambda r: r.rate)
    progress(TAG, f"{label}: runs at " + ", ".join(f"{r.rate:,.0f}/s" for r in runs))
    return runs[len(runs) // 2]


# ---- the benchmark ---------------------------------------------------------------------

DEFAULT_LABEL = "receiver SQLite FULL (defaults)"


async def run(p: B5Params | None = None) -> dict[str, Any]:
    p = p or B5Params()
    load_start = os.getloadavg()[0]
    header(
        "B5  receiver: verified (ES256 JWT + replay check + persist) notifications/s",
        [
            machine_line(),
            f"{p.notifications:,} webhooks = {p.tasks} tasks x {p.per_task}, each a fresh "
            "ES256 JWT (pre-signed, iat = now) + token, one subscription per task",
            f"load generator: its own process, {p.concurrency} in flight over keep-alive "
            f"connections, stops after {p.max_seconds:.0f} s; receiver: this process, "
            "127.0.0.1",
            "receiver defaults (fetch_coalesce_seconds=0.02, fetch_concurrency=32); "
            "GetTask answered by a stub agent in a third process",
            "order: round-robin over tasks (a task's notifications far apart: the worst case "
            f"for coalescing) or per-task bursts ({p.per_task} back to back)",
            "time = first request sent -> last reply read (load generator); "
            "rate = accepted replies / time (raw: 2xx / time)",
            "numbers are noisy: 2 cores shared by 3 processes and whatever else runs",
        ],
    )
    rows: list[B5Row] = []
    with temp_dir("a2a-push-b5-") as tmp:
        keyset = KeySet.generate()  # ES256
        jwks_file = tmp / "jwks.json"
        jwks_file.write_text(json.dumps(keyset.jwks()))
        async with AgentStub(jwks_file) as stub:
            row, requests_file = await run_receiver(stub, keyset, p, tmp, label=DEFAULT_LABEL)
            rows.append(row)
            row, _ = await run_receiver(
                stub, keyset, p, tmp, label="receiver SQLite NORMAL", synchronous="NORMAL"
            )
            rows.append(row)
            row, _ = await run_receiver(
                stub,
                keyset,
                p,
                tmp,
                label="receiver SQLite FULL, per-task bursts",
                order="bursts",
            )
            rows.append(row)
        rows.append(await run_raw(requests_file, p))

    ours = rows[0]
    raw = rows[-1].rate
    say()
    say(
        table(
            [
                "system",
                "2xx",
                "accepted",
                "dup",
                "errors",
                "seconds",
                "per s",
                "p50 ms",
                "p99 ms",
                "stored",
                "GetTask",
                "GetTask/task",
                "max conc",
                "srv CPU %",
                "srv CPU us each",
                "gen CPU %",
                "vs raw",
            ],
            [
                [
                    r.system,
                    r.ok,
                    r.load["accepted"] if r.receiver else None,
                    r.load["duplicate"] if r.receiver else None,
                    r.load["errors"]
                    + sum(v for k, v in r.load["statuses"].items() if not 200 <= int(k) < 300),
                    round(float(r.load["seconds"]), 2),
                    r.rate,
                    float(r.load["p50_ms"]),
                    float(r.load["p99_ms"]),
                    r.stored,
                    r.get_task,
                    r.get_task / r.stub["tasks"] if r.get_task and r.stub.get("tasks") else None,
                    r.stub.get("max_in_flight_per_task"),
                    r.server_cpu_pct,
                    r.server_cpu_us,
                    r.loadgen_cpu_pct,
                    r.rate / raw if raw else None,
                ]
                for r in rows
            ],
        )
    )
    for r in rows:
        non_2xx = {k: v for k, v in r.load["statuses"].items() if not 200 <= int(k) < 300}
        if non_2xx or r.load["errors"]:
            say(f"  {r.system}: non-2xx {non_2xx}; errors {r.load['error_samples']}")
        if r.load["stopped"]:
            say(f"  {r.system}: stopped at the {p.max_seconds:.0f} s limit")
    say(
        f"  per s: accepted/s (raw: 2xx/s); errors: no reply or non-2xx; stored: notification "
        f"rows persisted; GetTask/task: calls per distinct task ({p.per_task} notifications "
        "each); max conc: most GetTask calls for one task in flight at once"
    )
    say(
        "  srv CPU %: the receiver (or raw handler) process during the load, all threads, "
        "GetTask work included; srv CPU us each: that CPU time per accepted notification "
        "(raw: per request); gen CPU %: the load generator; ~100 % = CPU-bound on its core"
    )
    say(f"  load average (1 min) at start {load_start:.2f}, at end {os.getloadavg()[0]:.2f}")
    say()
    ok_rate = ours.rate >= p.target_rate
    receivers = [r for r in rows if r.receiver]
    ok_coalesce = all(r.coalesced for r in receivers)
    ok_stored = all(r.stored == r.counted and r.snapshots == p.tasks for r in receivers)
    say(
        f"  target: defaults >= {p.target_rate:,.0f} verified notifications/s   "
        f"{ours.rate:8,.0f}/s   {verdict(ok_rate)}"
    )
    say(
        "  target: GetTask coalesced per task (<= 1 in flight per task, calls <= "
        f"notifications, none pending)   {verdict(ok_coalesce)}"
    )
    say(
        "  check: every accepted notification persisted, every task's snapshot stored   "
        f"{verdict(ok_stored)}"
    )
    say()
    return {
        "ours": ours.rate,
        "normal": rows[1].rate,
        "bursts": rows[2].rate,
        "raw": raw,
        "pass": ok_rate and ok_coalesce and ok_stored,
    }
