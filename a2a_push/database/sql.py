"""SQL kept in .sql files: named queries and ordered migrations, and the runners that
apply the migrations (SQLite: ``PRAGMA user_version``; PostgreSQL: a versions table).

A package of SQL holds one folder per backend (``sqlite``, ``postgres``), each with a
``queries.sql`` ("-- name: x" blocks) and numbered migrations ``NNNN_<what>.sql``. The
outbox's is ``a2a_push.store.sql`` (the default), the gateway's ``a2a_push.gateway.sql``,
the receiver's ``receiver.sql``.
"""

from __future__ import annotations

import re
import sqlite3
from functools import cache
from importlib import resources
from typing import Any, Final

OUTBOX_SQL: Final = "a2a_push.store.sql"
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(_\w+)\}\}")
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@cache
def queries(backend: str, package: str = OUTBOX_SQL) -> dict[str, str]:
    """The named queries of ``<package>/<backend>/queries.sql`` ("-- name: x" blocks).

    A block whose name starts with ``_`` is a fragment, not a query: a query includes it
    as ``{{_name}}`` (its comment lines left out), so text used by several queries is
    written once. Fragments common to every backend (a column list, say) are in
    ``<package>/fragments.sql``; a backend's own file may declare more."""
    root = resources.files(package)
    named = _named(root.joinpath(backend, "queries.sql").read_text("utf-8"))
    shared = root.joinpath("fragments.sql")
    common = _named(shared.read_text("utf-8")) if shared.is_file() else {}
    fragments = {
        name: "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("--"))
        for name, body in (common | named).items()
        if name.startswith("_")
    }

    def include(match: re.Match[str]) -> str:
        try:
            return fragments[match.group(1)]
        except KeyError:
            raise ValueError(
                f"{package}/{backend}/queries.sql: no fragment named {match.group(1)!r}"
            ) from None

    return {
        name: _INCLUDE.sub(include, sql) for name, sql in named.items() if name not in fragments
    }


def _named(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    return {name: _statement(body) for name, body in zip(parts[1::2], parts[2::2])}


def _statement(body: str) -> str:
    """A query's text without the blank and comment lines after it (a section heading
    before the next query) and without its final semicolon."""
    lines = body.strip().splitlines()
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
        lines.pop()
    return "\n".join(lines).strip().rstrip(";")


@cache
def migrations(backend: str, package: str = OUTBOX_SQL) -> list[tuple[int, str]]:
    """Ordered (version, script) pairs from ``<package>/<backend>/NNNN_*.sql``."""
    folder = resources.files(package).joinpath(backend)
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text("utf-8")))
    return sorted(found)


def migrate_sqlite(conn: sqlite3.Connection, package: str = OUTBOX_SQL) -> None:
    """Apply ``<package>/sqlite/NNNN_*.sql`` newer than ``PRAGMA user_version``, in one
    transaction (another process migrating at the same time waits for the lock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for version, script in migrations("sqlite", package):
            if version > current:
                for statement in _split_statements(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


async def migrate_postgres(
    conn: Any, package: str, *, table: str, lock: int, schema: str | None = None
) -> list[int]:
    """Apply ``<package>/postgres/NNNN_*.sql`` not yet recorded in ``table``, each in a
    transaction of its own, under the session advisory lock ``lock`` (processes starting
    together migrate one after the other). ``schema``: created first if missing (under
    the lock: ``CREATE SCHEMA IF NOT EXISTS`` is not safe concurrently). ``conn``: an
    asyncpg connection whose ``search_path`` is that schema. The versions applied.

    Each package records its versions in a table of its own, so packages sharing one
    database and schema (the outbox, the gateway, the receiver) never collide."""
    if not _TABLE_NAME.fullmatch(table):
        raise ValueError(f"table: {table!r} is not a plain table name")
    if schema is not None and not _TABLE_NAME.fullmatch(schema):
        raise ValueError(f"schema: {schema!r} is not a plain schema name")
    applied = []
    await conn.execute("SELECT pg_advisory_lock($1)", lock)
    try:
        if schema:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} "
            "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in await conn.fetch(f"SELECT version FROM {table}")}
        for version, script in migrations("postgres", package):
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(script)
                await conn.execute(f"INSERT INTO {table} (version) VALUES ($1)", version)
            applied.append(version)
    finally:
        if not conn.is_closed():
            await conn.execute("SELECT pg_advisory_unlock($1)", lock)
    return applied


def _split_statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
