"""The gateway's own state, on SQLite and PostgreSQL: its schema is versioned (and a
database from before that opens with its data), and the first signing key is one
decision for the cluster (replicas starting together on a fresh database agree on one
key)."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from a2a_push.database import migrations
from a2a_push.gateway.state import GatewayState, PostgresGatewayState, SQLiteGatewayState
from a2a_push.signing.keys import SigningKey
from a2a_push.store.secrets import SecretBox

from ..conftest import postgres_schema, require_postgres

REPLICAS = 4
TRIES = 5
GATEWAY_SQL = "a2a_push.gateway.sql"

# The schema gateways created before it was versioned (inline CREATE TABLE IF NOT EXISTS).
OLD_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, context_id TEXT, status TEXT,
    updated_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid TEXT PRIMARY KEY, alg TEXT NOT NULL, private TEXT NOT NULL,
    created_at REAL NOT NULL, retired_at REAL);
"""
OLD_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, context_id TEXT, status TEXT,
    updated_at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid TEXT PRIMARY KEY, alg TEXT NOT NULL, private TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, retired_at DOUBLE PRECISION);
"""


def _old_rows() -> tuple[tuple[object, ...], list[tuple[object, ...]]]:
    """A task row and two key rows (one retired), as the old code stored them."""
    box = SecretBox(None)
    old, active = SigningKey.generate("ES256"), SigningKey.generate("ES256")
    keys = [
        (k.kid, k.alg, box.seal(k.private_pem().decode("ascii"), None), at, retired)
        for k, at, retired in ((old, 1000.0, 2000.0), (active, 2000.0, None))
    ]
    return ("t-1", "agent-a", "ctx-1", '{"state":"working"}', 1500.0), keys


async def _check_old_data_kept(state: GatewayState, kids: list[str]) -> None:
    owner = await state.owner("t-1")
    assert owner is not None
    assert (owner.agent_id, owner.context_id, owner.status) == (
        "agent-a",
        "ctx-1",
        {"state": "working"},
    )
    assert await state.claim_task("t-1", "agent-b") is None  # still agent-a's
    assert [k.kid for k in await state.load_keys()] == kids  # no new key created
    assert [k.retired_at for k in await state.load_keys()] == [2000.0, None]


async def test_a_sqlite_state_from_before_versioned_migrations_keeps_its_data(
    tmp_path: Path,
) -> None:
    path = tmp_path / "outbox-gateway.db"
    task, keys = _old_rows()
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SQLITE_SCHEMA)
        conn.execute("INSERT INTO gateway_tasks VALUES (?, ?, ?, ?, ?)", task)
        conn.executemany("INSERT INTO gateway_signing_keys VALUES (?, ?, ?, ?, ?)", keys)
    conn.close()

    for _ in range(2):  # the first open migrates; the second finds nothing to do
        state = SQLiteGatewayState(path)
        await state.open()
        try:
            await _check_old_data_kept(state, [str(k[0]) for k in keys])
        finally:
            await state.close()
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.close()
    assert version == max(v for v, _ in migrations("sqlite", GATEWAY_SQL))


async def test_a_postgres_state_from_before_versioned_migrations_keeps_its_data() -> None:
    """In a schema shared with the outbox: the gateway's versions are its own."""
    dsn, schema = require_postgres(), postgres_schema()
    import asyncpg

    from a2a_push.store.postgres import PostgresStore

    task, keys = _old_rows()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(f'SET search_path TO "{schema}"')
        await conn.execute(OLD_PG_SCHEMA)
        await conn.execute("INSERT INTO gateway_tasks VALUES ($1, $2, $3, $4, $5)", *task)
        await conn.executemany("INSERT INTO gateway_signing_keys VALUES ($1, $2, $3, $4, $5)", keys)
    finally:
        await conn.close()
    outbox = PostgresStore(dsn, schema=schema)
    await outbox.open()
    await outbox.close()

    for _ in range(2):  # the first open migrates; the second finds nothing to do
        state = PostgresGatewayState(dsn, schema=schema)
        await state.open()
        try:
            await _check_old_data_kept(state, [str(k[0]) for k in keys])
        finally:
            await state.close()
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        gateway = [r[0] for r in await conn.fetch("SELECT version FROM gateway_schema_migrations")]
        outbox_versions = [r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")]
    finally:
        await conn.close()
    assert sorted(gateway) == [v for v, _ in migrations("postgres", GATEWAY_SQL)]
    assert sorted(outbox_versions) == [v for v, _ in migrations("postgres")]


def _start_together(make: Callable[[], GatewayState]) -> list[str]:
    """Start ``REPLICAS`` states at once, each on its own thread and event loop (as
    separate processes would): open, then load the keys as a starting gateway does.
    The active kid each one loaded."""
    barrier = threading.Barrier(REPLICAS)
    kids: list[str] = []
    errors: list[BaseException] = []

    async def start(state: GatewayState) -> str:
        await state.open()
        try:
            keys = await state.load_keys()
        finally:
            await state.close()
        return next(k.kid for k in keys if k.retired_at is None)

    def run() -> None:
        state = make()
        barrier.wait()
        try:
            kids.append(asyncio.run(start(state)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(REPLICAS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return kids


def test_sqlite_replicas_starting_together_agree_on_one_key(tmp_path: Path) -> None:
    for n in range(TRIES):
        path = tmp_path / f"state-{n}.db"
        kids = _start_together(functools.partial(SQLiteGatewayState, path))
        with sqlite3.connect(path) as conn:
            stored = [r[0] for r in conn.execute("SELECT kid FROM gateway_signing_keys")]
        assert len(stored) == 1, f"try {n}: {len(stored)} keys created"
        assert kids == stored * REPLICAS, f"try {n}"


def test_postgres_replicas_starting_together_agree_on_one_key() -> None:
    dsn = require_postgres()
    import asyncpg

    for n in range(TRIES):
        schema = postgres_schema()  # not there yet (the states create it); dropped after
        kids = _start_together(functools.partial(PostgresGatewayState, dsn, schema=schema))

        async def stored(schema: str = schema) -> list[str]:
            conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
            try:
                return [r[0] for r in await conn.fetch("SELECT kid FROM gateway_signing_keys")]
            finally:
                await conn.close()

        keys = asyncio.run(stored())
        assert len(keys) == 1, f"try {n}: {len(keys)} keys created"
        assert kids == keys * REPLICAS, f"try {n}"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_later_start_keeps_the_key(kind: str, tmp_path: Path) -> None:
    """Not a fresh database: a replica starting later loads the key, creates none."""
    if kind == "sqlite":

        def make() -> GatewayState:
            return SQLiteGatewayState(tmp_path / "state.db")
    else:
        dsn, schema = require_postgres(), postgres_schema()

        def make() -> GatewayState:
            return PostgresGatewayState(dsn, schema=schema)

    first = _start_together(make)
    assert _start_together(make) == first
