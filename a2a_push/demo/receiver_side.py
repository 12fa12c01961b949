"""Part 2 of the demo, around the receiver: its process (``python -m receiver``) and the
app's SSE client reading task updates from it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import aiohttp

import receiver
from a2a_push.protocol.constants import HEADER_AUTHORIZATION
from a2a_push.protocol.types import TaskState
from receiver.settings import ENV_PREFIX

RECONNECT_DELAY: Final = 0.2  # the SSE client's pause between reconnection attempts
START_TIMEOUT: Final = 15.0  # the receiver process answers /healthz within this
STOP_TIMEOUT: Final = 10.0  # … and exits within this after SIGTERM
CLIENT_ID: Final = "demo-app"
# `python -m receiver` runs from the folder that holds the receiver package.
RECEIVER_ROOT: Final = Path(receiver.__file__).resolve().parent.parent


class Styling(Protocol):
    """The demo's output style (``a2a_push.demo.sink.Style``): colour on a terminal only."""

    def ok(self, text: str) -> str: ...
    def bad(self, text: str) -> str: ...
    def warn(self, text: str) -> str: ...
    def dim(self, text: str) -> str: ...
    def bold(self, text: str) -> str: ...
    def client(self, text: str) -> str: ...


class LoopError(Exception):
    """The loop cannot go on (a process did not start, a wait timed out, …)."""


def state_name(state: str | None) -> str:
    """TASK_STATE_INPUT_REQUIRED -> input-required."""
    if not state:
        return "—"
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


def is_terminal(state: str | None) -> bool:
    try:
        return state is not None and TaskState(state).is_terminal
    except ValueError:
        return False


def artifact_text(task: Mapping[str, Any], width: int = 48) -> str | None:
    """The newest artifact's text, on one line and shortened; None without one."""
    artifacts = task.get("artifacts") or []
    if not artifacts:
        return None
    text = "".join(p.get("text", "") for p in artifacts[-1].get("parts") or [])
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ---- the app's SSE client ------------------------------------------------------------------


@dataclass(frozen=True)
class Update:
    """One SSE event: a task snapshot the receiver stored."""

    event_id: int
    task_id: str
    state: str | None


@dataclass
class Seen:
    """What the app's SSE client saw, in order (the final check reads only this)."""

    updates: list[Update] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)  # Last-Event-ID of each resume

    def last_state(self, task_id: str) -> str | None:
        return next((u.state for u in reversed(self.updates) if u.task_id == task_id), None)

    def count(self, task_id: str) -> int:
        return sum(u.task_id == task_id for u in self.updates)

    def twice(self) -> list[int]:
        """Event ids that arrived more than once."""
        counts = Counter(u.event_id for u in self.updates)
        return sorted(i for i, n in counts.items() if n > 1)


@dataclass
class EventStream:
    """``GET /events`` with the app's API key; resumes with ``Last-Event-ID`` after a drop.

    It reconnects every ``RECONNECT_DELAY`` seconds (sooner than the receiver's ``retry:``
    hint, to keep the demo short) and prints a line per event and per (re)connection.
    """

    session: aiohttp.ClientSession
    url: str
    api_key: str
    say: Callable[[str, str], None]
    label_of: Callable[[str], str]
    style: Styling
    seen: Seen = field(default_factory=Seen)
    last_id: int = 0
    connections: int = 0
    failure: str | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        lost = False
        while True:
            headers = {HEADER_AUTHORIZATION: f"Bearer {self.api_key}"}
            if self.last_id:
                headers["Last-Event-ID"] = str(self.last_id)
            try:
                async with self.session.get(
                    self.url,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=2),
                    read_bufsize=1 << 20,
                ) as response:
                    if response.status != 200:
                        self.failure = f"GET /events answered {response.status}"
                        self._notify()
                        return
                    self.connections += 1
                    if self.connections == 1:
                        self.say("sse", "connected: GET /events (Authorization: Bearer <API key>)")
                    else:
                        self.seen.resumed_from.append(self.last_id)
                        self.say(
                            "sse",
                            self.style.ok("reconnected")
                            + f" with Last-Event-ID: {self.last_id}: the stream resumes after it",
                        )
                    lost = False
                    self._notify()
                    await self._read(response.content)
                    reason = "the receiver ended the stream"
            except (aiohttp.ClientError, ConnectionError) as exc:
                reason = f"connection lost ({type(exc).__name__})"
            except Exception as exc:  # e.g. not the stream it should be: the demo fails
                self.failure = f"the SSE client failed: {exc!r}"
                self._notify()
                return
            if not lost and self.connections:
                lost = True
                self.say(
                    "sse",
                    self.style.warn(reason)
                    + f"; reconnecting with Last-Event-ID: {self.last_id} every"
                    f" {RECONNECT_DELAY:g} s",
                )
            await asyncio.sleep(RECONNECT_DELAY)

    async def _read(self, content: aiohttp.StreamReader) -> None:
        fields: dict[str, str] = {}
        async for raw in content:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if "data" in fields:
                    self._dispatch(fields)
                fields = {}
            elif not line.startswith(":"):  # ":" starts a comment (keepalive)
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data" and "data" in fields:
                    value = fields["data"] + "\n" + value
                fields[name] = value

    def _dispatch(self, fields: Mapping[str, str]) -> None:
        event_id = int(fields.get("id", "0"))
        payload = json.loads(fields["data"])
        task = payload.get("task") or {}
        task_id = str(payload.get("taskId") or task.get("id") or "?")
        state = (task.get("status") or {}).get("state")
        again = any(u.event_id == event_id for u in self.seen.updates)
        self.seen.updates.append(Update(event_id, task_id, state))
        self.last_id = max(self.last_id, event_id)
        text = f"#{event_id:<3} {self.label_of(task_id):<6} {task_id[:8]}…  {state_name(state):<14}"
        artifact = artifact_text(task)
        if artifact:
            text += f"  “{artifact}”"
        if again:
            text += self.style.bad(" ✗ seen before")
        self.say("sse", text.rstrip())
        self._notify()

    def _notify(self) -> None:
        woken, self.changed = self.changed, asyncio.Event()
        woken.set()


# ---- the receiver process -------------------------------------------------------------------


@dataclass
class ReceiverProcess:
    """``python -m receiver`` on a fixed port and data dir; its output goes to a log file."""

    port: int
    data_dir: Path
    config: Path
    api_key: str
    log: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "receiver",
            "--config",
            str(self.config),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]

    async def start(self, session: aiohttp.ClientSession) -> float:
        """Start it and wait until ``/healthz`` answers 200; the seconds that took."""
        started = time.perf_counter()
        # Only this run's settings: none inherited from the caller's environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env[ENV_PREFIX + "API_KEYS"] = f"{CLIENT_ID}:{self.api_key}"
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                cwd=RECEIVER_ROOT,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while not await self._healthy(session):
                    if self.process.returncode is not None:
                        raise LoopError(
                            f"the receiver exited with code {self.process.returncode} while"
                            " starting"
                        )
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise LoopError(
                f"the receiver did not answer /healthz within {START_TIMEOUT:g} s"
            ) from None
        return time.perf_counter() - started

    async def _healthy(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(
                self.url + "/healthz", timeout=aiohttp.ClientTimeout(total=2)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def stop(self) -> tuple[int | None, float]:
        """SIGTERM and wait for the exit (SIGKILL after ``STOP_TIMEOUT``); (code, seconds).
        The code is None when it had to be killed."""
        process, started = self.process, time.perf_counter()
        if process is None:
            return 0, 0.0
        self.process = None
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                code = await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
            return None, time.perf_counter() - started
        return code, time.perf_counter() - started

    def log_tail(self, lines: int = 15) -> list[str]:
        try:
            return self.log.read_text("utf-8", errors="replace").splitlines()[-lines:]
        except OSError:
            return []
