"""Storage contracts: the config store and the delivery outbox.

Every backend (memory, SQLite, PostgreSQL) implements both on one connection, so a
publish can read the task's configs and enqueue its deliveries in one transaction.
The dispatcher and notifier only ever talk to these contracts.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import InvalidConfigError
from ..protocol.constants import DEFAULT_MAX_CONFIGS_PER_TASK, VERSION_1_0

Renderer = Callable[[str], bytes]
"""Renders an event's webhook body for a protocol version ("1.0" or "0.3")."""


class DeliveryState(enum.StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class StoredConfig:
    """A push notification config as stored: owner-scoped, with its secrets in clear.

    ``key`` is the internal, globally unique identity; ``id`` is the A2A config id,
    unique only within (task, owner).
    """

    key: str
    id: str
    task_id: str
    owner: str
    url: str
    token: str | None = field(default=None, repr=False)  # secrets stay out of logs
    auth_scheme: str | None = None
    auth_credentials: str | None = field(default=None, repr=False)
    tenant: str | None = None
    protocol_version: str = VERSION_1_0
    enabled: bool = True
    disabled_reason: str | None = None
    failing_since: float | None = None
    created_at: float = 0.0

    def with_changes(self, **changes: object) -> StoredConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One webhook to one config: the unit the dispatcher sends and retries."""

    id: str
    config_key: str
    task_id: str
    seq: int
    kind: str
    body: bytes = field(repr=False)
    state: DeliveryState
    attempts: int
    next_attempt_at: float
    created_at: float
    updated_at: float
    # How many times it was rescheduled (indexes the durable retry schedule).
    rounds: int = 0
    last_status: int | None = None
    last_error: str | None = None
    # Filled in by claim_due(): the config the delivery goes to, as of the claim.
    config: StoredConfig | None = None
    # Set when the stored config could not be read (e.g. its secrets fail to decrypt).
    config_error: str | None = None
    # Filled in by get_delivery() and list_deliveries(): when the lease a worker holds
    # on it ends (a claimed delivery is in flight, or its worker died), else None.
    leased_until: float | None = None
    # The config's endpoint (scheme://host:port) when the delivery was queued; None for
    # a delivery queued before this was recorded.
    endpoint: str | None = None
    # The W3C traceparent of the publish that queued it (sent on its webhook), when the
    # publisher traced it; see a2a_push.tracing.
    traceparent: str | None = None


AttemptVerdict = Literal["delivered", "retry", "dead", "gone"]
"""What an attempt meant for its delivery: delivered, to be retried at ``retry_at``,
dead-lettered, or dead-lettered because the receiver answered 410 Gone."""

ATTEMPT_VERDICTS: tuple[AttemptVerdict, ...] = ("delivered", "retry", "dead", "gone")

ATTEMPT_ERROR_CLASSES = ("timeout", "refused", "reset", "dns", "tls", "ssrf", "connect", "error")
"""Why an attempt got no HTTP answer: the time limit ran out; the connection was refused;
it was reset or closed before the answer; the host name did not resolve; the TLS
handshake or certificate failed; the URL guard refused the address (SSRF policy); any
other connection failure; anything else."""

MAX_ATTEMPT_RESPONSE_BYTES = 1024
"""How much of an answer's body an attempt keeps (as received: never decompressed)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt of a delivery, as the attempt history keeps it.

    ``endpoint`` is the URL's origin alone (``scheme://host:port``): a webhook URL's
    path and query often hold its secret, and are never stored here. ``response`` is the
    first :data:`MAX_ATTEMPT_RESPONSE_BYTES` of the answer's body, as received, with the
    request's own credentials cut out should the receiver echo them.
    """

    delivery_id: str
    number: int  # the delivery's attempt count after it (1 is the first; a replay restarts)
    started_at: float  # Unix seconds
    duration: float  # seconds
    endpoint: str
    verdict: AttemptVerdict
    status: int | None = None  # the HTTP status; None when there was no answer
    error_class: str | None = None  # one of ATTEMPT_ERROR_CLASSES when there was none
    error: str | None = None  # what went wrong, as the delivery's last_error says it
    retry_at: float | None = None  # for a "retry": when the next attempt is due
    response: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class AttemptBucket:
    """Attempts that started in one interval: how many delivered, how many did not."""

    start: float  # Unix seconds
    delivered: int
    failed: int


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """One endpoint's recent attempts: how many, how many delivered, and the latency
    percentiles (seconds) of all of them."""

    attempts: int
    succeeded: int
    p50: float | None
    p95: float | None
    p99: float | None


ENDPOINT_STATS_SAMPLE = 50_000
"""How many of the latest attempts ``Outbox.endpoint_stats`` reads at most."""


OutcomeKind = Literal["delivered", "retry", "dead", "defer"]
"""defer: push back without an attempt (breaker open, endpoint busy)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to a claimed delivery; applied with ``Outbox.complete``."""

    delivery_id: str
    config_key: str
    task_id: str
    kind: OutcomeKind
    attempts: int
    status: int | None = None
    error: str | None = None
    next_attempt_at: float | None = None  # required for "retry" and "defer"
    # The worker that leased the delivery. Given, the outcome leaves the delivery and its
    # lane alone when another worker holds the lane's lease now (it took the work over
    # after this worker's lease ran out): that worker's outcome is the one that counts,
    # so a late outcome never acks, reschedules or frees work it no longer holds. It
    # cannot recall a request already sent: the late request may still reach the
    # endpoint after the taker's (a duplicate, same webhook-id). The config side effects
    # below apply either way (they are facts about the endpoint).
    worker_id: str | None = None
    # Config side effects, applied in the same transaction, and only while the config
    # still has ``config_url`` (when given): a late outcome from the URL a config had
    # before it was registered again elsewhere must not disable the new registration,
    # or bring back the old failure clock.
    disable_config: str | None = None  # reason, when the config must be disabled
    config_failing_since: float | None = None
    clear_config_failing: bool = False
    config_url: str | None = None  # the URL the request went to
    # The HTTP attempts this outcome ends (a claim may make several quick ones), recorded
    # in the same transaction when the store keeps the attempt history.
    history: tuple[Attempt, ...] = ()
    # (And one the store applies by itself: a "dead" outcome that leaves the config with
    # nothing pending stops its failure clock. The clock measures failing without a
    # break in the work: started again weeks later, an old clock would disable the
    # config at its first failed attempt, without a retry.)


def has_config_side_effects(o: Outcome) -> bool:
    return (
        o.disable_config is not None or o.config_failing_since is not None or o.clear_config_failing
    )


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    due: int
    leased: int
    dead: int
    delivered: int | None  # None: not counted (see Outbox.stats)
    oldest_pending_created_at: float | None


@dataclass(frozen=True, slots=True)
class DeliveryFilter:
    state: DeliveryState | None = None
    task_id: str | None = None
    config_key: str | None = None
    # Only deliveries queued for this endpoint (scheme://host:port, the default port
    # written out: see a2a_push.endpoints.endpoint_of).
    endpoint: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    limit: int = 100
    # Keyset paging: ids strictly greater than this (ids sort by creation).
    after_id: str | None = None


@dataclass(frozen=True, slots=True)
class InitialDelivery:
    """The first webhook of a config being stored (a task snapshot), queued by
    ``put_config`` in the transaction that stores the config.

    It takes the task's next sequence number as the config becomes visible to
    publishes, so every event fanned out to the config comes after it: a publish that
    commits first cannot reach the config, one that commits later has a higher seq.
    """

    kind: str
    render: Renderer
    new_id: Callable[[], str]
    now: float | None = None
    final: bool = False  # the snapshot is in a terminal state (see Store.enqueue)
    traceparent: str | None = None  # see Store.enqueue


@dataclass(slots=True)
class StoreOptions:
    max_configs_per_task: int = DEFAULT_MAX_CONFIGS_PER_TASK
    # Secrets (token, credentials) are encrypted at rest with these Fernet keys; the first
    # encrypts, all decrypt (rotation). None: stored in clear (memory backend ignores it).
    encryption_keys: Sequence[str] | None = None
    # Record every HTTP attempt of every delivery (Store.list_attempts), in the
    # transaction that records its outcome; False records none.
    attempt_history: bool = True
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.encryption_keys, str | bytes):
            raise ValueError(
                "encryption_keys takes a list of keys, not a single key: write "
                "encryption_keys=[key] (several keys: the first encrypts, all decrypt)"
            )


def check_same_version(config: StoredConfig, stored_version: str) -> None:
    """Registering a config id again keeps its protocol version (checked in the write's
    transaction): its queued webhooks were rendered for that version, and relabelling
    them (A2A-Version) would send bodies of the wrong shape."""
    if stored_version != config.protocol_version:
        raise InvalidConfigError(
            "id",
            f"config {config.id!r} was registered through A2A {stored_version}; delete it "
            "first, or use another id",
        )


class ConfigStore(abc.ABC):
    """Push notification configs, scoped by owner, capped per task."""

    @abc.abstractmethod
    async def put_config(
        self, config: StoredConfig, *, initial: InitialDelivery | None = None
    ) -> StoredConfig:
        """Create, or replace the config with the same (task, owner, id).

        ``initial``: also queue this delivery for the stored config (and no other) with
        the task's next sequence number, atomically with storing it: no publish of the
        task is ordered between the two, in this process or any other. Nothing is
        queued for a config stored disabled.

        Raises ``TooManyConfigsError`` when a new config would exceed the per-task cap
        (and then queues nothing).
        """

    @abc.abstractmethod
    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        """The owner's config, or None (another owner's config is never returned)."""

    @abc.abstractmethod
    async def get_config_by_key(self, key: str) -> StoredConfig | None: ...

    @abc.abstractmethod
    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        """One page of the owner's configs for the task, and the next page token."""

    @abc.abstractmethod
    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        """Delete; pending deliveries to it are dead-lettered. False if it did not exist."""

    @abc.abstractmethod
    async def configs_for_task(self, task_id: str) -> list[StoredConfig]:
        """Every enabled config of the task, all owners."""

    @abc.abstractmethod
    async def set_config_enabled(self, key: str, enabled: bool, reason: str | None = None) -> bool:
        """Enable or disable a config. Disabling dead-letters its pending deliveries."""

    @abc.abstractmethod
    async def list_all_configs(
        self, *, enabled: bool | None = None, after_key: str | None = None, limit: int = 100
    ) -> list[StoredConfig]:
        """Configs of every task and owner, by key (keyset paging: keys after
        ``after_key``); only enabled or only disabled ones when ``enabled`` says so.
        For operators (the console); secrets are read too, as everywhere in the store."""

    @abc.abstractmethod
    async def count_configs(self, *, enabled: bool | None = None) -> int:
        """How many configs there are (only enabled or disabled ones when given)."""


class Outbox(abc.ABC):
    """Durable delivery queue, FIFO per (config, task), claimed under leases."""

    @abc.abstractmethod
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
        """Fan an event out to the task's enabled configs in one transaction.

        ``traceparent``: the W3C trace context of the publish, kept with each delivery
        and sent on its webhook (None when the publish is not traced).

        ``final``: the event puts the task in a terminal state; the first such event's
        time is kept for :meth:`purge_final_tasks`, and a later event that is not final
        (the task id reused, or events after the end) forgets it. This holds when every
        config of the task is disabled too (nothing is queued, but its configs are still
        purged in time); a task with no configs at all records nothing.

        Assigns the task's next sequence number and returns it with the delivery ids
        (empty, and no sequence number used, when the task has no enabled configs).
        Durable when it returns. With an ``idempotency_key`` seen before (and not yet
        purged), nothing is enqueued and the first call's result is returned: a
        publish retried after a lost answer is not sent twice. A key first seen before
        ``idempotency_since`` has expired: it counts as new (whether or not the
        purge has deleted it yet), and this call's result replaces it.
        """

    @abc.abstractmethod
    async def purge_final_tasks(self, *, final_before: float, limit: int = 1000) -> int:
        """Delete the configs of at most ``limit`` tasks whose final event was published
        before ``final_before`` and that have no pending or dead delivery (dead letters
        keep their config, to be replayed, until they are purged themselves); returns
        how many tasks. The task's sequence counter stays (a few bytes), so its seq
        never goes back; its delivered deliveries stay until their own retention.
        Callers repeat while it returns ``limit``."""

    @abc.abstractmethod
    async def purge_idempotency_keys(self, *, created_before: float, limit: int = 1000) -> int:
        """Forget at most ``limit`` idempotency keys recorded before the time given (the
        oldest first); returns how many. Callers repeat while it returns ``limit``."""

    @abc.abstractmethod
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
        """Lease up to ``limit`` due deliveries, at most one per (config, task) lane,
        at most ``per_endpoint`` per endpoint, none for ``exclude_endpoints``
        (``scheme://host:port``, see ``a2a_push.endpoints.endpoint_of``)."""

    @abc.abstractmethod
    async def complete(self, outcomes: Sequence[Outcome], *, now: float | None = None) -> None:
        """Record outcomes of claimed deliveries and release their lanes."""

    async def complete_and_claim_next(
        self,
        outcome: Outcome,
        *,
        lease_seconds: float,
        worker_id: str,
        now: float | None = None,
    ) -> Delivery | None:
        """``complete([outcome])``, then lease and return the lane's next delivery if it
        is due now, so a busy lane streams without a separate claim round."""
        await self.complete([outcome], now=now)
        return None

    @abc.abstractmethod
    async def release(self, delivery_ids: Sequence[str], *, worker_id: str) -> None:
        """Give leased work back untouched (graceful shutdown)."""

    @abc.abstractmethod
    async def get_delivery(self, delivery_id: str) -> Delivery | None: ...

    @abc.abstractmethod
    async def list_deliveries(self, flt: DeliveryFilter) -> list[Delivery]: ...

    @abc.abstractmethod
    async def list_attempts(self, delivery_id: str) -> list[Attempt]:
        """The delivery's recorded attempts, oldest first (empty for an unknown id, or
        when the history is off). They go when the delivery is purged."""

    @abc.abstractmethod
    async def attempt_series(
        self, *, since: float, bucket_seconds: float, now: float | None = None
    ) -> list[AttemptBucket]:
        """Attempts per interval of ``bucket_seconds`` from ``since`` to ``now``, every
        interval listed (empty ones as zeros), oldest first."""

    @abc.abstractmethod
    async def endpoint_stats(
        self, *, since: float, now: float | None = None
    ) -> dict[str, EndpointStats]:
        """Per endpoint (scheme://host:port), the attempts that started from ``since``
        (the latest :data:`ENDPOINT_STATS_SAMPLE` of them at most)."""

    @abc.abstractmethod
    async def replay(self, delivery_ids: Sequence[str], *, now: float | None = None) -> int:
        """Put dead-lettered deliveries back in their lanes as new; returns how many."""

    @abc.abstractmethod
    async def purge(self, state: DeliveryState, *, updated_before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` delivered or dead deliveries last updated before the
        time given; returns how many. Pending deliveries are never purged."""

    @abc.abstractmethod
    async def next_due_at(self, *, exclude_endpoints: Collection[str] = ()) -> float | None:
        """Earliest time any lane becomes due (None when nothing is pending), leaving out
        lanes to ``exclude_endpoints`` (those a claim would skip)."""

    @abc.abstractmethod
    async def take_tokens(
        self, endpoint: str, *, rate: float, capacity: float, want: int, now: float | None = None
    ) -> tuple[int, float]:
        """Take up to ``want`` tokens from ``endpoint``'s rate-limit bucket, shared by
        every process on this store: it refills at ``rate`` tokens a second and holds at
        most ``capacity`` (a new bucket starts full). Returns (tokens taken, seconds
        until the next whole token when none were taken, else 0)."""

    @abc.abstractmethod
    async def stats(self, *, now: float | None = None, count_delivered: bool = True) -> OutboxStats:
        """Counts of the outbox. ``count_delivered=False`` leaves out the delivered
        count (``delivered`` is None): it reads every retained delivered row, which the
        metrics scrape and the health check have no use for."""


@dataclass(frozen=True, slots=True)
class FsyncCounts:
    """A store's fsyncs so far: how many, their time in all (seconds), how many took
    20 ms (``a2a_push.database.sqlite_writer.SLOW_FSYNC``) or longer, and the longest
    (seconds). Each one holds up every publish of its commit."""

    count: int = 0
    seconds: float = 0.0
    slow: int = 0
    longest: float = 0.0


class Store(ConfigStore, Outbox, abc.ABC):
    """A backend: both contracts on one connection."""

    options: StoreOptions
    # Network round trips to a database server so far (statements, BEGIN and COMMIT):
    # 0 for the embedded backends. Exported as a metric; B6 divides it by deliveries.
    round_trips: int = 0

    def fsync_counts(self) -> FsyncCounts:
        """The fsyncs this process made to make commits durable, so far (all zero for a
        backend whose server does its own: PostgreSQL). Exported as metrics."""
        return FsyncCounts()

    async def open(self) -> None:
        """Connect and migrate. Idempotent."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @property
    def location(self) -> str:
        """Where the data lives, for messages (never a password)."""
        return type(self).__name__

    @property
    def command_database(self) -> str | None:
        """This database as the ``a2a-push deliveries`` commands take it (``--database``),
        a password shown as ``***``; None when they cannot open it (a memory store)."""
        return None

    def set_wakeup(self, callback: Callable[[], None] | None) -> None:
        """Have the store call ``callback`` when work may have become due because of
        another process (a publish, replay or release made elsewhere), so an idle
        dispatcher need not wait for its next poll; None unregisters.

        Called on the event loop, possibly more often than needed: it must be cheap and
        idempotent (setting an event). Backends with nothing to signal across processes
        ignore it (this default); their dispatcher polls.
        """
        return None

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


MATCHING_PAGE = 500
"""How many deliveries :func:`matching_ids` reads at a time."""


async def matching_ids(
    store: Outbox, flt: DeliveryFilter, *, at_most: int | None = None
) -> list[str]:
    """The ids of every delivery ``flt`` matches, oldest first (its limit and after_id
    are ignored), read page by page; the first ``at_most`` of them when given."""
    chosen: list[str] = []
    after: str | None = None
    while at_most is None or len(chosen) < at_most:
        page = await store.list_deliveries(replace(flt, limit=MATCHING_PAGE, after_id=after))
        chosen.extend(d.id for d in page)
        if len(page) < MATCHING_PAGE:
            break
        after = page[-1].id
    return chosen if at_most is None else chosen[:at_most]
