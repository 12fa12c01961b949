"""``make demo`` works. Part 1: the mock agent over HTTP, every webhook arrives verified and
in order, and a webhook that does not verify fails the demo. Part 2: the whole loop through
the receiver in its own process, stopped and restarted mid-run, loses nothing; anything
lost, or a receiver that does not start, fails the demo.

The demo runs once for the whole module (``python -m a2a_push demo``, as ``make demo``
does); the failure tests run it in-process with one thing broken."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from a2a_push.delivery.dispatcher import WEBHOOK_OUTCOME, webhook_log
from a2a_push.demo import loop as demo_loop
from a2a_push.demo import run as demo
from a2a_push.demo import sink
from a2a_push.demo.loop import Retries, TaskRun
from a2a_push.demo.receiver_side import Seen, Update
from a2a_push.protocol.types import TaskState
from a2a_push.signing import KeySet, verify_webhook_jwt

REPO_ROOT = Path(__file__).resolve().parents[2]

# (task, config) -> what that config must receive
ROUTES = {
    ("roll", "jwt"): demo.ROLL,
    ("roll", "whsec"): demo.ROLL,
    ("book", "jwt"): demo.BOOK,
    ("fail", "jwt"): demo.FAIL,
    ("echo", "jwt"): demo.CANCEL,
}
FINAL = {"roll": "completed", "book": "completed", "fail": "failed", "echo": "canceled"}


# part 2: what each task ends as
FINAL_LOOP = {
    "roll": "completed",
    "fail": "failed",
    "book": "completed",
    "login": "completed",
    "report": "completed",
}
PART_2 = "a2a-push demo, part 2"
SSE_ROW = re.compile(r"\s*\d+\.\d+s\s+sse\s+#(\d+)\s+(\w+)\s+([0-9a-f]{8})…\s+(\S+)(.*)")


@pytest.fixture(scope="module")
def demo_run() -> subprocess.CompletedProcess[str]:
    """``python -m a2a_push demo``, once for every test of the module."""
    return subprocess.run(
        [sys.executable, "-m", "a2a_push", "demo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=90,
    )


@pytest.fixture(scope="module")
def lines(demo_run: subprocess.CompletedProcess[str]) -> list[str]:
    assert demo_run.returncode == 0, demo_run.stdout + demo_run.stderr
    return demo_run.stdout.splitlines()


def part_1(lines: list[str]) -> list[str]:
    return lines[: index_of(lines, PART_2)]


def part_2(lines: list[str]) -> list[str]:
    return lines[index_of(lines, PART_2) :]


def index_of(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


async def run_collecting(*, loop: bool = True) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = await demo.run_demo(out=lines.append, loop=loop)
    return code, lines


def rows_for(lines: list[str], task: str, config: str) -> list[str]:
    """The sink's timeline rows for one config ("  0.123s  roll  jwt  task (submitted) …")."""
    return [line for line in lines if re.match(rf"\s*\d+\.\d+s\s+{task}\s+{config}\s", line)]


def client_rows(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r"\s*\d+\.\d+s\s+\w+\s+client\s", line)]


def summary_row(lines: list[str], task: str, config: str) -> list[str]:
    (row,) = [line for line in lines if line.startswith(f"  {task}  {config}  ")]
    return re.split(r"\s{2,}", row.strip())


def test_demo_drives_every_flow_and_verifies_every_webhook(lines: list[str]) -> None:
    text = "\n".join(lines)
    lines = part_1(lines)

    for (task, config), expected in ROUTES.items():
        rows = rows_for(lines, task, config)
        delivered = [row for row in rows if " 200 " in row]
        assert len(delivered) == len(expected), (task, config, text)
        for row, event in zip(delivered, expected, strict=True):  # in order
            assert event in row, (task, config, row)
        assert rows and all("signature verified ✓" in row for row in rows), (task, config)
        # each attempt's latency, from the outbox write to the arrival
        assert all(re.search(r" \d[\d,]* ms  ", row) for row in rows), (task, config, rows)
        _, _, _, webhooks, _, verified, order, final = summary_row(lines, task, config)
        assert webhooks == f"{len(expected)}/{len(expected)}"
        assert verified == "yes ✓" and order.endswith("✓") and final == FINAL[task]

    part = "\n".join(lines)
    # each flow's terminal state, and the booking's input-required turn
    for state in ("completed", "input-required", "failed", "canceled"):
        assert f"statusUpdate ({state})" in part, state

    # the JSON-RPC steps are in the timeline too
    steps = "\n".join(client_rows(lines))
    for step in (
        "→ SendMessage “roll 2d6”",
        "→ CreateTaskPushNotificationConfig whsec",
        "its first webhook is a snapshot",
        "→ SendMessage “book a table for two”",
        f"→ SendMessage “{demo.BOOKING_DATE}” (returnImmediately, same taskId",
        "→ SendMessage “fail”",
        "→ CancelTask",
        "canceled",
        "← GetTask: completed",
    ):
        assert step in steps, step
    assert "/.well-known/jwks.json" in part  # the JWKS came over HTTP

    assert "verified" in text and "FAILED" not in text
    assert "OK — 20 webhooks arrived" in part
    assert "\x1b[" not in text  # no colour codes when not writing to a terminal
    for section in ("Embedding the notifier", "Verifying webhooks", "Delivery guarantees"):
        assert section in text
        assert f"## {section}" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_demo_shows_the_503_retries_and_order_holds(lines: list[str]) -> None:
    lines = part_1(lines)
    text = "\n".join(lines)
    assert "answers 503" in text and "retries after 503" in text
    rows = rows_for(lines, "roll", "whsec")
    outages = [row for row in rows if " 503 " in row]
    assert len(outages) == sink.OUTAGE_REQUESTS
    assert all("simulated outage" in row for row in outages)
    assert any("retry 1" in row for row in rows)
    # nothing overtook the retried snapshot: the 503s come first, then all four in order
    assert rows[: sink.OUTAGE_REQUESTS] == outages
    assert all("task (submitted)" in row for row in rows[: sink.OUTAGE_REQUESTS + 1])
    events = [re.split(r"\s{2,}", row.strip())[3] for row in rows[sink.OUTAGE_REQUESTS :]]
    assert events == list(demo.ROLL)
    assert "order per config holds" in text
    _, _, _, webhooks, retries, verified, order, _ = summary_row(lines, "roll", "whsec")
    assert (webhooks, retries, verified) == ("4/4", str(sink.OUTAGE_REQUESTS), "yes ✓")
    assert order.endswith("✓")


async def test_demo_fails_loudly_when_a_signature_does_not_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stranger = KeySet.generate().jwks()  # not the agent's keys: as if the JWKS were swapped

    def with_wrong_keys(token: str, **kwargs: Any) -> dict[str, Any]:
        return verify_webhook_jwt(token, **{**kwargs, "jwks": stranger})

    monkeypatch.setattr(sink, "verify_webhook_jwt", with_wrong_keys)
    code, lines = await run_collecting(loop=False)
    text = "\n".join(lines)
    assert code != 0
    assert "✗ FAILED: unknown_kid" in text
    assert "FAILED —" in text and "signature verified ✓" not in text
    assert "Next:" not in text


def test_a2a_push_demo_exits_zero(demo_run: subprocess.CompletedProcess[str]) -> None:
    assert demo_run.returncode == 0, demo_run.stdout + demo_run.stderr
    assert demo_run.stderr == ""  # the demo prints only to stdout (the receiver to its log)
    assert "OK — 20 webhooks arrived" in demo_run.stdout
    assert "OK — all 5 tasks final in the receiver" in demo_run.stdout
    assert "removed" in demo_run.stdout  # the temporary folder is cleaned up
    assert "a2a-push receiver --help" in demo_run.stdout
    assert "python -m receiver --help" not in demo_run.stdout


# ---- part 2: the whole loop through the receiver --------------------------------------------


def sse_rows(lines: list[str]) -> list[tuple[int, str, str, str, str]]:
    """(event id, task label, task id prefix, state, rest) of each SSE line."""
    rows = []
    for line in lines:
        match = SSE_ROW.fullmatch(line)
        if match:
            event_id, label, task, state, rest = match.groups()
            rows.append((int(event_id), label, task, state, rest))
    return rows


def row_index(lines: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(lines) if re.search(pattern, line))


def test_part_2_runs_the_receiver_as_a_process_and_restarts_it(lines: list[str]) -> None:
    lines = part_2(lines)
    text = "\n".join(lines)
    assert "python -m receiver --config receiver/receiver.json --host 127.0.0.1" in text
    assert "A2A_RECEIVER_API_KEYS" in text  # the API key comes from the environment
    started = re.search(r"receiver  started, pid (\d+): healthy after", text)
    stopped = re.search(r"receiver  SIGTERM → pid (\d+)", text)
    exited = re.search(r"receiver  pid (\d+) exited \(code 0\)", text)
    restarted = re.search(r"receiver  restarted, pid (\d+) \(same port (\d+), same data dir", text)
    assert started and stopped and exited and restarted, text
    assert started[1] == stopped[1] == exited[1] != restarted[1]  # a new process …
    assert f"process on http://127.0.0.1:{restarted[2]}," in text  # … on the first one's port

    # the app answers two tasks while the receiver is down: the agent goes on without it
    down, up = row_index(lines, "SIGTERM → pid"), row_index(lines, "restarted, pid")
    for answer in demo_loop.ANSWERS.values():
        sent = row_index(lines, f"→ SendMessage “{answer}”.* while the receiver is down")
        assert down < sent < up
    assert any("every task finished while the receiver was down" in line for line in lines)


def test_part_2_sse_client_prints_each_update_and_resumes_after_the_restart(
    lines: list[str],
) -> None:
    lines = part_2(lines)
    rows = sse_rows(lines)
    ids = [row[0] for row in rows]
    assert ids == sorted(set(ids)) and ids[0] == 1  # in order, none twice

    labels = [label for label, _ in (*demo_loop.TASKS, demo_loop.LATE)]
    assert sorted({row[1] for row in rows}) == sorted(labels)
    for label in labels:  # the last line about each task: its final state
        last = [row for row in rows if row[1] == label][-1]
        assert last[3] == FINAL_LOOP[label], (label, last)
    # the interrupted states arrive before the outage, the artifacts with the updates
    states = {(row[1], row[3]) for row in rows}
    assert {("book", "input-required"), ("login", "auth-required")} <= states
    assert any(row[1] == "roll" and re.search(r"“2d6: \d+ \+ \d+ = \d+”", row[4]) for row in rows)
    assert any(
        row[1] == "book" and "“Booked a table for two for friday 8pm" in row[4] for row in rows
    )

    # the stream ends with the receiver; the client resumes from the last id it saw
    resumed = row_index(lines, r"sse\s+reconnected with Last-Event-ID: \d+")
    last_id = int(re.findall(r"Last-Event-ID: (\d+)", lines[resumed])[0])
    before = [row[0] for row in sse_rows(lines[:resumed])]
    after = [row[0] for row in sse_rows(lines[resumed:])]
    assert before and before[-1] == last_id
    assert after and min(after) > last_id
    assert row_index(lines, r"sse\s+the receiver ended the stream|connection lost") < resumed
    # the answered tasks finished while the receiver was down: seen after the resume
    completed = row_index(lines, r"sse\s+#\d+\s+book\s+\S+\s+completed")
    assert completed > resumed


def test_part_2_summary_shows_nothing_was_lost(lines: list[str]) -> None:
    lines = part_2(lines)
    text = "\n".join(lines)
    for label, final in FINAL_LOOP.items():
        (row,) = [line for line in lines if re.match(rf"  {label}\s+[0-9a-f]{{8}}…  ", line)]
        _, _, agent, receiver, sse, updates = re.split(r"\s{2,}", row.strip())
        assert (agent, receiver, sse) == (final, f"{final} ✓", f"{final} ✓"), row
        assert int(updates) >= 1
    assert "OK — all 5 tasks final in the receiver and on the SSE stream" in text
    assert "none seen twice" in text
    assert re.search(
        r"[1-9]\d* webhooks were retried \(\d+ failed attempts in all\), none lost", text
    )
    assert "the SSE client resumed with Last-Event-ID" in text
    assert "FAILED" not in text


def test_part_2_judge_names_every_lost_or_repeated_update() -> None:
    done = TaskState.COMPLETED.value
    tasks = [
        TaskRun("book", "book it", "b" * 36, done, TaskState.WORKING.value, 200),
        TaskRun("roll", "roll 2d6", "r" * 36, done, None, 404),
    ]
    seen = Seen(
        updates=[
            Update(1, "b" * 36, TaskState.WORKING.value),
            Update(2, "r" * 36, done),
            Update(2, "r" * 36, done),
        ]
    )
    problems = demo_loop.judge(tasks, seen, Retries(0, 0, pending=1, dead=1), [])
    text = "\n".join(problems)
    assert "book bbbbbbbb…: the receiver has working, the agent completed" in text
    assert "roll rrrrrrrr…: GET /tasks/{id} answered 404" in text
    assert "book bbbbbbbb…: the SSE client last saw working" in text
    assert "SSE event ids seen more than once: 2" in text
    assert "never resumed with Last-Event-ID" in text
    assert "1 pending and 1 dead-lettered" in text
    assert "no webhook was retried" in text

    fine = [TaskRun("roll", "roll 2d6", "r" * 36, done, done, 200)]
    ok = Seen(updates=[Update(1, "r" * 36, done)], resumed_from=[1])
    assert demo_loop.judge(fine, ok, Retries(1, 3, pending=0, dead=0), []) == []


async def test_demo_fails_with_the_reason_when_the_receiver_does_not_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = property(lambda self: [sys.executable, "-m", "receiver", "--port", "not-a-port"])
    monkeypatch.setattr(demo_loop.ReceiverProcess, "command", broken)
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code != 0
    assert "OK — 20 webhooks arrived" in text  # part 1 is fine
    assert "✗ the receiver exited with code 2 while starting" in text
    assert "the receiver's log (last lines):" in text and "not-a-port" in text
    assert "FAILED — part 2" in text and "Next:" not in text
    assert "removed" in text


OUTBOX_NOW = re.compile(
    r"outbox: (\d+) webhooks pending now, (\d+) delivered so far, (\d+) failed attempts so far"
)


def test_part_2_outbox_counters_say_what_each_number_is(lines: list[str]) -> None:
    """Every line about the agent's outbox shows the same three numbers, labelled alike:
    a count pending now, and two running totals that never go down and end at the
    summary's total."""
    lines = part_2(lines)
    about = [line for line in lines if "outbox:" in line or "failed attempts" in line]
    counts = [OUTBOX_NOW.search(line) for line in about if "outbox:" in line]
    assert len(counts) >= 2 and all(counts), about  # the outage progress and its end
    delivered = [int(m[2]) for m in counts if m]
    failed = [int(m[3]) for m in counts if m]
    assert delivered == sorted(delivered) and failed == sorted(failed)
    (total,) = [
        int(m[1]) for line in about if (m := re.search(r"\((\d+) failed attempts in all\)", line))
    ]
    assert 0 < failed[-1] <= total
    # no other wording for the same numbers
    for line in about:
        rest = OUTBOX_NOW.sub("", line)
        assert "failed attempts" not in rest or "failed attempts in all" in rest, line
        assert "pending" not in rest and "wait in the outbox" not in rest, line


def test_the_next_hints_are_real_commands_and_readme_sections() -> None:
    text = "\n".join(demo.NEXT_STEPS)
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    sections = re.findall(r"“([^”]+)”", text)
    assert len(sections) == 4
    for section in sections:
        assert f"\n## {section}\n" in readme, section
    commands = re.findall(r"`(a2a-push [^`]+)`", text)
    assert commands == ["a2a-push mock-agent --help", "a2a-push receiver --help"]
    for command in commands:  # the console script itself, as the reader would run it
        args = command.split()[1:]
        result = subprocess.run(
            [sys.executable, "-m", "a2a_push", *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (command, result.stderr)
        assert result.stdout.startswith(f"usage: {command.removesuffix(' --help')}")
    assert "python -m" not in text
    assert "source .venv/bin/activate" in text and ".venv/bin/a2a-push" in text


def test_demo_does_not_count_expected_webhook_retries_as_problems() -> None:
    """Part 2 stops the receiver on purpose: the notifier's retry lines are expected
    (its progress lines count them); a dead letter is still a problem."""
    shown: list[str] = []
    problems: list[str] = []
    handler = demo._ForwardLogs(shown.append, sink.Style(False), problems)
    library_log = logging.getLogger("a2a_push")  # where the demo listens
    library_log.addHandler(handler)
    try:
        webhook_log.warning("webhook to x failed; retrying", extra={WEBHOOK_OUTCOME: "retry"})
        assert problems == [] and shown == []
        webhook_log.warning("webhook to x dead-lettered", extra={WEBHOOK_OUTCOME: "dead"})
        logging.getLogger("a2a_push.delivery").warning("something else")
    finally:
        library_log.removeHandler(handler)
    assert problems == [
        "a2a_push.webhooks: webhook to x dead-lettered",
        "a2a_push.delivery: something else",
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_demo_stopped_by_a_signal_stops_its_receiver_and_removes_its_folder(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # `kill`, `timeout` or a closed terminal, as Ctrl-C: no receiver left listening, and
    # no temporary folder (it holds private signing keys) left on disk.
    proc = subprocess.Popen(
        [sys.executable, "-m", "a2a_push", "demo"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8", "TMPDIR": str(tmp_path)},
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # until the receiver runs, in part 2
            if "a separate process on" in line:
                break
        else:
            pytest.fail("the demo ended before part 2 started its receiver")
        proc.send_signal(sig)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig
    assert list(tmp_path.iterdir()) == []
    left = [
        cmdline
        for cmdline in (_cmdline(p) for p in Path("/proc").iterdir() if p.name.isdigit())
        if str(tmp_path) in cmdline
    ]
    assert left == []


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone meanwhile, or not ours to read
        return ""
