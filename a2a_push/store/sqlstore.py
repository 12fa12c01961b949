"""The outbox and config-store algorithm, written once for every backend.

:class:`SQLStore` implements the contracts of :mod:`.base` — what a publish writes (fan
out, ``seq``, lanes), how a lane advances, what each outcome does to the delivery, its
lane, its config and the config's failure clock, retention, replay — over one small
interface, :class:`Tx`: a transaction that runs named queries. A backend supplies the SQL
(its ``sql/<backend>/queries.sql``: the same names, the same positional parameters) and
the transactions (:meth:`SQLStore._transaction`, :meth:`SQLStore._fetch`); how a backend
claims due lanes stays its own (:meth:`SQLStore.claim_due`), since a single writer
(SQLite) and many competing ones (PostgreSQL, ``SKIP LOCKED``) claim differently.

The SQLite backend runs these coroutines inside its group-commit writer, where a query is
a plain call that never suspends (:func:`run_sync`); the PostgreSQL backend awaits each
query on a pooled connection. A behaviour fix to the outbox is made here, once.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..endpoints import endpoint_of
from ..errors import SecretDecryptionError, StoreUnavailableError, TooManyConfigsError
from .base import (
    ENDPOINT_STATS_SAMPLE,
    MAX_ATTEMPT_RESPONSE_BYTES,
    Attempt,
    AttemptBucket,
    Delivery,
    DeliveryState,
    EndpointStats,
    InitialDelivery,
    OutboxStats,
    Outcome,
    Renderer,
    Store,
    StoredConfig,
    check_same_version,
    has_config_side_effects,
)
from .paging import check_page_size, decode_page_token, encode_page_token
from .rows import RowMapping, corrupt_state_reason
from .secrets import SecretBox

T = TypeVar("T")

log = logging.getLogger("a2a_push.store")

_PENDING = DeliveryState.PENDING.value

Lease = tuple[float, float, str]
"""(now, lease until, worker): lease the lane's next delivery to the worker if it is due."""


class Tx(Protocol):
    """One transaction of a backend, as the algorithm uses it. Queries are named (the
    backend's ``queries.sql``) and take positional parameters."""

    # Whether every statement costs a network round trip, and the backend has the fused
    # statements that save them: finish_and_lease_next and finish_and_lease_many
    # (finish_delivery and the lease of the lane's next delivery, lease_next_head, in
    # one statement for one outcome or several), and fan_out (next_task_seq,
    # insert_delivery and open_lane in one statement).
    fuses_statements: bool

    async def lock_tasks(
        self,
        task_ids: Sequence[str],
        now: float | None = None,
        attempts: Sequence[Sequence[Any]] = (),
    ) -> float:
        """Serialize this transaction with every other one that reads and rewrites these
        tasks' configs, lanes or ``seq`` (a no-op for a single writer); returns the
        transaction's time: ``now``, or else the clock due times and leases go by.

        ``attempts``: rows of the attempt history (see :func:`attempt_rows`) to write in
        this transaction, in the same statement where the backend can (no round trip of
        their own)."""

    def clock_shift(self, at: float, now: float | None) -> float:
        """How far the clock of ``at`` (see :meth:`lock_tasks`) is ahead of this
        process's: added to times this process computed (a retry's due time)."""

    async def try_lock_task(self, task_id: str) -> bool:
        """:meth:`lock_tasks` for one task without waiting; False when it is taken."""

    async def execute(self, query: str, *args: Any) -> int:
        """Run a statement; the number of rows it changed."""

    async def executemany(self, query: str, args: Iterable[Sequence[Any]]) -> None: ...

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any | None: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...

    async def lease_next_head(
        self, config_key: str, task_id: str, at: float, until: float, worker: str
    ) -> Any | None:
        """The lane's lowest-seq pending delivery, leased to ``worker`` until ``until`` if
        it is due at ``at``: its row with its config (the columns of a claim), or None
        (none pending, not due, or the lane has no row)."""

    def array(self, values: Sequence[str]) -> Any:
        """A list parameter as the backend's queries take it."""

    def notify(self) -> None:
        """Wake other processes' dispatchers once this transaction commits (work was
        queued or released); a no-op where nothing listens."""


def run_sync(step: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (one whose awaits are all plain calls, as on
    the SQLite writer's connection) to its end, synchronously."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    step.close()
    raise RuntimeError("a synchronous store transaction awaited something that suspends")


class SQLStore(RowMapping, Store, abc.ABC):
    """The store contracts over a backend's transactions (see the module docstring)."""

    _box: SecretBox

    # ---- what a backend provides -------------------------------------------------------

    @abc.abstractmethod
    async def _transaction(self, op: Callable[[Tx], Awaitable[T]], *, sync: bool = True) -> T:
        """Run ``op`` in a transaction and commit. ``sync=False`` marks bookkeeping
        (claims, outcomes, releases, purges) whose loss on power failure only repeats
        work: a backend may commit it without waiting for the disk."""

    @abc.abstractmethod
    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        """Rows of a read outside any write transaction."""

    @abc.abstractmethod
    def _array(self, values: Sequence[str]) -> Any:
        """A list parameter for :meth:`_fetch` (see :meth:`Tx.array`)."""

    async def _fetchrow(self, query: str, *args: Any) -> Any | None:
        rows = await self._fetch(query, *args)
        return rows[0] if rows else None

    # ---- configs ----------------------------------------------------------------------

    async def put_config(
        self, config: StoredConfig, *, initial: InitialDelivery | None = None
    ) -> StoredConfig:
        sealed = self._box.seal(config.token, config.auth_credentials)
        cap = self.options.max_configs_per_task
        endpoint = endpoint_of(config.url)

        async def op(tx: Tx) -> StoredConfig:
            # The task's lock, held until commit: a concurrent put for the same task
            # (another process) counts after this one's insert, so the cap holds; and a
            # publish of the task waits for it, so it is ordered entirely before or after
            # ``initial``.
            at = await tx.lock_tasks([config.task_id], None if initial is None else initial.now)
            found = await tx.fetchrow("find_config_key", config.task_id, config.owner, config.id)
            if found is None:
                if await tx.fetchval("count_task_configs", config.task_id) >= cap:
                    raise TooManyConfigsError(config.task_id, cap)
                await tx.execute(
                    "insert_config",
                    config.key,
                    config.id,
                    config.task_id,
                    config.owner,
                    config.tenant,
                    config.url,
                    endpoint,
                    config.auth_scheme,
                    sealed,
                    config.protocol_version,
                    config.enabled,
                    config.disabled_reason,
                    config.failing_since,
                    config.created_at,
                )
                stored = config
            else:
                check_same_version(config, found["protocol_version"])
                key = found["key"]
                await tx.execute(
                    "replace_config",
                    key,
                    config.tenant,
                    config.url,
                    endpoint,
                    config.auth_scheme,
                    sealed,
                    config.protocol_version,
                    config.enabled,
                    config.disabled_reason,
                )
                await tx.execute("set_lanes_endpoint", endpoint, key)
                if found["url"] != config.url:
                    # Registered again at another URL: what waits for it is due now and
                    # its retry steps start afresh (the backoff was the old URL's).
                    await tx.execute("retry_config_afresh", key, at)
                    await tx.execute("config_lanes_due_now", key, at)
                stored = config.with_changes(
                    key=key, created_at=found["created_at"], failing_since=None
                )
            if initial is not None:
                _, ids = await _fan_out(
                    tx,
                    stored.task_id,
                    initial.kind,
                    initial.render,
                    initial.new_id,
                    only_config_key=stored.key,
                    at=at,
                    final=initial.final,
                    traceparent=initial.traceparent,
                )
                if ids:
                    tx.notify()
            return stored

        return await self._transaction(op)

    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        row = await self._fetchrow("config_by_ids", task_id, owner, config_id)
        return self._config_from_row(row) if row is not None else None

    async def get_config_by_key(self, key: str) -> StoredConfig | None:
        row = await self._fetchrow("config_by_key", key)
        return self._config_from_row(row) if row is not None else None

    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        check_page_size(page_size)
        after = decode_page_token(page_token) or ""
        rows = await self._fetch("configs_page", task_id, owner, after, page_size + 1)
        page = [self._config_from_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return page, encode_page_token(page[-1].id) if more and page else None

    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        async def op(tx: Tx) -> bool:
            at = await tx.lock_tasks([task_id])
            found = await tx.fetchrow("find_config_key", task_id, owner, config_id)
            if found is None:
                return False
            await _dead_letter_config(tx, found["key"], "config deleted", at)
            await tx.execute("delete_config", found["key"])
            return True

        return await self._transaction(op)

    async def configs_for_task(self, task_id: str) -> list[StoredConfig]:
        rows = await self._fetch("enabled_task_configs", task_id)
        return [self._config_from_row(r) for r in rows]

    async def list_all_configs(
        self, *, enabled: bool | None = None, after_key: str | None = None, limit: int = 100
    ) -> list[StoredConfig]:
        check_page_size(limit)
        rows = await self._fetch("all_configs_page", enabled, after_key or "", limit)
        return [self._config_from_row(r) for r in rows]

    async def count_configs(self, *, enabled: bool | None = None) -> int:
        row = await self._fetchrow("count_configs", enabled)
        return int(row[0]) if row is not None else 0

    async def set_config_enabled(self, key: str, enabled: bool, reason: str | None = None) -> bool:
        async def op(tx: Tx) -> bool:
            task_id = await tx.fetchval("config_task", key)
            if task_id is None:
                return False
            at = await tx.lock_tasks([task_id])
            return await _set_enabled(tx, key, enabled, reason, at)

        return await self._transaction(op)

    async def reencrypt_secrets(self, previous_keys: Sequence[str] | None = None) -> int:
        """Re-seal every stored secret with the current primary key.

        ``previous_keys``: the keys the rows are sealed with now (None: in clear), for
        turning encryption on; rotation within ``encryption_keys`` needs no argument.
        """
        old = SecretBox(previous_keys)
        box = self._box

        async def op(tx: Tx) -> int:
            rows = await tx.fetch("all_config_secrets")
            updates = []
            for row in rows:
                sealed = row["secrets"]
                try:
                    token, credentials = old.open(sealed)
                except SecretDecryptionError:
                    token, credentials = box.open(sealed)
                updates.append((box.seal(token, credentials), row["key"]))
            await tx.executemany("set_config_secrets", updates)
            return len(rows)

        return await self._transaction(op)

    # ---- outbox -----------------------------------------------------------------------

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
        traceparent: str | None = None,
    ) -> tuple[int, list[str]]:
        since = float("-inf") if idempotency_since is None else idempotency_since
        # Rendered before the transaction where it can be: the bodies for the protocol
        # versions the task's configs used at its last publish here, so the transaction
        # (SQLite's shared writer batch, PostgreSQL's task lock) does not wait for them.
        # A version not rendered ahead (a config registered since) is rendered inside;
        # a task with no configs renders nothing.
        ahead: dict[str, bytes] = {}
        for version in self._versions_of(task_id):
            try:
                ahead[version] = render(version)
            except Exception:  # noqa: S112 - inside the transaction it fails as it should
                continue  # (or not at all, if no config of that version is left)
        used: list[str] = []

        def rendered(version: str) -> bytes:
            used.append(version)
            body = ahead.get(version)
            return render(version) if body is None else body

        async def op(tx: Tx) -> tuple[int, list[str]]:
            used.clear()  # (a batch retried op by op runs this again)
            # Publishes of one task take turns (across processes): seq follows commit
            # order, so a lane's FIFO by seq is the order events were accepted in. The
            # event is due from the transaction's time: claims go by that clock.
            at = await tx.lock_tasks([task_id], now)
            if idempotency_key is not None:
                # Under the task's lock: a retry racing the first attempt waits for it.
                row = await tx.fetchrow("get_idempotency_key", idempotency_key, since)
                if row is not None:
                    return int(row["seq"]), json.loads(row["ids"])
            seq, ids = await _fan_out(
                tx,
                task_id,
                kind,
                rendered,
                new_id,
                only_config_key=only_config_key,
                at=at,
                final=final,
                traceparent=traceparent,
            )
            if idempotency_key is not None:
                await tx.execute("put_idempotency_key", idempotency_key, seq, json.dumps(ids), at)
            if ids:
                tx.notify()
            return seq, ids

        result = await self._transaction(op)
        if only_config_key is None:
            self._remember_versions(task_id, used)
        return result

    # The protocol versions each recently published task's configs used (a bounded LRU):
    # what enqueue renders ahead of its transaction.
    _VERSIONS_KEPT = 10_000
    _task_versions: OrderedDict[str, tuple[str, ...]] | None = None

    def _versions_of(self, task_id: str) -> tuple[str, ...]:
        known = self._task_versions
        return () if known is None else known.get(task_id, ())

    def _remember_versions(self, task_id: str, versions: Sequence[str]) -> None:
        known = self._task_versions
        if known is None:
            known = self._task_versions = OrderedDict()
        if versions:
            known[task_id] = tuple(dict.fromkeys(versions))
            known.move_to_end(task_id)
            if len(known) > self._VERSIONS_KEPT:
                known.popitem(last=False)
        else:
            known.pop(task_id, None)

    async def purge_final_tasks(self, *, final_before: float, limit: int = 1000) -> int:
        async def op(tx: Tx) -> int:
            rows = await tx.fetch("final_tasks_to_purge", final_before, limit)
            candidates = [row["task_id"] for row in rows]
            if not candidates:
                return 0
            # The tasks' locks first, as publishes and registrations take them (then
            # their task_seq row): none is half done, and no deadlock. Checked again
            # under them, in a statement that sees what committed meanwhile.
            await tx.lock_tasks(candidates)
            rows = await tx.fetch("forget_tasks_final", tx.array(candidates), final_before)
            tasks = [row["task_id"] for row in rows]
            if tasks:
                await tx.execute("delete_tasks_configs", tx.array(tasks))
            return len(tasks)

        return await self._transaction(op, sync=False)

    async def purge_idempotency_keys(self, *, created_before: float, limit: int = 1000) -> int:
        async def op(tx: Tx) -> int:
            return await tx.execute("purge_idempotency_keys", created_before, limit)

        return await self._transaction(op, sync=False)

    async def complete(self, outcomes: Sequence[Outcome], *, now: float | None = None) -> None:
        if not outcomes:
            return
        if self._outcome_batches and now is None and len(outcomes) == 1:
            # Written with the other outcomes of the moment (see _ChainBatcher), its lane
            # left unleased.
            await self._batcher().submit(_Chained(outcomes[0], None, outcomes[0].worker_id))
            return
        history = attempt_rows(outcomes) if self.options.attempt_history else ()

        async def op(tx: Tx) -> None:
            at = await tx.lock_tasks([o.task_id for o in outcomes], now, history)
            shift = tx.clock_shift(at, now)
            for o in outcomes:
                await _apply_outcome(tx, o, at, shift=shift)

        await self._transaction(op, sync=False)

    async def complete_and_claim_next(
        self,
        outcome: Outcome,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
    ) -> Delivery | None:
        item = _Chained(outcome, lease_seconds, worker_id)
        if self._outcome_batches and now is None:
            row = await self._batcher().submit(item)
        else:
            op = _chain_op([item], now, history=self.options.attempt_history)
            (row,) = await self._transaction(op, sync=False)
        return None if row is None else self._claimed_from_row(row)

    # Outcomes that arrive while a transaction of them runs are written together in the
    # next one (as SQLite's writer groups its commits): a backend whose every statement
    # is a network round trip turns that on.
    _outcome_batches = False
    _outcome_batcher: _ChainBatcher | None = None

    def _batcher(self) -> _ChainBatcher:
        if self._outcome_batcher is None:
            self._outcome_batcher = _ChainBatcher(self)
        return self._outcome_batcher

    async def release(self, delivery_ids: Sequence[str], *, worker_id: str) -> None:
        if not delivery_ids:
            return

        async def op(tx: Tx) -> None:
            if await tx.execute("release_lanes", tx.array(list(delivery_ids)), worker_id):
                tx.notify()

        await self._transaction(op, sync=False)

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        row = await self._fetchrow("delivery_by_id", delivery_id)
        return self._delivery_from_row(row) if row is not None else None

    async def attempt_series(
        self, *, since: float, bucket_seconds: float, now: float | None = None
    ) -> list[AttemptBucket]:
        if bucket_seconds <= 0:
            raise ValueError("bucket_seconds must be positive")
        until = time.time() if now is None else now
        count = max(1, math.ceil((until - since) / bucket_seconds))
        found = {
            int(r["bucket"]): (int(r["delivered"]), int(r["failed"]))
            for r in await self._fetch("attempt_buckets", since, bucket_seconds, until)
        }
        return [
            AttemptBucket(since + i * bucket_seconds, *found.get(i, (0, 0))) for i in range(count)
        ]

    async def endpoint_stats(
        self, *, since: float, now: float | None = None
    ) -> dict[str, EndpointStats]:
        until = time.time() if now is None else now
        rows = await self._fetch("recent_attempts", since, until, ENDPOINT_STATS_SAMPLE)
        durations: dict[str, list[float]] = {}
        succeeded: dict[str, int] = {}
        for r in rows:
            durations.setdefault(r["endpoint"], []).append(float(r["duration"]))
            succeeded[r["endpoint"]] = succeeded.get(r["endpoint"], 0) + (
                r["verdict"] == "delivered"
            )
        return {
            endpoint: EndpointStats(
                attempts=len(values),
                succeeded=succeeded[endpoint],
                p50=_percentile(sorted(values), 0.50),
                p95=_percentile(sorted(values), 0.95),
                p99=_percentile(sorted(values), 0.99),
            )
            for endpoint, values in durations.items()
        }

    async def list_attempts(self, delivery_id: str) -> list[Attempt]:
        rows = await self._fetch("delivery_attempts", delivery_id)
        return [self._attempt_from_row(row) for row in rows]

    async def replay(self, delivery_ids: Sequence[str], *, now: float | None = None) -> int:
        if not delivery_ids:
            return 0

        async def op(tx: Tx) -> int:
            ids = tx.array(list(delivery_ids))
            tasks = [r["task_id"] for r in await tx.fetch("dead_delivery_tasks", ids)]
            if not tasks:
                return 0
            # Replayed deliveries are due from the transaction's time (claims go by it).
            at = await tx.lock_tasks(tasks, now)
            # Re-checked under the locks; only the locked tasks' deliveries are touched.
            rows = await tx.fetch("replay_deliveries", at, ids, tx.array(tasks))
            for config_key, task_id in sorted({(r["config_key"], r["task_id"]) for r in rows}):
                await _advance_lane(tx, config_key, task_id, keep_lease=True)
            if rows:
                tx.notify()
            return len(rows)

        return await self._transaction(op)

    async def purge(self, state: DeliveryState, *, updated_before: float, limit: int = 1000) -> int:
        if state is DeliveryState.PENDING:
            raise ValueError("pending deliveries are never purged")

        async def op(tx: Tx) -> int:
            return await tx.execute("purge_deliveries", state.value, updated_before, limit)

        return await self._transaction(op, sync=False)

    async def stats(self, *, now: float | None = None, count_delivered: bool = True) -> OutboxStats:
        row = await self._fetchrow("stats", self._stats_now(now), count_delivered)
        assert row is not None
        return OutboxStats(
            pending=row["pending"],
            due=row["due"],
            leased=row["leased"],
            dead=row["dead"],
            delivered=row["delivered"],
            oldest_pending_created_at=row["oldest"],
        )

    async def take_tokens(
        self, endpoint: str, *, rate: float, capacity: float, want: int, now: float | None = None
    ) -> tuple[int, float]:
        if rate <= 0 or capacity < 1 or want < 1:
            raise ValueError("take_tokens: rate > 0, capacity >= 1 and want >= 1 are needed")
        at = self._stats_now(now)

        async def op(tx: Tx) -> Any:
            return await tx.fetchrow("take_tokens", endpoint, rate, capacity, want, at)

        # Bookkeeping (no flush at commit): a bucket lost in a crash refills as new.
        row = await self._transaction(op, sync=False)
        granted, left = int(row["granted"]), float(row["tokens"])
        return granted, 0.0 if granted else max(0.0, 1.0 - left) / rate

    def _stats_now(self, now: float | None) -> float | None:
        """The time ``stats`` counts due and leased lanes at (None: the backend's clock)."""
        return time.time() if now is None else now

    # ---- claims -----------------------------------------------------------------------

    @staticmethod
    async def _repair_lane(tx: Tx, row: Any, at: float) -> None:
        """A claimed lane whose head is no longer pending (never expected): a state that is
        none of ours is dead-lettered with the reason, and the lane moves to its next
        pending delivery. Only if the task is free: a claim must never wait on a lock
        while it holds lane rows, or it could deadlock with a completion."""
        if not await tx.try_lock_task(row["lane_task_id"]):
            return
        reason = corrupt_state_reason(row["state"])
        await tx.execute("dead_letter_corrupt_state", reason, at, row["id"])
        await _advance_lane(tx, row["lane_config_key"], row["lane_task_id"], now=at)

    @staticmethod
    def _is_pending(row: Any) -> bool:
        return bool(row["state"] == _PENDING)


# ---- outcomes, alone or several in one transaction ------------------------------------


@dataclass(frozen=True, slots=True)
class _Chained:
    """An outcome, and the lease its worker takes on the lane's next delivery (none
    when ``lease_seconds`` is None: the lane goes back to the outbox)."""

    outcome: Outcome
    lease_seconds: float | None
    worker_id: str | None


def attempt_rows(outcomes: Iterable[Outcome]) -> list[tuple[Any, ...]]:
    """The outcomes' attempts as rows of the attempt history (the columns of the
    ``insert_attempt`` query, in order), each response cut to its first KiB."""
    return [
        (
            a.delivery_id,
            a.number,
            a.started_at,
            a.duration,
            a.endpoint,
            a.verdict,
            a.status,
            a.error_class,
            a.error,
            a.retry_at,
            a.response[:MAX_ATTEMPT_RESPONSE_BYTES],
        )
        for o in outcomes
        for a in o.history
    ]


def _chain_op(
    items: Sequence[_Chained], now: float | None, *, history: bool
) -> Callable[[Tx], Awaitable[list[Any]]]:
    """The transaction that records each outcome in turn and leases each lane's next
    delivery if it is due: one row (the delivery and its config) or None per item.
    ``history``: also record the outcomes' attempts."""
    rows = attempt_rows(item.outcome for item in items) if history else ()

    async def op(tx: Tx) -> list[Any]:
        # The leases run from the transaction's time once the locks are held.
        at = await tx.lock_tasks([item.outcome.task_id for item in items], now, rows)
        shift = tx.clock_shift(at, now)
        leases: list[Lease | None] = [
            None
            if item.lease_seconds is None or item.worker_id is None
            else (at, at + item.lease_seconds, item.worker_id)
            for item in items
        ]
        finished = await _finish_many(tx, items, leases, at)
        heads = []
        read: dict[str, Any] = {}  # leased deliveries read as they were leased
        for i, item in enumerate(items):
            done = finished.get(i)
            heads.append(
                await _apply_outcome(
                    tx,
                    item.outcome,
                    at,
                    shift=shift,
                    lease_next=leases[i],
                    finished=None if done is None else done[:3],
                    read=read,
                )
            )
            if done is not None and done[1] is not None:
                read[done[1]] = done[3]
        leased = [head for head in heads if head is not None]
        if not leased:
            return [None] * len(items)
        lanes = {(item.outcome.config_key, item.outcome.task_id) for item in items}
        if (
            len(lanes) == len(items)
            and all(_plain(item.outcome) for item in items)
            and all(head in read for head in leased)
        ):
            # Each leased delivery and its config were read as it was leased, and nothing
            # this transaction did since touches them: no outcome changed a config, and
            # no two outcomes share a lane.
            return [None if head is None else read[head] for head in heads]
        # The leased deliveries with their configs, read once every outcome (and what it
        # did to its config) is written.
        found = {
            row["id"]: row for row in await tx.fetch("deliveries_with_configs", tx.array(leased))
        }
        return [None if head is None else found.get(head) for head in heads]

    return op


class _ChainBatcher:
    """Writes outcomes in shared transactions: up to ``RUNNERS`` transactions at once
    (on as many pooled connections), each taking every outcome submitted while the
    others ran (at most ``MAX_BATCH``). A batch that fails for any reason but an outage
    is written again one outcome per transaction, so one bad outcome fails alone."""

    MAX_BATCH = 64
    RUNNERS = 2

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        self._queue: list[tuple[_Chained, asyncio.Future[Any]]] = []
        self._runners: set[asyncio.Task[None]] = set()

    async def submit(self, item: _Chained) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if len(self._runners) < self.RUNNERS:
            runner = asyncio.create_task(self._run(), name="a2a-push-outcomes")
            self._runners.add(runner)
            runner.add_done_callback(self._runners.discard)
        return await future

    async def _run(self) -> None:
        while self._queue:
            batch = self._queue[: self.MAX_BATCH]
            del self._queue[: self.MAX_BATCH]
            items = [item for item, _ in batch]
            try:
                op = _chain_op(items, None, history=self._store.options.attempt_history)
                rows = await self._store._transaction(op, sync=False)
            except Exception as exc:
                if len(batch) > 1 and not isinstance(exc, StoreUnavailableError):
                    await self._one_by_one(batch)
                else:
                    for _, future in batch:
                        self._settle(future, error=exc)
                continue
            except BaseException as exc:  # cancelled (the loop is closing): nobody hangs
                for _, future in batch + self._queue:
                    self._settle(future, error=exc)
                self._queue.clear()
                raise
            for (item, future), row in zip(batch, rows):
                self._settle(future, row, worker_id=item.worker_id)

    async def _one_by_one(self, batch: list[tuple[_Chained, asyncio.Future[Any]]]) -> None:
        for item, future in batch:
            try:
                op = _chain_op([item], None, history=self._store.options.attempt_history)
                (row,) = await self._store._transaction(op, sync=False)
            except Exception as exc:
                self._settle(future, error=exc)
            else:
                self._settle(future, row, worker_id=item.worker_id)

    def _settle(
        self,
        future: asyncio.Future[Any],
        row: Any = None,
        *,
        error: BaseException | None = None,
        worker_id: str | None = None,
    ) -> None:
        if future.done():
            # Its caller is gone (cancelled): a next delivery leased for it would wait
            # for the lease to run out; hand it back.
            if row is not None and worker_id is not None:
                task = asyncio.create_task(self._store.release([row["id"]], worker_id=worker_id))
                task.add_done_callback(_log_release_failure)
            return
        if isinstance(error, asyncio.CancelledError):
            future.cancel()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(row)


def _log_release_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("handing back a delivery nobody waits for failed: %s", task.exception())


# ---- the algorithm's steps, inside a transaction holding the task's lock ---------------


async def _fan_out(
    tx: Tx,
    task_id: str,
    kind: str,
    render: Renderer,
    new_id: Callable[[], str],
    *,
    only_config_key: str | None,
    at: float,
    final: bool = False,
    traceparent: str | None = None,
) -> tuple[int, list[str]]:
    """Fan an event out to the task's enabled configs (or only ``only_config_key``): the
    task's next ``seq``, one delivery per config, each config's lane opened if it has
    none. A final event's time is kept for retention; an event that is not final forgets
    it, also when every config is disabled (nothing is queued then, no seq is used)."""
    configs = await tx.fetch("enqueue_targets", task_id)
    targets = [
        (row["key"], row["protocol_version"], row["endpoint"])
        for row in configs
        if row["enabled"] and (only_config_key is None or row["key"] == only_config_key)
    ]
    if not targets:
        if configs:  # none enabled: no seq used, but the task's end still counts
            await tx.execute("record_task_final", task_id, at if final else None)
        return 0, []
    # Every body first: a render that fails leaves nothing written (the transaction
    # rolls back before any delivery row exists).
    bodies: dict[str, bytes] = {}
    for _, version, _ in targets:
        if version not in bodies:
            bodies[version] = render(version)
    if tx.fuses_statements:
        ids = [new_id() for _ in targets]
        fused: int = await tx.fetchval(
            "fan_out",
            task_id,
            at if final else None,
            kind,
            at,
            traceparent,
            ids,
            [key for key, _, _ in targets],
            [bodies[version] for _, version, _ in targets],
            [endpoint for _, _, endpoint in targets],
        )
        return fused, ids
    seq: int = await tx.fetchval("next_task_seq", task_id, at if final else None)
    rows, lanes, ids = [], [], []
    for key, version, endpoint in targets:
        delivery_id = new_id()
        ids.append(delivery_id)
        rows.append(
            (delivery_id, key, task_id, seq, kind, bodies[version], at, endpoint, traceparent)
        )
        lanes.append((key, task_id, delivery_id, at, endpoint))
    await tx.executemany("insert_delivery", rows)
    await tx.executemany("open_lane", lanes)
    return seq, ids


def _fusable(o: Outcome) -> bool:
    """Whether ``o``'s write and the lease of its lane's next delivery can be one
    statement (finish_and_lease_next)."""
    return o.kind in ("delivered", "dead") and o.disable_config is None


def _plain(o: Outcome) -> bool:
    """A delivered outcome that changes nothing about its config."""
    return o.kind == "delivered" and not has_config_side_effects(o)


async def _finish_many(
    tx: Tx, items: Sequence[_Chained], leases: Sequence[Lease | None], at: float
) -> dict[int, tuple[bool, str | None, bool, Any]]:
    """For a backend whose every statement is a round trip: the fusable outcomes of a
    batch written, and their lanes' next deliveries leased (or, for an outcome with no
    lease, their lanes pointed at their next deliveries), in one statement
    (finish_and_lease_many) instead of one each. Returns, by position in ``items``,
    whether each wrote, what it leased, whether its lane moved on, and the row of the
    leased delivery with its config (or of NULLs); the others (and a second outcome on
    a lane already in the statement) are left to ``_apply_outcome``'s own statements."""
    if not tx.fuses_statements:
        return {}
    picked: list[int] = []
    lanes: set[tuple[str, str]] = set()
    ids: set[str] = set()
    for i, item in enumerate(items):
        o = item.outcome
        lane = (o.config_key, o.task_id)
        if _fusable(o) and lane not in lanes and o.delivery_id not in ids:
            picked.append(i)
            lanes.add(lane)
            ids.add(o.delivery_id)
    if not picked or (len(picked) == 1 and leases[picked[0]] is not None):
        return {}  # one lease: finish_and_lease_next is the same single round trip
    outcomes = [items[i].outcome for i in picked]
    taken = [leases[i] for i in picked]
    rows = await tx.fetch(
        "finish_and_lease_many",
        ["delivered" if o.kind == "delivered" else "dead" for o in outcomes],
        [o.attempts for o in outcomes],
        [o.status for o in outcomes],
        [o.error for o in outcomes],
        [o.delivery_id for o in outcomes],
        [o.config_key for o in outcomes],
        [o.task_id for o in outcomes],
        [o.worker_id for o in outcomes],
        [None if lease is None else lease[1] for lease in taken],
        [None if lease is None else lease[2] for lease in taken],
        at,
    )
    return {
        picked[row["ord"] - 1]: (
            bool(row["changed"]),
            None if row["leased"] is None else str(row["leased"]),
            bool(row["advanced"]),
            row,
        )
        for row in rows
    }


async def _apply_outcome(
    tx: Tx,
    o: Outcome,
    at: float,
    *,
    shift: float = 0.0,
    lease_next: Lease | None = None,
    finished: tuple[bool, str | None, bool] | None = None,
    read: dict[str, Any] | None = None,
) -> str | None:
    """Record ``o``; with ``lease_next``, also lease the lane's next delivery if it is due
    now and return its id (and, with ``read``, keep its row there by id). ``finished``:
    ``o`` was written already (by _finish_many), with this result.

    ``at`` is the transaction's time. A retry's or deferral's ``o.next_attempt_at`` is on
    the worker's clock (its retry policy or breaker computed it): ``shift`` puts it on
    the clock claims go by, so that a pause shorter than the worker's skew is not due at
    once (a worker behind the database would claim, defer and claim again in a loop)."""
    leased: str | None = None
    changed: bool | int
    fused = advanced = False
    # Each write leaves the delivery alone when another worker holds the lane's lease now
    # (it took the lane over after o.worker_id's lease ran out: its outcome is the one
    # that counts), in the same statement that checks it.
    lane = (o.config_key, o.task_id, o.worker_id)
    if finished is not None:
        changed, leased, advanced = finished
        fused = True
    elif o.kind == "defer":
        assert o.next_attempt_at is not None
        changed = await tx.execute(
            "defer_delivery", o.next_attempt_at + shift, at, o.delivery_id, *lane
        )
    elif o.kind == "retry":
        assert o.next_attempt_at is not None
        changed = await tx.execute(
            "retry_delivery",
            o.attempts,
            o.status,
            o.error,
            o.next_attempt_at + shift,
            at,
            o.delivery_id,
            *lane,
        )
    elif lease_next is not None and _fusable(o) and tx.fuses_statements:
        # finish_delivery, and lease_next_head over the deliveries after it, in one
        # statement (for a backend whose every statement is a network round trip).
        state = "delivered" if o.kind == "delivered" else "dead"
        _, until, worker = lease_next
        row = await tx.fetchrow(
            "finish_and_lease_next",
            state,
            o.attempts,
            o.status,
            o.error,
            at,
            o.delivery_id,
            *lane,
            until,
            worker,
        )
        assert row is not None
        changed, fused = row["changed"], True
        leased = None if row["leased"] is None else str(row["leased"])
    else:
        state = "delivered" if o.kind == "delivered" else "dead"
        changed = await tx.execute(
            "finish_delivery", state, o.attempts, o.status, o.error, at, o.delivery_id, *lane
        )
    if changed:
        if fused:
            if leased is None and not advanced:  # the lane moves on as usual
                await _advance_lane(tx, o.config_key, o.task_id, now=at)
        elif lease_next is not None and o.disable_config is None and o.kind != "defer":
            leased = await _advance_lane(
                tx, o.config_key, o.task_id, lease_next=lease_next, now=at, read=read
            )
        else:
            await _advance_lane(tx, o.config_key, o.task_id, now=at)
        if o.kind == "dead" and o.disable_config is None:
            # The config's failure clock measures failing without a break in the work:
            # nothing of it pending, it stops.
            await tx.execute("clear_config_failing_if_idle", o.config_key)
    # The config side effects apply either way: they are facts about the endpoint.
    if not has_config_side_effects(o):
        return leased
    if o.config_url is not None:
        url = await tx.fetchval("config_url", o.config_key)
        if url != o.config_url:
            return leased  # registered again elsewhere since: not about this config now
    if o.config_failing_since is not None:
        await tx.execute("set_config_failing_since", o.config_failing_since, o.config_key)
    if o.clear_config_failing:
        await tx.execute("clear_config_failing", o.config_key)
    if o.disable_config is not None:
        await _set_enabled(tx, o.config_key, False, o.disable_config, at)
    return leased


async def _advance_lane(
    tx: Tx,
    config_key: str,
    task_id: str,
    *,
    keep_lease: bool = False,
    lease_next: Lease | None = None,
    now: float | None = None,
    read: dict[str, Any] | None = None,
) -> str | None:
    """Point the lane at its lowest-seq pending delivery, or drop it when empty.

    With ``lease_next`` and that delivery due now, lease the lane to the worker and
    return the delivery's id (its row, with its config, kept in ``read``). Otherwise the
    lane is due at its head's next attempt, but not before ``now``: a lane that keeps
    getting work queues behind the lanes already waiting (round robin between lanes).
    """
    if lease_next is not None:
        # The common case: the next delivery is due, lease it (and read it meanwhile).
        at, until, worker = lease_next
        row = await tx.lease_next_head(config_key, task_id, at, until, worker)
        if row is not None:
            if read is not None:
                read[row["id"]] = row
            return str(row["id"])
    head = await tx.fetchrow("lane_head", config_key, task_id)
    if head is None:
        await tx.execute("delete_lane", config_key, task_id)
        return None
    if keep_lease:
        lane = await tx.fetchrow("lane_lease_owner", config_key, task_id)
        if lane is not None and lane["lease_owner"] is not None:
            # In flight: the worker's outcome will advance the lane; just fix the head.
            await tx.execute("set_lane_head_only", head["id"], config_key, task_id)
            return None
    due = head["next_attempt_at"] if now is None else max(head["next_attempt_at"], now)
    await tx.execute("set_lane_head", config_key, task_id, head["id"], due)
    return None


async def _set_enabled(tx: Tx, key: str, enabled: bool, reason: str | None, now: float) -> bool:
    changed = bool(
        await tx.execute("set_config_enabled", enabled, None if enabled else reason, key)
    )
    if changed and not enabled:
        await _dead_letter_config(tx, key, f"config disabled: {reason or 'no reason given'}", now)
    return changed


async def _dead_letter_config(tx: Tx, key: str, reason: str, now: float) -> None:
    """The config's pending deliveries become dead letters, except those in flight (their
    workers' outcomes say what became of them); its idle lanes go."""
    await tx.execute("dead_letter_config_deliveries", reason, now, key)
    await tx.execute("delete_config_lanes", key)


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted values (None for none)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
