"""``PushNotifier``: what an A2A agent embeds. One call per task event; the rest is ours.

notifier = PushNotifier.open("push.db", issuer="https://agent.example.com",
                             data_dir="./a2a-push-data")
async with notifier:
    await notifier.register_config(config, owner="alice", task=task)
    await notifier.publish(task.id, status_update)   # durable when it returns
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from . import tracing
from .console import Console, ConsoleSource
from .console.auth import MIN_KEY_LENGTH as MIN_ADMIN_KEY_LENGTH
from .delivery.dispatcher import Dispatcher, DispatcherOptions, longest_claim
from .delivery.health import EndpointHealth
from .delivery.retry import RetryPolicy
from .delivery.ssrf import AddressPolicy
from .delivery.transport import Timeouts, Transport
from .errors import InvalidConfigError, NotifierNotStartedError, StoreUnavailableError
from .events import (
    OPERATOR_TASK,
    EventCallback,
    Events,
    OperationalEvent,
    is_operator_task,
    operator_config,
)
from .ids import new_config_id, new_delivery_id, new_key
from .metrics import Metrics, add_metrics_route
from .protocol.constants import DEFAULT_MAX_PAYLOAD_BYTES, VERSION_0_3, VERSION_1_0
from .protocol.types import (
    PushNotificationEvent,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
    id_problem,
)
from .protocol.webhook_body import TRUNCATED_FLAG as TRUNCATED_FLAG
from .protocol.webhook_body import body_renderer
from .signing import KeySet, WebhookSigner
from .signing import standard_webhooks as stdwh
from .store import (
    Delivery,
    DeliveryFilter,
    DeliveryState,
    FsyncCounts,
    InitialDelivery,
    Store,
    StoredConfig,
    open_store,
)

log = logging.getLogger("a2a_push.notifier")

TaskProvider = Callable[[str], Awaitable[Task | None]]
"""Returns the current snapshot of a task (for the first notification to a new config)."""

JWKS_PATH = "/.well-known/jwks.json"


@dataclass(frozen=True)
class Retention:
    """How long finished deliveries are kept (seconds; None keeps them for ever).

    Dead letters are kept longer than delivered ones: they are what you replay.
    ``final_tasks``: how long after a task's final event (a terminal state) its push
    configs are kept; a task with a pending or dead delivery keeps them until that
    settles or is purged.
    """

    delivered: float | None = 7 * 24 * 3600.0
    dead: float | None = 30 * 24 * 3600.0
    idempotency_keys: float = 24 * 3600.0  # how long a publish's idempotency key holds
    final_tasks: float | None = 7 * 24 * 3600.0
    interval: float = 3600.0  # how often to purge; 0 turns the background purge off


@dataclass(frozen=True)
class PublishResult:
    seq: int
    delivery_ids: list[str]


class PushNotifier:
    """Registers push configs and turns task events into durable, signed, ordered webhooks."""

    def __init__(
        self,
        store: Store,
        *,
        issuer: str,
        keyset: KeySet | None = None,
        signing: bool = True,
        address_policy: AddressPolicy | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        dispatcher: DispatcherOptions | None = None,
        health: EndpointHealth | None = None,
        metrics: Metrics | None = None,
        transport: Transport | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        task_provider: TaskProvider | None = None,
        resolve_on_register: bool = True,
        run_dispatcher: bool = True,
        key_reload_interval: float = 30.0,
        retention: Retention | None = None,
        operator_url: str | None = None,
        operator_token: str | None = None,
    ) -> None:
        _check_arguments(
            issuer=issuer,
            keyset=keyset,
            address_policy=address_policy,
            timeouts=timeouts,
            retry=retry,
            dispatcher=dispatcher,
            health=health,
            metrics=metrics,
            transport=transport,
            retention=retention,
            max_payload_bytes=max_payload_bytes,
            task_provider=task_provider,
            key_reload_interval=key_reload_interval,
        )
        self.store = store
        self.issuer = issuer
        self.keyset = keyset if keyset is not None else KeySet.generate()
        self.signer = WebhookSigner(self.keyset, issuer) if signing else None
        if transport is not None and address_policy is None:
            # Registrations are checked as the transport will dial.
            address_policy = transport.policy
        elif transport is not None and address_policy is not None:
            theirs = transport.policy
            if (address_policy.allow, address_policy.allow_loopback) != (
                theirs.allow,
                theirs.allow_loopback,
            ):
                raise ValueError(
                    f"address_policy= ({address_policy!r}) and transport= (whose policy is "
                    f"{theirs!r}) disagree: registrations would be checked by one and "
                    "requests by the other; give the policy to the Transport only"
                )
        self.address_policy = address_policy or AddressPolicy()
        self.metrics = metrics or Metrics()
        dispatcher = dispatcher or DispatcherOptions()
        if transport is not None and timeouts is not None and transport.timeouts != timeouts:
            raise ValueError(
                "timeouts= and transport= disagree: give the timeouts to the Transport only"
            )
        # The timeouts in effect are the transport's when one is given.
        _check_lease(
            dispatcher,
            retry or RetryPolicy(),
            transport.timeouts if transport is not None else timeouts or Timeouts(),
        )
        # The connection pool must fit the dispatcher's caps: a request waiting for a
        # pooled connection spends its total timeout waiting (and fails, and counts
        # against a healthy endpoint's breaker).
        if (
            transport is not None
            and run_dispatcher
            and (
                0 < transport.limit < dispatcher.concurrency  # 0: no limit (aiohttp)
                or 0 < transport.limit_per_host < dispatcher.per_endpoint
            )
        ):
            raise ValueError(
                f"transport= has room for {transport.limit} connections "
                f"({transport.limit_per_host} per host), fewer than the dispatcher sends at "
                f"once ({dispatcher.concurrency}, {dispatcher.per_endpoint} per endpoint): "
                f"give Transport(..., limit={dispatcher.concurrency}, "
                f"limit_per_host={dispatcher.per_endpoint}), or lower DispatcherOptions"
            )
        self.transport = transport or Transport(
            self.address_policy,
            timeouts or Timeouts(),
            limit=dispatcher.concurrency,
            limit_per_host=dispatcher.per_endpoint,
        )
        self._owns_transport = transport is None
        self.max_payload_bytes = max_payload_bytes
        self.task_provider = task_provider
        self.resolve_on_register = resolve_on_register
        self.dispatcher = Dispatcher(
            store,
            self.transport,
            self.signer,
            retry=retry,
            health=health,
            metrics=self.metrics,
            options=dispatcher,
        )
        self._run_dispatcher = run_dispatcher
        self.operator_url = _check_operator(self.address_policy, operator_url, operator_token)
        self._operator_token = operator_token
        # Operational events (docs/events.md): dead letters and disabled configs from the
        # dispatcher, breakers opening and closing, signing keys rotated and retired.
        self.events = Events()
        self.dispatcher.events = self.events
        self.dispatcher.health.listener = self.events.breaker_changed
        self._keys_seen = _key_state(self.keyset)
        self._key_reload_interval = key_reload_interval
        self._jwks_checked_at = float("-inf")  # time.monotonic() of jwks()'s last reload
        self._key_reload_failure: str | None = None  # the last one logged
        self._key_watcher: asyncio.Task[None] | None = None
        self.retention = retention if retention is not None else Retention()
        self._janitor: asyncio.Task[None] | None = None
        self._started = False
        self._round_trips_counted = 0  # the store's round trips the metric has counted
        self._fsyncs_counted = FsyncCounts()  # and its fsyncs
        self._stopped = False
        # The event loop of start(): the store, dispatcher and connection pool belong to it.
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(
        cls,
        database: str | Path,
        *,
        issuer: str,
        data_dir: str | Path | None = None,
        encryption_keys: Sequence[str] | None = None,
        keyset: KeySet | None = None,
        **kwargs: Any,
    ) -> PushNotifier:
        """A notifier on ``database`` (a SQLite path, ``sqlite:///…`` or ``memory://``), with
        its signing keys loaded from ``data_dir/keys`` (created there, with one key, when
        the folder has none); or ``keyset``; with neither, a throwaway in-memory key.
        ``kwargs`` are the constructor's."""
        from .store import StoreOptions

        if data_dir is not None and keyset is not None:
            raise ValueError(
                "PushNotifier.open(): give data_dir= (keys kept in data_dir/keys) or "
                "keyset=, not both"
            )
        store = open_store(database, StoreOptions(encryption_keys=encryption_keys))
        if data_dir:
            keyset = KeySet.load_or_create(Path(data_dir) / "keys")
        return cls(store, issuer=issuer, keyset=keyset, **kwargs)

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store and start delivering (idempotent while running).

        A notifier runs once, in the event loop that starts it: use it from that loop
        only, and after :meth:`stop` make a new one (its store is closed by then).
        """
        loop = asyncio.get_running_loop()
        if self._started:
            self._check_loop(loop)
            return
        if self._stopped:
            raise NotifierNotStartedError(
                "this PushNotifier was stopped and cannot be started again (its store is "
                "closed): make a new one, e.g. with PushNotifier.open(...)"
            )
        if self.metrics.serving is not None and self.metrics.serving() is not None:
            raise NotifierNotStartedError(
                "metrics=: this Metrics serves another running PushNotifier, and their "
                "queue gauges would overwrite each other's: give each notifier its own "
                "(the default) and serve each on a path of its own, or stop that one first"
            )
        if self._run_dispatcher and not self._owns_transport and not self.transport.started:
            raise NotifierNotStartedError(
                "the Transport given as transport= is not started: the notifier neither "
                "starts nor closes a transport it was given, so `await transport.start()` "
                "(or `async with transport:`) before starting the notifier"
            )
        await self.store.open()
        self._loop = loop
        try:
            operator = None
            if self.operator_url is not None:
                if self.resolve_on_register:
                    await self.address_policy.check_url(self.operator_url, "operator_url")
                # Stored (again) at each start: enabled, at the URL given now.
                operator = await self.store.put_config(
                    operator_config(self.operator_url, self._operator_token)
                )
            self.events.start(self.store, operator, self.dispatcher.wake)
            self._keys_seen = _key_state(self.keyset)
            if self._owns_transport:
                await self.transport.start()
            if self._run_dispatcher:
                self.dispatcher.start()
        except BaseException:
            self._stopped = True
            try:
                if self._owns_transport:
                    await self.transport.close()
            finally:
                await self.store.close()
            raise
        if self.retention.interval > 0:
            self._janitor = asyncio.create_task(self._purge_old(), name="a2a-push-retention")
        if self.keyset.directory is not None and self._key_reload_interval > 0:
            self._key_watcher = asyncio.create_task(self._watch_keys(), name="a2a-push-keys")
        self.metrics.serving = weakref.ref(self)
        self._started = True

    async def stop(self) -> None:
        """Graceful: stop claiming, let in-flight webhooks finish, release the rest."""
        if not self._started:
            return
        if self._loop is not None and not self._loop.is_closed():
            # From a loop that has ended (asyncio.run() returned without a stop()), this
            # still closes what can be closed; from another running loop it cannot.
            self._check_loop(asyncio.get_running_loop())
        self._started = False
        self._stopped = True
        if self.metrics.serving is not None and self.metrics.serving() is self:
            self.metrics.serving = None
        try:
            for background in (self._key_watcher, self._janitor):
                if background is not None:
                    background.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await background
            self._key_watcher = self._janitor = None
            await self.dispatcher.stop()
            await self.events.stop()  # after the dispatcher: its last events are queued too
        finally:
            try:
                if self._owns_transport:
                    await self.transport.close()
            finally:
                await self.store.close()

    async def purge_old_deliveries(self, now: float | None = None) -> int:
        """Delete delivered and dead deliveries older than the retention; returns how many."""
        now = time.time() if now is None else now
        total = 0
        # In small batches, each its own transaction, so publishes are never held up long.
        for state, keep in (
            (DeliveryState.DELIVERED, self.retention.delivered),
            (DeliveryState.DEAD, self.retention.dead),
        ):
            if keep is not None:
                purge = functools.partial(self.store.purge, state, updated_before=now - keep)
                total += await _in_batches(purge, 1000)
        # The same for idempotency keys (one per publish that gave one)...
        cutoff = now - self.retention.idempotency_keys
        await _in_batches(
            functools.partial(self.store.purge_idempotency_keys, created_before=cutoff), 1000
        )
        # ...and for the configs of tasks finished long ago, 100 at a time: on
        # PostgreSQL each holds an advisory lock per task.
        if self.retention.final_tasks is not None:
            final_before = now - self.retention.final_tasks
            tasks = await _in_batches(
                functools.partial(self.store.purge_final_tasks, final_before=final_before), 100
            )
            if tasks:
                log.info("retention: deleted the push configs of %d finished tasks", tasks)
        return total

    async def _purge_old(self) -> None:
        while True:
            try:
                purged = await self.purge_old_deliveries()
                if purged:
                    log.info("retention: purged %d old deliveries", purged)
            except StoreUnavailableError as exc:
                # An outage: one line per try, not a traceback every interval.
                log.warning("purging old deliveries failed (%s); will try again", exc)
            except Exception:
                log.exception("purging old deliveries failed; will try again")
            await asyncio.sleep(self.retention.interval)

    async def _watch_keys(self) -> None:
        """Sign with keys rotated by another process (``a2a-push keys rotate``)."""
        while True:
            await asyncio.sleep(self._key_reload_interval)
            self._reload_keys()
            self.note_key_changes()

    def _require_started(self) -> None:
        if not self._started and self._stopped:
            raise NotifierNotStartedError(
                "the PushNotifier is stopped (or stopping): a stopped notifier cannot be "
                "started again, so make a new one; publish before stop() is called"
            )
        if not self._started:
            raise NotifierNotStartedError(
                "the PushNotifier is not started: run it in `async with notifier:` or call "
                "`await notifier.start()` first (and `await notifier.stop()` at shutdown; "
                "in aiohttp, from a cleanup_ctx)"
            )
        self._check_loop(asyncio.get_running_loop())

    def _check_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """A started notifier is used only from the event loop it was started in: its
        store, dispatcher and connection pool belong to that loop."""
        started_in = self._loop
        if started_in is None or started_in is loop:
            return
        if started_in.is_closed():
            raise NotifierNotStartedError(
                "the PushNotifier was started in an event loop that has ended (an earlier "
                "asyncio.run()?) and was not stopped: a notifier serves the one loop it "
                "was started in, so make one per loop, and stop it before its loop ends "
                "(`async with notifier:` does); `await notifier.stop()` here still closes it"
            )
        raise NotifierNotStartedError(
            "the PushNotifier was started in another event loop, which is still running: "
            "use it from that loop (from another thread: "
            "asyncio.run_coroutine_threadsafe(notifier.publish(...), that_loop)), or give "
            "this loop a notifier of its own"
        )

    async def __aenter__(self) -> PushNotifier:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- publishing ---------------------------------------------------------------------

    async def publish(
        self,
        task_id: str,
        event: PushNotificationEvent | StreamResponse,
        *,
        task: Task | None = None,
        idempotency_key: str | None = None,
    ) -> PublishResult:
        """Queue ``event`` for every config of the task; durable when it returns.

        ``task``: the task's current snapshot, used for configs registered through v0.3
        (whose webhooks carry the whole task). A task with no configs costs one lookup.
        ``idempotency_key``: a publish repeated with the same key (within
        ``Retention.idempotency_keys``) for the same task queues nothing and returns the
        first result, whatever its event: a key names one event, for retrying its
        publish (keys are scoped to the task: another task may use the same key).
        """
        if not isinstance(task_id, str) or not task_id:
            raise TypeError(f"publish(): task_id must be a non-empty str, not {task_id!r}")
        if isinstance(event, StreamResponse):
            inner = event.event
            if not isinstance(inner, Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
                raise TypeError("publish() takes a task, status update or artifact update")
            event = inner
        if not isinstance(event, Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
            raise TypeError(
                "publish(task_id, event): event must be a Task, TaskStatusUpdateEvent, "
                f"TaskArtifactUpdateEvent or StreamResponse, not {type(event).__name__}"
                + _from_json_hint(event)
            )
        if task is not None and (not isinstance(task, Task) or task.id != task_id):
            raise ValueError(f"publish(): task= must be the Task {task_id!r} (its snapshot)")
        if is_operator_task(task_id):
            raise ValueError(f"publish(): the task id {OPERATOR_TASK!r} is reserved (events)")
        self._require_started()
        event_task_id = event.id if isinstance(event, Task) else event.task_id
        if event_task_id != task_id:
            raise ValueError(f"publish(): the event is for task {event_task_id!r}, not {task_id!r}")
        kind = _kind_of(event)
        started = time.perf_counter()
        new_id: Callable[[], str] = new_delivery_id
        minted: set[str] = set()
        if idempotency_key is not None:
            # Ids made by this call: a repeat returns the first call's, and is not counted.
            def new_id() -> str:
                made = new_delivery_id()
                minted.add(made)
                return made

        with tracing.publish_span(task_id, kind) as traceparent:
            seq, ids = await self.store.enqueue(
                task_id,
                kind,
                self._renderer(event, task),
                new_id=new_id,
                # Scoped to the task: the same key for another task is another event.
                idempotency_key=None
                if idempotency_key is None
                else _task_scoped_key(task_id, idempotency_key),
                # Held for Retention.idempotency_keys, whether or not the purge has run.
                idempotency_since=None
                if idempotency_key is None
                else time.time() - self.retention.idempotency_keys,
                final=_is_final(event),
                traceparent=traceparent,
            )
            if traceparent is not None:
                tracing.annotate(**{"a2a_push.seq": seq, "a2a_push.deliveries": len(ids)})
        self.metrics.publish_latency.observe(time.perf_counter() - started)
        if idempotency_key is not None and ids and not minted.intersection(ids):
            return PublishResult(seq, ids)  # a repeat: nothing was queued
        self.metrics.child(self.metrics.events_published, kind).inc()
        if ids:
            self.metrics.deliveries_enqueued.inc(len(ids))
            self.dispatcher.wake()
        return PublishResult(seq, ids)

    def _renderer(self, event: PushNotificationEvent, task: Task | None) -> Callable[[str], bytes]:
        return body_renderer(event, task, self.max_payload_bytes)

    # ---- configs --------------------------------------------------------------------------

    async def register_config(
        self,
        config: TaskPushNotificationConfig,
        *,
        owner: str,
        task_id: str | None = None,
        protocol_version: str = VERSION_1_0,
        task: Task | None = None,
    ) -> StoredConfig:
        """Validate and store a config, with a task snapshot queued as its first webhook.

        The snapshot is ``task``, else what ``task_provider`` returns (asked before the
        config is stored); with neither, nothing is queued until the next publish. The
        config and its snapshot are stored in one transaction, so a concurrent publish of
        the task is ordered entirely before it (and never reaches this config) or after
        it (with a higher seq): the config's first webhook is always the snapshot.

        Raises ``InvalidConfigError`` (with ``.field``) for a bad URL, an address the SSRF
        policy refuses, a task over its config cap, or a config id registered before
        through another protocol version; then nothing is stored or queued.
        """
        if not isinstance(config, TaskPushNotificationConfig):
            raise TypeError(
                "register_config(config): config must be a TaskPushNotificationConfig, not "
                f"{type(config).__name__}" + _from_json_hint(config)
            )
        if not isinstance(owner, str) or not owner:
            raise TypeError(
                f"register_config(): owner must be a non-empty str (whose config it is), "
                f"not {owner!r}"
            )
        if task_id is not None and not isinstance(task_id, str):
            raise TypeError(f"register_config(): task_id must be a str, not {task_id!r}")
        self._require_started()
        checked = await self.check_config(
            config, task_id=task_id, protocol_version=protocol_version
        )
        return await self.register_checked(checked, owner=owner, task=task)

    async def register_checked(
        self, checked: CheckedConfig, *, owner: str, task: Task | None = None
    ) -> StoredConfig:
        """:meth:`register_config` for a config :meth:`check_config` has passed: a server
        that must check a config before something else it does for it (claiming the
        task, say) checks it once, resolving its host once."""
        self._require_started()
        config, target_task = checked.config, checked.task_id
        protocol_version = checked.protocol_version
        snapshot = task
        if snapshot is None and self.task_provider is not None:
            snapshot = await self.task_provider(target_task)
        if snapshot is not None and (not isinstance(snapshot, Task) or snapshot.id != target_task):
            # Never send one task's data to another task's subscriber.
            source = "task=" if task is not None else "task_provider"
            raise ValueError(
                f"register_config(): the snapshot from {source} is not the Task "
                f"{target_task!r} (got {getattr(snapshot, 'id', type(snapshot).__name__)!r})"
            )
        initial = (
            InitialDelivery(
                "task",
                self._renderer(snapshot, snapshot),
                new_delivery_id,
                final=_is_final(snapshot),
            )
            if snapshot is not None
            else None
        )
        auth = config.authentication
        stored = await self.store.put_config(
            StoredConfig(
                key=new_key(),
                id=config.id or new_config_id(),
                task_id=target_task,
                owner=owner,
                url=config.url,
                token=config.token,
                auth_scheme=auth.scheme if auth else None,
                auth_credentials=auth.credentials if auth else None,
                tenant=config.tenant,
                protocol_version=protocol_version,
                created_at=time.time(),
            ),
            initial=initial,
        )
        if initial is not None and stored.enabled:
            self.metrics.deliveries_enqueued.inc()  # the snapshot, as send_snapshot counts it
            self.dispatcher.wake()
        if task is None and snapshot is not None and self.task_provider is not None:
            provider = self.task_provider
            await self.catch_up(stored, snapshot, lambda: provider(target_task))
        return stored

    async def check_config(
        self,
        config: TaskPushNotificationConfig,
        *,
        task_id: str | None = None,
        protocol_version: str = VERSION_1_0,
    ) -> CheckedConfig:
        """Check ``config`` as :meth:`register_config` does (task id, URL and SSRF policy,
        a ``whsec_`` token), storing nothing; what :meth:`register_checked` stores. Raises
        ``InvalidConfigError`` (with ``.field``). A server calls it before anything it does
        for the config (claiming the task, say), so a refused config leaves nothing behind."""
        target_task = task_id or config.task_id
        if not target_task:
            raise InvalidConfigError("taskId", "a push notification config needs a task id")
        if config.task_id and task_id and config.task_id != task_id:
            raise InvalidConfigError("taskId", "does not match the task in the request")
        problem = id_problem(target_task)  # (config.task_id was checked by the model)
        if problem is not None:
            raise InvalidConfigError("taskId", problem)
        if is_operator_task(target_task):
            raise InvalidConfigError("taskId", "is reserved for a2a-push's operational events")
        if protocol_version not in (VERSION_1_0, VERSION_0_3):
            raise InvalidConfigError("protocolVersion", f"unsupported: {protocol_version!r}")
        self.address_policy.validate_url(config.url)
        stdwh.check_secret(config.token)
        if self.resolve_on_register:
            await self.address_policy.check_url(config.url)
        return CheckedConfig(config, target_task, protocol_version)

    async def catch_up(
        self,
        config: StoredConfig,
        snapshot: Task | None,
        read: Callable[[], Awaitable[Task | None]],
        *,
        rounds: int = 3,
    ) -> None:
        """After registering ``config`` with ``snapshot`` (read before it was stored;
        None: no snapshot was queued): send it the task as ``read()`` finds it now, if
        that differs, and again until a read after the last send matches what was sent.

        A publish that landed between the snapshot's read and the config being stored
        was not fanned out to the config (it did not exist yet). An agent records a
        task's state before publishing it, so a read after a send that matches what was
        sent means every later publish is queued after that send: the config ends on the
        task's latest state. Best effort: the config is stored whatever happens here
        (a failure is logged; the task's next event reaches the config anyway).
        """
        sent = snapshot
        try:
            for _ in range(rounds):
                now = await read()
                if now is None or now == sent:
                    return
                await self.send_snapshot(config, now)
                sent = now
        except Exception as exc:
            log.warning(
                "config %s of task %s: catching up with the task failed (%s); it gets the "
                "task's next event",
                config.id,
                config.task_id,
                exc,
            )

    async def send_snapshot(self, config: StoredConfig, task: Task) -> list[str]:
        """Queue ``task`` as a ``task`` webhook to ``config`` alone (after the task's
        queued events, with the next seq); the delivery ids."""
        if not isinstance(task, Task) or task.id != config.task_id:
            got = task.id if isinstance(task, Task) else type(task).__name__
            raise ValueError(f"send_snapshot(): the task is {got!r}, not {config.task_id!r}")
        self._require_started()
        _, ids = await self.store.enqueue(
            task.id,
            "task",
            self._renderer(task, task),
            new_id=new_delivery_id,
            only_config_key=config.key,
            final=_is_final(task),
        )
        if ids:
            self.metrics.deliveries_enqueued.inc(len(ids))
            self.dispatcher.wake()
        return ids

    async def get_config(self, task_id: str, config_id: str, owner: str) -> StoredConfig | None:
        self._require_started()
        return await self.store.get_config(task_id, config_id, owner)

    async def list_configs(
        self, task_id: str, owner: str, *, page_size: int = 100, page_token: str | None = None
    ) -> tuple[list[StoredConfig], str | None]:
        self._require_started()
        return await self.store.list_configs(
            task_id, owner, page_size=page_size, page_token=page_token
        )

    async def delete_config(self, task_id: str, config_id: str, owner: str) -> bool:
        self._require_started()
        return await self.store.delete_config(task_id, config_id, owner)

    # ---- operations -----------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        """The public keys receivers verify our JWTs with (serve at /.well-known/jwks.json).

        With key reloading on (``key_reload_interval`` > 0), read afresh from the key
        folder when another process rotated the keys, at most once a second and never
        waiting for the folder's lock: a process that already picked up a new key signs
        with it, and a receiver fetching the set from this one must find it."""
        if self._key_reload_interval > 0:
            now = time.monotonic()
            if now - self._jwks_checked_at >= 1.0:
                self._jwks_checked_at = now
                self._reload_keys(wait=False)
        self.note_key_changes()
        return self.keyset.jwks()

    def _reload_keys(self, *, wait: bool = True) -> None:
        """Adopt keys another process rotated in; a failure is logged once per cause (a
        corrupt keys.json would otherwise log at every JWKS request), and the set in
        memory stays in use."""
        try:
            if self.keyset.reload(wait=wait):
                log.info("signing keys reloaded; active kid %s", self.keyset.active.kid)
            self._key_reload_failure = None
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}"
            if cause != self._key_reload_failure:
                self._key_reload_failure = cause
                log.exception("reloading the signing keys failed; still using the old set")

    def note_key_changes(self) -> None:
        """Emit ``key.rotated`` and ``key.retired`` for what changed in the key set since
        the last look (a rotation here, or one another process made and a reload
        adopted)."""
        now = _key_state(self.keyset)
        before, self._keys_seen = self._keys_seen, now
        if now != before and self._started:
            self.events.keys_changed(before, now)

    def on_event(self, callback: EventCallback) -> Callable[[], None]:
        """Call ``callback(event)`` with each operational event (an
        :class:`~a2a_push.events.OperationalEvent`; docs/events.md), on the event loop,
        as it happens; an async callback is awaited in a task of its own. A callback
        that raises is logged; delivery goes on. Returns a function that unregisters it."""
        return self.events.on_event(callback)

    def recent_events(self) -> list[OperationalEvent]:
        """The latest operational events this notifier emitted (in memory), oldest first."""
        return list(self.events.recent)

    async def dead_letters(self, *, task_id: str | None = None, limit: int = 100) -> list[Delivery]:
        self._require_started()
        return await self.store.list_deliveries(
            DeliveryFilter(state=DeliveryState.DEAD, task_id=task_id, limit=limit)
        )

    async def wait_settled(
        self, delivery_ids: Sequence[str], *, timeout: float = 30.0
    ) -> list[Delivery]:
        """Wait until each of ``delivery_ids`` (e.g. ``PublishResult.delivery_ids``) is
        delivered or dead-lettered, and return them in that order: for a script that
        publishes and exits, or a test. Retries happen meanwhile, on their schedule.

        Raises ``TimeoutError`` after ``timeout`` seconds, naming the deliveries still
        pending and their last error; ``KeyError`` for an id the outbox does not hold.
        """
        self._require_started()
        deadline = time.monotonic() + timeout
        pause = 0.01
        while True:
            found = [await self.store.get_delivery(delivery_id) for delivery_id in delivery_ids]
            missing = [d_id for d_id, got in zip(delivery_ids, found, strict=True) if got is None]
            if missing:
                raise KeyError(f"wait_settled(): no delivery {missing[0]!r} in the outbox")
            settled = [got for got in found if got is not None]
            pending = [got for got in settled if got.state is DeliveryState.PENDING]
            if not pending:
                return settled
            if time.monotonic() >= deadline:
                first = pending[0]
                why = first.last_error or (
                    f"HTTP {first.last_status}" if first.last_status else "not attempted yet"
                )
                raise TimeoutError(
                    f"wait_settled(): {len(pending)} of {len(settled)} deliveries still "
                    f"pending after {timeout:g} s; {first.id}: {first.attempts} attempts, "
                    f"last: {why}"
                )
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.25)

    async def replay(self, delivery_ids: Sequence[str]) -> int:
        """Send dead-lettered deliveries again (their configs must still be enabled)."""
        self._require_started()
        count = await self.store.replay(delivery_ids)
        if count:
            self.dispatcher.wake()
        return count

    def add_console(
        self,
        app: web.Application,
        *,
        admin_keys: Sequence[str],
        prefix: str = "/console",
        session_seconds: float | None = None,
        secure_cookies: bool | None = None,
    ) -> Console:
        """Serve the delivery console (docs/console.md) on ``app`` under ``prefix``:
        operators sign in with one of ``admin_keys`` (at least 16 characters each; with
        none, the console answers that it is off). ``secure_cookies``: None makes the
        session cookie Secure when the request came over https; pass True behind a proxy
        that terminates TLS."""
        keys = list(admin_keys)
        short = [k for k in keys if not isinstance(k, str) or len(k) < MIN_ADMIN_KEY_LENGTH]
        if short:
            raise ValueError(
                f"add_console(admin_keys=...): each key must be a str of at least "
                f"{MIN_ADMIN_KEY_LENGTH} characters"
            )
        console = Console(
            ConsoleSource.of_notifier(self),
            keys,
            session_seconds=session_seconds,
            secure_cookies=secure_cookies,
        )
        console.add_routes(app, prefix)
        return console

    def add_routes(
        self, app: web.Application, *, metrics_path: str | None = "/metrics", jwks: bool = True
    ) -> None:
        """Mount ``GET /.well-known/jwks.json`` (unless ``jwks`` is False) and (unless None)
        ``GET metrics_path``."""

        async def jwks_route(request: web.Request) -> web.Response:
            return web.json_response(self.jwks(), headers={"Cache-Control": "max-age=300"})

        if jwks:
            if serves_get(app, JWKS_PATH):
                raise ValueError(
                    f"notifier.add_routes(): this app already serves GET {JWKS_PATH} "
                    "(a2a_push.server.mount adds it): pass jwks=False here, or "
                    "mount(app, service, jwks=False)"
                )
            app.router.add_get(JWKS_PATH, jwks_route)
        if metrics_path is not None:
            add_metrics_route(app, self.metrics, metrics_path, before_scrape=self.refresh_metrics)

    async def refresh_metrics(self) -> None:
        """Update the queue gauges from the store (call before a scrape, or periodically).
        A notifier not running keeps the last values."""
        if not self._started:
            return
        stats = await self.store.stats(count_delivered=False)
        m = self.metrics
        m.queue_depth.set(stats.pending)
        m.queue_due.set(stats.due)
        m.dead_letters.set(stats.dead)
        oldest = stats.oldest_pending_created_at
        m.oldest_pending_age.set(max(0.0, time.time() - oldest) if oldest else 0.0)
        counts: dict[str, int] = {"open": 0, "half_open": 0}
        for state in self.dispatcher.health.states().values():
            if state.value in counts:
                counts[state.value] += 1
        for state_name, n in counts.items():
            m.breakers.labels(state_name).set(n)
        trips = self.store.round_trips
        if trips > self._round_trips_counted:
            m.store_round_trips.inc(trips - self._round_trips_counted)
        self._round_trips_counted = trips
        fsyncs, base = self.store.fsync_counts(), self._fsyncs_counted
        m.store_fsyncs.inc(max(0, fsyncs.count - base.count))
        m.store_fsync_seconds.inc(max(0.0, fsyncs.seconds - base.seconds))
        m.store_slow_fsyncs.inc(max(0, fsyncs.slow - base.slow))
        self._fsyncs_counted = fsyncs


@dataclass(frozen=True, slots=True)
class CheckedConfig:
    """A config :meth:`PushNotifier.check_config` passed, for the task it is for."""

    config: TaskPushNotificationConfig
    task_id: str
    protocol_version: str


def _task_scoped_key(task_id: str, key: str) -> str:
    """The outbox's idempotency key for ``key`` on ``task_id``: a hash of an unambiguous
    encoding of both (any text; fixed length in the database)."""
    scope = json.dumps([task_id, key], ensure_ascii=True)
    return "k1:" + hashlib.sha256(scope.encode("ascii")).hexdigest()


def _check_arguments(
    *,
    issuer: object,
    keyset: object,
    address_policy: object,
    timeouts: object,
    retry: object,
    dispatcher: object,
    health: object,
    metrics: object,
    transport: object,
    retention: object,
    max_payload_bytes: object,
    task_provider: object,
    key_reload_interval: object,
) -> None:
    """Wrong types fail here, naming the argument, rather than deep inside a later call."""
    if not isinstance(issuer, str) or not issuer:
        raise TypeError(
            "PushNotifier(): issuer must be a non-empty str (your agent's public base URL, "
            f"the JWT 'iss'), not {issuer!r}"
        )
    expected: tuple[tuple[str, object, type, str], ...] = (
        ("keyset", keyset, KeySet, "KeySet.load_or_create(directory)"),
        ("address_policy", address_policy, AddressPolicy, "AddressPolicy(allow=[...])"),
        ("timeouts", timeouts, Timeouts, "Timeouts(connect=5, total=15)"),
        ("retry", retry, RetryPolicy, "RetryPolicy(...)"),
        ("dispatcher", dispatcher, DispatcherOptions, "DispatcherOptions(...)"),
        ("health", health, EndpointHealth, "EndpointHealth(...)"),
        ("metrics", metrics, Metrics, "Metrics(registry=...)"),
        ("transport", transport, Transport, "Transport(policy, timeouts)"),
        ("retention", retention, Retention, "Retention(...)"),
    )
    for name, value, kind, example in expected:
        if value is not None and not isinstance(value, kind):
            raise TypeError(
                f"PushNotifier(): {name} must be {_article(kind.__name__)} {kind.__name__}, "
                f"e.g. {example}, not {type(value).__name__}"
            )
    if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int):
        raise TypeError(
            f"PushNotifier(): max_payload_bytes must be an int, not {max_payload_bytes!r}"
        )
    if max_payload_bytes < 1:
        raise ValueError(
            f"PushNotifier(): max_payload_bytes must be positive, not {max_payload_bytes}"
        )
    if task_provider is not None and not callable(task_provider):
        raise TypeError(
            "PushNotifier(): task_provider must be an async function (task_id) -> Task | None"
        )
    if isinstance(key_reload_interval, bool) or not isinstance(key_reload_interval, int | float):
        raise TypeError(
            "PushNotifier(): key_reload_interval must be a number of seconds (0: off), not "
            f"{key_reload_interval!r}"
        )
    if not key_reload_interval >= 0:
        raise ValueError("PushNotifier(): key_reload_interval must be 0 (off) or positive")


def _check_operator(policy: AddressPolicy, url: object, token: object) -> str | None:
    """The operator URL, checked with its token as check_config checks a push config's
    (the URL's syntax and SSRF policy, a ``whsec_`` token's secret)."""
    if url is None:
        if token is not None:
            raise ValueError("PushNotifier(): operator_token= needs an operator_url=")
        return None
    if not isinstance(url, str) or not url:
        raise TypeError(f"PushNotifier(): operator_url must be a URL (str), not {url!r}")
    if token is not None and (not isinstance(token, str) or not token):
        raise TypeError("PushNotifier(): operator_token must be a non-empty str")
    try:
        policy.validate_url(url, "operator_url")
        stdwh.check_secret(token)
    except InvalidConfigError as exc:
        what = "operator_token" if exc.field == "token" else "operator_url"
        raise ValueError(f"PushNotifier(): {what}: {exc.message}") from None
    return url


def _key_state(keyset: KeySet) -> tuple[str, dict[str, str]]:
    """The active kid, and every kid held with its algorithm (see note_key_changes)."""
    return keyset.active.kid, {key.kid: key.alg for key in keyset.keys}


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _check_lease(options: DispatcherOptions, retry: RetryPolicy, timeouts: Timeouts) -> None:
    """A claim must end before its lease does, or the lane could be claimed twice."""
    longest = longest_claim(
        lease_seconds=options.lease_seconds,
        quick_attempts=retry.quick_attempts,
        total_timeout=timeouts.total,
        quick_pause=retry.quick_retry_after_max,
    )
    if options.lease_seconds <= longest:
        raise ValueError(
            f"DispatcherOptions.lease_seconds ({options.lease_seconds:g} s) must be longer "
            f"than one claim can take ({longest:g} s: quick_attempts x (Timeouts.total + "
            "quick_retry_after_max) + lease_seconds / 4); raise lease_seconds"
        )


# ---- helpers ------------------------------------------------------------------------------


async def _in_batches(purge: Callable[..., Awaitable[int]], batch: int) -> int:
    """Call ``purge(limit=batch)`` until it deletes fewer than ``batch``; the total."""
    total = 0
    while True:
        n = await purge(limit=batch)
        total += n
        if n < batch:
            return total


def _is_final(event: PushNotificationEvent) -> bool:
    """Whether ``event`` puts its task in a terminal state (no event may follow)."""
    if isinstance(event, Task | TaskStatusUpdateEvent):
        return event.status.state.is_terminal
    return False


def _kind_of(event: PushNotificationEvent) -> str:
    if isinstance(event, Task):
        return "task"
    if isinstance(event, TaskStatusUpdateEvent):
        return "statusUpdate"
    return "artifactUpdate"


def _from_json_hint(value: object) -> str:
    if isinstance(value, dict):
        return " (a dict: build the model with Model.model_validate(data))"
    if isinstance(value, str | bytes):
        return " (JSON text: build the model with Model.model_validate_json(text))"
    return ""


def serves_get(app: web.Application, path: str) -> bool:
    """Whether ``app`` has a ``GET`` route for exactly ``path``."""
    return any(
        route.method == "GET" and route.resource is not None and route.resource.canonical == path
        for route in app.router.routes()
    )
