"""In-memory backend: for unit tests and throwaway demos only (nothing survives a restart)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from ..endpoints import endpoint_of
from ..errors import TooManyConfigsError
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
)
from .paging import check_page_size, decode_page_token, encode_page_token


@dataclass(slots=True)
class _Lane:
    # Pending delivery ids in sequence order; the head is the only one that may be sent.
    pending: list[str] = field(default_factory=list)
    lease_owner: str | None = None
    lease_until: float = 0.0
    # When the lane last finished a delivery: it is not due before then, so a lane that
    # keeps getting work queues behind lanes that were already waiting (round robin).
    requeued_at: float = 0.0


class MemoryStore(Store):
    """Implements the store contracts with dicts; same semantics as the durable backends."""

    def __init__(self, options: StoreOptions | None = None) -> None:
        self.options = options or StoreOptions()
        self._configs: dict[str, StoredConfig] = {}
        self._config_index: dict[tuple[str, str, str], str] = {}
        # task id -> its configs' keys, in the order stored (a dict as an ordered set):
        # publishes look a task's configs up without walking every config.
        self._by_task: dict[str, dict[str, None]] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._task_seq: dict[str, int] = {}
        self._task_final: dict[str, float] = {}  # task id -> its first final event's time
        self._idempotency: dict[str, tuple[int, list[str], float]] = {}

    @property
    def location(self) -> str:
        return "memory (nothing kept after exit)"

    async def close(self) -> None:
        return None

    # ---- configs -------------------------------------------------------------------

    async def put_config(
        self, config: StoredConfig, *, initial: InitialDelivery | None = None
    ) -> StoredConfig:
        # No await from here to the end: nothing else runs in between, so a publish is
        # ordered entirely before or after storing the config and queueing ``initial``.
        # Rendered first, so a failing renderer leaves nothing half done.
        body = initial.render(config.protocol_version) if initial is not None else b""
        index = (config.task_id, config.owner, config.id)
        existing_key = self._config_index.get(index)
        if existing_key is None:
            count = len(self._by_task.get(config.task_id, ()))
            if count >= self.options.max_configs_per_task:
                raise TooManyConfigsError(config.task_id, self.options.max_configs_per_task)
            stored = config
        else:
            old = self._configs[existing_key]
            check_same_version(config, old.protocol_version)
            stored = replace(config, key=existing_key, created_at=old.created_at)
            if old.url != config.url:
                self._retry_afresh(existing_key, time.time())
        self._configs[stored.key] = stored
        self._config_index[index] = stored.key
        self._by_task.setdefault(stored.task_id, {})[stored.key] = None
        if initial is not None:
            self._enqueue(
                stored.task_id,
                initial.kind,
                lambda _version: body,
                new_id=initial.new_id,
                only_config_key=stored.key,
                now=initial.now,
                final=initial.final,
            )
        return stored

    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        key = self._config_index.get((task_id, owner, config_id))
        return self._configs.get(key) if key else None

    async def get_config_by_key(self, key: str) -> StoredConfig | None:
        return self._configs.get(key)

    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        check_page_size(page_size)
        after = decode_page_token(page_token)
        matching = sorted(
            (c for c in self._task_configs(task_id) if c.owner == owner),
            key=lambda c: c.id,
        )
        if after is not None:
            matching = [c for c in matching if c.id > after]
        page = matching[:page_size]
        more = len(matching) > page_size
        return page, encode_page_token(page[-1].id) if more and page else None

    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        key = self._config_index.pop((task_id, owner, config_id), None)
        if key is None:
            return False
        self._dead_letter_config(key, "config deleted", time.time())
        del self._configs[key]
        keys = self._by_task[task_id]
        del keys[key]
        if not keys:
            del self._by_task[task_id]
        return True

    def _task_configs(self, task_id: str) -> list[StoredConfig]:
        return [self._configs[key] for key in self._by_task.get(task_id, ())]

    async def configs_for_task(self, task_id: str) -> list[StoredConfig]:
        return [c for c in self._task_configs(task_id) if c.enabled]

    async def set_config_enabled(self, key: str, enabled: bool, reason: str | None = None) -> bool:
        config = self._configs.get(key)
        if config is None:
            return False
        self._configs[key] = replace(
            config,
            enabled=enabled,
            disabled_reason=None if enabled else reason,
            # Enabling starts the failure clock afresh.
            failing_since=None if enabled else config.failing_since,
        )
        if not enabled:
            self._dead_letter_config(key, f"config disabled: {reason or 'no reason given'}", None)
        return True

    def _dead_letter_config(self, key: str, reason: str, now: float | None) -> None:
        now = now or time.time()
        for lane_key in [k for k in self._lanes if k[0] == key]:
            lane = self._lanes[lane_key]
            pending = lane.pending
            if lane.lease_owner is not None:
                # In flight: its worker's outcome says what became of it (see the SQL
                # stores' dead_letter_config_deliveries).
                lane.pending, pending = pending[:1], pending[1:]
            else:
                del self._lanes[lane_key]
            for delivery_id in pending:
                d = self._deliveries[delivery_id]
                self._deliveries[delivery_id] = replace(
                    d, state=DeliveryState.DEAD, last_error=reason, updated_at=now
                )

    # ---- outbox --------------------------------------------------------------------

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
        known = None if idempotency_key is None else self._idempotency.get(idempotency_key)
        if known is not None and (idempotency_since is None or known[2] >= idempotency_since):
            seq, ids, _at = known
            return seq, list(ids)
        seq, ids = self._enqueue(
            task_id,
            kind,
            render,
            new_id=new_id,
            only_config_key=only_config_key,
            now=now,
            final=final,
        )
        if idempotency_key is not None:
            at = time.time() if now is None else now
            self._idempotency[idempotency_key] = (seq, list(ids), at)
        return seq, ids

    async def purge_final_tasks(self, *, final_before: float, limit: int = 1000) -> int:
        unsettled = {d.task_id for d in self._deliveries.values() if d.state != "delivered"}
        doomed = [
            task_id
            for task_id, at in self._task_final.items()
            if at < final_before and task_id not in unsettled
        ][:limit]
        for task_id in doomed:
            for key in list(self._by_task.get(task_id, ())):
                config = self._configs.pop(key)
                del self._config_index[(config.task_id, config.owner, config.id)]
            self._by_task.pop(task_id, None)
            del self._task_final[task_id]  # the counter stays: seq never goes back
        return len(doomed)

    async def purge_idempotency_keys(self, *, created_before: float, limit: int = 1000) -> int:
        old = [(at, k) for k, (_, _, at) in self._idempotency.items() if at < created_before]
        doomed = [k for _, k in sorted(old)[:limit]]
        for key in doomed:
            del self._idempotency[key]
        return len(doomed)

    def _enqueue(
        self,
        task_id: str,
        kind: str,
        render: Renderer,
        *,
        new_id: Callable[[], str],
        only_config_key: str | None,
        now: float | None,
        final: bool = False,
    ) -> tuple[int, list[str]]:
        now = time.time() if now is None else now
        configs = self._task_configs(task_id)
        targets = [
            c
            for c in configs
            if c.enabled and (only_config_key is None or c.key == only_config_key)
        ]
        if not targets:
            if configs:  # none enabled: no seq used, but the task's end still counts
                self._record_final(task_id, final, now)
            return 0, []
        # Every body first: a render that fails leaves nothing changed (as the SQL stores'
        # rolled-back transaction does).
        bodies: dict[str, bytes] = {}
        for config in targets:
            if config.protocol_version not in bodies:
                bodies[config.protocol_version] = render(config.protocol_version)
        seq = self._task_seq.get(task_id, 0) + 1
        self._task_seq[task_id] = seq
        self._record_final(task_id, final, now)
        ids: list[str] = []
        for config in targets:
            body = bodies[config.protocol_version]
            delivery = Delivery(
                id=new_id(),
                config_key=config.key,
                task_id=task_id,
                seq=seq,
                kind=kind,
                body=body,
                state=DeliveryState.PENDING,
                attempts=0,
                next_attempt_at=now,
                created_at=now,
                updated_at=now,
            )
            self._deliveries[delivery.id] = delivery
            self._lanes.setdefault((config.key, task_id), _Lane()).pending.append(delivery.id)
            ids.append(delivery.id)
        return seq, ids

    def _record_final(self, task_id: str, final: bool, now: float) -> None:
        """The first final event's time is kept; an event that is not final forgets it."""
        if final:
            self._task_final.setdefault(task_id, now)
        else:
            self._task_final.pop(task_id, None)

    def _retry_afresh(self, config_key: str, now: float) -> None:
        """A config registered again at another URL: what waits for it is due now, its
        retry steps reset (the backoff was the old URL's), except what is in flight."""
        for (key, _task), lane in self._lanes.items():
            if key != config_key or (lane.lease_owner is not None and lane.lease_until > now):
                continue
            for delivery_id in lane.pending:
                d = self._deliveries[delivery_id]
                self._deliveries[delivery_id] = replace(
                    d, next_attempt_at=min(d.next_attempt_at, now), rounds=0
                )

    def _lane_endpoint(self, config_key: str) -> str:
        config = self._configs.get(config_key)
        return endpoint_of(config.url) if config else ""

    def _head(self, lane: _Lane) -> Delivery:
        return self._deliveries[lane.pending[0]]

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
        now = time.time() if now is None else now
        due = [
            (max(self._head(lane).next_attempt_at, lane.requeued_at), lane_key)
            for lane_key, lane in self._lanes.items()
            if lane.pending and lane.lease_until <= now and self._head(lane).next_attempt_at <= now
        ]
        due.sort()
        picked: list[tuple[str, str]] = []
        per: dict[str, int] = {}
        cap = per_endpoint or limit
        for _, lane_key in due:
            endpoint = self._lane_endpoint(lane_key[0])
            if endpoint in exclude_endpoints or per.get(endpoint, 0) >= cap:
                continue
            per[endpoint] = per.get(endpoint, 0) + 1
            picked.append(lane_key)
            if len(picked) >= limit:
                break
        claimed: list[Delivery] = []
        for lane_key in picked:
            lane = self._lanes[lane_key]
            lane.lease_owner = worker_id
            lane.lease_until = now + lease_seconds
            head = self._head(lane)
            config = self._configs.get(head.config_key)
            claimed.append(replace(head, config=config))
        return claimed

    async def complete(self, outcomes: Sequence[Outcome], *, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for o in outcomes:
            await self._apply_outcome(o, now)

    async def _apply_outcome(self, o: Outcome, now: float) -> bool:
        """Record ``o``; False when it left the delivery alone (finished already, or its
        lane is leased to another worker now)."""
        d = self._deliveries.get(o.delivery_id)
        applied = d is not None and d.state is DeliveryState.PENDING
        if d is not None and applied:
            applied = self._apply_to_delivery(d, o, now)
        # The config side effects apply either way: they are facts about the endpoint.
        config = self._configs.get(o.config_key)
        if config is not None and o.config_url is not None and config.url != o.config_url:
            config = None  # registered again elsewhere since: not about this config now
        if config is not None:
            if o.config_failing_since is not None and config.failing_since is None:
                config = replace(config, failing_since=o.config_failing_since)
            if o.clear_config_failing or (
                applied
                and o.kind == "dead"
                and o.disable_config is None
                and (config.key, config.task_id) not in self._lanes  # its one lane
            ):
                config = replace(config, failing_since=None)
            self._configs[config.key] = config
            if o.disable_config is not None:
                await self.set_config_enabled(config.key, False, o.disable_config)
        return applied

    def _apply_to_delivery(self, d: Delivery, o: Outcome, now: float) -> bool:
        lane_key = (d.config_key, d.task_id)
        lane = self._lanes.get(lane_key)
        applied = o.worker_id is None or lane is None or lane.lease_owner in (None, o.worker_id)
        if not applied:
            pass  # leased to another worker now: that worker's outcome will count
        elif o.kind == "defer":
            assert o.next_attempt_at is not None
            self._deliveries[d.id] = replace(d, next_attempt_at=o.next_attempt_at, updated_at=now)
        elif o.kind == "retry":
            assert o.next_attempt_at is not None
            self._deliveries[d.id] = replace(
                d,
                attempts=o.attempts,
                rounds=d.rounds + 1,
                next_attempt_at=o.next_attempt_at,
                last_status=o.status,
                last_error=o.error,
                updated_at=now,
            )
        else:
            state = DeliveryState.DELIVERED if o.kind == "delivered" else DeliveryState.DEAD
            self._deliveries[d.id] = replace(
                d,
                state=state,
                attempts=o.attempts,
                last_status=o.status,
                last_error=o.error,
                updated_at=now,
            )
            if lane is not None and d.id in lane.pending:
                lane.pending.remove(d.id)
        if applied and lane is not None:
            lane.lease_owner, lane.lease_until = None, 0.0
            lane.requeued_at = now
            if not lane.pending:
                del self._lanes[lane_key]
        return applied

    async def complete_and_claim_next(
        self,
        outcome: Outcome,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
    ) -> Delivery | None:
        now = time.time() if now is None else now
        if not await self._apply_outcome(outcome, now):
            return None
        if outcome.disable_config is not None or outcome.kind == "defer":
            return None
        lane = self._lanes.get((outcome.config_key, outcome.task_id))
        if lane is None or not lane.pending or lane.lease_until > now:
            return None
        head = self._head(lane)
        if head.next_attempt_at > now:
            return None
        lane.lease_owner, lane.lease_until = worker_id, now + lease_seconds
        return replace(head, config=self._configs.get(head.config_key))

    async def release(self, delivery_ids: Sequence[str], *, worker_id: str) -> None:
        for delivery_id in delivery_ids:
            d = self._deliveries.get(delivery_id)
            if d is None:
                continue
            lane = self._lanes.get((d.config_key, d.task_id))
            if lane is not None and lane.lease_owner == worker_id:
                lane.lease_owner, lane.lease_until = None, 0.0

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        d = self._deliveries.get(delivery_id)
        return None if d is None else self._with_lease(d)

    def _with_lease(self, d: Delivery) -> Delivery:
        lane = self._lanes.get((d.config_key, d.task_id))
        if lane is None or lane.lease_owner is None or not lane.pending:
            return d
        return replace(d, leased_until=lane.lease_until) if lane.pending[0] == d.id else d

    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]:
        out = []
        for d in sorted(self._deliveries.values(), key=lambda d: d.id):
            if flt.after_id is not None and d.id <= flt.after_id:
                continue
            if flt.state is not None and d.state is not flt.state:
                continue
            if flt.task_id is not None and d.task_id != flt.task_id:
                continue
            if flt.config_key is not None and d.config_key != flt.config_key:
                continue
            if flt.created_after is not None and d.created_at < flt.created_after:
                continue
            if flt.created_before is not None and d.created_at >= flt.created_before:
                continue
            out.append(self._with_lease(d))
            if len(out) >= flt.limit:
                break
        return out

    async def replay(self, delivery_ids: Sequence[str], *, now: float | None = None) -> int:
        now = time.time() if now is None else now
        count = 0
        for delivery_id in delivery_ids:
            d = self._deliveries.get(delivery_id)
            if d is None or d.state is not DeliveryState.DEAD:
                continue
            config = self._configs.get(d.config_key)
            if config is None or not config.enabled:
                continue
            self._deliveries[d.id] = replace(
                d,
                state=DeliveryState.PENDING,
                attempts=0,
                rounds=0,
                last_error=None,
                last_status=None,
                next_attempt_at=now,
                updated_at=now,
            )
            lane = self._lanes.setdefault((d.config_key, d.task_id), _Lane())
            lane.pending.append(d.id)
            lane.pending.sort(key=lambda i: self._deliveries[i].seq)
            count += 1
        return count

    async def purge(self, state: DeliveryState, *, updated_before: float, limit: int = 1000) -> int:
        if state is DeliveryState.PENDING:
            raise ValueError("pending deliveries are never purged")
        doomed = [
            d.id
            for d in self._deliveries.values()
            if d.state is state and d.updated_at < updated_before
        ][:limit]
        for delivery_id in doomed:
            del self._deliveries[delivery_id]
        return len(doomed)

    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        excluded = set(exclude_endpoints)
        times = [
            max(self._head(lane).next_attempt_at, lane.lease_until)
            for (config_key, _), lane in self._lanes.items()
            if lane.pending and self._lane_endpoint(config_key) not in excluded
        ]
        return min(times) if times else None

    async def stats(self, *, now: float | None = None, count_delivered: bool = True) -> OutboxStats:
        now = time.time() if now is None else now
        pending = [d for d in self._deliveries.values() if d.state is DeliveryState.PENDING]
        leased = sum(1 for lane in self._lanes.values() if lane.lease_until > now)
        due = sum(
            1
            for lane in self._lanes.values()
            if lane.pending and lane.lease_until <= now and self._head(lane).next_attempt_at <= now
        )
        return OutboxStats(
            pending=len(pending),
            due=due,
            leased=leased,
            dead=sum(1 for d in self._deliveries.values() if d.state is DeliveryState.DEAD),
            delivered=sum(
                1 for d in self._deliveries.values() if d.state is DeliveryState.DELIVERED
            )
            if count_delivered
            else None,
            oldest_pending_created_at=min((d.created_at for d in pending), default=None),
        )
