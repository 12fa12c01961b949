"""Part 1 of the demo, the receiving side: a local webhook sink that checks every webhook
on arrival (JWT against the JWKS, the config's token, Standard Webhooks HMAC)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_CONTENT_TYPE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
    STANDARD_WEBHOOKS_SECRET_PREFIX,
)
from a2a_push.protocol.types import (
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a_push.signing import (
    JWTVerificationError,
    StandardWebhooksVerificationError,
    standard_webhooks,
    verify_webhook_jwt,
)

Out = Callable[[str], object]

OUTAGE_REQUESTS = 2  # the whsec receiver answers 503 to this many requests first


# ---- output ---------------------------------------------------------------------------------


class Style:
    """Colour only for a terminal; plain text everywhere else (pipes, logs, tests)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def ok(self, text: str) -> str:
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        return self._wrap("1;31", text)

    def warn(self, text: str) -> str:
        return self._wrap("33", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def client(self, text: str) -> str:
        return self._wrap("36", text)


ROW = "{t:>7}  {task:<4}  {who:<6}  {event:<29}  {http:>4}  {latency:>8}  {check}"


def state_name(state: TaskState | str) -> str:
    return str(TaskState(state).value).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _label(response: StreamResponse) -> tuple[str, TaskState | None]:
    """'statusUpdate (working)', and the state it reports (None for an artifact)."""
    event = response.event
    if isinstance(event, Task):
        return f"task ({state_name(event.status.state)})", event.status.state
    if isinstance(event, TaskStatusUpdateEvent):
        return f"statusUpdate ({state_name(event.status.state)})", event.status.state
    if isinstance(event, TaskArtifactUpdateEvent):
        return f"artifactUpdate ({event.artifact.name or event.artifact.artifact_id})", None
    return type(event).__name__, None


# ---- the receiving side -----------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """A webhook the sink verified and answered 2xx."""

    label: str
    seq: int
    task_id: str
    state: TaskState | None


@dataclass
class Route:
    """One push config, as the sink sees it."""

    flow: str  # the skill: roll, book, fail, echo
    name: str  # also the config id
    token: str
    expected: tuple[str, ...]
    outage: int = 0
    follows: Route | None = None  # created later: its snapshot, then what `follows` got after
    url: str = ""
    task_id: str = ""
    requests: int = 0
    attempts: Counter[str] = field(default_factory=Counter)  # per webhook-id
    accepted: list[Accepted] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    artifact_text: str | None = None  # the dice roll or the order, as the webhook carried it

    @property
    def path(self) -> str:
        return f"/hooks/{self.flow}/{self.name}"

    @property
    def standard(self) -> bool:
        return self.token.startswith(STANDARD_WEBHOOKS_SECRET_PREFIX)

    @property
    def verified_by(self) -> str:
        return "Standard Webhooks + JWT" if self.standard else "JWT (JWKS) + token"

    @property
    def retries(self) -> int:
        return sum(n - 1 for n in self.attempts.values())

    @property
    def labels(self) -> list[str]:
        return [a.label for a in self.accepted]

    @property
    def done(self) -> bool:
        """Failed, or its last webhook says the task is over (order is kept per config)."""
        if self.failures:
            return True
        last = self.accepted[-1].state if self.accepted else None
        return last is not None and last.is_terminal

    def expected_labels(self) -> list[str]:
        """A config created after the task started gets a snapshot of the task as it was,
        then every event published after it (its ``seq`` is higher)."""
        if self.follows is None or not self.accepted:
            return list(self.expected)
        first = self.accepted[0]
        if not first.label.startswith("task ("):
            return list(self.expected)
        later = [a.label for a in self.follows.accepted if a.seq > first.seq]
        return [first.label, *later]


class DemoSink:
    """A webhook receiver: verifies each request on arrival and prints a timeline row.

    It answers 503 to a route's first ``outage`` requests (a simulated outage), 401 when
    a check fails, 200 otherwise.
    """

    def __init__(self, routes: list[Route], *, clock: Callable[[], float], out: Out, style: Style):
        self.routes = {r.path: r for r in routes}
        self.clock = clock
        self.out = out
        self.style = style
        self.jwks: Mapping[str, Any] = {}
        self.issuer = ""
        self.base_url = ""
        # When the agent wrote a webhook (by its webhook-id) to its outbox, if known:
        # each row's latency runs from then to the webhook's arrival here.
        self.queued_at: Callable[[str], Awaitable[float | None]] | None = None
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        for route in self.routes.values():
            route.url = self.base_url + route.path

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds after some webhook; its value at the end."""
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    await self._changed.wait()
        except TimeoutError:
            pass
        return predicate()

    def _notify(self) -> None:
        woken, self._changed = self._changed, asyncio.Event()
        woken.set()

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()  # verify these exact bytes; parse only after
        arrived, now = self.clock(), time.time()
        route = self.routes.get(request.path)
        if route is None:
            return web.Response(status=404)
        latency = ""
        queued = None
        if self.queued_at is not None:
            queued = await self.queued_at(request.headers.get(HEADER_WEBHOOK_ID, ""))
        if queued is not None:
            latency = f"{max(0.0, now - queued) * 1000:,.0f} ms"
        try:
            return self._receive(route, request.headers, raw, arrived, latency)
        finally:
            self._notify()

    def _receive(
        self, route: Route, headers: Mapping[str, str], raw: bytes, arrived: float, latency: str
    ) -> web.Response:
        route.requests += 1
        webhook_id = headers.get(HEADER_WEBHOOK_ID, "?")
        route.attempts[webhook_id] += 1
        attempt = route.attempts[webhook_id]

        label = "(unverified)"  # the body is not trusted, nor parsed, before it verifies
        try:
            claims = self._verify(route, headers, raw)
            response = StreamResponse.model_validate_json(raw)
            label, state = _label(response)
            self._check_binding(route, claims, response)
        except (JWTVerificationError, StandardWebhooksVerificationError, ValueError) as exc:
            route.failures.append(f"rejected {label}: {exc}")
            self._row(arrived, route, label, 401, latency, self.style.bad(f"✗ FAILED: {exc}"))
            return web.Response(status=401)

        seq = int(claims["seq"])
        how = "HMAC + JWT" if route.standard else "JWT + token"
        check = self.style.ok("signature verified ✓") + f" {how} · seq {seq}"
        notes = []
        if attempt > 1:
            notes.append(f"retry {attempt - 1}")
        outage = route.requests <= route.outage
        if outage:
            notes.append("simulated outage")
        if notes:
            check += self.style.dim(" · " + ", ".join(notes))
        if outage:
            self._row(arrived, route, label, 503, latency, check)
            return web.Response(status=503)
        route.accepted.append(Accepted(label, seq, response.task_id or "", state))
        self._row(arrived, route, label, 200, latency, check)
        return web.Response(status=200)

    def _verify(self, route: Route, headers: Mapping[str, str], raw: bytes) -> dict[str, Any]:
        if headers.get(HEADER_CONTENT_TYPE) != A2A_MEDIA_TYPE:
            raise ValueError(f"Content-Type is {headers.get(HEADER_CONTENT_TYPE)!r}")
        if route.standard:
            if HEADER_NOTIFICATION_TOKEN in headers:
                raise ValueError("the whsec_ secret travelled in a header")
            standard_webhooks.verify(
                route.token,
                msg_id=headers.get(HEADER_WEBHOOK_ID, ""),
                timestamp=headers.get(HEADER_WEBHOOK_TIMESTAMP, ""),
                signature_header=headers.get(HEADER_WEBHOOK_SIGNATURE, ""),
                body=raw,
            )
        elif not secrets.compare_digest(headers.get(HEADER_NOTIFICATION_TOKEN, ""), route.token):
            raise ValueError(f"{HEADER_NOTIFICATION_TOKEN} is not the config's token")
        token = headers.get(HEADER_SIGNATURE)
        if not token:
            raise ValueError(f"no {HEADER_SIGNATURE} header")
        claims = verify_webhook_jwt(
            token, jwks=self.jwks, body=raw, audience=route.url, issuer=self.issuer
        )
        if claims["jti"] != headers.get(HEADER_WEBHOOK_ID):
            raise ValueError("the JWT's jti is not the webhook-id")
        return claims

    def _check_binding(
        self, route: Route, claims: Mapping[str, Any], response: StreamResponse
    ) -> None:
        """The signed claims must name this config and the task the body is about."""
        if claims.get("configId") != route.name:
            raise ValueError(f"JWT configId {claims.get('configId')!r} is not {route.name!r}")
        if claims.get("taskId") != response.task_id:
            raise ValueError(f"JWT taskId {claims.get('taskId')!r} does not match the body")
        event = response.event
        if isinstance(event, TaskArtifactUpdateEvent):
            route.artifact_text = next((p.text for p in event.artifact.parts if p.text), None)

    def _row(
        self, arrived: float, route: Route, label: str, status: int, latency: str, check: str
    ) -> None:
        http = str(status)
        if status >= 400:
            http = self.style.warn(http) if status == 503 else self.style.bad(http)
            http = " " * (4 - len(str(status))) + http  # colour codes are invisible
        self.out(
            ROW.format(
                t=f"{arrived:.3f}s",
                task=route.flow,
                who=route.name,
                event=label,
                http=http,
                latency=latency,
                check=check,
            )
        )
