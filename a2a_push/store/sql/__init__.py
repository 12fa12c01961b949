"""SQL for the durable backends, kept in .sql files: named queries and ordered migrations."""

from __future__ import annotations

import re
import sqlite3
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queries(backend: str, package: str = __package__) -> dict[str, str]:
    """The named queries of ``<package>/<backend>/queries.sql`` ("-- name: x" blocks)."""
    text = resources.files(package).joinpath(backend, "queries.sql").read_text("utf-8")
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
def migrations(backend: str, package: str = __package__) -> list[tuple[int, str]]:
    """Ordered (version, script) pairs from ``<package>/<backend>/NNNN_*.sql``."""
    folder = resources.files(package).joinpath(backend)
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text("utf-8")))
    return sorted(found)


def migrate_sqlite(conn: sqlite3.Connection, package: str = __package__) -> None:
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


def _split_statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
