"""Opening a notifier's or gateway's database for the commands that read or change it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from ..database import migrations
from ..gateway.client import redact_url
from ..store import (
    MemoryStore,
    SecretBox,
    SQLiteStore,
    Store,
    StoreOptions,
    is_postgres_url,
    open_store,
)
from .common import ENV_DATABASE, ENV_ENCRYPTION_KEYS, PROG, CLIError

# Dead-lettered deliveries are gathered for replay in pages of this size.


def given_encryption_keys(args: argparse.Namespace) -> list[str]:
    given: list[str] | None = getattr(args, "encryption_keys", None)
    if given is None:
        given = os.environ.get(ENV_ENCRYPTION_KEYS, "").split(",")
    keys = [k.strip() for k in given if k.strip()]
    try:
        SecretBox(keys or None)
    except ValueError:
        # Never echo the value: it is a secret.
        raise CLIError(
            "--encryption-key: each key must be a Fernet key (32 url-safe base64-encoded "
            f"bytes); make one with `{PROG} store generate-key`",
            2,
        ) from None
    return keys


def open_outbox(args: argparse.Namespace) -> Store:
    database: str | None = args.database
    if not database:
        raise CLIError(
            f"no database given: pass --database DB ({DATABASE_FORMS}) or set {ENV_DATABASE}",
            2,
        )
    keys = given_encryption_keys(args)
    try:
        store = open_store(database, StoreOptions(encryption_keys=keys or None))
    except ValueError as exc:
        raise CLIError(f"--{exc}", 2) from None
    if isinstance(store, MemoryStore):
        raise CLIError(
            f"--database {redact_url(database)}: an in-memory store holds nothing between runs; "
            "point it at the notifier's SQLite file or the gateway's PostgreSQL database",
            2,
        )
    if isinstance(store, SQLiteStore) and not store.path.is_file():
        # Opening would create an empty database and show nothing, hiding the typo.
        raise CLIError(
            f"database {store.path} does not exist; pass the file your notifier or "
            f"gateway uses (--database or {ENV_DATABASE})"
        )
    if isinstance(store, SQLiteStore) and not _is_outbox_file(store.path):
        # Opening migrates: it would add our tables to another application's file.
        raise CLIError(
            f"{store.path} is not an a2a-push outbox (no deliveries table); pass the file "
            f"your notifier or gateway uses (--database or {ENV_DATABASE})"
        )
    if is_postgres_url(database):
        from ..store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        # Nor on PostgreSQL: a typo'd database or schema gets an error, not our tables.
        store.migrate = False
    return store


def _is_outbox_file(path: Path) -> bool:
    """Whether ``path`` is an SQLite file holding an a2a-push outbox (read-only look);
    a CLIError naming the problem when it cannot be read at all, or when the outbox is
    older than this version (opening it would migrate it, maybe under a running older
    notifier: the CLI never migrates)."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {row[0] for row in rows}
            (version,) = conn.execute("PRAGMA user_version").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            return False
        # Locked, unreadable, a WAL file that cannot be opened...: say what it is.
        raise CLIError(f"cannot read {path}: {exc}") from None
    if not {"configs", "deliveries", "lanes"} <= tables:
        return False
    latest = max(v for v, _ in migrations("sqlite"))
    if version < latest:
        raise CLIError(
            f"the outbox {path} is older than this a2a-push (schema {version}, this version "
            f"uses {latest}): start the notifier or gateway of this version once to upgrade "
            "it; the CLI never migrates"
        )
    return True


def run_with_store(args: argparse.Namespace, work: Callable[[Store], Any]) -> int:
    store = open_outbox(args)

    async def run() -> int:
        async with store:
            result: int = await work(store)
            return result

    return asyncio.run(run())


# What --database takes, for help and messages.
DATABASE_FORMS: Final = (
    "a SQLite file path, sqlite:///path, or postgresql://user[:password]@host[:port]/database"
)


def add_database_option(sub: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """``--database DB`` (default: ``$A2A_PUSH_DATABASE``), for the commands that open one."""
    sub.add_argument(
        "--database",
        default=env.get(ENV_DATABASE),
        metavar="DB",
        help=f"the notifier's or gateway's database: {DATABASE_FORMS} (default: ${ENV_DATABASE})",
    )
