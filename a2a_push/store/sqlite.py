"""SQLite backend (the embedded default): WAL, group commit, fsync off the event loop.

All writes (publishes, claims, outcomes) go through the group-commit writer of
``sqlite_writer``: concurrent writes share one transaction, run on the event loop, and
the fsync of the WAL that makes a commit durable runs on a worker thread, awaited only by
batches that need it (publishes and config changes; not claims or outcomes). Checkpoints
run on their own connection and thread. Reads use an aiosqlite connection of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiosqlite

from ..endpoints import endpoint_of
from ..errors import (
    SecretDecryptionError,
    StoreClosedError,
    TooManyConfigsError,
)
from .base import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    InitialDelivery,
    OutboxStats,
    Outcome,
    Renderer,
    Store,
    StoredConfig,
    StoreOptions,
    check_same_version,
    has_config_side_effects,
)
from .paging import check_page_size, decode_page_token, encode_page_token
from .rows import LEASED_UNTIL, RowMapping, corrupt_state_reason
from .secrets import SecretBox
from .sql import migrate_sqlite, queries
from .sqlite_writer import SQLiteWriter, enable_wal, prepare_writer_connection

T = TypeVar("T")
_Q = queries("sqlite")
# The writer's page cache, in KiB (SQLite's default is 2 MiB): enough for the hot index
# pages of a large backlog, so claims and outcomes do not read them back from the file.
_CACHE_KIB = 32 * 1024

log = logging.getLogger("a2a_push.store.sqlite")

Synchronous = Literal["FULL", "NORMAL"]


class SQLiteStore(RowMapping, Store):
    """Config store and outbox in one SQLite file.

    ``synchronous="FULL"`` (default) fsyncs every commit, so an acknowledged publish
    survives power loss; ``"NORMAL"`` survives process crashes (kill -9) but may lose the
    last commits on power loss, for more throughput.
    """

    def __init__(
        self,
        path: str | Path,
        options: StoreOptions | None = None,
        *,
        synchronous: Synchronous = "FULL",
    ) -> None:
        if str(path) in ("", ":memory:"):
            raise ValueError(
                f"SQLiteStore({str(path)!r}): give the path of a database file (the outbox "
                "must survive a restart, and WAL mode needs a file); for a store kept in "
                "memory use MemoryStore()"
            )
        self.options = options or StoreOptions()
        self.path = Path(path)
        # Made absolute once, when the file is named: messages name that file even if
        # the working directory changes later, and cost no system call.
        self._location = f"the SQLite file {self.path.resolve()}"
        self._synchronous = synchronous
        self._box = SecretBox(self.options.encryption_keys)
        self._executor: ThreadPoolExecutor | None = None  # connect, close
        self._conn: sqlite3.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._writer: SQLiteWriter | None = None
        self._closed = False

    # ---- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                "the SQLite store was closed and cannot be opened again: make a new one"
            )
        if self._writer is not None:
            return
        create_private_file(self.path)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="a2a-push-sqlite")
        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._executor, self._connect_writer)
        self._reader = await aiosqlite.connect(self.path, isolation_level=None)
        self._reader.row_factory = aiosqlite.Row
        await self._reader.execute("PRAGMA busy_timeout = 5000")
        self._writer = SQLiteWriter(
            self._conn,
            f"{self.path}-wal",
            durable=self._synchronous == "FULL",
            name="a2a-push-sqlite",
        )
        self._writer.start()

    def _connect_writer(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        enable_wal(conn)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate_sqlite(conn)  # with the default synchronous=FULL: the schema is durable
        prepare_writer_connection(conn)
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        return conn

    @property
    def location(self) -> str:
        return self._location

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            await self._writer.close()
        if self._reader is not None:
            await self._reader.close()
        if self._executor is not None:
            conn = self._conn
            if conn is not None:
                # Closing the last connection checkpoints the WAL: off the event loop.
                await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
            self._executor.shutdown(wait=True)

    def _not_open(self) -> str:
        if self._closed:
            return "the SQLite store was closed"
        return "the SQLite store is not open (call open() first)"

    def debug_state(self) -> dict[str, object]:
        """Internals, for diagnosing a stuck writer."""
        if self._writer is None:
            return {"writer_running": False}
        return self._writer.debug_state()

    # ---- the writer ------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, sync: bool = True) -> T:
        """Run ``fn`` in the next group-committed transaction.

        ``sync=False`` marks bookkeeping (claims, outcomes, releases) whose loss on power
        failure only means a webhook is sent again: a batch of nothing but such writes
        commits without an fsync even under ``synchronous="FULL"``. Publishes and config
        changes always get the configured durability.
        """
        if self._closed or self._writer is None:
            raise StoreClosedError(self._not_open())
        return await self._writer.write(fn, sync=sync)

    async def _read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        if self._closed or self._reader is None:
            raise StoreClosedError(self._not_open())
        async with self._reader.execute(sql, params) as cur:
            return list(await cur.fetchall())

    # ---- configs ---------------------------------------------------------------------

    async def put_config(
        self, config: StoredConfig, *, initial: InitialDelivery | None = None
    ) -> StoredConfig:
        sealed = self._box.seal(config.token, config.auth_credentials)
        cap = self.options.max_configs_per_task

        def op(conn: sqlite3.Connection) -> StoredConfig:
            found = conn.execute(
                _Q["find_config_key"], (config.task_id, config.owner, config.id)
            ).fetchone()
            values = _config_params(config, sealed)
            if found is None:
                (count,) = conn.execute(_Q["count_task_configs"], (config.task_id,)).fetchone()
                if count >= cap:
                    raise TooManyConfigsError(config.task_id, cap)
                conn.execute(_Q["insert_config"], values)
                stored = config
            else:
                check_same_version(config, found["protocol_version"])
                values["key"] = found["key"]
                conn.execute(_Q["replace_config"], values)
                conn.execute(_Q["set_lanes_endpoint"], (values["endpoint"], found["key"]))
                if found["url"] != config.url:
                    moved = {"key": found["key"], "now": time.time()}
                    conn.execute(_Q["retry_config_afresh"], moved)
                    conn.execute(_Q["config_lanes_due_now"], moved)
                stored = config.with_changes(
                    key=found["key"], created_at=found["created_at"], failing_since=None
                )
            if initial is not None:
                # In the same op, so in the same transaction: no publish between the two.
                _enqueue(
                    conn,
                    stored.task_id,
                    initial.kind,
                    initial.render,
                    initial.new_id,
                    only_config_key=stored.key,
                    now=initial.now,
                    final=initial.final,
                )
            return stored

        return await self._write(op)

    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        rows = await self._read(_Q["config_by_ids"], (task_id, owner, config_id))
        return self._config_from_row(rows[0]) if rows else None

    async def get_config_by_key(self, key: str) -> StoredConfig | None:
        rows = await self._read(_Q["config_by_key"], (key,))
        return self._config_from_row(rows[0]) if rows else None

    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        check_page_size(page_size)
        after = decode_page_token(page_token) or ""
        rows = await self._read(_Q["configs_page"], (task_id, owner, after, page_size + 1))
        page = [self._config_from_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return page, encode_page_token(page[-1].id) if more and page else None

    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            found = conn.execute(_Q["find_config_key"], (task_id, owner, config_id)).fetchone()
            if found is None:
                return False
            _dead_letter_config(conn, found["key"], "config deleted", time.time())
            conn.execute(_Q["delete_config"], (found["key"],))
            return True

        return await self._write(op)

    async def configs_for_task(self, task_id: str) -> list[StoredConfig]:
        rows = await self._read(_Q["enabled_task_configs"], (task_id,))
        return [self._config_from_row(r) for r in rows]

    async def set_config_enabled(self, key: str, enabled: bool, reason: str | None = None) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            return _set_enabled(conn, key, enabled, reason, time.time())

        return await self._write(op)

    async def reencrypt_secrets(self, previous_keys: Sequence[str] | None = None) -> int:
        """Re-seal every stored secret with the current primary key.

        ``previous_keys``: the keys the rows are sealed with now (None: in clear), for
        turning encryption on; rotation within ``encryption_keys`` needs no argument.
        """
        old = SecretBox(previous_keys) if previous_keys is not None else SecretBox(None)
        box = self._box

        def op(conn: sqlite3.Connection) -> int:
            rows = conn.execute(_Q["all_config_secrets"]).fetchall()
            for row in rows:
                sealed = row["secrets"]
                try:
                    token, credentials = old.open(sealed)
                except SecretDecryptionError:
                    token, credentials = box.open(sealed)
                conn.execute(_Q["set_config_secrets"], (box.seal(token, credentials), row["key"]))
            return len(rows)

        return await self._write(op)

    # ---- outbox ----------------------------------------------------------------------

    async def enqueue(
        self,
        task_id: str,
        kind: str,
        render: Renderer,
        *,
        new_id: Callable[[], str],
        only_config_key: str | None = None,
        now: float | None = None,
        idempotency_key: str | None = None,
        idempotency_since: float | None = None,
        final: bool = False,
    ) -> tuple[int, list[str]]:
        since = float("-inf") if idempotency_since is None else idempotency_since

        def op(conn: sqlite3.Connection) -> tuple[int, list[str]]:
            if idempotency_key is not None:
                row = conn.execute(_Q["get_idempotency_key"], (idempotency_key, since)).fetchone()
                if row is not None:
                    return int(row[0]), json.loads(row[1])
            seq, ids = _enqueue(
                conn,
                task_id,
                kind,
                render,
                new_id,
                only_config_key=only_config_key,
                now=now,
                final=final,
            )
            if idempotency_key is not None:
                at = time.time() if now is None else now
                conn.execute(_Q["put_idempotency_key"], (idempotency_key, seq, json.dumps(ids), at))
            return seq, ids

        return await self._write(op)

    async def claim_due(
        self,
        limit: int,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
        per_endpoint: int | None = None,
        exclude_endpoints: Collection[str] = (),
    ) -> list[Delivery]:
        exclude = json.dumps(sorted(exclude_endpoints))

        def op(conn: sqlite3.Connection) -> list[Delivery]:
            at = time.time() if now is None else now
            params = {
                "now": at,
                "exclude": exclude,
                "per_endpoint": per_endpoint or limit,
                "limit": limit,
            }
            rows = conn.execute(_Q["due_lanes"], params).fetchall()
            claimed: list[Delivery] = []
            leases = []
            for row in rows:
                if row["state"] != DeliveryState.PENDING.value:
                    # A lane whose head is no longer pending: repair it (never expected).
                    # A state that is none of ours is dead-lettered first, with the reason.
                    conn.execute(
                        _Q["dead_letter_corrupt_state"],
                        (corrupt_state_reason(row["state"]), at, row["id"]),
                    )
                    _advance_lane(conn, row["lane_config_key"], row["lane_task_id"], now=at)
                    continue
                claimed.append(self._claimed_from_row(row))
                leases.append(
                    (at + lease_seconds, worker_id, row["lane_config_key"], row["lane_task_id"])
                )
            conn.executemany(_Q["lease_lane"], leases)
            return claimed

        return await self._write(op, sync=False)

    async def complete(self, outcomes: Sequence[Outcome], *, now: float | None = None) -> None:
        if not outcomes:
            return

        def op(conn: sqlite3.Connection) -> None:
            at = time.time() if now is None else now
            for o in outcomes:
                _apply_outcome(conn, o, at)

        await self._write(op, sync=False)

    async def complete_and_claim_next(
        self,
        outcome: Outcome,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
    ) -> Delivery | None:
        def op(conn: sqlite3.Connection) -> Delivery | None:
            at = time.time() if now is None else now
            lease = (at, at + lease_seconds, worker_id)
            head_id = _apply_outcome(conn, outcome, at, lease_next=lease)
            if head_id is None:
                return None
            row = conn.execute(_Q["delivery_with_config"], (head_id,)).fetchone()
            return self._claimed_from_row(row)

        return await self._write(op, sync=False)

    async def release(self, delivery_ids: Sequence[str], *, worker_id: str) -> None:
        if not delivery_ids:
            return

        def op(conn: sqlite3.Connection) -> None:
            conn.executemany(_Q["release_lane"], [(i, worker_id) for i in delivery_ids])

        await self._write(op, sync=False)

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        rows = await self._read(_Q["delivery_by_id"], (delivery_id,))
        return self._delivery_from_row(rows[0]) if rows else None

    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]:
        conditions = (
            ("state = ?", flt.state.value if flt.state is not None else None),
            ("task_id = ?", flt.task_id),
            # A config belongs to one task: a listing by config walks that task's index
            # entries (there is no index by config; a deleted config's are scanned for).
            ("task_id = ?", await self._task_of_config(flt) if flt.task_id is None else None),
            ("config_key = ?", flt.config_key),
            ("created_at >= ?", flt.created_after),
            ("created_at < ?", flt.created_before),
            ("id > ?", flt.after_id),
        )
        clauses = ["1 = 1"] + [c for c, value in conditions if value is not None]
        params: list[object] = [value for _, value in conditions if value is not None]
        # Only fixed clause strings are joined; every value is a bound parameter.
        sql = (
            f"SELECT d.*, {LEASED_UNTIL} FROM deliveries d WHERE {' AND '.join(clauses)} "
            "ORDER BY id LIMIT ?"
        )
        rows = await self._read(sql, [*params, flt.limit])
        return [self._delivery_from_row(r) for r in rows]

    async def _task_of_config(self, flt: DeliveryFilter) -> str | None:
        if flt.config_key is None:
            return None
        rows = await self._read(_Q["config_task"], (flt.config_key,))
        return str(rows[0][0]) if rows else None

    async def replay(self, delivery_ids: Sequence[str], *, now: float | None = None) -> int:
        def op(conn: sqlite3.Connection) -> int:
            at = time.time() if now is None else now
            lanes: set[tuple[str, str]] = set()
            count = 0
            for delivery_id in delivery_ids:
                row = conn.execute(_Q["replay_delivery"], (at, at, delivery_id)).fetchone()
                if row is not None:
                    count += 1
                    lanes.add((row["config_key"], row["task_id"]))
            for config_key, task_id in lanes:
                _advance_lane(conn, config_key, task_id, keep_lease=True)
            return count

        return await self._write(op)

    async def purge(self, state: DeliveryState, *, updated_before: float, limit: int = 1000) -> int:
        if state is DeliveryState.PENDING:
            raise ValueError("pending deliveries are never purged")

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                _Q["purge_deliveries"], (state.value, updated_before, limit)
            ).rowcount

        return await self._write(op, sync=False)

    async def purge_final_tasks(self, *, final_before: float, limit: int = 1000) -> int:
        def op(conn: sqlite3.Connection) -> int:
            rows = conn.execute(_Q["final_tasks_to_purge"], (final_before, limit)).fetchall()
            tasks = [(row[0],) for row in rows]
            conn.executemany(_Q["delete_task_configs"], tasks)
            conn.executemany(_Q["forget_task_final"], tasks)
            return len(tasks)

        return await self._write(op, sync=False)

    async def purge_idempotency_keys(self, *, created_before: float, limit: int = 1000) -> int:
        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(_Q["purge_idempotency_keys"], (created_before, limit)).rowcount

        return await self._write(op, sync=False)

    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        rows = await self._read(_Q["next_due_at"], (json.dumps(sorted(exclude_endpoints)),))
        value = rows[0][0] if rows else None
        return float(value) if value is not None else None

    async def stats(self, *, now: float | None = None, count_delivered: bool = True) -> OutboxStats:
        at = time.time() if now is None else now
        rows = await self._read(_Q["stats"], {"now": at, "delivered": count_delivered})
        pending, due, leased, dead, delivered, oldest = rows[0]
        return OutboxStats(
            pending=pending,
            due=due,
            leased=leased,
            dead=dead,
            delivered=delivered,
            oldest_pending_created_at=oldest,
        )


# ---- helpers run on the writer thread ---------------------------------------------------


def create_private_file(path: Path) -> None:
    """Create a new database file readable by its owner alone (0600, in a new folder of
    mode 0700): it holds secrets (config tokens, sealed keys). SQLite gives the file's
    WAL and shared-memory files the same mode. An existing file keeps its mode."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _enqueue(
    conn: sqlite3.Connection,
    task_id: str,
    kind: str,
    render: Renderer,
    new_id: Callable[[], str],
    *,
    only_config_key: str | None,
    now: float | None,
    final: bool = False,
) -> tuple[int, list[str]]:
    """Fan an event out to the task's enabled configs (or only ``only_config_key``)."""
    at = time.time() if now is None else now
    configs = conn.execute(_Q["enqueue_targets"], (task_id,)).fetchall()
    targets = [
        (row["key"], row["protocol_version"], row["endpoint"])
        for row in configs
        if row["enabled"] and (only_config_key is None or row["key"] == only_config_key)
    ]
    if not targets:
        if configs:  # none enabled: no seq used, but the task's end still counts
            conn.execute(_Q["record_task_final"], (task_id, at if final else None))
        return 0, []
    (seq,) = conn.execute(_Q["next_task_seq"], (task_id, at if final else None)).fetchone()
    bodies: dict[str, bytes] = {}
    rows, lanes, ids = [], [], []
    for key, version, endpoint in targets:
        body = bodies.get(version)
        if body is None:
            body = bodies[version] = render(version)
        delivery_id = new_id()
        ids.append(delivery_id)
        rows.append((delivery_id, key, task_id, seq, kind, body, at, at, at))
        lanes.append((key, task_id, delivery_id, at, endpoint))
    conn.executemany(_Q["insert_delivery"], rows)
    conn.executemany(_Q["open_lane"], lanes)
    return seq, ids


def _apply_outcome(
    conn: sqlite3.Connection,
    o: Outcome,
    at: float,
    *,
    lease_next: tuple[float, float, str] | None = None,
) -> str | None:
    """Record ``o``; with ``lease_next`` = (now, lease until, worker), also lease the lane's
    next delivery if it is due now and return its id."""
    leased: str | None = None
    changed = 0
    if _leased_to_another(conn, o):
        pass  # that worker's outcome will count
    elif o.kind == "defer":
        assert o.next_attempt_at is not None
        changed = conn.execute(
            _Q["defer_delivery"], (o.next_attempt_at, at, o.delivery_id)
        ).rowcount
    elif o.kind == "retry":
        assert o.next_attempt_at is not None
        changed = conn.execute(
            _Q["retry_delivery"],
            (o.attempts, o.status, o.error, o.next_attempt_at, at, o.delivery_id),
        ).rowcount
    else:
        state = "delivered" if o.kind == "delivered" else "dead"
        changed = conn.execute(
            _Q["finish_delivery"], (state, o.attempts, o.status, o.error, at, o.delivery_id)
        ).rowcount
    if changed:
        if lease_next is not None and o.disable_config is None and o.kind != "defer":
            leased = _advance_lane(conn, o.config_key, o.task_id, lease_next=lease_next, now=at)
        else:
            _advance_lane(conn, o.config_key, o.task_id, now=at)
        if o.kind == "dead" and o.disable_config is None:
            conn.execute(_Q["clear_config_failing_if_idle"], (o.config_key,))
    if not has_config_side_effects(o):
        return leased
    if o.config_url is not None:
        row = conn.execute(_Q["config_url"], (o.config_key,)).fetchone()
        if row is None or row[0] != o.config_url:
            return leased  # registered again elsewhere since: not about this config now
    if o.config_failing_since is not None:
        conn.execute(_Q["set_config_failing_since"], (o.config_failing_since, o.config_key))
    if o.clear_config_failing:
        conn.execute(_Q["clear_config_failing"], (o.config_key,))
    if o.disable_config is not None:
        _set_enabled(conn, o.config_key, False, o.disable_config, at)
    return leased


def _leased_to_another(conn: sqlite3.Connection, o: Outcome) -> bool:
    """Whether a worker other than ``o.worker_id`` holds the lane's lease now."""
    if o.worker_id is None:
        return False
    lane = conn.execute(_Q["lane_lease"], (o.config_key, o.task_id)).fetchone()
    owner = None if lane is None else lane["lease_owner"]
    return owner is not None and owner != o.worker_id


def _advance_lane(
    conn: sqlite3.Connection,
    config_key: str,
    task_id: str,
    *,
    keep_lease: bool = False,
    lease_next: tuple[float, float, str] | None = None,
    now: float | None = None,
) -> str | None:
    """Point the lane at its lowest-seq pending delivery, or drop it when empty.

    With ``lease_next`` = (now, lease until, worker) and that delivery due now, lease the
    lane to the worker in the same statement and return the delivery's id. Otherwise the
    lane is due at its head's next attempt, but not before ``now``: a lane that keeps
    getting work queues behind the lanes already waiting (round robin between lanes).
    """
    head = conn.execute(_Q["lane_head"], (config_key, task_id)).fetchone()
    if head is None:
        conn.execute(_Q["delete_lane"], (config_key, task_id))
        return None
    if lease_next is not None and head["next_attempt_at"] <= lease_next[0]:
        _, until, worker = lease_next
        if conn.execute(
            _Q["lease_lane_head"], (head["id"], until, worker, config_key, task_id)
        ).rowcount:
            return str(head["id"])
    if keep_lease:
        lane = conn.execute(_Q["lane_lease"], (config_key, task_id)).fetchone()
        if lane is not None and lane["lease_owner"] is not None:
            # In flight: the worker's outcome will advance the lane; just fix the head.
            conn.execute(_Q["set_lane_head_only"], (head["id"], config_key, task_id))
            return None
    due = head["next_attempt_at"] if now is None else max(head["next_attempt_at"], now)
    conn.execute(_Q["set_lane_head"], (config_key, task_id, head["id"], due))
    return None


def _set_enabled(
    conn: sqlite3.Connection, key: str, enabled: bool, reason: str | None, now: float
) -> bool:
    changed = conn.execute(
        _Q["set_config_enabled"], (1 if enabled else 0, None if enabled else reason, key)
    ).rowcount
    if changed and not enabled:
        _dead_letter_config(conn, key, f"config disabled: {reason or 'no reason given'}", now)
    return bool(changed)


def _dead_letter_config(conn: sqlite3.Connection, key: str, reason: str, now: float) -> None:
    conn.execute(_Q["dead_letter_config_deliveries"], (reason, now, key))
    conn.execute(_Q["delete_config_lanes"], (key,))


def _config_params(config: StoredConfig, sealed: str | None) -> dict[str, Any]:
    return {
        "key": config.key,
        "id": config.id,
        "task_id": config.task_id,
        "owner": config.owner,
        "tenant": config.tenant,
        "url": config.url,
        "endpoint": endpoint_of(config.url),
        "auth_scheme": config.auth_scheme,
        "secrets": sealed,
        "protocol_version": config.protocol_version,
        "enabled": 1 if config.enabled else 0,
        "disabled_reason": config.disabled_reason,
        "failing_since": config.failing_since,
        "created_at": config.created_at,
    }
