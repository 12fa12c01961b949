"""What the gateway keeps beside the outbox: which agent owns each task (and its latest
known state), and the signing keys every replica signs with.

Two backends: SQLite (a single gateway; its own small file beside the outbox) and
PostgreSQL (replicas share it). Private keys are sealed with the store's Fernet keys
when encryption keys are configured.
"""

from __future__ import annotations

import abc
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization

from a2a_push.database import create_private_file, enable_wal
from a2a_push.errors import SecretDecryptionError, StoreUnavailableError, StoreUnusableError
from a2a_push.protocol.types import TERMINAL_STATES
from a2a_push.signing.keys import DEFAULT_ALGORITHM, Algorithm, KeyStoreError, SigningKey
from a2a_push.store import is_postgres_url
from a2a_push.store.secrets import SecretBox

_SQLITE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id    TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    context_id TEXT,
    status     TEXT,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid        TEXT PRIMARY KEY,
    alg        TEXT NOT NULL,
    private    TEXT NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL
);
"""

_PG_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id    TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    context_id TEXT,
    status     TEXT,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid        TEXT PRIMARY KEY,
    alg        TEXT NOT NULL,
    private    TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    retired_at DOUBLE PRECISION
);
"""
# Serialises schema creation and key rotation across replicas.
_PG_LOCK: Final = 0x6132_6170_6777
# The recorded ``status.state`` of a finished task, as TaskStatus.to_json_dict writes it.
_TERMINAL: Final = tuple(sorted(state.value for state in TERMINAL_STATES))
# The outbox's push configs: a task that still has one keeps its owner (see purge_tasks).
_OUTBOX_ALIAS: Final = "outbox"


class TaskOwner:
    """The agent that owns a task and the task's latest known id/context/status."""

    __slots__ = ("agent_id", "context_id", "status")

    def __init__(self, agent_id: str, context_id: str | None, status: dict[str, Any] | None):
        self.agent_id = agent_id
        self.context_id = context_id
        self.status = status


class GatewayState(abc.ABC):
    """Task ownership and signing keys, shared by every gateway replica on one database."""

    def __init__(self, encryption_keys: Sequence[str] | None = None) -> None:
        self._box = SecretBox(encryption_keys)

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def claim_task(
        self,
        task_id: str,
        agent_id: str,
        *,
        context_id: str | None = None,
        status: dict[str, Any] | None = None,
    ) -> TaskOwner | None:
        """Record that ``agent_id`` owns ``task_id`` (the first agent to name a task owns
        it) and, when given, its latest context and status; the task's record after that.
        None: another agent owns it."""

    @abc.abstractmethod
    async def owner(self, task_id: str) -> TaskOwner | None: ...

    @abc.abstractmethod
    async def purge_tasks(self, *, updated_before: float, limit: int = 1000) -> int:
        """Forget up to ``limit`` finished tasks: rows whose latest status is terminal
        (completed, failed, canceled, rejected), last updated before ``updated_before``,
        and with no push config left for the task in the outbox. Their ids are then
        unowned: the next agent to name one owns it, as a new task. The count deleted."""

    @abc.abstractmethod
    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]: ...

    @abc.abstractmethod
    async def _rotate_rows(self, new: tuple[str, str, str, float], at: float) -> None:
        """Retire the active key and insert ``new`` atomically (serialised across replicas)."""

    @abc.abstractmethod
    async def _delete_keys(self, kids: Sequence[str]) -> None: ...

    # ---- keys ------------------------------------------------------------------------

    def _seal(self, key: SigningKey) -> str:
        sealed = self._box.seal(key.private_pem().decode("ascii"), None)
        assert sealed is not None
        return sealed

    def _unseal(
        self, kid: str, alg: str, private: str, created: float, retired: float | None
    ) -> SigningKey:
        try:
            pem, _ = self._box.open(private)
        except SecretDecryptionError as exc:
            raise KeyStoreError(
                f"signing key {kid} is sealed and cannot be opened ({exc}): configure the "
                "encryption key the gateway seals its keys with (gateway: encryption_keys "
                "in its settings file, or A2A_GATEWAY_ENCRYPTION_KEYS; a2a-push keys "
                "rotate: --encryption-key=KEY)"
            ) from None
        if pem is None:
            raise KeyStoreError(
                f"signing key {kid} cannot be decrypted: configure the encryption key it was "
                "sealed with"
            )
        private_key = serialization.load_pem_private_key(pem.encode("ascii"), password=None)
        return SigningKey(kid, alg, private_key, created, retired)  # type: ignore[arg-type]

    async def load_keys(
        self, alg: Algorithm = DEFAULT_ALGORITHM, *, create: bool = True
    ) -> list[SigningKey]:
        """Every stored key; on a fresh database, one new ``alg`` key is created first
        (``create=False``: an empty list instead)."""
        rows = await self._load_rows()
        if not rows and not create:
            return []
        if not rows:
            await self.rotate_key(alg)
            rows = await self._load_rows()
        return [self._unseal(*row) for row in rows]

    async def rotate_key(self, alg: Algorithm = DEFAULT_ALGORITHM) -> SigningKey:
        """A new active key; the previous one is retired (still published for the grace)."""
        key = SigningKey.generate(alg)
        await self._rotate_rows((key.kid, key.alg, self._seal(key), key.created_at), key.created_at)
        return key

    async def prune_keys(self, grace_period: float, now: float | None = None) -> list[str]:
        """Delete retired keys whose grace period (``grace_period`` seconds after they
        were retired) is over: no longer published, nothing verifies with them. The
        active key and keys still in the grace window stay. The kids deleted."""
        at = time.time() if now is None else now
        expired = [
            kid
            for kid, _, _, _, retired in await self._load_rows()
            if retired is not None and retired + grace_period <= at
        ]
        if expired:
            await self._delete_keys(expired)
        return expired


class SQLiteGatewayState(GatewayState):
    """Gateway state in a SQLite file (one gateway process)."""

    def __init__(
        self,
        path: str | Path,
        encryption_keys: Sequence[str] | None = None,
        *,
        outbox: str | Path | None = None,
    ) -> None:
        """``outbox``: the SQLite outbox file beside it, read (never written) by
        :meth:`purge_tasks` so that a task with push configs keeps its owner. None: a
        state without an outbox (no configs to keep tasks for)."""
        super().__init__(encryption_keys)
        self.path = Path(path)
        self.outbox = None if outbox is None else Path(outbox)
        self._conn: sqlite3.Connection | None = None
        self._outbox_attached = False

    async def open(self) -> None:
        create_private_file(self.path)  # it holds the private signing keys
        # URIs on for the outbox's read-only ATTACH (a plain path is still a path).
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, uri=True)
        enable_wal(conn)
        conn.execute("PRAGMA secure_delete = ON")  # retired signing keys leave no trace
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.executescript(_SQLITE_SCHEMA)
        self._conn = conn
        self._outbox_attached = False

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailableError("the gateway state is not open")
        return self._conn

    async def claim_task(
        self,
        task_id: str,
        agent_id: str,
        *,
        context_id: str | None = None,
        status: dict[str, Any] | None = None,
    ) -> TaskOwner | None:
        # One statement: the owner check, the upsert and the record read are atomic.
        row = (
            self._db()
            .execute(
                "INSERT INTO gateway_tasks (task_id, agent_id, context_id, status, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
                "context_id = COALESCE(excluded.context_id, context_id), "
                "status = COALESCE(excluded.status, status), updated_at = excluded.updated_at "
                "WHERE gateway_tasks.agent_id = excluded.agent_id "
                "RETURNING agent_id, context_id, status",
                (task_id, agent_id, context_id, _dump(status), time.time()),
            )
            .fetchone()
        )
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def owner(self, task_id: str) -> TaskOwner | None:
        row = (
            self._db()
            .execute(
                "SELECT agent_id, context_id, status FROM gateway_tasks WHERE task_id = ?",
                (task_id,),
            )
            .fetchone()
        )
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def purge_tasks(self, *, updated_before: float, limit: int = 1000) -> int:
        conn = self._db()
        keep_configured = ""
        if self.outbox is not None:
            if not self._outbox_attached:
                # Read-only (the outbox's own connection is its only writer), and only
                # here: tools that open the state never need it. A missing outbox fails
                # the purge rather than being created empty.
                uri = self.outbox.resolve().as_uri() + "?mode=ro"
                conn.execute(f"ATTACH DATABASE ? AS {_OUTBOX_ALIAS}", (uri,))
                self._outbox_attached = True
            keep_configured = (
                f"AND NOT EXISTS (SELECT 1 FROM {_OUTBOX_ALIAS}.configs c "
                "WHERE c.task_id = g.task_id) "
            )
        marks = ", ".join("?" for _ in _TERMINAL)
        cursor = conn.execute(
            "DELETE FROM gateway_tasks WHERE task_id IN ("
            "SELECT g.task_id FROM gateway_tasks g WHERE g.updated_at < ? "
            f"AND json_extract(g.status, '$.state') IN ({marks}) {keep_configured}"
            "LIMIT ?)",
            (updated_before, *_TERMINAL, limit),
        )
        return max(cursor.rowcount, 0)

    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]:
        rows = (
            self._db()
            .execute(
                "SELECT kid, alg, private, created_at, retired_at FROM gateway_signing_keys "
                "ORDER BY created_at"
            )
            .fetchall()
        )
        return [tuple(r) for r in rows]

    async def _rotate_rows(self, new: tuple[str, str, str, float], at: float) -> None:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "UPDATE gateway_signing_keys SET retired_at = ? WHERE retired_at IS NULL", (at,)
            )
            conn.execute(
                "INSERT INTO gateway_signing_keys (kid, alg, private, created_at) "
                "VALUES (?, ?, ?, ?)",
                new,
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def _delete_keys(self, kids: Sequence[str]) -> None:
        self._db().executemany(
            "DELETE FROM gateway_signing_keys WHERE kid = ?", [(k,) for k in kids]
        )


class PostgresGatewayState(GatewayState):
    """Gateway state in PostgreSQL, shared by replicas."""

    def __init__(
        self,
        dsn: str,
        encryption_keys: Sequence[str] | None = None,
        *,
        schema: str | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(encryption_keys)
        self.dsn = dsn
        self.schema = schema
        # False (for tools): create nothing; open() fails where no gateway ever ran.
        self.create = create
        self._pool: Any = None

    async def open(self) -> None:
        try:
            import asyncpg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StoreUnavailableError(
                "PostgreSQL needs the asyncpg package: install a2a-push with the postgres extra"
            ) from exc
        from a2a_push.database.postgres import describe_dsn, is_unavailable

        settings = {"search_path": self.schema} if self.schema else None
        pool = None
        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=4, server_settings=settings
            )
            async with pool.acquire() as conn, conn.transaction():
                if not self.create:
                    if await conn.fetchval("SELECT to_regclass('gateway_signing_keys')") is None:
                        raise StoreUnusableError(
                            "no gateway state in this database: no gateway has started on "
                            "it; give the --database the gateway runs with, or start the "
                            "gateway once"
                        )
                else:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _PG_LOCK)
                    await conn.execute(_PG_SCHEMA)
        except BaseException as exc:
            if pool is not None:
                pool.terminate()
            if is_unavailable(exc):
                raise StoreUnavailableError(
                    f"PostgreSQL at {describe_dsn(self.dsn)} is not reachable: {exc}"
                ) from exc
            if isinstance(exc, asyncpg.PostgresError):
                raise StoreUnusableError(
                    f"cannot use PostgreSQL at {describe_dsn(self.dsn)}: {exc}; check the DSN"
                ) from exc
            raise
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _run(self, fn: Any) -> Any:
        from a2a_push.database.postgres import pooled_connection

        if self._pool is None:
            raise StoreUnavailableError("the gateway state is not open")
        async with pooled_connection(self._pool, _unreachable) as conn:
            return await fn(conn)

    async def claim_task(
        self,
        task_id: str,
        agent_id: str,
        *,
        context_id: str | None = None,
        status: dict[str, Any] | None = None,
    ) -> TaskOwner | None:
        async def op(conn: Any) -> Any:
            return await conn.fetchrow(
                "INSERT INTO gateway_tasks (task_id, agent_id, context_id, status, updated_at) "
                "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (task_id) DO UPDATE SET "
                "context_id = COALESCE(EXCLUDED.context_id, gateway_tasks.context_id), "
                "status = COALESCE(EXCLUDED.status, gateway_tasks.status), "
                "updated_at = EXCLUDED.updated_at "
                "WHERE gateway_tasks.agent_id = EXCLUDED.agent_id "
                "RETURNING agent_id, context_id, status",
                task_id,
                agent_id,
                context_id,
                _dump(status),
                time.time(),
            )

        row = await self._run(op)
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def owner(self, task_id: str) -> TaskOwner | None:
        async def op(conn: Any) -> Any:
            return await conn.fetchrow(
                "SELECT agent_id, context_id, status FROM gateway_tasks WHERE task_id = $1",
                task_id,
            )

        row = await self._run(op)
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def purge_tasks(self, *, updated_before: float, limit: int = 1000) -> int:
        # The outbox's configs table is in the same database (and search_path). Rows a
        # replica is updating are skipped (and re-checked when locked), not waited for.
        async def op(conn: Any) -> Any:
            return await conn.execute(
                "DELETE FROM gateway_tasks WHERE task_id IN ("
                "SELECT g.task_id FROM gateway_tasks g WHERE g.updated_at < $1 "
                "AND (g.status::jsonb ->> 'state') = ANY($2::text[]) "
                "AND NOT EXISTS (SELECT 1 FROM configs c WHERE c.task_id = g.task_id) "
                "LIMIT $3 FOR UPDATE SKIP LOCKED)",
                updated_before,
                list(_TERMINAL),
                limit,
            )

        tag = await self._run(op)  # "DELETE <n>"
        return int(str(tag).rsplit(" ", 1)[-1])

    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]:
        async def op(conn: Any) -> Any:
            return await conn.fetch(
                "SELECT kid, alg, private, created_at, retired_at FROM gateway_signing_keys "
                "ORDER BY created_at"
            )

        return [tuple(r) for r in await self._run(op)]

    async def _rotate_rows(self, new: tuple[str, str, str, float], at: float) -> None:
        async def op(conn: Any) -> None:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _PG_LOCK)
                await conn.execute(
                    "UPDATE gateway_signing_keys SET retired_at = $1 WHERE retired_at IS NULL", at
                )
                await conn.execute(
                    "INSERT INTO gateway_signing_keys (kid, alg, private, created_at) "
                    "VALUES ($1, $2, $3, $4)",
                    *new,
                )

        await self._run(op)

    async def _delete_keys(self, kids: Sequence[str]) -> None:
        async def op(conn: Any) -> None:
            await conn.execute("DELETE FROM gateway_signing_keys WHERE kid = ANY($1)", list(kids))

        await self._run(op)


def open_gateway_state(
    database: str, encryption_keys: Sequence[str] | None = None, *, create: bool = True
) -> GatewayState:
    """PostgreSQL state for a ``postgresql://`` database; for a SQLite outbox file, a
    ``<name>-gateway.db`` file beside it. ``create=False`` (PostgreSQL): create no tables
    (tools that only use an existing gateway's state)."""
    path = sqlite_state_path(database)
    if path is None:
        return PostgresGatewayState(database, encryption_keys, create=create)
    return SQLiteGatewayState(path, encryption_keys, outbox=database.removeprefix("sqlite:///"))


def sqlite_state_path(database: str) -> Path | None:
    """The gateway's own SQLite file beside a SQLite outbox (``<name>-gateway.db``);
    None for PostgreSQL, where the state lives in the same database."""
    if is_postgres_url(database):
        return None
    outbox = Path(database.removeprefix("sqlite:///"))
    return outbox.with_name(outbox.stem + "-gateway.db")


def _dump(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _load(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    data = json.loads(value)
    return data if isinstance(data, dict) else None


def _unreachable(exc: BaseException) -> StoreUnavailableError:
    if isinstance(exc, TimeoutError):
        return StoreUnavailableError("PostgreSQL did not answer in time")
    return StoreUnavailableError(f"PostgreSQL is not reachable: {exc}")
