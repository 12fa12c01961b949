"""The receiver's core: webhooks, subscriptions, fetching, snapshots, client events.

``Receiver`` is embeddable (``await receiver.handle_webhook(...)``,
``receiver.on_update(callback)``); :func:`receiver.api.create_app` wraps it in an
aiohttp application; ``python -m receiver`` / ``a2a-push receiver`` run that.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import hmac
import inspect
import json
import logging
import math
import os
import secrets
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from a2a_push import tracing
from a2a_push.errors import A2APushError, StoreUnavailableError
from a2a_push.httputil import read_at_most
from a2a_push.protocol.constants import A2A_MEDIA_TYPE, HEADER_WEBHOOK_SIGNATURE
from a2a_push.protocol.types import TaskState
from a2a_push.server.app import PUSH_SIGNING_EXTENSION_URIS
from a2a_push.store import is_postgres_url

from .agent_client import AgentCallError, AgentClient, shown_url
from .fetcher import TaskFetcher
from .metrics import ReceiverMetrics
from .settings import AgentSettings, ReceiverSettings, check_database
from .sqlite_store import SQLiteReceiverStore
from .store import (
    Notification,
    ReceiverStore,
    Subscription,
    SubscriptionState,
    TaskEvent,
)
from .verify import (
    ISSUER_HINT,
    MAX_ID_LENGTH,
    MAX_JWKS_BYTES,
    AuthMethod,
    JWKSCache,
    VerifiedWebhook,
    VerifyPolicy,
    WebhookRejected,
    WebhookVerifier,
    check_token,
    is_valid_id,
    issuer_fix,
    parse_json,
    presented_jwt,
    presented_token,
    token_digest,
    unverified_claims,
)

log = logging.getLogger(__name__)

JSON_TYPES: Final = frozenset({A2A_MEDIA_TYPE, "application/json"})
AGENT_CARD_PATH: Final = "/.well-known/agent-card.json"
"""Where an agent publishes its card, below its origin."""
API_KEYS_FILE: Final = "api-keys.json"
_EVENTS_PAGE: Final = 500  # events read from the store at once for a client's stream
BODY_HASH_RETENTION_SECONDS: Final = 3600.0
_CREATE_MARGIN_SECONDS: Final = 10.0
_V03_KINDS: Final = {
    "task": "task",
    "status-update": "statusUpdate",
    "artifact-update": "artifactUpdate",
}
# StreamResponse members by their JSON names, camelCase and ProtoJSON's snake_case.
_STREAM_KINDS: Final = {
    "task": "task",
    "statusUpdate": "statusUpdate",
    "status_update": "statusUpdate",
    "artifactUpdate": "artifactUpdate",
    "artifact_update": "artifactUpdate",
    "message": "message",
}

UpdateCallback = Callable[[TaskEvent], Awaitable[None] | None]


class ClientError(Exception):
    """A client API request was refused: HTTP ``status`` with a JSON error body."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


def error_body(reason: str, message: str) -> dict[str, Any]:
    return {"error": reason, "message": message}


STORE_RETRY_AFTER: Final = 2  # seconds a 503 for a store outage asks callers to wait


def unavailable_body() -> dict[str, Any]:
    # The cause (a host, a driver message) is for the operator's log, not for callers.
    return error_body(
        "unavailable", "the receiver's database is unavailable; nothing was changed; retry shortly"
    )


def unavailable_cause(exc: StoreUnavailableError) -> str:
    return f"the receiver's database is unavailable ({exc})"


class _RateLimiter:
    """A token bucket per agent: ``rate`` webhooks/s with a burst of one second's worth
    (at least one webhook, so a rate below 1/s still lets one through now and then)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self._buckets: dict[str, tuple[float, float]] = {}

    def wait(self, key: str) -> float:
        """0 when a webhook may pass now (and takes its token); else seconds to wait."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate
        self._buckets[key] = (tokens - 1, now)
        return 0.0


_URGENT_STATES: Final = frozenset(
    name
    for state in TaskState
    if state.is_terminal or state.is_interrupted
    for name in (state.value, state.value.removeprefix("TASK_STATE_").lower().replace("_", "-"))
)


def _is_urgent(payload: Mapping[str, Any]) -> bool:
    """Whether the event ends the task or waits for the user: fetch it without delay."""
    status = payload.get("status")
    return isinstance(status, dict) and status.get("state") in _URGENT_STATES


_MAX_LOGGED_ISSUER: Final = 200
_MAX_WARNED_ISSUERS: Final = 100


def _shown_issuer(issuer: object) -> str:
    """An unverified JWT ``iss`` as logged: repr'd (quoted, with line breaks and other
    control characters escaped: one log line whatever it holds) and cut."""
    if not isinstance(issuer, str):
        return "(none)" if issuer is None else f"(not a string: {type(issuer).__name__})"
    if len(issuer) > _MAX_LOGGED_ISSUER:
        return f"{issuer[:_MAX_LOGGED_ISSUER]!r}... ({len(issuer)} characters)"
    return repr(issuer)


def _body_task(body: bytes) -> tuple[str, str, bool]:
    """(kind, task id, urgent) of a webhook body: a StreamResponse or a bare v0.3 Task."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise WebhookRejected(400, "malformed", "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise WebhookRejected(400, "malformed", "the body is not a JSON object")
    variants = [name for name in _STREAM_KINDS if name in data]
    if len(variants) > 1:
        raise WebhookRejected(400, "malformed", "a StreamResponse has exactly one payload")
    if variants:
        kind = _STREAM_KINDS[variants[0]]
        payload = data[variants[0]]
        if not isinstance(payload, dict):
            raise WebhookRejected(400, "malformed", f"{variants[0]} is not an object")
    else:
        v03_kind = data.get("kind")
        if not isinstance(v03_kind, str) or v03_kind not in _V03_KINDS:
            raise WebhookRejected(
                400, "malformed", "the body is neither a StreamResponse nor a v0.3 Task"
            )
        kind, payload = _V03_KINDS[v03_kind], data
    task_id = payload.get("id") if kind == "task" else payload.get("taskId", payload.get("task_id"))
    # Printable: the id is a storage key, and lone surrogates cannot even be encoded.
    if not is_valid_id(task_id):
        raise WebhookRejected(400, "malformed", "the payload names no valid task id")
    return kind, task_id, _is_urgent(payload)


class _SubscriptionLookup:
    """Subscriptions by id for one webhook: the steps that need one (which agent of a
    shared issuer, whether it is subscribed, which subscription) read each once."""

    __slots__ = ("_found", "_store")

    def __init__(self, store: ReceiverStore) -> None:
        self._store = store
        self._found: dict[str, Subscription | None] = {}

    async def by_id(self, subscription_id: str) -> Subscription | None:
        if subscription_id not in self._found:
            self._found[subscription_id] = await self._store.get_subscription(subscription_id)
        return self._found[subscription_id]


class Receiver:
    """Verifies webhooks, keeps subscriptions, fetches and stores tasks, tells clients."""

    def __init__(
        self,
        settings: ReceiverSettings,
        *,
        store: ReceiverStore | None = None,
        metrics: ReceiverMetrics | None = None,
        warn_default_keys: bool = True,
    ) -> None:
        """``warn_default_keys=False``: do not log that the generated API keys are used
        (workers: their supervisor said so once)."""
        self.settings = settings
        self._warn_default_keys = warn_default_keys
        self.store: ReceiverStore = store or open_receiver_store(settings)
        self.metrics = metrics or ReceiverMetrics()
        self._session: aiohttp.ClientSession | None = None
        self._verifiers: dict[str, WebhookVerifier] = {}
        self._clients: dict[str, AgentClient] = {}
        # Several agents may share an issuer (e.g. agents at paths of one host, or behind
        # one gateway): each issuer keeps every agent that accepts it, those whose own
        # URL it is first.
        self._by_issuer: dict[str, list[AgentSettings]] = {}
        # Only agents that accept JWTs: the issuer is how a JWT names its agent.
        for agent in sorted(settings.agents, key=lambda a: len(a.issuers)):
            if AuthMethod.JWT in agent.methods:
                for issuer in agent.issuers:
                    self._by_issuer.setdefault(issuer, []).append(agent)
        for issuer, agents in self._by_issuer.items():
            agents.sort(key=lambda a: a.key != issuer.rstrip("/"))
        self._api_keys: dict[str, str] = {}  # key digest -> client id
        self._callbacks: list[UpdateCallback] = []
        self._new_event = asyncio.Event()
        self._limiter = _RateLimiter(settings.webhook_rate_limit)
        # Unknown JWT issuers already warned about: each is a WARNING once, later
        # requests naming it are DEBUG (anyone can send them; they must not flood the log).
        self._warned_issuers: set[str] = set()
        self.fetcher: TaskFetcher | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.streams = 0  # open client_events streams (GET /events)
        self._streams_waiting = False  # a stream found the store unavailable (logged)
        # Subscriptions being created by this process, by (client, agent, task): a
        # concurrent duplicate waits for the outcome. (One in flight in another process
        # is a young row the store does not mark confirmed yet.)
        self._creating: dict[tuple[str, str, str], asyncio.Future[Subscription]] = {}

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            # Nothing half-started may outlive a failed start (an unclosed HTTP session,
            # an open store, background tasks).
            with contextlib.suppress(Exception):
                await self.stop()
            raise

    async def _start(self) -> None:
        self.store.set_event_listener(self._wake_streams)
        await self.store.open()
        self._load_api_keys()
        self._session = aiohttp.ClientSession()
        for agent in self.settings.agents:
            self._clients[agent.key] = AgentClient(
                agent, self._session, timeout=self.settings.fetch_timeout
            )
            jwks = None
            if AuthMethod.JWT in agent.methods:
                jwks = JWKSCache(
                    agent.jwks_url or agent.origin + "/.well-known/jwks.json",
                    session=self._session,
                    locate=None if agent.jwks_url else functools.partial(self._card_jwks, agent),
                )
                if agent.jwks_url is None:
                    self._spawn(jwks.locate())
            self._verifiers[agent.key] = WebhookVerifier(
                VerifyPolicy(
                    methods=agent.methods,
                    audience=self.settings.webhook_url,
                    algorithms=agent.algorithms,
                    freshness_seconds=self.settings.freshness_seconds,
                    standard_webhooks_secrets=tuple(
                        s.get_secret_value() for s in agent.standard_webhooks_secrets
                    ),
                ),
                jwks,
            )
        self.fetcher = TaskFetcher(
            self.store,
            self._clients,
            on_snapshot=self._announce,
            metrics=self.metrics,
            concurrency=self.settings.fetch_concurrency,
            attempts=self.settings.fetch_attempts,
            coalesce=self.settings.fetch_coalesce_seconds,
            min_interval=self.settings.fetch_min_interval_seconds,
            give_up_after=self.settings.retention_days * 86400,
        )
        await self.fetcher.start()
        self._maintenance = asyncio.create_task(self._maintain(), name="receiver-maintenance")
        if isinstance(self.store, SQLiteReceiverStore):
            # Other worker processes on the same file store snapshots too: notice them.
            self._spawn(self._watch_other_writers())

    async def stop(self) -> None:
        self.end_streams()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.fetcher is not None:
            await self.fetcher.stop()
        if self._session is not None:
            await self._session.close()
        await self.store.close()

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _load_api_keys(self) -> None:
        keys = {
            token_digest(k.api_key.get_secret_value()): k.client_id for k in self.settings.api_keys
        }
        if not keys:
            path = self.settings.data_dir / API_KEYS_FILE
            keys = {token_digest(key): client for client, key in _default_keys(path).items()}
            if self._warn_default_keys:
                log.warning("no API keys configured; using the generated ones in %s", path)
        self._api_keys = keys

    async def _card_jwks(self, agent: AgentSettings) -> str | None:
        """The JWKS URL the agent card declares (push-signing extension); None when the
        agent answers without one. Raises (the cache asks again later) when the card
        cannot be read now: the agent is unreachable, overloaded or answers garbage."""
        assert self._session is not None
        return card_jwks_uri(await fetch_agent_card(self._session, agent.origin))

    async def _watch_other_writers(self) -> None:
        seen: int | None = None  # not read yet (a failed first read is tried again)
        while True:
            if seen is not None:
                await asyncio.sleep(0.5)
                if self.streams == 0:
                    continue
            try:
                latest = await self.store.latest_event_id()
            except Exception:
                log.debug("reading the latest event id failed", exc_info=True)
                if seen is None:
                    await asyncio.sleep(0.5)
                continue
            if seen is None:
                seen = latest
            elif latest > seen:
                seen = latest
                self._wake_streams()

    async def _maintain(self) -> None:
        """Purge what is past its retention, every 10 minutes."""
        while True:
            await asyncio.sleep(600)
            try:
                await self.purge()
            except Exception:
                log.exception("receiver purge failed; will try again")

    async def purge(self, *, now: float | None = None) -> int:
        """Drop webhook-id dedup keys older than ``dedup_retention_hours`` (and at least
        four freshness windows); body-hash keys (senders that send no webhook id) after
        an hour (and at least four freshness windows), so an identical body sent again
        later (WORKING, INPUT_REQUIRED, WORKING) is a new notification; and notifications
        (fetched or not), deleted subscriptions, superseded events and unsubscribed tasks
        older than ``retention_days``.

        First, subscriptions to tasks that finished (a terminal state) more than
        ``retention_days`` ago, and made that long ago, end as if unsubscribed: the task
        is no longer the client's (GET /tasks/{id}: 404), and a later purge drops the
        subscription, then the task and its events. Everything in batches, a
        transaction each. How many rows went (or ended)."""
        now = time.time() if now is None else now
        settings = self.settings
        floor = 4 * settings.freshness_seconds
        dedup = max(settings.dedup_retention_hours * 3600, floor)
        retention = now - settings.retention_days * 86400
        ended = await self.store.end_finished_subscriptions(before=retention, now=now)
        if ended:
            log.info("ended %d subscriptions to tasks finished before the retention", ended)
        return ended + await self.store.purge(
            seen_before=now - dedup,
            notifications_before=retention,
            history_before=retention,
            body_hashes_before=now - max(BODY_HASH_RETENTION_SECONDS, floor),
        )

    # ---- callbacks and events --------------------------------------------------------

    def on_update(self, callback: UpdateCallback) -> None:
        """Call ``callback(event)`` (sync or async) for every stored task snapshot."""
        self._callbacks.append(callback)

    def _wake_streams(self) -> None:
        signal, self._new_event = self._new_event, asyncio.Event()
        signal.set()

    async def _announce(self, event: TaskEvent) -> None:
        self.metrics.snapshots.inc()
        self._wake_streams()
        for callback in list(self._callbacks):
            try:
                result = callback(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("an on_update callback failed")

    async def wait_for_event(self, timeout: float) -> None:
        """Return when a new snapshot is stored, or after ``timeout`` seconds."""
        signal = self._new_event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(signal.wait(), timeout)

    @contextlib.asynccontextmanager
    async def client_events(
        self, client_id: str, *, after: int, idle: float
    ) -> AsyncIterator[AsyncIterator[TaskEvent | None]]:
        """An open stream of the client's events with ids past ``after``, in id order,
        as they are stored: each :class:`TaskEvent`, or None after ``idle`` seconds
        without one (every few seconds while the store is unavailable, which the stream
        waits out): the cue to show the connection is alive. It ends when the receiver
        stops or :meth:`end_streams` is called; an error other than a store outage
        ends it by raising. Counted in :attr:`streams` (and the SSE clients gauge)
        while open."""
        events = self._client_events(client_id, after, idle)
        self.metrics.sse_clients.inc()
        self.streams += 1
        try:
            yield events
        finally:
            self.metrics.sse_clients.dec()
            self.streams -= 1
            await events.aclose()

    async def _client_events(
        self, client_id: str, after: int, idle: float
    ) -> AsyncGenerator[TaskEvent | None, None]:
        last = after
        while not self._closing:
            # Taken before reading, so an event stored meanwhile wakes us at once.
            signal = self._new_event
            try:
                batch = await self.store.events_for_client(
                    client_id, after=last, limit=_EVENTS_PAGE
                )
            except StoreUnavailableError as exc:
                # An outage: the stream stays open (keepalives go on) and reads
                # again every few seconds; one line per outage, whatever the streams.
                if not self._streams_waiting:
                    log.warning("SSE streams wait: %s", unavailable_cause(exc))
                self._streams_waiting = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), STORE_RETRY_AFTER)
                yield None
                continue
            self._streams_waiting = False
            for event in batch:
                yield event
                last = event.id
            if len(batch) == _EVENTS_PAGE:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), idle)
            if not signal.is_set():
                yield None

    def end_streams(self) -> None:
        """End every open :meth:`client_events` stream now (at shutdown: an HTTP server
        waits for its open handlers, and a stream would hold it until its next
        keepalive)."""
        self._closing = True
        self._new_event.set()

    # ---- webhooks --------------------------------------------------------------------

    async def handle_webhook(
        self, headers: Mapping[str, str], body: bytes, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        """Process one webhook request; the HTTP status and JSON body to answer with."""
        started = time.perf_counter()
        with tracing.server_span("a2a_receiver webhook", headers) as span:
            status, result = await self._handled_webhook(headers, body, content_type)
            if span is not None:
                span.set_attribute("http.response.status_code", status)
                span.set_attribute("a2a_receiver.result", str(result.get("status", "")))
        self.metrics.webhook_latency.observe(time.perf_counter() - started)
        return status, result

    async def _handled_webhook(
        self, headers: Mapping[str, str], body: bytes, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        try:
            status, result = await self._webhook(headers, body, content_type)
        except WebhookRejected as exc:
            self.metrics.webhooks.labels(exc.reason).inc()
            log.info("webhook refused (%s): %s", exc.status, exc)
            status, result = exc.status, error_body(exc.reason, str(exc))
            if exc.retry_after is not None:
                result["retryAfter"] = exc.retry_after
        except StoreUnavailableError as exc:
            # An outage (PostgreSQL down or restarting): nothing was stored; the sender
            # retries a 503. One line, not a traceback per webhook.
            log.warning("webhook answered 503: %s", unavailable_cause(exc))
            self.metrics.webhooks.labels("unavailable").inc()
            status, result = 503, unavailable_body()
            result["retryAfter"] = STORE_RETRY_AFTER
        except Exception:
            # Ours, not the sender's (e.g. the store failed): a JSON 500 it will retry.
            log.exception("webhook processing failed")
            self.metrics.webhooks.labels("error").inc()
            status, result = 500, error_body("internal", "the webhook could not be processed")
        else:
            self.metrics.webhooks.labels(result["status"]).inc()
        return status, result

    async def _webhook(
        self, headers: Mapping[str, str], body: bytes, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        if len(body) > self.settings.max_body_bytes:
            raise WebhookRejected(413, "too_large", "the body is over the size limit")
        if content_type not in JSON_TYPES:
            raise WebhookRejected(
                415, "unsupported_media_type", f"send {A2A_MEDIA_TYPE} or application/json"
            )
        lookup = _SubscriptionLookup(self.store)  # each subscription read once per webhook
        candidates, sub = await self._identify(headers, lookup)
        agent, verified = await self._verify(candidates, sub, headers, body, lookup)
        # After verification: forged requests naming an agent must not use up its budget.
        wait = self._limiter.wait(agent.key)
        if wait > 0:
            raise WebhookRejected(
                429,
                "rate_limited",
                "too many webhooks; retry later",
                retry_after=max(1, math.ceil(wait)),
            )
        kind, task_id, urgent = _body_task(body)
        if await self.store.seen(agent.key, verified.dedup_key):
            return 200, {"status": "duplicate"}
        sub = await self._subscription_for(agent, verified, task_id, sub, lookup)
        if verified.claims is not None:
            token = presented_token(headers)
            if token is not None:
                check_token(token, sub.token_digest)
        if sub.state is SubscriptionState.DELETED:
            raise WebhookRejected(410, "subscription_ended", "this subscription was deleted")
        notification_id = await self.store.record(
            Notification(
                agent_url=agent.key,
                task_id=task_id,
                dedup_key=verified.dedup_key,
                subscription_id=sub.id,
                method=verified.method.value,
                kind=kind,
                body=body,
                received_at=time.time(),
                seq=verified.seq,
            )
        )
        if notification_id is None:
            return 200, {"status": "duplicate"}
        assert self.fetcher is not None
        self.fetcher.want(agent.key, task_id, notification_id, urgent=urgent)
        return 200, {"status": "accepted"}

    async def _identify(
        self, headers: Mapping[str, str], lookup: _SubscriptionLookup
    ) -> tuple[list[AgentSettings], Subscription | None]:
        """Which agents (and, for a token, which subscription) a request may be from.

        Nothing here is trusted yet: the agents' verifiers check the claim next. Only a
        Standard Webhooks signature can leave several candidates (one per secret holder).
        """
        jwt_value = presented_jwt(headers)
        issuer: object = None
        claims: dict[str, Any] = {}
        if jwt_value is not None:
            claims = unverified_claims(jwt_value)
            issuer = claims.get("iss")
            agents = self._by_issuer.get(issuer, []) if isinstance(issuer, str) else []
            if len(agents) > 1:
                agents = await self._likely_first(agents, claims, lookup)
            if agents:
                return agents, None
        token = presented_token(headers)
        if token is not None:
            sub = await self.store.subscription_by_token(token_digest(token))
            if sub is None:
                raise WebhookRejected(401, "bad_token", "the notification token is not known")
            agent_settings = self.settings.agent(sub.agent_url)
            if agent_settings is None:
                raise WebhookRejected(401, "unknown_agent", "the agent is no longer trusted")
            return [agent_settings], sub
        if headers.get(HEADER_WEBHOOK_SIGNATURE) is not None:
            candidates = [
                a for a in self.settings.agents if AuthMethod.STANDARD_WEBHOOKS in a.methods
            ]
            if candidates:
                return candidates, None
        if jwt_value is not None and not claims:
            raise WebhookRejected(
                401,
                "malformed",
                "the JWT could not be read (three base64url parts, a JSON object of claims)",
            )
        if jwt_value is not None and issuer is None:
            raise WebhookRejected(
                401, "no_issuer", "the JWT has no iss claim: it names the agent that signed it"
            )
        if jwt_value is not None:
            # The iss is unverified (no agent's keys were tried): the caller's to choose,
            # so it is not echoed back. The operator finds it in the log, repr'd (one
            # line, control characters escaped) and cut.
            shown = _shown_issuer(issuer)
            if shown in self._warned_issuers:
                level = logging.DEBUG
            elif len(self._warned_issuers) < _MAX_WARNED_ISSUERS:
                self._warned_issuers.add(shown)
                level = logging.WARNING
            else:
                level = logging.DEBUG
            log.log(
                level,
                "webhook refused: its JWT names issuer %s, which no agent here accepts; if "
                "one of this receiver's agents signs as that, set its `issuer` in its "
                "[[agents]] entry%s",
                shown,
                " (warned once per issuer, for the first "
                f"{_MAX_WARNED_ISSUERS} issuers; repeats are DEBUG)"
                if level == logging.WARNING
                else "",
            )
            raise WebhookRejected(
                401,
                "unknown_issuer",
                "the JWT issuer is not one this receiver trusts: if one of this receiver's "
                "agents signs as that, set its `issuer` in its [[agents]] entry (the "
                "receiver's log names the issuer that came)" + ISSUER_HINT,
            )
        raise WebhookRejected(401, "no_credentials", "the request is not authenticated")

    async def _likely_first(
        self, agents: list[AgentSettings], claims: Mapping[str, Any], lookup: _SubscriptionLookup
    ) -> list[AgentSettings]:
        """Agents sharing an issuer, the one the (unverified) JWT is likely from first: the
        agent of the subscription its configId names. Only an order to try them in:
        ``_verify`` checks each one's keys and subscriptions."""
        config_id = claims.get("configId")
        if not isinstance(config_id, str) or not config_id:
            return agents
        sub = await lookup.by_id(config_id)
        likely = sub.agent_url if sub is not None else None
        return sorted(agents, key=lambda a: a.key != likely)

    async def _subscribed(
        self,
        agent: AgentSettings,
        verified: VerifiedWebhook,
        body: bytes,
        lookup: _SubscriptionLookup,
    ) -> bool:
        """Whether ``agent`` has a subscription this verified JWT can be for: the one its
        configId names, or one to the body's task (the body is covered by the JWT)."""
        if verified.config_id is not None:
            sub = await lookup.by_id(verified.config_id)
            if sub is not None and sub.agent_url == agent.key:
                return True
        try:
            _, task_id, _ = _body_task(body)
        except WebhookRejected:
            return False
        return bool(await self.store.subscriptions_for_task(agent.key, task_id))

    async def _verify(
        self,
        candidates: list[AgentSettings],
        sub: Subscription | None,
        headers: Mapping[str, str],
        body: bytes,
        lookup: _SubscriptionLookup,
    ) -> tuple[AgentSettings, VerifiedWebhook]:
        """The agent the request is from, and what its verifier says. With several
        candidates (agents sharing a JWT issuer, or Standard Webhooks secret holders),
        each is tried; for a shared issuer the agent must also have a subscription the
        webhook is for, else the first that verified is taken."""
        refusal: WebhookRejected | None = None
        fallback: tuple[AgentSettings, VerifiedWebhook] | None = None
        for agent in candidates:
            try:
                verified = await self._verifiers[agent.key].verify(
                    headers, body, expected_token_digest=sub.token_digest if sub else None
                )
            except WebhookRejected as exc:
                if len(candidates) == 1 or exc.status not in (401, 503):
                    raise
                # Another candidate may still verify; if none does, a 503 (an agent's
                # keys could not be fetched) is the answer worth retrying.
                if refusal is None or exc.status == 503:
                    refusal = exc
                continue
            # The issuer picked this agent, except on the token path: check it there too.
            issuer = verified.claims.get("iss") if verified.claims is not None else None
            if verified.claims is not None and issuer not in agent.issuers:
                # Signed with this agent's keys: its iss is what the entry should say.
                raise WebhookRejected(
                    401,
                    "bad_issuer",
                    f"the JWT issuer {str(issuer)[:200]!r} is not the one configured for the "
                    f"agent this token belongs to, {agent.key} ({', '.join(agent.issuers)})"
                    f"{issuer_fix(issuer)}",
                )
            if len(candidates) == 1 or verified.claims is None:
                return agent, verified
            if await self._subscribed(agent, verified, body, lookup):
                return agent, verified
            fallback = fallback or (agent, verified)
        if fallback is not None and (refusal is None or refusal.status != 503):
            return fallback
        # An agent whose keys could not be fetched may be the one with the subscription:
        # a 503 (retried by the sender) rather than a final 404.
        assert refusal is not None
        raise refusal

    async def _subscription_for(
        self,
        agent: AgentSettings,
        verified: VerifiedWebhook,
        task_id: str,
        known: Subscription | None,
        lookup: _SubscriptionLookup,
    ) -> Subscription:
        if verified.task_id is not None and verified.task_id != task_id:
            raise WebhookRejected(400, "task_mismatch", "the JWT taskId is not the body's task")
        if known is not None:
            if known.task_id != task_id:
                raise WebhookRejected(404, "unknown_task", "the token is for another task")
            return known
        sub = None
        if verified.config_id is not None:
            sub = await lookup.by_id(verified.config_id)
        if sub is None:
            subs = await self.store.subscriptions_for_task(agent.key, task_id)
            active = [s for s in subs if s.state is SubscriptionState.ACTIVE]
            if active or subs:
                sub = (active or subs)[-1]
        if sub is None or sub.agent_url != agent.key or sub.task_id != task_id:
            raise WebhookRejected(404, "unknown_task", "no subscription for this task")
        return sub

    # ---- subscriptions ---------------------------------------------------------------

    def client_for(self, authorization: str | None) -> str:
        """The client id an ``Authorization: Bearer <api key>`` header belongs to."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ClientError(401, "unauthorized", "send Authorization: Bearer <API key>")
        digest = token_digest(key.strip()).encode()
        found = None
        for known, client in self._api_keys.items():
            if hmac.compare_digest(known.encode(), digest):
                found = client
        if found is None:
            raise ClientError(401, "unauthorized", "the API key is not valid")
        return found

    async def subscribe(
        self, client_id: str, agent_url: str, task_id: str
    ) -> tuple[Subscription, bool]:
        """Register a push config on the agent for this client; (subscription, created).

        A duplicate request while the first is still creating the config on the agent
        waits for it here and shares its outcome (the subscription, or the same error).
        In another process (workers, replicas), a duplicate that finds a subscription
        created moments ago and not yet confirmed in the store gets 409: it may not exist
        on the agent yet. A repeat that finds it confirmed (or old) gets it, and the task
        is fetched again.
        """
        # The rule webhooks are held to: a task no webhook could name cannot be followed.
        require_id(task_id, "taskId")
        agent = self.settings.agent(agent_url)
        if agent is None:
            raise ClientError(400, "unknown_agent", _unknown_agent(agent_url, self.settings))
        key = (client_id, agent.key, task_id)
        pending = self._creating.get(key)
        if pending is not None:
            return await asyncio.shield(pending), False
        future: asyncio.Future[Subscription] = asyncio.get_running_loop().create_future()
        self._creating[key] = future
        try:
            sub, created = await self._subscribe(client_id, agent, task_id)
        except ClientError as exc:
            future.set_exception(exc)
            raise
        except BaseException:
            future.set_exception(
                ClientError(503, "unavailable", "creating the subscription failed; retry")
            )
            raise
        else:
            future.set_result(sub)
        finally:
            del self._creating[key]
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: nobody may be waiting
        return sub, created

    @property
    def _create_window(self) -> float:
        """How long creating a subscription can take: the agent call and a margin."""
        return self.settings.fetch_timeout + _CREATE_MARGIN_SECONDS

    async def _subscribe(
        self, client_id: str, agent: AgentSettings, task_id: str
    ) -> tuple[Subscription, bool]:
        token = secrets.token_urlsafe(32)
        candidate = Subscription(
            id=f"sub_{uuid.uuid4().hex}",
            client_id=client_id,
            agent_url=agent.key,
            task_id=task_id,
            token_digest=token_digest(token),
            state=SubscriptionState.ACTIVE,
            created_at=time.time(),
        )
        # Stored first: the agent may send the first webhook before it answers.
        sub = await self.store.add_subscription(candidate)
        if sub.id != candidate.id:
            if sub.confirmed_at is None and sub.created_at > time.time() - self._create_window:
                # Created moments ago by another process, which may still be asking the
                # agent (and remove it if that fails): not "active" yet as far as we know.
                raise ClientError(
                    409,
                    "subscription_pending",
                    "a subscription to this task is being created by another request; "
                    "retry shortly",
                    retry_after=2,
                )
            # Asked again: fetch the task again too. A state that webhooks could not bring
            # (they were refused while the agent's entry was wrong, and the sender gave
            # up) is recovered by subscribing again, without deleting first. Not urgent:
            # a client repeating this as fast as it can gets at most one GetTask per
            # task per minimum interval, and none while the task's fetches back off.
            await self._refresh(agent.key, task_id, urgent=False)
            return sub, False
        try:
            await self._clients[agent.key].create_push_config(
                task_id, sub.id, self.settings.webhook_url, token
            )
        except AgentCallError as exc:
            if exc.retryable:
                # The agent may have created the config before the call failed: keep the
                # subscription, deleted, so its webhooks get 410 and the config is disabled.
                await self.store.delete_subscription(sub.id, now=time.time())
            else:
                await self.store.remove_subscription(sub.id)
            if exc.task_not_found:
                why = _task_not_found(exc, agent, task_id)
                raise ClientError(404, "task_not_found", why) from exc
            raise ClientError(502, "agent_error", str(exc)) from exc
        try:
            await self.store.confirm_subscription(sub.id, now=time.time())
        except Exception:
            # The subscription works all the same; only a repeat in another process
            # gets 409 for a while (until the row is past the creation window).
            log.warning("could not mark subscription %s confirmed", sub.id, exc_info=True)
        # A new subscription (the agent has just accepted a config) is fetched at once.
        await self._refresh(agent.key, task_id, urgent=True)
        return sub, True

    async def _refresh(self, agent_key: str, task_id: str, *, urgent: bool) -> None:
        """Fetch the task's current state (coalesced with any fetch under way): at once
        when ``urgent``, else when the fetcher's minimum interval and backoff allow."""
        assert self.fetcher is not None
        # Numbered like the snapshot already stored (if another subscription fetched
        # this task before), so it may replace it: a lower number would mark it as older
        # than what is stored, and it would be dropped.
        known = await self.store.get_snapshot(agent_key, task_id)
        up_to = known.generation if known else 0
        if urgent:
            self.fetcher.want(agent_key, task_id, up_to, urgent=True)
        else:
            self.fetcher.refresh(agent_key, task_id, up_to)

    async def own_subscription(self, client_id: str, subscription_id: str) -> Subscription:
        sub = await self.store.get_subscription(subscription_id)
        if sub is None or sub.client_id != client_id:
            raise ClientError(404, "not_found", "no such subscription")
        return sub

    async def unsubscribe(self, client_id: str, subscription_id: str) -> tuple[Subscription, bool]:
        """Delete locally (webhooks then get 410) and on the agent; (subscription, removed)."""
        sub = await self.own_subscription(client_id, subscription_id)
        deleted = sub
        if sub.state is not SubscriptionState.DELETED:
            found = await self.store.delete_subscription(sub.id, now=time.time())
            assert found is not None
            deleted = found
        # Asked again for a deleted subscription, the agent is asked again too: an
        # earlier attempt may have failed. A config the agent no longer has is removed.
        try:
            await self._clients[sub.agent_url].delete_push_config(sub.task_id, sub.id)
        except AgentCallError as exc:
            if exc.task_not_found:
                return deleted, True
            log.warning("could not remove push config %s on the agent: %s", sub.id, exc)
            return deleted, False
        except KeyError:
            log.warning("push config %s: its agent is no longer configured", sub.id)
            return deleted, False
        return deleted, True

    async def task_for_client(
        self, client_id: str, task_id: str, agent_url: str | None
    ) -> dict[str, Any]:
        require_id(task_id, "taskId")
        key = None
        if agent_url is not None:
            # Written as the client wrote it when subscribing, or another way: the agent.
            agent = self.settings.agent(agent_url)
            key = agent.key if agent is not None else agent_url.rstrip("/")
        # The client's active subscriptions to this task only (an index lookup): never
        # every subscription it ever made.
        subs = await self.store.active_subscriptions_to_task(client_id, task_id, key)
        if not subs:
            raise ClientError(404, "not_found", "no subscription to this task")
        for agent_key in dict.fromkeys(s.agent_url for s in reversed(subs)):
            snap = await self.store.get_snapshot(agent_key, task_id)
            if snap is not None:
                return snap.task
        raise ClientError(404, "not_fetched", "the task has not been fetched yet; retry shortly")


INVALID_ID: Final = f"{{}}: 1 to {MAX_ID_LENGTH} printable characters are required"


def _unknown_agent(agent_url: str, settings: ReceiverSettings) -> str:
    """Which agents there are, and the one ``agent_url`` most likely means."""
    keys = [a.key for a in settings.agents]
    shown = ", ".join(keys[:_LISTED_AGENTS]) + (", ..." if len(keys) > _LISTED_AGENTS else "")
    try:
        given = repr(shown_url(agent_url)[:200])
    except ValueError:
        given = "(not a URL)"
    message = (
        f"agentUrl {given} is not one of this receiver's agents "
        f"(configured: {shown}); give one of those URLs, as configured"
    )
    close = _closest_agent(agent_url, keys)
    return f"{message}; did you mean {close}?" if close else message


_LISTED_AGENTS: Final = 10


def _closest_agent(agent_url: str, keys: list[str]) -> str | None:
    """The configured agent ``agent_url`` most likely means: the one with the same port
    and path on another host name (``localhost`` for ``127.0.0.1``), else the closest
    spelling."""
    try:
        given = urlsplit(agent_url.rstrip("/"))
        same_place = [
            k for k in keys if (urlsplit(k).port, urlsplit(k).path) == (given.port, given.path)
        ]
    except ValueError:
        same_place = []
    if len(same_place) == 1:
        return same_place[0]
    close = difflib.get_close_matches(agent_url.rstrip("/"), keys, n=1)
    return close[0] if close else None


def _task_not_found(exc: AgentCallError, agent: AgentSettings, task_id: str) -> str:
    """The agent says the task does not exist. Credentials are named only where they can
    be the cause: the agent refused them (401/403), or the receiver sends some (agents
    scope tasks to the caller, and the receiver calls with its own, never shown)."""
    if exc.refused_credentials:
        return (
            f"the agent at {shown_url(agent.url)} refused the receiver's credentials (HTTP "
            f"{exc.status}) and answered that task {task_id!r} does not exist: check this "
            "agent's `credentials` (the Authorization value sent), then the taskId"
        )
    message = (
        f"the agent at {shown_url(agent.url)} answered that task {task_id!r} does not exist "
        f"({exc}); check the taskId, and that agentUrl is the agent that runs the task"
    )
    if agent.credentials is not None:
        message += (
            ". The receiver calls this agent with its configured `credentials`, and an "
            "agent may show a caller only its own tasks: if the task was created with other "
            "credentials, set `credentials` in this agent's [[agents]] entry to the "
            "Authorization value it was created with"
        )
    return message


def require_id(value: str, name: str) -> None:
    """A client API id held to the webhook rule (:func:`is_valid_id`), else a 400."""
    if not is_valid_id(value):
        raise ClientError(400, "invalid", INVALID_ID.format(name))


async def fetch_agent_card(session: aiohttp.ClientSession, origin: str) -> Any:
    """The agent card at ``origin`` + :data:`AGENT_CARD_PATH`, parsed JSON (any value);
    None when the agent answers without one (a 4xx: no card, or not for us). Raises
    ``ValueError`` (a 5xx, 408 or 429, a card that is not JSON or over the size cap),
    ``aiohttp.ClientError`` or ``TimeoutError`` when it cannot be read now: ask later."""
    url = origin.rstrip("/") + AGENT_CARD_PATH
    async with session.get(
        url, timeout=aiohttp.ClientTimeout(total=5), allow_redirects=False
    ) as resp:
        if resp.status >= 500 or resp.status in (408, 429):
            raise ValueError(f"HTTP {resp.status} from {url}")
        if resp.status != 200:
            return None
        raw = await read_at_most(resp.content, MAX_JWKS_BYTES)
    return parse_json(raw, f"{url}: the agent card")


def card_jwks_uri(card: object) -> str | None:
    """The ``jwksUri`` of an agent card's push-signing extension (its current URI or the
    legacy one); None for anything else (also for a card that is not a JSON object, or
    has odd members)."""
    capabilities = card.get("capabilities") if isinstance(card, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    for ext in extensions if isinstance(extensions, list) else ():
        name = ext.get("uri") if isinstance(ext, dict) else None
        if isinstance(name, str) and name in PUSH_SIGNING_EXTENSION_URIS:
            params = ext.get("params")
            uri = params.get("jwksUri") if isinstance(params, dict) else None
            if isinstance(uri, str) and uri.startswith(("http://", "https://")):
                return uri
    return None


def open_receiver_store(settings: ReceiverSettings) -> ReceiverStore:
    """PostgreSQL for a ``postgresql://`` database (replicas share it), else SQLite.

    Settings validation already refused any other URL scheme; checked again here for
    settings that skipped it (``model_copy``), so that ``mysql://x/y`` never becomes a
    SQLite file named ``mysql:/x/y``."""
    try:
        database = check_database(settings.database_url)
    except ValueError as exc:
        raise ValueError(f"database: {exc}") from None
    if is_postgres_url(database):
        from .postgres_store import PostgresReceiverStore

        return PostgresReceiverStore(database)
    return SQLiteReceiverStore(
        database.removeprefix("sqlite:///"), synchronous=settings.synchronous
    )


class ApiKeysFileError(A2APushError, ValueError):
    """The generated API keys file cannot be used; the message says what to fix."""


def _default_keys(path: Path) -> dict[str, str]:
    """Client API keys from ``path``, creating one for client "default" (mode 0600)."""
    if path.exists():
        fix = (
            "fix it, or delete it to have a new key generated for the client `default` "
            "(or configure api_keys)"
        )
        try:
            data = json.loads(path.read_text("utf-8"))
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON
            raise ApiKeysFileError(f"{path} is not valid JSON ({exc}); {fix}") from None
        if (
            not isinstance(data, dict)
            or not data
            or not all(isinstance(v, str) and v.strip() for v in data.values())
        ):
            raise ApiKeysFileError(
                f'{path} must be a JSON object of client id -> API key (e.g. {{"default": '
                f'"a-long-random-key"}}) with at least one key; {fix}'
            )
        return data
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {"default": secrets.token_urlsafe(32)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(keys, fh, indent=2)
    return keys
