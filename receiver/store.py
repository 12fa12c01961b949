"""What the receiver keeps: subscriptions, seen webhook ids, notifications, task snapshots
and the event log its clients stream. One contract, several backends."""

from __future__ import annotations

import abc
import enum
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Self


class SubscriptionState(enum.StrEnum):
    ACTIVE = "active"
    DELETED = "deleted"


@dataclass(frozen=True)
class Subscription:
    """A client's interest in one task on one agent, backed by a push config there."""

    id: str
    client_id: str
    agent_url: str
    task_id: str
    token_digest: str = field(repr=False)
    state: SubscriptionState
    created_at: float
    deleted_at: float | None = None
    confirmed_at: float | None = None
    """When the agent accepted the push config; None while that is not known (the
    call is in flight, or the row predates this column)."""

    @property
    def position(self) -> SubscriptionPosition:
        """Where it is in its client's list (see :meth:`ReceiverStore.list_subscriptions`)."""
        return (self.created_at, self.id)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "agentUrl": self.agent_url,
            "taskId": self.task_id,
            "state": self.state.value,
            "createdAt": self.created_at,
        }
        if self.deleted_at is not None:
            out["deletedAt"] = self.deleted_at
        return out


SubscriptionPosition = tuple[float, str]
"""Where a subscription is in a client's list: its ``(created_at, id)``."""

FIRST_POSITION: SubscriptionPosition = (float("-inf"), "")
"""Before every subscription: a list from the start."""


@dataclass(frozen=True)
class Notification:
    """A verified webhook, as persisted before the 2xx."""

    agent_url: str
    task_id: str
    dedup_key: str
    subscription_id: str
    method: str
    kind: str
    body: bytes = field(repr=False)
    received_at: float
    seq: int | None = None


@dataclass(frozen=True)
class TaskSnapshot:
    """The newest task as fetched with GetTask."""

    agent_url: str
    task_id: str
    context_id: str | None
    state: str | None
    final: bool
    status_timestamp: str | None
    generation: int
    task: dict[str, Any]
    updated_at: float


@dataclass(frozen=True)
class TaskEvent:
    """One entry of the event log that SSE clients read (and resume) from."""

    id: int
    agent_url: str
    task_id: str
    kind: str
    data: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class PendingFetch:
    """A task with notifications that no successful GetTask has covered yet."""

    agent_url: str
    task_id: str
    up_to: int
    """The newest notification id; a fetch started now covers every one up to it."""
    since: float | None = None
    """When the oldest of those notifications was received: the task has waited for a
    fetch since then (the fetcher gives up on one that keeps failing past a bound)."""


FinishedTaskPosition = tuple[float, str, str]
"""Where a finished task is in :meth:`ReceiverStore.end_finished_subscriptions`' walk:
its ``(updated_at, agent_url, task_id)``."""

FIRST_FINISHED: FinishedTaskPosition = (float("-inf"), "", "")

PURGE_BATCH: Final = 1000
"""Rows a purge deletes (subscriptions the maintenance ends, tasks it looks at) per
transaction: none holds the writer long, however much is due."""


class ReceiverStore(abc.ABC):
    """Storage contract of the receiver. Every method is safe to call concurrently."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    def set_event_listener(self, callback: Callable[[], None]) -> None:  # noqa: B027
        """Call ``callback`` when another process stores a snapshot (shared backends)."""

    async def ping(self) -> None:
        """Raise when the store cannot serve requests (for /healthz)."""
        await self.pending_fetches(limit=1)

    # ---- subscriptions ---------------------------------------------------------------

    @abc.abstractmethod
    async def add_subscription(self, sub: Subscription) -> Subscription:
        """Insert ``sub``; if the client already has an active one for this task, return
        that one instead (creating a subscription is idempotent)."""

    @abc.abstractmethod
    async def confirm_subscription(self, subscription_id: str, *, now: float) -> None:
        """Record that the agent accepted the subscription's push config (kept in the
        store, so every process and a restarted one know; the first time counts)."""

    @abc.abstractmethod
    async def get_subscription(self, subscription_id: str) -> Subscription | None: ...

    @abc.abstractmethod
    async def subscription_by_token(self, token_digest: str) -> Subscription | None: ...

    @abc.abstractmethod
    async def subscriptions_for_task(self, agent_url: str, task_id: str) -> list[Subscription]:
        """Every subscription (active and deleted) to one task."""

    @abc.abstractmethod
    async def list_subscriptions(
        self,
        client_id: str,
        *,
        after: SubscriptionPosition | None = None,
        limit: int | None = None,
    ) -> list[Subscription]:
        """The client's subscriptions (active and deleted), oldest first (by creation time,
        then id): only those after ``after`` (the position of the last one of the page
        before), at most ``limit`` of them (all when None)."""

    @abc.abstractmethod
    async def active_subscriptions_to_task(
        self, client_id: str, task_id: str, agent_url: str | None = None
    ) -> list[Subscription]:
        """The client's active subscriptions to ``task_id`` (at most one per agent), oldest
        first; only the one to ``agent_url`` when given. An index lookup: it reads those
        rows only, however many subscriptions the client has."""

    @abc.abstractmethod
    async def delete_subscription(self, subscription_id: str, *, now: float) -> Subscription | None:
        """Mark deleted (webhooks for it then get 410); None when it does not exist."""

    @abc.abstractmethod
    async def remove_subscription(self, subscription_id: str) -> None:
        """Forget a subscription entirely (its creation on the agent failed)."""

    # ---- webhooks --------------------------------------------------------------------

    @abc.abstractmethod
    async def seen(self, agent_url: str, dedup_key: str) -> bool:
        """Whether a webhook with this dedup key from this agent was already accepted."""

    @abc.abstractmethod
    async def record(self, notification: Notification) -> int | None:
        """Remember the dedup key and store the notification, atomically; its id.

        A dedup key already seen from this agent stores nothing and returns None.
        """

    @abc.abstractmethod
    async def pending_fetches(self, limit: int = 1000) -> list[PendingFetch]: ...

    @abc.abstractmethod
    async def mark_fetched(self, agent_url: str, task_id: str, up_to: int) -> None:
        """Notifications of this task up to ``up_to`` are covered by a stored snapshot."""

    async def purge(
        self,
        *,
        seen_before: float,
        notifications_before: float,
        history_before: float | None = None,
        body_hashes_before: float | None = None,
        batch: int = PURGE_BATCH,
    ) -> int:
        """Drop dedup keys and notifications (fetched or not) older than the given times;
        how many rows went.

        ``body_hashes_before``: dedup keys that are body hashes (senders that send no
        webhook id) go sooner: an identical body sent again later is a new notification.
        ``history_before``: also drop subscriptions deleted before then, tasks updated
        before then that no subscription (active or deleted) names any more, and events
        created before then, except each remaining task's newest event: an SSE client
        resuming from an older id still gets every task's latest state.

        Each statement deletes at most ``batch`` rows per transaction, again until fewer
        go, so however much is due no one transaction holds the writer long.
        """
        total = 0
        for name, before in purge_statements(
            seen_before=seen_before,
            notifications_before=notifications_before,
            history_before=history_before,
            body_hashes_before=body_hashes_before,
        ):
            while True:
                deleted = await self._purge_batch(name, before, batch)
                total += deleted
                if deleted < batch:
                    break
        return total

    @abc.abstractmethod
    async def _purge_batch(self, name: str, before: float, limit: int) -> int:
        """Run the purge query ``name`` with its cut-off, deleting at most ``limit`` rows,
        in a transaction of its own; rows deleted."""

    async def end_finished_subscriptions(
        self, *, before: float, now: float, batch: int = PURGE_BATCH
    ) -> int:
        """End (mark deleted at ``now``, as an unsubscribe does) the active subscriptions
        made before ``before`` to tasks whose stored snapshot is final (a terminal state)
        and was stored before ``before``: nothing can change them any more, and clients
        rarely unsubscribe. The purge then drops the subscriptions, and later their tasks
        and events, like any deleted ones. Walks the finished tasks oldest first,
        ``batch`` of them per transaction; how many subscriptions ended."""
        total = 0
        after = FIRST_FINISHED
        while True:
            ended, last = await self._end_finished_batch(
                before=before, now=now, after=after, limit=batch
            )
            total += ended
            if last is None:
                return total
            after = last

    @abc.abstractmethod
    async def _end_finished_batch(
        self, *, before: float, now: float, after: FinishedTaskPosition, limit: int
    ) -> tuple[int, FinishedTaskPosition | None]:
        """One transaction of :meth:`end_finished_subscriptions`: the next ``limit``
        finished tasks after ``after``; subscriptions ended, and the position of the last
        task looked at (None when there were fewer than ``limit``: the walk is over)."""

    # ---- snapshots and events --------------------------------------------------------

    @abc.abstractmethod
    async def save_snapshot(
        self, snapshot: TaskSnapshot, *, fetched_up_to: int | None = None
    ) -> TaskEvent | None:
        """Store ``snapshot`` unless it would go backwards or changes nothing; log and
        return its event.

        Refused (None) when the stored snapshot is final (a terminal state), has a newer
        generation, or a later status timestamp. None too, with nothing stored or logged
        but the newer generation, when the task is byte for byte the stored one: an
        unchanged snapshot is not a new event. Decided in the write's transaction, so
        concurrent savers (other workers and replicas too) of one snapshot log it once.
        ``fetched_up_to``: in the same transaction, mark the task's notifications up to
        that id as covered.
        """

    @abc.abstractmethod
    async def is_final(self, agent_url: str, task_id: str) -> bool:
        """Whether the stored snapshot is in a terminal state (nothing can change it)."""

    @abc.abstractmethod
    async def get_snapshot(self, agent_url: str, task_id: str) -> TaskSnapshot | None: ...

    @abc.abstractmethod
    async def snapshots_for_client(
        self, client_id: str, *, context_id: str | None = None, limit: int = 100
    ) -> list[TaskSnapshot]: ...

    @abc.abstractmethod
    async def events_for_client(
        self, client_id: str, *, after: int, limit: int = 100
    ) -> list[TaskEvent]:
        """Log entries newer than ``after`` for tasks the client subscribed to, oldest first."""

    @abc.abstractmethod
    async def latest_event_id(self) -> int: ...


def supersedes(new: TaskSnapshot, old: TaskSnapshot) -> bool:
    """Whether ``new`` may replace ``old``: snapshots never go backwards.

    A final (terminal) snapshot is never replaced; a fetch that started earlier (lower
    generation) never overwrites a later one; nor does an older status timestamp.
    """
    if old.final or new.generation < old.generation:
        return False
    new_at, old_at = _instant(new.status_timestamp), _instant(old.status_timestamp)
    return new_at is None or old_at is None or new_at >= old_at


def _instant(timestamp: str | None) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (any number of fraction digits)."""
    if not timestamp:
        return None
    try:
        value = datetime.fromisoformat(timestamp.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def subscription_from_row(row: Any) -> Subscription:
    """A subscription from a database row (``sqlite3.Row`` or ``asyncpg.Record``)."""
    return Subscription(
        id=row["id"],
        client_id=row["client_id"],
        agent_url=row["agent_url"],
        task_id=row["task_id"],
        token_digest=row["token_digest"],
        state=SubscriptionState(row["state"]),
        created_at=row["created_at"],
        deleted_at=row["deleted_at"],
        confirmed_at=row["confirmed_at"],
    )


def oldest_first(subs: Iterable[Subscription]) -> list[Subscription]:
    """``subs`` in their clients' list order (see :meth:`ReceiverStore.list_subscriptions`)."""
    return sorted(subs, key=lambda s: s.position)


def snapshot_from_row(row: Any) -> TaskSnapshot:
    """A task snapshot from a database row."""
    return TaskSnapshot(
        agent_url=row["agent_url"],
        task_id=row["task_id"],
        context_id=row["context_id"],
        state=row["state"],
        final=bool(row["final"]),
        status_timestamp=row["status_timestamp"],
        generation=int(row["generation"]),
        task=json.loads(row["snapshot"]),
        updated_at=row["updated_at"],
    )


def purge_statements(
    *,
    seen_before: float,
    notifications_before: float,
    history_before: float | None,
    body_hashes_before: float | None,
) -> list[tuple[str, float]]:
    """What :meth:`ReceiverStore.purge` runs: each backend's query of that name (in its
    ``queries.sql``) with its cut-off, in this order (each in batches)."""
    statements = [("purge_seen", seen_before), ("purge_notifications", notifications_before)]
    if body_hashes_before is not None:
        statements.append(("purge_body_hashes", body_hashes_before))
    if history_before is not None:
        # In this order: a task whose last subscription goes now goes too, then its events.
        statements += [
            (name, history_before)
            for name in ("purge_deleted_subscriptions", "purge_tasks", "purge_events")
        ]
    return statements
