"""Database plumbing shared by every store of the package: the outbox
(``a2a_push.store``), the gateway's state (``a2a_push.gateway.state``) and the
receiver's store (``receiver``). What they store and how lives with each of them; this
is how they open, write, migrate and report their databases, written once.

Public names (everything else here is private):

SQLite (``a2a_push.database.sqlite_writer``)
    ``create_private_file(path)``: a new database file readable by its owner alone.
    ``enable_wal(conn)``: put the file in WAL mode (retried while another process holds it).
    ``prepare_writer_connection(conn)``: settings of the connection a ``SQLiteWriter`` owns.
    ``SQLiteWriter``: the group-commit writer (one transaction and one fsync per batch,
    checkpoints kept up with).

SQL files and migrations (``a2a_push.database.sql``)
    ``queries(backend, package)``: the named queries of ``<package>/<backend>/queries.sql``.
    ``migrations(backend, package)``: its ordered ``NNNN_*.sql`` migrations.
    ``migrate_sqlite(conn, package)``: apply them to a SQLite file (``user_version``).
    ``migrate_postgres(conn, package, table=..., lock=...)``: apply them to PostgreSQL,
    recorded in the package's own versions table.
    ``package`` defaults to the outbox's, ``OUTBOX_SQL``.

PostgreSQL (``a2a_push.database.postgres``; needs asyncpg, so not imported here)
    ``is_unavailable(exc)`` / ``UNAVAILABLE_ERRORS``: whether an error means "the
    database cannot be reached (for now)".
    ``pooled_connection(pool, unavailable)``: a pooled connection that raises connection
    failures as ``unavailable(exc)``.
    ``describe_dsn(dsn)``: ``host:port/database``, for messages (never the password).
"""

from __future__ import annotations

from .sql import OUTBOX_SQL, migrate_postgres, migrate_sqlite, migrations, queries
from .sqlite_writer import SQLiteWriter, create_private_file, enable_wal, prepare_writer_connection

__all__ = [
    "OUTBOX_SQL",
    "SQLiteWriter",
    "create_private_file",
    "enable_wal",
    "migrate_postgres",
    "migrate_sqlite",
    "migrations",
    "prepare_writer_connection",
    "queries",
]
