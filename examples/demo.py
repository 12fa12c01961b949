"""``make demo``: a dice-rolling agent's push notifications, end to end, in a few seconds.

An embedded :class:`~a2a_push.notifier.PushNotifier` (SQLite in a temporary folder) sends
one task's lifecycle to two push configs on a local webhook receiver:

* ``plain`` — the receiver authenticates each webhook by its JWT (``X-A2A-Signature``)
  against the notifier's JWKS;
* ``stdwh`` — its token is a Standard Webhooks secret (``whsec_…``), so the receiver
  checks the ``webhook-signature`` HMAC (and the JWT, for the sequence number). This
  receiver is "down" for its first requests (503), to show retries and ordering.

Every check runs on the raw bytes the receiver got. The exit code is 0 only if every
expected webhook arrived, verified, in order.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import random
import secrets
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from base64 import b64encode
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from tenacity import wait_fixed

from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
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
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.signing import (
    JWTVerificationError,
    StandardWebhooksVerificationError,
    standard_webhooks,
    verify_webhook_jwt,
)
from a2a_push.store import generate_key

Out = Callable[[str], object]

ISSUER = "https://dice-agent.example"
OWNER = "demo-client"
ARTIFACT_NAME = "dice-result"
OUTAGE_REQUESTS = 2  # the stdwh receiver answers 503 to this many requests first
STEP_PAUSE = 0.3  # the agent "works" this long between events, so the timeline reads well
DELIVERY_TIMEOUT = 15.0

# The default schedule waits minutes to hours between durable retries; the demo shortens
# it so it finishes in seconds. Same mechanism, smaller numbers.
DEMO_RETRY = RetryPolicy(
    quick_attempts=2,
    quick_wait=wait_fixed(0.2),
    schedule=(0.5, 1.0, 2.0),
    jitter=0.1,
)

EXPECTED = (
    "task (submitted)",
    "statusUpdate (working)",
    f"artifactUpdate ({ARTIFACT_NAME})",
    "statusUpdate (completed)",
)

NEXT_STEPS = (
    "Next: README.md — “Embedding the notifier” (publish from your agent),",
    "      “Verifying webhooks” (JWT/JWKS and Standard Webhooks on your receiver) and",
    "      “Delivery guarantees” (retries, ordering, dead letters).",
)


# ---- output ---------------------------------------------------------------------------------


class _Style:
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


_ROW = "{t:>7}  {who:<6}  {event:<28}  {attempt:>3}  {http:>4}  {latency:>8}  {check}"


def _short_state(state: TaskState) -> str:
    return state.value.removeprefix("TASK_STATE_").lower()


def _label(response: StreamResponse) -> str:
    event = response.event
    if isinstance(event, Task):
        return f"task ({_short_state(event.status.state)})"
    if isinstance(event, TaskStatusUpdateEvent):
        return f"statusUpdate ({_short_state(event.status.state)})"
    if isinstance(event, TaskArtifactUpdateEvent):
        return f"artifactUpdate ({event.artifact.name or event.artifact.artifact_id})"
    return type(event).__name__


# ---- the receiving side -----------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """A webhook the receiver verified and answered 2xx."""

    label: str
    seq: int
    webhook_id: str


@dataclass
class Route:
    """One push config, as the receiver sees it."""

    name: str
    path: str
    config_id: str
    secret: str | None  # a Standard Webhooks secret, or None for JWT-only
    outage: int
    url: str = ""
    requests: int = 0
    attempts: Counter[str] = field(default_factory=Counter)  # per webhook-id
    accepted: list[Accepted] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    roll_sent: str | None = None  # the dice roll the agent published
    roll_received: str | None = None  # ... and as the artifact webhook carried it

    @property
    def verified_by(self) -> str:
        return "Standard Webhooks + JWT" if self.secret else "JWT (JWKS)"

    @property
    def retries(self) -> int:
        return sum(n - 1 for n in self.attempts.values())


class DemoReceiver:
    """A tiny webhook receiver: verifies each request on arrival and prints a timeline row.

    It answers 503 to a route's first ``outage`` requests (a simulated outage), 401 when
    a check fails, 200 otherwise.
    """

    def __init__(self, routes: list[Route], *, clock: Callable[[], float], out: Out, style: _Style):
        self.routes = {r.path: r for r in routes}
        self.clock = clock
        self.out = out
        self.style = style
        self.jwks: Mapping[str, Any] = {}
        self.issuer = ""
        self.sent_at: dict[tuple[str, str], float] = {}  # (route, event label) -> publish time
        self.settled = asyncio.Event()  # everything expected arrived, or something failed
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}"
        for route in self.routes.values():
            route.url = self.base_url + route.path

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()  # verify these exact bytes; parse only after
        arrived = self.clock()
        route = self.routes.get(request.path)
        if route is None:
            return web.Response(status=404)
        route.requests += 1
        webhook_id = request.headers.get(HEADER_WEBHOOK_ID, "?")
        route.attempts[webhook_id] += 1
        attempt = route.attempts[webhook_id]

        label = "(unverified)"  # the body is not trusted, nor parsed, before it verifies
        try:
            claims = self._verify(route, request.headers, raw)
            response = StreamResponse.model_validate_json(raw)
            label = _label(response)
            self._check_binding(route, claims, response)
        except (JWTVerificationError, StandardWebhooksVerificationError, ValueError) as exc:
            route.failures.append(f"rejected {label}: {exc}")
            self._row(arrived, route, label, attempt, 401, self.style.bad(f"✗ FAILED: {exc}"))
            self.settled.set()
            return web.Response(status=401)

        seq = int(claims["seq"])
        how = "HMAC + JWT" if route.secret else "JWT"
        check = self.style.ok("signature verified ✓") + f" ({how}, seq {seq})"
        notes = []
        if attempt > 1:
            # The first claim makes up to quick_attempts in-process; later ones come back
            # from the outbox on the durable schedule.
            kind = "quick" if attempt <= DEMO_RETRY.quick_attempts else "durable"
            notes.append(f"{kind} retry")
        if route.requests <= route.outage:
            notes.append("simulated outage")
        if notes:
            check += self.style.dim(" · " + ", ".join(notes))
        if route.requests <= route.outage:
            self._row(arrived, route, label, attempt, 503, check)
            return web.Response(status=503)
        route.accepted.append(Accepted(label, seq, webhook_id))
        self._row(arrived, route, label, attempt, 200, check)
        if all(len(r.accepted) >= len(EXPECTED) for r in self.routes.values()):
            self.settled.set()
        return web.Response(status=200)

    def _verify(self, route: Route, headers: Mapping[str, str], raw: bytes) -> dict[str, Any]:
        if headers.get(HEADER_CONTENT_TYPE) != A2A_MEDIA_TYPE:
            raise ValueError(f"Content-Type is {headers.get(HEADER_CONTENT_TYPE)!r}")
        if route.secret is not None:
            if HEADER_NOTIFICATION_TOKEN in headers:
                raise ValueError("the whsec_ secret travelled in a header")
            standard_webhooks.verify(
                route.secret,
                msg_id=headers.get(HEADER_WEBHOOK_ID, ""),
                timestamp=headers.get(HEADER_WEBHOOK_TIMESTAMP, ""),
                signature_header=headers.get(HEADER_WEBHOOK_SIGNATURE, ""),
                body=raw,
            )
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
        if claims.get("configId") != route.config_id:
            raise ValueError(f"JWT configId {claims.get('configId')!r} is not {route.config_id!r}")
        if claims.get("taskId") != response.task_id:
            raise ValueError(f"JWT taskId {claims.get('taskId')!r} does not match the body")
        event = response.event
        if isinstance(event, TaskArtifactUpdateEvent):
            route.roll_received = next((p.text for p in event.artifact.parts if p.text), None)

    def _row(
        self, arrived: float, route: Route, label: str, attempt: int, status: int, check: str
    ) -> None:
        sent = self.sent_at.get((route.name, label))
        latency = f"{(arrived - sent) * 1000:.0f} ms" if sent is not None else "—"
        http = str(status)
        if status >= 400:
            http = self.style.warn(http) if status == 503 else self.style.bad(http)
            # keep the column aligned when colour codes add invisible characters
            http = " " * (4 - len(str(status))) + http
        self.out(
            _ROW.format(
                t=f"{arrived:.3f}s",
                who=route.name,
                event=label,
                attempt=attempt,
                http=http,
                latency=latency,
                check=check,
            )
        )


# ---- the demo ---------------------------------------------------------------------------------


def _agent_row(out: Out, at: float, text: str) -> None:
    out(f"{at:>6.3f}s  agent   {text}")


def _status(task: Task, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    message = None
    if text is not None:
        message = Message(
            message_id=uuid.uuid4().hex, role=Role.AGENT, parts=[Part(text=text)], task_id=task.id
        )
    return TaskStatusUpdateEvent(
        task_id=task.id,
        context_id=task.context_id or "",
        status=TaskStatus(state=state, message=message),
    )


def _roll(rng: random.Random, dice: int = 2, sides: int = 6) -> tuple[list[int], str]:
    rolls = [rng.randint(1, sides) for _ in range(dice)]
    return rolls, f"{dice}d{sides} → {' + '.join(map(str, rolls))} = {sum(rolls)}"


class _ForwardLogs(logging.Handler):
    """The library's own warnings and errors, into the timeline (and counted as problems)."""

    def __init__(self, out: Out, style: _Style, problems: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.out = out
        self.style = style
        self.problems = problems

    def emit(self, record: logging.LogRecord) -> None:
        message = f"{record.name}: {record.getMessage()}"
        self.problems.append(message)
        self.out(self.style.bad(f"  ! {message}"))


async def run_demo(out: Out = print) -> int:
    """Run the demo, writing lines to ``out``; return the exit code (0: all verified)."""
    style = _Style(out is print and sys.stdout.isatty())
    started = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - started

    whsec = STANDARD_WEBHOOKS_SECRET_PREFIX + b64encode(secrets.token_bytes(24)).decode()
    routes = [
        Route("plain", "/hooks/plain", "plain", secret=None, outage=0),
        Route("stdwh", "/hooks/stdwh", "stdwh", secret=whsec, outage=OUTAGE_REQUESTS),
    ]
    problems: list[str] = []
    forward = _ForwardLogs(out, style, problems)
    library_log = logging.getLogger("a2a_push")
    library_log.addHandler(forward)
    tmp = tempfile.mkdtemp(prefix="a2a-push-demo-")
    try:
        await _run(Path(tmp), routes, out, style, clock, problems)
    except Exception as exc:  # the demo reports on stdout, with the traceback, and fails
        out(style.bad(f"✗ the demo crashed: {exc!r}"))
        out(traceback.format_exc().rstrip())
        problems.append(f"crashed: {exc!r}")
    finally:
        library_log.removeHandler(forward)
        removed = _remove(tmp)
    if not removed:
        problems.append(f"the temporary folder {tmp} was not removed")

    out("")
    code = _summarise(routes, problems, out, style)
    if removed:
        out(f"Temporary folder {tmp} removed. Finished in {clock():.1f} s.")
    if code == 0:
        for line in NEXT_STEPS:
            out(line)
    return code


def _remove(folder: str) -> bool:
    """Delete the demo's temporary folder; True when it is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    return not Path(folder).exists()


async def _run(
    tmp: Path,
    routes: list[Route],
    out: Out,
    style: _Style,
    clock: Callable[[], float],
    problems: list[str],
) -> None:
    """Receiver up, notifier open, the agent's work published; then wait for delivery."""
    receiver = DemoReceiver(routes, clock=clock, out=out, style=style)
    await receiver.start()
    try:
        notifier = PushNotifier.open(
            tmp / "push.db",
            issuer=ISSUER,
            data_dir=tmp,
            encryption_keys=[generate_key()],  # config secrets are sealed at rest
            address_policy=AddressPolicy(allow_loopback=True),  # the receiver is on 127.0.0.1
            retry=DEMO_RETRY,
        )
        async with notifier:
            receiver.jwks = notifier.jwks()  # a real receiver fetches /.well-known/jwks.json
            receiver.issuer = notifier.issuer
            _intro(out, style, tmp, receiver)
            await _agent(notifier, receiver, routes, out, clock)
            try:
                await asyncio.wait_for(receiver.settled.wait(), DELIVERY_TIMEOUT)
            except TimeoutError:
                problems.append(f"not everything arrived within {DELIVERY_TIMEOUT:g} s")
            await _until_outbox_settles(notifier, timeout=2.0)
            dead = Counter(d.last_error or "?" for d in await notifier.dead_letters())
            for error, count in dead.items():
                problems.append(f"{count} webhook(s) dead-lettered by the notifier ({error})")
    finally:
        await receiver.stop()


async def _until_outbox_settles(notifier: PushNotifier, timeout: float) -> None:
    """Wait (briefly) until nothing is pending, so the dead-letter count is complete."""
    step = 0.05  # the store has no "drained" signal to wait on, so poll it
    for _ in range(round(timeout / step)):
        if not (await notifier.store.stats()).pending:
            return
        await asyncio.sleep(step)


def _intro(out: Out, style: _Style, tmp: Path, receiver: DemoReceiver) -> None:
    default = RetryPolicy()
    out(style.bold("a2a-push demo — durable, signed, retried, ordered A2A push notifications"))
    out("")
    out(f"  notifier   PushNotifier on SQLite in {tmp} (issuer {ISSUER})")
    out(f"  receiver   {receiver.base_url} (loopback allowed explicitly for the demo)")
    out("  config     plain → /hooks/plain: JWT (X-A2A-Signature) checked against the JWKS")
    out("  config     stdwh → /hooks/stdwh: token whsec_…, Standard Webhooks HMAC (+ JWT);")
    out(f"             this receiver answers 503 to its first {OUTAGE_REQUESTS} requests")
    out(
        f"  retries    shortened for the demo: {DEMO_RETRY.quick_attempts} quick attempts"
        f" 0.2 s apart, then {DEMO_RETRY.describe()}"
    )
    out(
        f"             (default: {default.quick_attempts} quick attempts,"
        f" then {default.describe()})"
    )
    out("  latency    publish → arrival at the receiver, retry waits included")
    out("")
    header = _ROW.format(
        t="time",
        who="who",
        event="event",
        attempt="try",
        http="HTTP",
        latency="latency",
        check="check",
    )
    out(header)
    out("-" * len(header) + "-" * 30)


async def _agent(
    notifier: PushNotifier,
    receiver: DemoReceiver,
    routes: list[Route],
    out: Out,
    clock: Callable[[], float],
) -> None:
    """What an agent does: create the task, register the client's configs, publish events."""
    task = Task(
        id=f"dice-{uuid.uuid4().hex[:8]}",
        context_id=f"ctx-{uuid.uuid4().hex[:8]}",
        status=TaskStatus(state=TaskState.SUBMITTED),
    )
    _agent_row(out, clock(), f"task {task.id} submitted: “roll 2d6”")

    for route in routes:
        receiver.sent_at[(route.name, EXPECTED[0])] = clock()
        await notifier.register_config(
            TaskPushNotificationConfig(id=route.config_id, url=route.url, token=route.secret),
            owner=OWNER,
            task_id=task.id,
            task=task,  # the first webhook to a new config is a snapshot of the task
        )
        _agent_row(out, clock(), f"registered config {route.name} → task snapshot queued")

    def stamp(label: str) -> None:
        at = clock()
        for route in routes:
            receiver.sent_at[(route.name, label)] = at

    await asyncio.sleep(STEP_PAUSE)
    stamp(EXPECTED[1])
    result = await notifier.publish(task.id, _status(task, TaskState.WORKING, "Rolling 2d6…"))
    _agent_row(out, clock(), f"publish {EXPECTED[1]}: seq {result.seq}, durable")

    await asyncio.sleep(STEP_PAUSE)
    rolls, text = _roll(random.Random())
    artifact = Artifact(
        artifact_id=f"{ARTIFACT_NAME}-{task.id}",
        name=ARTIFACT_NAME,
        parts=[Part(text=text), Part(data={"dice": "2d6", "rolls": rolls, "total": sum(rolls)})],
    )
    stamp(EXPECTED[2])
    result = await notifier.publish(
        task.id,
        TaskArtifactUpdateEvent(
            task_id=task.id, context_id=task.context_id or "", artifact=artifact, last_chunk=True
        ),
    )
    _agent_row(out, clock(), f"publish {EXPECTED[2]} “{text}”: seq {result.seq}, durable")
    for route in routes:
        route.roll_sent = text

    await asyncio.sleep(STEP_PAUSE)
    stamp(EXPECTED[3])
    result = await notifier.publish(task.id, _status(task, TaskState.COMPLETED, text))
    _agent_row(out, clock(), f"publish {EXPECTED[3]}: seq {result.seq}, durable")


def _summarise(routes: list[Route], problems: list[str], out: Out, style: _Style) -> int:
    """Print the table and the verdict; return the exit code."""
    rows = [("config", "verified by", "webhooks", "retries", "all verified", "order (seq)")]
    failed = list(problems)
    for route in routes:
        labels = [a.label for a in route.accepted]
        seqs = [a.seq for a in route.accepted]
        in_order = all(a < b for a, b in itertools.pairwise(seqs)) and labels == sorted(
            labels, key=lambda label: EXPECTED.index(label) if label in EXPECTED else -1
        )
        # Each distinct failure once, with how often it happened.
        for failure, times in Counter(route.failures).items():
            failed.append(f"{route.name}: {failure}" + (f" ({times} times)" if times > 1 else ""))
        missing = [label for label in EXPECTED if label not in labels]
        if missing:
            failed.append(f"{route.name}: never accepted: {', '.join(missing)}")
        elif labels != list(EXPECTED):
            failed.append(f"{route.name}: accepted {labels}, expected {list(EXPECTED)}")
        if not in_order:
            failed.append(f"{route.name}: out of order (seq {', '.join(map(str, seqs))})")
        if route.roll_received is not None and route.roll_received != route.roll_sent:
            failed.append(
                f"{route.name}: the artifact carried {route.roll_received!r},"
                f" not {route.roll_sent!r}"
            )
        order = " < ".join(map(str, seqs)) + (" ✓" if in_order else " ✗") if seqs else "—"
        rows.append(
            (
                route.name,
                route.verified_by,
                f"{len(route.accepted)}/{len(EXPECTED)}",
                str(route.retries),
                "NO ✗" if route.failures else "yes ✓",
                order,
            )
        )

    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        out("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if n == 0:
            out("  " + "  ".join("-" * width for width in widths))
    out("")
    if any(r.retries and len(r.accepted) > 1 for r in routes):
        out(
            "While a config's webhook is being retried, its later events wait their turn:"
            " order per config holds."
        )
    if failed:
        out(style.bad(f"FAILED — {len(failed)} problem(s):"))
        for problem in failed:
            out(style.bad(f"  ✗ {problem}"))
        return 1
    total = sum(len(r.accepted) for r in routes)
    retries = sum(r.retries for r in routes)
    out(
        style.ok("OK")
        + f" — {total} webhooks arrived, every signature verified, order kept,"
        + f" {retries} retries after 503."
    )
    return 0


def main() -> int:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "✓✗→—“”…".encode(encoding)
    except (LookupError, UnicodeEncodeError):
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(errors="replace")
    try:
        return asyncio.run(run_demo())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
