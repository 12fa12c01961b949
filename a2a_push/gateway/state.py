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

from a2a_push.database import create_private_file, enable_wal, migrate_sqlite, queries
from a2a_push.errors import SecretDecryptionError, StoreUnavailableError, StoreUnusableError
from a2a_push.protocol.types import TERMINAL_STATES
from a2a_push.signing.keys import DEFAULT_ALGORITHM, Algorithm, KeyStoreError, SigningKey
from a2a_push.store import is_postgres_url
from a2a_push.store.secrets import SecretBox

# The schema (numbered migrations) and the queries: a2a_push/gateway/sql/<backend>/.
_PACKAGE: Final = "a2a_push.gateway.sql"
_SQLITE: Final = queries("sqlite", _PACKAGE)
_PG: Final = queries("postgres", _PACKAGE)
# PostgreSQL: the gateway records its migrations in a table of its own, so they never
# collide with the outbox's (schema_migrations, numbered from 1 too) in a shared schema.
_PG_MIGRATIONS: Final = "gateway_schema_migrations"
# Serialises migrations (a session lock) and key changes (transaction locks) across
# replicas; the key gateways before versioned migrations created their tables under.
_PG_LOCK: Final = 0x6132_6170_6777
# The recorded ``status.state`` of a finished task, as TaskStatus.to_json_dict writes it.
_TERMINAL: Final = tuple(sorted(state.value for state in TERMINAL_STATES))


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
    async def swap_meta(self, name: str, value: str) -> tuple[str, float] | None:
        """Record ``value`` as ``name`` (e.g. the issuer this replica signs as); what was
        recorded before, and when (None: nothing). Atomic across replicas."""

    @abc.abstractmethod
    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]: ...

    @abc.abstractmethod
    async def _add_key(self, new: tuple[str, str, str, float], *, first: bool) -> None:
        """Store ``new`` (kid, alg, sealed private key, created_at) as the active key, in
        one transaction serialised across replicas. ``first``: only if there is no
        active key at that point (another replica may just have created one); else the
        active key is retired (at ``created_at``) in the same transaction."""

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
        (``create=False``: an empty list instead). Replicas starting together on a fresh
        database create one key between them: the first to take the lock inserts its
        key, the others find it there and drop theirs, so all of them sign with it."""
        rows = await self._load_rows()
        if not rows and not create:
            return []
        if not rows:
            await self._add_key(self._row(SigningKey.generate(alg)), first=True)
            rows = await self._load_rows()
        return [self._unseal(*row) for row in rows]

    async def rotate_key(self, alg: Algorithm = DEFAULT_ALGORITHM) -> SigningKey:
        """A new active key; the previous one is retired (still published for the grace)."""
        key = SigningKey.generate(alg)
        await self._add_key(self._row(key), first=False)
        return key

    def _row(self, key: SigningKey) -> tuple[str, str, str, float]:
        return (key.kid, key.alg, self._seal(key), key.created_at)

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
        migrate_sqlite(conn, _PACKAGE)  # the state's own file: its own user_version
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
        row = (
            self._db()
            .execute(
                _SQLITE["claim_task"],
                (task_id, agent_id, context_id, _dump(status), time.time()),
            )
            .fetchone()
        )
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def owner(self, task_id: str) -> TaskOwner | None:
        row = self._db().execute(_SQLITE["task_owner"], (task_id,)).fetchone()
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def purge_tasks(self, *, updated_before: float, limit: int = 1000) -> int:
        conn = self._db()
        query = _SQLITE["purge_tasks"]
        if self.outbox is not None:
            # The outbox's push configs: a task that still has one keeps its owner.
            if not self._outbox_attached:
                # Read-only (the outbox's own connection is its only writer), and only
                # here: tools that open the state never need it. A missing outbox fails
                # the purge rather than being created empty.
                conn.execute(
                    _SQLITE["attach_outbox"], (self.outbox.resolve().as_uri() + "?mode=ro",)
                )
                self._outbox_attached = True
            query = _SQLITE["purge_tasks_without_configs"]
        cursor = conn.execute(query, (updated_before, json.dumps(_TERMINAL), limit))
        return max(cursor.rowcount, 0)

    async def swap_meta(self, name: str, value: str) -> tuple[str, float] | None:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = conn.execute(_SQLITE["meta_value"], (name,)).fetchone()
            conn.execute(_SQLITE["put_meta"], (name, value, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return None if before is None else (before[0], before[1])

    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]:
        return [tuple(r) for r in self._db().execute(_SQLITE["signing_keys"]).fetchall()]

    async def _add_key(self, new: tuple[str, str, str, float], *, first: bool) -> None:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")  # the write lock: other processes wait for it
        try:
            if first:
                conn.execute(_SQLITE["insert_first_key"], new)
            else:
                conn.execute(_SQLITE["retire_active_key"], (new[3],))
                conn.execute(_SQLITE["insert_key"], new)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def _delete_keys(self, kids: Sequence[str]) -> None:
        self._db().execute(_SQLITE["delete_keys"], (json.dumps(list(kids)),))


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
        from a2a_push.database import migrate_postgres
        from a2a_push.database.postgres import describe_dsn, is_unavailable

        settings = {"search_path": self.schema} if self.schema else None
        pool = None
        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=4, server_settings=settings
            )
            async with pool.acquire() as conn:
                if not self.create:
                    if not await conn.fetchval(_PG["has_state"]):
                        raise StoreUnusableError(
                            "no gateway state in this database: no gateway has started on "
                            "it; give the --database the gateway runs with, or start the "
                            "gateway once"
                        )
                else:
                    await migrate_postgres(
                        conn, _PACKAGE, table=_PG_MIGRATIONS, lock=_PG_LOCK, schema=self.schema
                    )
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
                _PG["claim_task"],
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
            return await conn.fetchrow(_PG["task_owner"], task_id)

        row = await self._run(op)
        return None if row is None else TaskOwner(row[0], row[1], _load(row[2]))

    async def purge_tasks(self, *, updated_before: float, limit: int = 1000) -> int:
        # The outbox's configs table is in the same database (and search_path).
        async def op(conn: Any) -> Any:
            return await conn.execute(
                _PG["purge_tasks_without_configs"], updated_before, list(_TERMINAL), limit
            )

        tag = await self._run(op)  # "DELETE <n>"
        return int(str(tag).rsplit(" ", 1)[-1])

    async def swap_meta(self, name: str, value: str) -> tuple[str, float] | None:
        async def op(conn: Any) -> Any:
            async with conn.transaction():
                # Serialised: two replicas starting at once on an empty table must not
                # both find nothing recorded.
                await conn.execute(_PG["lock_keys"], _PG_LOCK)
                before = await conn.fetchrow(_PG["meta_value"], name)
                await conn.execute(_PG["put_meta"], name, value, time.time())
                return before

        before = await self._run(op)
        return None if before is None else (before[0], before[1])

    async def _load_rows(self) -> list[tuple[str, str, str, float, float | None]]:
        async def op(conn: Any) -> Any:
            return await conn.fetch(_PG["signing_keys"])

        return [tuple(r) for r in await self._run(op)]

    async def _add_key(self, new: tuple[str, str, str, float], *, first: bool) -> None:
        async def op(conn: Any) -> None:
            async with conn.transaction():
                # Under the lock, a first key sees any key another replica committed.
                await conn.execute(_PG["lock_keys"], _PG_LOCK)
                if first:
                    await conn.execute(_PG["insert_first_key"], *new)
                else:
                    await conn.execute(_PG["retire_active_key"], new[3])
                    await conn.execute(_PG["insert_key"], *new)

        await self._run(op)

    async def _delete_keys(self, kids: Sequence[str]) -> None:
        async def op(conn: Any) -> None:
            await conn.execute(_PG["delete_keys"], list(kids))

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
