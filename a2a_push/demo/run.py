"""``make demo``: the mock A2A agent over HTTP, every push notification verified on arrival.

The mock agent (:mod:`a2a_push.mock_agent`, push notifications by a2a-push) runs in this
process on 127.0.0.1; the demo is its client, speaking plain JSON-RPC (``A2A-Version:
1.0``, an ``Authorization`` header naming the owner), and runs a local webhook sink:

* ``roll 2d6``   two push configs: ``jwt`` (inline with SendMessage; the sink checks the
  JWT in ``X-A2A-Signature`` against the agent's JWKS, fetched over HTTP, and the config's
  token) and ``whsec`` (created with CreateTaskPushNotificationConfig; its token is a
  Standard Webhooks secret, so the sink checks the ``webhook-signature`` HMAC too). The
  ``whsec`` receiver is "down" for its first requests (503): retries, and order holds.
* ``book …``     input-required; the demo answers with the same taskId; completed.
* ``fail``       failed.
* an echo task   canceled with CancelTask while it is working.

Every check runs on the raw bytes the sink got.

Part 2 (:mod:`a2a_push.demo.loop`) is the whole loop: a second mock agent, the receiver
as a separate process (``python -m receiver``), and the demo as an app that subscribes
through the receiver and prints each task update from its SSE stream, while the receiver
is stopped and restarted under it.

The exit code is 0 only if every expected webhook arrived, verified, in order (``seq``
strictly increasing per config), and part 2 lost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import logging
import secrets
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from base64 import b64encode
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from a2a_push.delivery.dispatcher import WEBHOOK_OUTCOME
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.mock_agent import AGENT, serving
from a2a_push.notifier import JWKS_PATH, PushNotifier
from a2a_push.protocol.constants import (
    HEADER_A2A_VERSION,
    HEADER_AUTHORIZATION,
    STANDARD_WEBHOOKS_SECRET_PREFIX,
    VERSION_1_0,
)
from a2a_push.protocol.types import (
    TaskState,
)

from .loop import run_loop
from .sink import OUTAGE_REQUESTS, ROW, DemoSink, Out, Route, Style, state_name

OWNER_AUTHORIZATION = "Bearer demo-client"  # the agent scopes tasks and configs to this
STEP_DELAY = 0.15  # the agent pauses this long between steps
FLOW_TIMEOUT = 10.0  # per flow: every expected webhook within this
BOOKING = "a table for two"
BOOKING_DATE = "friday 8pm"

# What each config must receive, in this order (the mock agent's skills are deterministic).
ROLL = (
    "task (submitted)",
    "statusUpdate (working)",
    "artifactUpdate (dice-result)",
    "statusUpdate (completed)",
)
BOOK = (
    "task (submitted)",
    "statusUpdate (working)",
    "statusUpdate (input-required)",
    "statusUpdate (working)",
    "artifactUpdate (order)",
    "statusUpdate (completed)",
)
FAIL = ("task (submitted)", "statusUpdate (working)", "statusUpdate (failed)")
CANCEL = ("task (submitted)", "statusUpdate (working)", "statusUpdate (canceled)")

NEXT_STEPS = (
    "Next: README.md — “Embedding the notifier” (publish from your agent),",
    "      “Serving the A2A push-config methods” (what the agent served here),",
    "      “Verifying webhooks” (JWT/JWKS and Standard Webhooks on your receiver) and",
    "      “Delivery guarantees” (retries, ordering, dead letters);",
    "      `a2a-push mock-agent --help` (the agent of both parts, to run on its own) and",
    "      `a2a-push receiver --help` (the receiver of part 2); after `make demo` the",
    "      command is in .venv: `source .venv/bin/activate`, or run `.venv/bin/a2a-push …`.",
)


# ---- the client side --------------------------------------------------------------------------


class RpcError(Exception):
    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        super().__init__(f"{method}: error {error.get('code')}: {error.get('message')}")


class Client:
    """A plain JSON-RPC client of the agent; each call is a timeline row."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        clock: Callable[[], float],
        out: Out,
        style: Style,
    ) -> None:
        self.session = session
        self.url = url
        self.clock = clock
        self.out = out
        self.style = style
        self._ids = itertools.count(1)

    def say(self, flow: str, text: str) -> None:
        self.out(f"{self.clock():>6.3f}s  {flow:<4}  {self.style.client('client')}  {text}")

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        request = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        headers = {HEADER_AUTHORIZATION: OWNER_AUTHORIZATION, HEADER_A2A_VERSION: VERSION_1_0}
        async with self.session.post(self.url, json=request, headers=headers) as response:
            body = await response.json()
        if "error" in body:
            raise RpcError(method, body["error"])
        return body["result"]

    async def send(
        self, flow: str, text: str, route: Route | None = None, task_id: str | None = None
    ) -> dict[str, Any]:
        """SendMessage with ``returnImmediately``: the webhooks tell the rest."""
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        configuration: dict[str, Any] = {"returnImmediately": True}
        how = ["returnImmediately"]
        if task_id:
            message["taskId"] = task_id
            how.append(f"same taskId {task_id[:8]}…")
        if route is not None:
            configuration["taskPushNotificationConfig"] = {
                "id": route.name,
                "url": route.url,
                "token": route.token,
            }
            how.append(f"inline config {route.name}")
        self.say(flow, self.style.client(f"→ SendMessage “{text}”") + f" ({', '.join(how)})")
        result = await self.call(
            "SendMessage", {"message": message, "configuration": configuration}
        )
        task: dict[str, Any] = result["task"]
        self.say(flow, f"← task {task['id'][:8]}… {state_name(task['status']['state'])}")
        return task

    async def state(self, task_id: str) -> str:
        task = await self.call("GetTask", {"id": task_id, "historyLength": 0})
        return str(task["status"]["state"])

    async def poll_state(self, task_id: str, state: TaskState, timeout: float) -> bool:
        """Ask the agent (GetTask) until the task is in ``state``."""
        return await self._poll(task_id, lambda s: s is state, timeout)

    async def poll_terminal(self, task_id: str, timeout: float) -> bool:
        """Ask the agent (GetTask) until the task is over."""
        return await self._poll(task_id, lambda s: s.is_terminal, timeout)

    async def _poll(
        self, task_id: str, wanted: Callable[[TaskState], bool], timeout: float
    ) -> bool:
        try:
            async with asyncio.timeout(timeout):
                # polling: the fallback when webhooks fail (what webhooks spare a client)
                while not wanted(TaskState(await self.state(task_id))):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:
            return False
        return True


# ---- the demo ---------------------------------------------------------------------------------


class _ForwardLogs(logging.Handler):
    """The library's own warnings and errors, into the timeline (and counted as problems).

    The mock agent's warnings that a webhook will be retried are left out: part 2 makes
    them on purpose (the receiver is down), and its progress lines count them. A dead
    letter is still a problem.
    """

    def __init__(self, out: Out, style: Style, problems: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.out = out
        self.style = style
        self.problems = problems

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, WEBHOOK_OUTCOME, None) == "retry":
            return
        message = f"{record.name}: {record.getMessage()}"
        self.problems.append(message)
        self.out(self.style.bad(f"  ! {message}"))


def _make_routes() -> list[Route]:
    whsec = STANDARD_WEBHOOKS_SECRET_PREFIX + b64encode(secrets.token_bytes(24)).decode()

    def token() -> str:
        return f"tok-{secrets.token_urlsafe(12)}"

    roll_jwt = Route("roll", "jwt", token(), ROLL)
    roll_whsec = Route("roll", "whsec", whsec, ROLL, outage=OUTAGE_REQUESTS, follows=roll_jwt)
    return [
        roll_jwt,
        roll_whsec,
        Route("book", "jwt", token(), BOOK),
        Route("fail", "jwt", token(), FAIL),
        Route("echo", "jwt", token(), CANCEL),
    ]


async def run_demo(out: Out = print, *, loop: bool = True) -> int:
    """Run the demo, writing lines to ``out``; return the exit code (0: all verified).

    Part 1 is the webhooks to a local sink; part 2 (``loop``) the whole loop through the
    receiver, in its own process (:mod:`a2a_push.demo.loop`).
    """
    style = Style(out is print and sys.stdout.isatty())
    started = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - started

    routes = _make_routes()
    problems: list[str] = []
    forward = _ForwardLogs(out, style, problems)
    library_log = logging.getLogger("a2a_push")
    library_log.addHandler(forward)
    tmp = tempfile.mkdtemp(prefix="a2a-push-demo-")
    try:
        try:
            await _run(Path(tmp), routes, out, style, clock, problems)
        except Exception as exc:  # the demo reports on stdout, with the traceback, and fails
            _crashed(exc, out, style, problems)
        out("")
        code = _summarise(routes, problems, out, style)
        if loop:
            out("")
            out("")
            loop_problems: list[str] = []
            forward.problems = loop_problems  # library warnings now count against part 2
            try:
                loop_code = await run_loop(
                    Path(tmp),
                    out=out,
                    style=style,
                    clock=clock,
                    owner_authorization=OWNER_AUTHORIZATION,
                    problems=loop_problems,
                )
            except Exception as exc:
                _crashed(exc, out, style, loop_problems)
                out(style.bad("FAILED — part 2 crashed"))
                loop_code = 1
            code = code or loop_code
    finally:
        library_log.removeHandler(forward)
        removed = _remove(tmp)
    out("")
    if removed:
        out(f"Temporary folder {tmp} removed. Finished in {clock():.1f} s.")
    else:
        out(style.bad(f"FAILED — the temporary folder {tmp} was not removed"))
        code = 1
    if code == 0:
        for line in NEXT_STEPS:
            out(line)
    return code


def _crashed(exc: Exception, out: Out, style: Style, problems: list[str]) -> None:
    out(style.bad(f"✗ the demo crashed: {exc!r}"))
    out(traceback.format_exc().rstrip())
    problems.append(f"crashed: {exc!r}")


def _remove(folder: str) -> bool:
    """Delete the demo's temporary folder; True when it is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    return not Path(folder).exists()


def _outbox_clock(notifier: PushNotifier) -> Callable[[str], Awaitable[float | None]]:
    """When ``notifier`` wrote a webhook (by its webhook-id, the delivery's id)."""

    async def queued_at(webhook_id: str) -> float | None:
        delivery = await notifier.store.get_delivery(webhook_id) if webhook_id else None
        return delivery.created_at if delivery is not None else None

    return queued_at


async def _run(
    tmp: Path,
    routes: list[Route],
    out: Out,
    style: Style,
    clock: Callable[[], float],
    problems: list[str],
) -> None:
    """Agent and sink up, the JWKS fetched, then the four flows one after another."""
    sink = DemoSink(routes, clock=clock, out=out, style=style)
    await sink.start()
    try:
        # The agent knows its own URL (the JWT issuer) before it starts.
        async with (
            serving(tmp / "agent", step_delay=STEP_DELAY) as (agent_url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            async with session.get(agent_url + JWKS_PATH) as response:
                response.raise_for_status()
                sink.jwks = await response.json()
            sink.issuer = agent_url
            sink.queued_at = _outbox_clock(app[AGENT].notifier)
            _intro(out, style, tmp, agent_url, sink)
            client = Client(session, agent_url + "/", clock=clock, out=out, style=style)
            by_flow = {(r.flow, r.name): r for r in routes}
            for flow in (_roll, _book, _fail, _cancel):
                try:
                    await flow(client, sink, by_flow, problems)
                except (RpcError, aiohttp.ClientError) as exc:
                    problems.append(str(exc))
                    out(style.bad(f"  ✗ {exc}"))
    finally:
        await sink.stop()


async def _settle(client: Client, sink: DemoSink, *routes: Route) -> None:
    """Wait until each config of the flow got its last webhook. If a webhook did not verify,
    ask the agent (GetTask) until the task is over instead, so the flows stay apart."""
    await sink.wait_until(lambda: all(r.done for r in routes), FLOW_TIMEOUT)
    if any(r.failures for r in routes):
        await client.poll_terminal(routes[0].task_id, FLOW_TIMEOUT)
        return
    for route in routes:
        if not route.done:
            route.failures.append(f"no terminal webhook within {FLOW_TIMEOUT:g} s")


async def _wait_for_state(
    client: Client, sink: DemoSink, route: Route, label: str, state: TaskState
) -> None:
    """The client learns the task's state from its webhook; if that does not verify, it
    asks the agent instead (GetTask), so the demo can go on and report the failure."""
    await sink.wait_until(lambda: route.failures != [] or label in route.labels, FLOW_TIMEOUT)
    if label in route.labels:
        return
    if not await client.poll_state(route.task_id, state, FLOW_TIMEOUT):
        raise RpcError("GetTask", {"message": f"task never reached {state_name(state)}"})


async def _roll(
    client: Client, sink: DemoSink, routes: Mapping[tuple[str, str], Route], problems: list[str]
) -> None:
    jwt, whsec = routes["roll", "jwt"], routes["roll", "whsec"]
    task = await client.send("roll", "roll 2d6", jwt)
    jwt.task_id = whsec.task_id = task["id"]
    client.say(
        "roll",
        client.style.client(f"→ CreateTaskPushNotificationConfig {whsec.name}")
        + " (token whsec_…: Standard Webhooks)",
    )
    created = await client.call(
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "id": whsec.name, "url": whsec.url, "token": whsec.token},
    )
    client.say(
        "roll",
        f"← config {created['id']} created; its first webhook is a snapshot of the task as it"
        " is now",
    )
    await _settle(client, sink, jwt, whsec)
    done = await client.call("GetTask", {"id": task["id"], "historyLength": 0})
    result = _artifact_text(done, "dice-result")
    client.say("roll", f"← GetTask: {state_name(done['status']['state'])}, “{result}”")
    for route in (jwt, whsec):
        if route.artifact_text is not None and route.artifact_text != result:
            problems.append(
                f"roll/{route.name}: the webhook carried {route.artifact_text!r},"
                f" the task {result!r}"
            )


async def _book(
    client: Client, sink: DemoSink, routes: Mapping[tuple[str, str], Route], problems: list[str]
) -> None:
    route = routes["book", "jwt"]
    task = await client.send("book", f"book {BOOKING}", route)
    route.task_id = task["id"]
    await _wait_for_state(
        client, sink, route, "statusUpdate (input-required)", TaskState.INPUT_REQUIRED
    )
    client.say("book", "the agent asks for a date (input-required): the client answers")
    await client.send("book", BOOKING_DATE, task_id=task["id"])
    await _settle(client, sink, route)
    done = await client.call("GetTask", {"id": task["id"], "historyLength": 0})
    order = _artifact_text(done, "order")
    client.say("book", f"← GetTask: {state_name(done['status']['state'])}, “{order}”")
    if BOOKING_DATE not in order:
        problems.append(f"book: the order does not name the date: {order!r}")


async def _fail(
    client: Client, sink: DemoSink, routes: Mapping[tuple[str, str], Route], problems: list[str]
) -> None:
    route = routes["fail", "jwt"]
    task = await client.send("fail", "fail", route)
    route.task_id = task["id"]
    await _settle(client, sink, route)


async def _cancel(
    client: Client, sink: DemoSink, routes: Mapping[tuple[str, str], Route], problems: list[str]
) -> None:
    route = routes["echo", "jwt"]
    task = await client.send("echo", "take your time", route)
    route.task_id = task["id"]
    await _wait_for_state(client, sink, route, "statusUpdate (working)", TaskState.WORKING)
    client.say("echo", client.style.client("→ CancelTask") + f" {task['id'][:8]}… (it is working)")
    canceled = await client.call("CancelTask", {"id": task["id"]})
    client.say("echo", f"← task {task['id'][:8]}… {state_name(canceled['status']['state'])}")
    await _settle(client, sink, route)


def _artifact_text(task: Mapping[str, Any], name: str) -> str:
    for artifact in task.get("artifacts") or []:
        if artifact.get("name") == name:
            return next((p["text"] for p in artifact["parts"] if "text" in p), "")
    return ""


def _intro(out: Out, style: Style, tmp: Path, agent_url: str, sink: DemoSink) -> None:
    default = RetryPolicy()
    kids = ", ".join(str(k.get("kid", "?"))[:12] for k in sink.jwks.get("keys", []))
    out(
        style.bold(
            "a2a-push demo, part 1 — an A2A agent's push notifications, signed, retried, ordered"
        )
    )
    out("")
    out(f"  agent      a2a-push mock-agent at {agent_url}/ (JSON-RPC, A2A-Version 1.0),")
    out(f"             its outbox and keys in {tmp}")
    out(f"  client     plain JSON-RPC, Authorization: {OWNER_AUTHORIZATION} (the owner)")
    out(f"  JWKS       fetched from {agent_url}{JWKS_PATH}: kid {kids}")
    out(f"  sink       {sink.base_url}/hooks/… checks every webhook on arrival:")
    out("             jwt   → the JWT (X-A2A-Signature) against the JWKS + the config's token")
    out("             whsec → token whsec_…: the Standard Webhooks HMAC + the JWT; answers 503")
    out(f"                     to its first {OUTAGE_REQUESTS} requests (retries; order holds)")
    out(
        f"  retries    the agent's default policy: {default.quick_attempts} quick attempts,"
        f" then {default.describe()}"
    )
    out("  latency    from the webhook's write to the agent's outbox to its arrival at the sink")
    out("             (a retry's includes the waits before it)")
    out("")
    header = ROW.format(
        t="time", task="task", who="from", event="event", http="HTTP", latency="latency", check=""
    )
    out(header + "check")
    out("-" * (len(header) + 40))


def _summarise(routes: list[Route], problems: list[str], out: Out, style: Style) -> int:
    """Print the table and the verdict; return the exit code."""
    rows = [
        (
            "task",
            "config",
            "verified by",
            "webhooks",
            "retries",
            "all verified",
            "order (seq)",
            "final state",
        )
    ]
    failed = list(problems)
    for route in routes:
        where = f"{route.flow}/{route.name}"
        expected = route.expected_labels()
        labels = route.labels
        seqs = [a.seq for a in route.accepted]
        in_order = all(a < b for a, b in itertools.pairwise(seqs))
        # Each distinct failure once, with how often it happened.
        for failure, times in Counter(route.failures).items():
            failed.append(f"{where}: {failure}" + (f" ({times} times)" if times > 1 else ""))
        missing = [label for label in expected if label not in labels]
        if missing:
            failed.append(f"{where}: never accepted: {', '.join(missing)}")
        elif labels != expected:
            failed.append(f"{where}: accepted {labels}, expected {expected}")
        if not in_order:
            failed.append(f"{where}: out of order (seq {', '.join(map(str, seqs))})")
        strangers = {a.task_id for a in route.accepted} - {route.task_id}
        if strangers:
            failed.append(f"{where}: webhooks about another task: {', '.join(sorted(strangers))}")
        last = route.accepted[-1].state if route.accepted else None
        final = state_name(last) if last is not None and last.is_terminal else "—"
        order = " < ".join(map(str, seqs)) + (" ✓" if in_order else " ✗") if seqs else "—"
        rows.append(
            (
                route.flow,
                route.name,
                route.verified_by,
                f"{len(route.accepted)}/{len(expected)}",
                str(route.retries),
                "NO ✗" if route.failures or not route.accepted else "yes ✓",
                order,
                final,
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
        "✓✗→←—“”…".encode(encoding)
    except (LookupError, UnicodeEncodeError):
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(errors="replace")
    stopped_by: list[signal.Signals] = []
    try:
        return asyncio.run(_run_until_signalled(stopped_by))
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM or SIGHUP: cleaned up as for Ctrl-C
        return 128 + stopped_by[0] if stopped_by else 1


async def _run_until_signalled(stopped_by: list[signal.Signals]) -> int:
    """The demo, stopped by SIGTERM or SIGHUP (``kill``, ``timeout``, a closed terminal)
    as by Ctrl-C: cancelled, so it stops the receiver it started and deletes its
    temporary folder (keys included) on the way out."""
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None

    def stop(sig: signal.Signals) -> None:
        stopped_by.append(sig)
        main_task.cancel()

    for name in ("SIGTERM", "SIGHUP"):  # (Windows has no SIGHUP, nor signal handlers)
        sig = getattr(signal, name, None)
        if sig is not None:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop, sig)
    return await run_demo()
