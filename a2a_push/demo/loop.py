"""Part 2 of ``make demo``: the whole loop, with the receiver in its own process.

mock agent → notifier → receiver (``python -m receiver``) → GetTask → an app on SSE.

The demo is the app. It starts tasks on the mock agent (plain JSON-RPC) and subscribes
to each through the receiver's REST API (``POST /subscriptions``: the receiver registers
a push config on the agent). Its SSE client reads ``GET /events`` and prints one line per
task update. Once the tasks are going, the receiver is stopped with SIGTERM; while it is
down the app answers two tasks that wait for input, so the agent goes on publishing and
its webhooks fail. The receiver then restarts on the same port and data dir, the
notifier's retries get through, and the SSE client resumes with ``Last-Event-ID``.

At the end every task must be in its final state in the receiver (``GET /tasks/{id}``)
and on the SSE stream, with no event id seen twice and nothing dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from a2a_push.mock_agent import AGENT, serving
from a2a_push.notifier import JWKS_PATH, PushNotifier
from a2a_push.protocol.constants import HEADER_A2A_VERSION, HEADER_AUTHORIZATION, VERSION_1_0
from a2a_push.protocol.types import TaskState
from a2a_push.store.base import Delivery, DeliveryFilter, DeliveryState
from receiver.settings import ENV_PREFIX

from .receiver_side import (
    STOP_TIMEOUT,
    EventStream,
    LoopError,
    ReceiverProcess,
    Seen,
    Styling,
    is_terminal,
    state_name,
)

Out = Callable[[str], object]

STEP_DELAY: Final = 0.3  # the agent's pause between steps in this part
RETRY_SCHEDULE: Final = (1.0,) * 30  # durable retries every second (default: 5 s, 5 m, …)
OUTAGE_SECONDS: Final = 2.5  # the receiver stays down at least this long
STEP_TIMEOUT: Final = 15.0  # every other wait
POLL: Final = 0.1
PROGRESS_EVERY: Final = 1.0

# (label, what the app sends); the first four start while the receiver is up.
TASKS: Final = (
    ("roll", "roll 2d6"),
    ("fail", "fail"),
    ("book", "book a table for two"),
    ("login", "login"),
)
LATE: Final = ("report", "report")  # started just before the outage: it runs through it
# What each task shows before the outage (the interrupted ones wait for an answer) …
BEFORE_OUTAGE: Final = {
    "roll": TaskState.COMPLETED,
    "fail": TaskState.FAILED,
    "book": TaskState.INPUT_REQUIRED,
    "login": TaskState.AUTH_REQUIRED,
}
# … and the answers the app sends while the receiver is down.
ANSWERS: Final = {"book": "friday 8pm", "login": "signed in, here is my token"}


# ---- the loop ----------------------------------------------------------------------------


@dataclass
class TaskRun:
    label: str
    text: str
    task_id: str = ""
    agent_state: str | None = None
    receiver_state: str | None = None
    receiver_status: int | None = None


class Loop:
    """Runs part 2; every step is a timeline row."""

    def __init__(
        self,
        tmp: Path,
        *,
        out: Out,
        style: Styling,
        clock: Callable[[], float],
        owner_authorization: str,
        problems: list[str],
    ) -> None:
        self.tmp = tmp
        self.out = out
        self.style = style
        self.clock = clock
        self.owner_authorization = owner_authorization
        self.problems = problems
        self.tasks: list[TaskRun] = []
        self.session: aiohttp.ClientSession | None = None
        self.agent_url = ""
        self.notifier: PushNotifier | None = None
        self.receiver: ReceiverProcess | None = None
        self.stream: EventStream | None = None
        self.outage = 0.0
        self.retries: Retries | None = None
        self.finished = False  # got through every phase
        self._ids = 0

    def say(self, who: str, text: str) -> None:
        self.out(f"{self.clock():>7.3f}s  {who:<8}  {text}")

    def label_of(self, task_id: str) -> str:
        return next((t.label for t in self.tasks if t.task_id == task_id), "?")

    # ---- talking to the agent and the receiver --------------------------------------------

    async def rpc(self, method: str, params: Mapping[str, Any]) -> Any:
        assert self.session is not None
        self._ids += 1
        request = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        headers = {HEADER_AUTHORIZATION: self.owner_authorization, HEADER_A2A_VERSION: VERSION_1_0}
        async with self.session.post(self.agent_url + "/", json=request, headers=headers) as r:
            body = await r.json()
        if "error" in body:
            raise LoopError(f"{method}: {body['error'].get('message')}")
        return body["result"]

    async def send(self, text: str, task_id: str | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if task_id:
            message["taskId"] = task_id
        params = {"message": message, "configuration": {"returnImmediately": True}}
        result = await self.rpc("SendMessage", params)
        return dict(result["task"])

    async def start_task(self, run: TaskRun) -> None:
        """SendMessage to the agent, then subscribe to the task through the receiver."""
        assert self.session is not None and self.receiver is not None
        task = await self.send(run.text)
        run.task_id = task["id"]
        self.tasks.append(run)
        async with self.session.post(
            self.receiver.url + "/subscriptions",
            json={"agentUrl": self.agent_url + "/", "taskId": run.task_id},
            headers=self._api_headers(),
        ) as response:
            body = await response.json()
            if response.status not in (200, 201):
                raise LoopError(f"POST /subscriptions answered {response.status}: {body}")
        self.say(
            "app",
            self.style.client(f"→ SendMessage “{run.text}”")
            + f" ← task {run.task_id[:8]}…; "
            + self.style.client("→ POST /subscriptions")
            + f" ← {response.status} {body.get('state', '')}",
        )

    def _api_headers(self) -> dict[str, str]:
        assert self.receiver is not None
        return {HEADER_AUTHORIZATION: f"Bearer {self.receiver.api_key}"}

    async def agent_states(self) -> dict[str, str | None]:
        states = {}
        for run in self.tasks:
            task = await self.rpc("GetTask", {"id": run.task_id, "historyLength": 0})
            states[run.task_id] = task["status"]["state"]
        return states

    async def outbox(self) -> OutboxNow:
        """The agent's outbox now (see ``OutboxNow``)."""
        assert self.notifier is not None
        deliveries = await self.notifier.store.list_deliveries(DeliveryFilter(limit=10_000))
        return OutboxNow.of(deliveries)

    async def until(
        self,
        condition: Callable[[], Awaitable[bool]],
        what: str,
        *,
        timeout: float = STEP_TIMEOUT,
        progress: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        """Wait for ``condition`` (re-checked on every SSE event and every ``POLL`` s),
        printing ``progress`` every second; LoopError after ``timeout``."""
        assert self.stream is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        next_note = loop.time() + PROGRESS_EVERY
        while not await condition():
            if self.stream.failure:
                raise LoopError(self.stream.failure)
            now = loop.time()
            if now >= deadline:
                raise LoopError(f"timed out after {timeout:g} s waiting for {what}")
            if progress is not None and now >= next_note:
                self.say("…", self.style.dim(await progress()))
                next_note += PROGRESS_EVERY
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stream.changed.wait(), POLL)

    # ---- the phases ------------------------------------------------------------------------

    async def run(self) -> None:
        # The agent's base URL is its JWT issuer: the receiver's default works.
        async with serving(
            self.tmp / "loop-agent", step_delay=STEP_DELAY, retry_schedule=RETRY_SCHEDULE
        ) as (self.agent_url, app):
            self.notifier = notifier = app[AGENT].notifier
            try:
                await self._run_with_agent()
            finally:
                if self.receiver is not None and self.receiver.process is not None:
                    code, _ = await self.receiver.stop()
                    if code is None:
                        self.problems.append("the receiver had to be killed at the end")
                with contextlib.suppress(Exception):
                    self.retries = await _retries(notifier)

    async def _run_with_agent(self) -> None:
        self.receiver = self._receiver_process()
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self.session = session
            self._intro()
            took = await self.receiver.start(session)
            self.say("receiver", f"started, pid {self._pid()}: healthy after {took:.2f} s")
            self.stream = EventStream(
                session,
                self.receiver.url + "/events",
                self.receiver.api_key,
                self.say,
                self.label_of,
                self.style,
            )
            reader = asyncio.create_task(self.stream.run(), name="demo-sse")
            try:
                await self.until(self._connected, "the SSE connection")
                await self._before_outage()
                await self._outage()
                await self._after_outage()
                await self._check()
                self.finished = True
            finally:  # the app hangs up before its session closes
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    def _intro(self) -> None:
        assert self.receiver is not None
        r = self.receiver
        args = [
            str(Path(a).relative_to(self.tmp)) if a.startswith(str(self.tmp)) else a
            for a in r.command[3:]
        ]
        half = args.index("--port")
        for line in (
            self.style.bold(
                "a2a-push demo, part 2 — the whole loop: mock agent → notifier → receiver →"
                " GetTask → an app on SSE"
            ),
            "",
            f"  agent      another mock agent at {self.agent_url}/; durable webhook retries"
            f" every {RETRY_SCHEDULE[0]:g} s",
            f"  receiver   a separate process on {r.url}, started in the temporary folder as",
            f"               python -m receiver {' '.join(args[:half])}",
            f"                 {' '.join(args[half:])}",
            "             receiver.json names the agent (URL, JWT issuer, JWKS, credentials for",
            f"             GetTask); the app's API key is in {ENV_PREFIX}API_KEYS",
            "  app        this demo: starts tasks on the agent, subscribes to each on the receiver",
            "             (POST /subscriptions) and reads GET /events (SSE): a line per update",
            "  outage     SIGTERM to the receiver while tasks go on; it restarts on the same port",
            "             and data dir, and the app resumes with Last-Event-ID",
            "",
        ):
            self.out(line)

    def _receiver_process(self) -> ReceiverProcess:
        data_dir = self.tmp / "receiver"
        data_dir.mkdir(parents=True)
        config = data_dir / "receiver.json"
        agent = {
            "url": self.agent_url + "/",
            "issuer": self.agent_url,
            "jwks_url": self.agent_url + JWKS_PATH,
            # GetTask and the push configs as the owner of the demo's tasks.
            "credentials": self.owner_authorization,
        }
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"agents": [agent]}, fh, indent=2)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        return ReceiverProcess(
            port=port,
            data_dir=data_dir,
            config=config,
            api_key=secrets.token_urlsafe(24),
            log=data_dir / "receiver.log",
        )

    def _pid(self) -> str:
        assert self.receiver is not None and self.receiver.process is not None
        return str(self.receiver.process.pid)

    async def _connected(self) -> bool:
        assert self.stream is not None
        return self.stream.connections > 0

    def _seen(self) -> Seen:
        assert self.stream is not None
        return self.stream.seen

    async def _before_outage(self) -> None:
        seen = self._seen()
        for label, text in TASKS:
            await self.start_task(TaskRun(label, text))

        def not_yet() -> list[str]:
            return [
                t.label
                for t in self.tasks
                if seen.last_state(t.task_id) != BEFORE_OUTAGE[t.label].value
            ]

        async def settled() -> bool:
            return not not_yet()

        async def waiting() -> str:
            return f"waiting for {', '.join(not_yet())} on the SSE stream"

        await self.until(settled, "the first tasks on the SSE stream", progress=waiting)
        await self.start_task(TaskRun(*LATE))

    async def _outage(self) -> None:
        assert self.receiver is not None
        pid = self._pid()
        down = time.perf_counter()
        self.say(
            "receiver",
            self.style.warn(f"SIGTERM → pid {pid}") + ": the agent's webhooks to it will fail",
        )
        code, took = await self.receiver.stop()
        if code is None:
            self.problems.append(f"the receiver did not exit within {STOP_TIMEOUT:g} s of SIGTERM")
        self.say("receiver", f"pid {pid} exited (code {code}) after {took:.2f} s")
        for run in self.tasks:
            answer = ANSWERS.get(run.label)
            if answer is not None:
                await self.send(answer, run.task_id)
                self.say(
                    "app",
                    self.style.client(f"→ SendMessage “{answer}”")
                    + f" ({run.label} {run.task_id[:8]}…, same taskId) while the receiver is down",
                )

        async def ready() -> bool:
            states = await self.agent_states()
            now = await self.outbox()
            return (
                time.perf_counter() - down >= OUTAGE_SECONDS
                and all(is_terminal(s) for s in states.values())
                and now.pending > 0
                and now.failed > 0
            )

        async def status() -> str:
            states = await self.agent_states()
            done = sum(is_terminal(s) for s in states.values())
            return (
                f"receiver down {time.perf_counter() - down:.1f} s · agent: {done}/"
                f"{len(states)} tasks finished · outbox: {await self.outbox()}"
            )

        await self.until(ready, "the agent to finish every task", progress=status)
        self.say(
            "agent",
            f"every task finished while the receiver was down · outbox: {await self.outbox()}",
        )
        took = await self.receiver.start(self._session())
        self.outage = time.perf_counter() - down
        self.say(
            "receiver",
            self.style.ok(f"restarted, pid {self._pid()}")
            + f" (same port {self.receiver.port}, same data dir): healthy after {took:.2f} s;"
            f" it was down {self.outage:.1f} s",
        )

    def _session(self) -> aiohttp.ClientSession:
        assert self.session is not None
        return self.session

    async def _after_outage(self) -> None:
        seen = self._seen()

        def not_final() -> list[str]:
            return [t.label for t in self.tasks if not is_terminal(seen.last_state(t.task_id))]

        async def done() -> bool:
            return not not_final() and (await self.outbox()).pending == 0

        async def waiting() -> str:
            return (
                f"retries under way · outbox: {await self.outbox()} · not final on the"
                f" stream yet: {', '.join(not_final()) or 'none'}"
            )

        await self.until(done, "every final state on the SSE stream", progress=waiting)

    async def _check(self) -> None:
        """What the receiver serves now, beside what the agent says."""
        assert self.session is not None and self.receiver is not None
        states = await self.agent_states()
        for run in self.tasks:
            run.agent_state = states[run.task_id]
            async with self.session.get(
                f"{self.receiver.url}/tasks/{run.task_id}", headers=self._api_headers()
            ) as response:
                run.receiver_status = response.status
                body = await response.json()
            if response.status == 200:
                run.receiver_state = (body.get("status") or {}).get("state")


# ---- the verdict ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxNow:
    """The agent's outbox at one moment, as part 2's progress lines show it. ``pending``
    is a count *now* (it falls as retries succeed); the other two only grow."""

    pending: int  # webhooks waiting now: not sent yet, or failed and due to be retried
    delivered: int  # webhooks delivered so far
    failed: int  # failed attempts so far, over every webhook (the final summary's total)

    @classmethod
    def of(cls, deliveries: list[Delivery]) -> OutboxNow:
        def failures(d: Delivery) -> int:
            # Every attempt of a pending or dead webhook failed; a delivered one's last won.
            return max(0, d.attempts - 1) if d.state is DeliveryState.DELIVERED else d.attempts

        return cls(
            pending=sum(d.state is DeliveryState.PENDING for d in deliveries),
            delivered=sum(d.state is DeliveryState.DELIVERED for d in deliveries),
            failed=sum(failures(d) for d in deliveries),
        )

    def __str__(self) -> str:
        return (
            f"{self.pending} webhooks pending now, {self.delivered} delivered so far,"
            f" {self.failed} failed attempts so far"
        )


@dataclass(frozen=True)
class Retries:
    """The agent's outbox at the end of the part."""

    webhooks: int  # deliveries that needed more than one attempt
    attempts: int  # their failed attempts
    pending: int
    dead: int


async def _retries(notifier: PushNotifier) -> Retries:
    stats = await notifier.store.stats()
    delivered = await notifier.store.list_deliveries(
        DeliveryFilter(state=DeliveryState.DELIVERED, limit=10_000)
    )
    retried = [d for d in delivered if d.attempts > 1]
    return Retries(
        webhooks=len(retried),
        attempts=sum(d.attempts - 1 for d in retried),
        pending=stats.pending,
        dead=stats.dead,
    )


def judge(
    tasks: list[TaskRun],
    seen: Seen,
    retries: Retries | None,
    problems: list[str],
    *,
    finished: bool = True,
) -> list[str]:
    """Everything that says an update was lost or seen twice; empty when all is well.

    When the loop did not get to its end (``finished`` false), ``problems`` say why (the
    timeline above shows how far it got) and nothing else is judged."""
    failed = list(problems)
    if not finished:
        return failed
    for run in tasks:
        where = f"{run.label} {run.task_id[:8]}…"
        if not is_terminal(run.agent_state):
            failed.append(f"{where}: not finished on the agent ({state_name(run.agent_state)})")
        if run.receiver_status != 200:
            failed.append(f"{where}: GET /tasks/{{id}} answered {run.receiver_status}")
        elif run.receiver_state != run.agent_state:
            failed.append(
                f"{where}: the receiver has {state_name(run.receiver_state)},"
                f" the agent {state_name(run.agent_state)}"
            )
        if seen.last_state(run.task_id) != run.agent_state:
            failed.append(
                f"{where}: the SSE client last saw {state_name(seen.last_state(run.task_id))},"
                f" the agent has {state_name(run.agent_state)}"
            )
    twice = seen.twice()
    if twice:
        failed.append(f"SSE event ids seen more than once: {', '.join(map(str, twice))}")
    ids = [u.event_id for u in seen.updates]
    if ids != sorted(set(ids)):
        failed.append("SSE event ids did not keep increasing")
    if not seen.resumed_from:
        failed.append("the SSE client never resumed with Last-Event-ID")
    if retries is None:
        failed.append("the agent's outbox could not be read")
    else:
        if retries.pending or retries.dead:
            failed.append(
                f"the agent's outbox ended with {retries.pending} pending and"
                f" {retries.dead} dead-lettered webhooks"
            )
        if not retries.webhooks:
            failed.append("no webhook was retried: the outage was not exercised")
    return failed


def summarise(loop: Loop, seen: Seen, failed: list[str]) -> int:
    """Print part 2's table and verdict; return its exit code."""
    out, style = loop.out, loop.style
    rows = [("task", "task id", "agent", "receiver (GET /tasks)", "SSE app (last)", "updates")]
    for run in loop.tasks if loop.finished else ():

        def mark(state: str | None, run: TaskRun = run) -> str:
            good = state == run.agent_state and is_terminal(state)
            return f"{state_name(state)} {'✓' if good else '✗'}"

        rows.append(
            (
                run.label,
                run.task_id[:8] + "…",
                state_name(run.agent_state),
                mark(run.receiver_state),
                mark(seen.last_state(run.task_id)),
                str(seen.count(run.task_id)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows if len(rows) > 1 else ()):
        out("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            out("  " + "  ".join("-" * w for w in widths))
    if len(rows) > 1:
        out("")
    if failed:
        out(style.bad(f"FAILED — part 2, {len(failed)} problem(s):"))
        for problem in failed:
            out(style.bad(f"  ✗ {problem}"))
        return 1
    retries = loop.retries
    assert retries is not None
    ids = [u.event_id for u in seen.updates]
    resumed = ", ".join(map(str, seen.resumed_from))
    out(
        style.ok("OK")
        + f" — all {len(loop.tasks)} tasks final in the receiver and on the SSE stream;"
        + f" {len(ids)} events (ids {min(ids)} to {max(ids)}), none seen twice."
    )
    out(
        f"     The receiver was down {loop.outage:.1f} s: {retries.webhooks} webhooks were"
        f" retried ({retries.attempts} failed attempts in all), none lost, none dead-lettered;"
    )
    out(f"     the SSE client resumed with Last-Event-ID {resumed}.")
    return 0


async def run_loop(
    tmp: Path,
    *,
    out: Out,
    style: Styling,
    clock: Callable[[], float],
    owner_authorization: str,
    problems: list[str],
) -> int:
    """Run part 2 in ``tmp`` (the caller removes it); return its exit code."""
    loop = Loop(
        tmp,
        out=out,
        style=style,
        clock=clock,
        owner_authorization=owner_authorization,
        problems=problems,
    )
    try:
        await loop.run()
    except (LoopError, aiohttp.ClientError, OSError) as exc:
        out(style.bad(f"  ✗ {exc}"))
        problems.append(str(exc) or type(exc).__name__)
        if loop.receiver is not None:
            tail = loop.receiver.log_tail()
            if tail:
                out(style.dim("  the receiver's log (last lines):"))
                for line in tail:
                    out(style.dim(f"    {line}"))
    out("")
    seen = loop.stream.seen if loop.stream is not None else Seen()
    failed = judge(loop.tasks, seen, loop.retries, problems, finished=loop.finished)
    return summarise(loop, seen, failed)
