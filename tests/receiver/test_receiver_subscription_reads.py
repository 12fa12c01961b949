"""How the receiver reads a client's subscriptions: GET /tasks/{id} looks up the client's
active subscription(s) to that one task (an index lookup, never every subscription the
client ever made), and GET /subscriptions comes in pages (``limit``, ``cursor``,
``nextCursor``). Real aiohttp servers; SQLite and PostgreSQL (skipped without a server,
except under CI=true)."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from a2a_push.database import queries
from receiver.api import RECEIVER, create_app
from receiver.core import Receiver
from receiver.settings import ReceiverSettings
from receiver.sqlite_store import SQLiteReceiverStore
from receiver.store import ReceiverStore, Subscription, SubscriptionState, TaskSnapshot

from ..conftest import postgres_schema, require_postgres

ALICE = "alice-api-key-0123456789"
BOB = "bob-api-key-0123456789abc"
AGENT_A = "http://agent-a.test"
AGENT_B = "http://agent-b.test"


def make_store(kind: str, tmp_path: Path) -> ReceiverStore:
    if kind == "sqlite":
        return SQLiteReceiverStore(tmp_path / "r.db", synchronous="NORMAL")
    from receiver.postgres_store import PostgresReceiverStore

    return PostgresReceiverStore(require_postgres(), schema=postgres_schema())


@dataclass
class App:
    base: str
    receiver: Receiver
    session: aiohttp.ClientSession

    @property
    def store(self) -> ReceiverStore:
        return self.receiver.store

    async def get(
        self, path: str, params: dict[str, str] | None = None, key: str = ALICE
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.session.get(self.base + path, params=params, headers=headers) as r:
            return r.status, await r.json()


@asynccontextmanager
async def app(kind: str, tmp_path: Path) -> AsyncIterator[App]:
    """The receiver app on ``kind``'s store, with two agents (never called: the tests
    store subscriptions and snapshots directly)."""
    settings = ReceiverSettings.model_validate(
        {
            "port": 0,
            "data_dir": tmp_path,
            "agents": [{"url": AGENT_A, "auth": ["token"]}, {"url": AGENT_B, "auth": ["token"]}],
            "api_keys": [
                {"client_id": "alice", "api_key": ALICE},
                {"client_id": "bob", "api_key": BOB},
            ],
        }
    )
    server = TestServer(create_app(settings, store=make_store(kind, tmp_path)), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield App(str(server.make_url("")).rstrip("/"), server.app[RECEIVER], session)
    finally:
        await server.close()


def sub(
    sub_id: str,
    task: str,
    *,
    client: str = "alice",
    agent: str = AGENT_A,
    created_at: float = 1.0,
) -> Subscription:
    return Subscription(
        id=sub_id,
        client_id=client,
        agent_url=agent,
        task_id=task,
        token_digest=f"digest-{sub_id}",
        state=SubscriptionState.ACTIVE,
        created_at=created_at,
    )


def snapshot(task: str, agent: str = AGENT_A, note: str = "") -> TaskSnapshot:
    body = {"id": task, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}
    if note:
        body["metadata"] = {"from": note}
    return TaskSnapshot(
        agent_url=agent,
        task_id=task,
        context_id="c",
        state="TASK_STATE_WORKING",
        final=False,
        status_timestamp=None,
        generation=1,
        task=body,
        updated_at=1.0,
    )


BACKENDS = pytest.mark.parametrize("kind", ["sqlite", "postgres"])


# ---- GET /tasks/{id} -------------------------------------------------------------------


@BACKENDS
async def test_a_task_is_read_through_the_clients_subscription_to_it_among_many(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with app(kind, tmp_path) as a:
        store = a.store
        # Alice follows 300 tasks on agent A; bob one of hers too, and one of his own.
        await asyncio.gather(
            *(store.add_subscription(sub(f"sub_{i:03d}", f"t{i}")) for i in range(300))
        )
        await store.add_subscription(sub("sub_bob_1", "t7", client="bob"))
        await store.add_subscription(sub("sub_bob_2", "bobs", client="bob"))
        # A task alice stopped following (deleted), and one she followed on A, then on B.
        await store.add_subscription(sub("sub_gone", "gone"))
        await store.delete_subscription("sub_gone", now=2.0)
        await store.add_subscription(sub("sub_moved_a", "moved", created_at=1.0))
        await store.delete_subscription("sub_moved_a", now=2.0)
        await store.add_subscription(sub("sub_moved_b", "moved", agent=AGENT_B, created_at=3.0))
        # A task she follows on both agents: the newer subscription's agent answers.
        await store.add_subscription(sub("sub_both_a", "both", created_at=1.0))
        await store.add_subscription(sub("sub_both_b", "both", agent=AGENT_B, created_at=2.0))
        for task, agent in [
            ("t7", AGENT_A),
            ("t299", AGENT_A),
            ("gone", AGENT_A),
            ("bobs", AGENT_A),
            ("moved", AGENT_A),
            ("moved", AGENT_B),
            ("both", AGENT_A),
            ("both", AGENT_B),
        ]:
            assert await store.save_snapshot(snapshot(task, agent, note=agent)) is not None

        # The read never loads the client's whole list.
        async def every_subscription(*args: object, **kwargs: object) -> list[Subscription]:
            raise AssertionError("GET /tasks/{id} read every subscription of the client")

        monkeypatch.setattr(store, "list_subscriptions", every_subscription)

        status, body = await a.get("/tasks/t7")
        assert (status, body["id"]) == (200, "t7")
        status, body = await a.get("/tasks/t299", {"agentUrl": AGENT_A.upper() + "/"})
        assert (status, body["id"]) == (200, "t299")
        assert await a.get("/tasks/t8") == (
            404,
            {"error": "not_fetched", "message": "the task has not been fetched yet; retry shortly"},
        )
        not_followed = (404, {"error": "not_found", "message": "no subscription to this task"})
        assert await a.get("/tasks/gone") == not_followed  # deleted
        assert await a.get("/tasks/bobs") == not_followed  # another client's
        assert await a.get("/tasks/no-such-task") == not_followed
        assert await a.get("/tasks/t7", {"agentUrl": AGENT_B}) == not_followed
        assert await a.get("/tasks/t7", {"agentUrl": "http://elsewhere.test/"}) == not_followed
        status, body = await a.get("/tasks/bobs", key=BOB)
        assert (status, body["id"]) == (200, "bobs")

        status, body = await a.get("/tasks/moved")
        assert (status, body["metadata"]["from"]) == (200, AGENT_B)
        assert await a.get("/tasks/moved", {"agentUrl": AGENT_A}) == not_followed
        status, body = await a.get("/tasks/both")
        assert (status, body["metadata"]["from"]) == (200, AGENT_B)  # the newer one
        status, body = await a.get("/tasks/both", {"agentUrl": AGENT_A + "/"})
        assert (status, body["metadata"]["from"]) == (200, AGENT_A)
        status, body = await a.get("/tasks/" + "t" * 257)
        assert (status, body["error"]) == (400, "invalid")


@BACKENDS
async def test_the_store_returns_only_the_clients_active_subscriptions_to_the_task(
    kind: str, tmp_path: Path
) -> None:
    async with make_store(kind, tmp_path) as store:
        for i in range(50):
            await store.add_subscription(sub(f"sub_{i:02d}", f"t{i}"))
        await store.add_subscription(sub("sub_b", "t3", agent=AGENT_B, created_at=2.0))
        await store.add_subscription(sub("sub_bob", "t3", client="bob"))
        await store.add_subscription(sub("sub_old", "t3", agent="http://old.test"))
        await store.delete_subscription("sub_old", now=2.0)

        found = await store.active_subscriptions_to_task("alice", "t3")
        assert [s.id for s in found] == ["sub_03", "sub_b"]  # oldest first
        assert all(s.state is SubscriptionState.ACTIVE for s in found)
        only_b = await store.active_subscriptions_to_task("alice", "t3", AGENT_B)
        assert [s.id for s in only_b] == ["sub_b"]
        assert await store.active_subscriptions_to_task("alice", "t3", "http://old.test") == []
        assert await store.active_subscriptions_to_task("alice", "t50") == []
        assert [s.id for s in await store.active_subscriptions_to_task("bob", "t3")] == ["sub_bob"]


# ---- reads are index lookups (rows read, never time) -------------------------------------


def _seed_sqlite(path: Path, n: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO subscriptions (id, client_id, agent_url, task_id, token_digest, "
            "state, created_at) VALUES (?, 'alice', ?, ?, ?, 'active', ?)",
            [(f"sub_{i:05d}", AGENT_A, f"t{i}", f"d{i}", float(i // 3)) for i in range(n)],
        )


async def test_sqlite_reads_a_tasks_subscription_and_a_page_through_indexes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    async with SQLiteReceiverStore(path, synchronous="NORMAL"):
        pass  # the schema
    _seed_sqlite(path, 3000)
    sql = queries("sqlite", "receiver.sql")
    with sqlite3.connect(path) as conn:

        def plan(name: str, params: dict[str, Any]) -> list[str]:
            return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql[name], params)]

        # As the receiver leaves the file (it never runs ANALYZE), and with statistics.
        for analyze in (False, True):
            if analyze:
                conn.execute("ANALYZE")
            for agent in (None, AGENT_A):
                steps = plan(
                    "active_subscriptions_to_task",
                    {"client_id": "alice", "task_id": "t5", "agent_url": agent},
                )
                # Not the client's range of subscriptions_by_client (client_id=?).
                assert steps == [
                    "SEARCH subscriptions USING INDEX subscriptions_active_by_task "
                    "(client_id=? AND task_id=?)"
                ], steps
            steps = plan(
                "list_subscriptions",
                {"client_id": "alice", "after_created_at": 10.0, "after_id": "x", "limit": 11},
            )
            # The page's range, in order (no sort of the rest of the client's list).
            assert steps == [
                "SEARCH subscriptions USING INDEX subscriptions_by_client "
                "(client_id=? AND (created_at,id)>(?,?))"
            ], steps
    async with SQLiteReceiverStore(path, synchronous="NORMAL") as store:
        assert [s.id for s in await store.active_subscriptions_to_task("alice", "t5")] == [
            "sub_00005"
        ]


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's nodes that read ``receiver_subscriptions``."""
    found = [plan] if plan.get("Relation Name") == "receiver_subscriptions" else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


async def test_postgresql_reads_a_tasks_subscription_and_a_page_through_indexes() -> None:
    import asyncpg

    from receiver.postgres_store import PostgresReceiverStore

    dsn, schema = require_postgres(), postgres_schema()
    async with PostgresReceiverStore(dsn, schema=schema):
        pass  # the schema
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.executemany(
            "INSERT INTO receiver_subscriptions (id, client_id, agent_url, task_id, "
            "token_digest, state, created_at) VALUES ($1, 'alice', $2, $3, $4, 'active', $5)",
            [(f"sub_{i:05d}", AGENT_A, f"t{i}", f"d{i}", float(i // 3)) for i in range(3000)],
        )
        sql = queries("postgres", "receiver.sql")

        async def rows_read(name: str, *args: Any) -> int:
            """Rows the query's scans of the table read, checking none is sequential."""
            raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql[name], *args)
            scans = _scans(json.loads(raw)[0]["Plan"])
            assert scans and all("Seq Scan" not in s["Node Type"] for s in scans), scans
            return sum(
                (s["Actual Rows"] + s.get("Rows Removed by Filter", 0)) * s["Actual Loops"]
                for s in scans
            )

        # Before statistics (unless autovacuum got there first) and with them.
        for analyze in (False, True):
            if analyze:
                await conn.execute("ANALYZE receiver_subscriptions")
            assert await rows_read("active_subscriptions_to_task", "alice", "t5", None) == 1
            assert await rows_read("active_subscriptions_to_task", "alice", "t5", AGENT_A) == 1
        # A page of 11 after a position: those rows of the index, in order, not the
        # client's 3000 sorted. (Only with statistics, as autovacuum keeps them: a table
        # never analyzed looks empty to the planner, and any plan is as good.)
        assert await rows_read("list_subscriptions", "alice", 10.0, "sub_00031", 11) == 11
        assert await rows_read("list_subscriptions", "alice", 10.0, "x", 11) == 11
    finally:
        await conn.close()


# ---- GET /subscriptions ----------------------------------------------------------------


async def _pages(a: App, params: dict[str, str]) -> list[list[str]]:
    pages: list[list[str]] = []
    while True:
        status, body = await a.get("/subscriptions", params)
        assert status == 200, body
        assert set(body) == {"subscriptions", "nextCursor"}
        pages.append([s["id"] for s in body["subscriptions"]])
        if body["nextCursor"] is None:
            return pages
        params = {**params, "cursor": body["nextCursor"]}


@BACKENDS
async def test_subscriptions_are_listed_in_pages_without_duplicates_or_gaps(
    kind: str, tmp_path: Path
) -> None:
    async with app(kind, tmp_path) as a:
        store = a.store
        # 105 of alice's (three per creation time: the id breaks ties), some deleted;
        # bob's are never listed to her.
        mine = [sub(f"sub_{i:03d}", f"t{i}", created_at=1000.0 + i // 3) for i in range(105)]
        await asyncio.gather(*(store.add_subscription(s) for s in mine))
        for s in mine[::10]:
            await store.delete_subscription(s.id, now=5000.0)
        await asyncio.gather(
            *(store.add_subscription(sub(f"sub_bob_{i}", f"t{i}", client="bob")) for i in range(7))
        )
        order = [s.id for s in sorted(mine, key=lambda s: (s.created_at, s.id))]

        # By default 100 a page, then the rest; each entry as before.
        status, first = await a.get("/subscriptions")
        assert status == 200 and len(first["subscriptions"]) == 100
        oldest = await store.get_subscription(order[0])
        assert oldest is not None and first["subscriptions"][0] == oldest.to_json()
        assert first["subscriptions"][10]["state"] == "deleted"
        assert await _pages(a, {}) == [order[:100], order[100:]]

        pages = await _pages(a, {"limit": "7"})
        assert [len(p) for p in pages] == [7] * 15
        flat = [i for p in pages for i in p]
        assert flat == order and len(set(flat)) == len(flat)
        # A limit over the maximum counts as the maximum; one page holds them all.
        assert await _pages(a, {"limit": "5000"}) == [order]
        assert await _pages(a, {"limit": "1000"}) == [order]
        status, body = await a.get("/subscriptions", {"limit": "105"})
        assert (len(body["subscriptions"]), body["nextCursor"]) == (105, None)

        # Bob's list is his own.
        bobs = [i for p in await _pages_as(a, BOB, {"limit": "3"}) for i in p]
        assert bobs == sorted(f"sub_bob_{i}" for i in range(7))


async def _pages_as(a: App, key: str, params: dict[str, str]) -> list[list[str]]:
    pages: list[list[str]] = []
    while True:
        status, body = await a.get("/subscriptions", params, key=key)
        assert status == 200, body
        pages.append([s["id"] for s in body["subscriptions"]])
        if body["nextCursor"] is None:
            return pages
        params = {**params, "cursor": body["nextCursor"]}


async def test_paging_survives_changes_between_pages(tmp_path: Path) -> None:
    """A cursor is a position, not an offset: subscriptions removed from an earlier page
    or added meanwhile shift nothing (no repeats, no gaps among those still there)."""
    async with app("sqlite", tmp_path) as a:
        store = a.store
        for i in range(10):
            await store.add_subscription(sub(f"sub_{i}", f"t{i}", created_at=float(i)))
        status, body = await a.get("/subscriptions", {"limit": "4"})
        assert status == 200
        assert [s["id"] for s in body["subscriptions"]] == ["sub_0", "sub_1", "sub_2", "sub_3"]
        await store.remove_subscription("sub_1")
        await store.remove_subscription("sub_3")  # the page's last: its cursor still works
        await store.add_subscription(sub("sub_new", "tnew", created_at=100.0))
        rest = await _pages(a, {"limit": "4", "cursor": body["nextCursor"]})
        assert [i for p in rest for i in p] == [
            "sub_4",
            "sub_5",
            "sub_6",
            "sub_7",
            "sub_8",
            "sub_9",
            "sub_new",
        ]
        assert await _pages(a, {"limit": "2", "cursor": body["nextCursor"]}) == [
            ["sub_4", "sub_5"],
            ["sub_6", "sub_7"],
            ["sub_8", "sub_9"],
            ["sub_new"],
        ]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"limit": "abc"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": "-5"}, "limit"),
        ({"limit": "1.5"}, "limit"),
        ({"cursor": ""}, "cursor"),
        ({"cursor": "!!!"}, "cursor"),
        ({"cursor": "\u00e9t\u00e9"}, "cursor"),
        ({"cursor": "A" * 3000}, "cursor"),
        ({"cursor": _b64(b"not json")}, "cursor"),
        ({"cursor": _b64(b"\xff\xfe")}, "cursor"),
        ({"cursor": _b64(b"[1]")}, "cursor"),
        ({"cursor": _b64(b'[1, "a", 2]')}, "cursor"),
        ({"cursor": _b64(b'{"a": 1}')}, "cursor"),
        ({"cursor": _b64(b'["1", "sub_1"]')}, "cursor"),
        ({"cursor": _b64(b'[true, "sub_1"]')}, "cursor"),
        ({"cursor": _b64(b"[1, 2]")}, "cursor"),
        ({"cursor": _b64(b'[NaN, "sub_1"]')}, "cursor"),
        ({"cursor": _b64(b'[1e999, "sub_1"]')}, "cursor"),
        ({"cursor": _b64(b"[" + b"9" * 400 + b', "sub_1"]')}, "cursor"),
        ({"cursor": _b64(b'[1, "a\\u0000b"]')}, "cursor"),
        ({"cursor": _b64(b'[1, "\\ud800"]')}, "cursor"),
        ({"limit": "2", "cursor": "%%%"}, "cursor"),
    ],
)
async def test_a_bad_limit_or_cursor_is_a_400_naming_it(
    tmp_path: Path, params: dict[str, str], name: str
) -> None:
    async with app("sqlite", tmp_path) as a:
        await a.store.add_subscription(sub("sub_1", "t1"))
        status, body = await a.get("/subscriptions", params)
        assert status == 400, body
        assert body["error"] == "invalid" and body["message"].startswith(f"{name}: ")
        # The API key is checked first, as everywhere.
        status, body = await a.get("/subscriptions", params, key="wrong-key-wrong-key")
        assert (status, body["error"]) == (401, "unauthorized")


async def test_get_tasks_keeps_its_limit_rules(tmp_path: Path) -> None:
    """GET /tasks and GET /subscriptions share the limit parsing: nothing changed there."""
    async with app("sqlite", tmp_path) as a:
        for value, message in [
            ("x", "limit: an integer is required"),
            ("0", "limit: must be at least 1"),
        ]:
            assert await a.get("/tasks", {"limit": value}) == (
                400,
                {"error": "invalid", "message": message},
            )
        assert await a.get("/tasks", {"limit": "5000"}) == (200, {"tasks": []})
