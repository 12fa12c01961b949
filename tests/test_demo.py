"""``make demo`` works: the mock agent over HTTP, every webhook arrives verified and in
order, and a webhook that does not verify fails the demo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from a2a_push.signing import KeySet, verify_webhook_jwt
from examples import demo

REPO_ROOT = Path(__file__).resolve().parent.parent

# (task, config) -> what that config must receive
ROUTES = {
    ("roll", "jwt"): demo.ROLL,
    ("roll", "whsec"): demo.ROLL,
    ("book", "jwt"): demo.BOOK,
    ("fail", "jwt"): demo.FAIL,
    ("echo", "jwt"): demo.CANCEL,
}
FINAL = {"roll": "completed", "book": "completed", "fail": "failed", "echo": "canceled"}


async def run_collecting() -> tuple[int, list[str]]:
    lines: list[str] = []
    code = await demo.run_demo(out=lines.append)
    return code, lines


def rows_for(lines: list[str], task: str, config: str) -> list[str]:
    """The sink's timeline rows for one config ("  0.123s  roll  jwt  task (submitted) …")."""
    return [line for line in lines if re.match(rf"\s*\d+\.\d+s\s+{task}\s+{config}\s", line)]


def client_rows(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r"\s*\d+\.\d+s\s+\w+\s+client\s", line)]


def summary_row(lines: list[str], task: str, config: str) -> list[str]:
    (row,) = [line for line in lines if line.startswith(f"  {task}  {config}  ")]
    return re.split(r"\s{2,}", row.strip())


async def test_demo_drives_every_flow_and_verifies_every_webhook() -> None:
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code == 0, text

    for (task, config), expected in ROUTES.items():
        rows = rows_for(lines, task, config)
        delivered = [row for row in rows if " 200 " in row]
        assert len(delivered) == len(expected), (task, config, text)
        for row, event in zip(delivered, expected, strict=True):  # in order
            assert event in row, (task, config, row)
        assert rows and all("signature verified ✓" in row for row in rows), (task, config)
        _, _, _, webhooks, _, verified, order, final = summary_row(lines, task, config)
        assert webhooks == f"{len(expected)}/{len(expected)}"
        assert verified == "yes ✓" and order.endswith("✓") and final == FINAL[task]

    # each flow's terminal state, and the booking's input-required turn
    for state in ("completed", "input-required", "failed", "canceled"):
        assert f"statusUpdate ({state})" in text, state

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
    assert "/.well-known/jwks.json" in text  # the JWKS came over HTTP

    assert "verified" in text and "FAILED" not in text
    assert "OK — 20 webhooks arrived" in text
    assert "\x1b[" not in text  # no colour codes when not writing to a terminal
    for section in ("Embedding the notifier", "Verifying webhooks", "Delivery guarantees"):
        assert section in text
        assert f"## {section}" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


async def test_demo_shows_the_503_retries_and_order_holds() -> None:
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code == 0, text
    assert "answers 503" in text and "retries after 503" in text
    rows = rows_for(lines, "roll", "whsec")
    outages = [row for row in rows if " 503 " in row]
    assert len(outages) == demo.OUTAGE_REQUESTS
    assert all("simulated outage" in row for row in outages)
    assert any("retry 1" in row for row in rows)
    # nothing overtook the retried snapshot: the 503s come first, then all four in order
    assert rows[: demo.OUTAGE_REQUESTS] == outages
    assert all("task (submitted)" in row for row in rows[: demo.OUTAGE_REQUESTS + 1])
    events = [re.split(r"\s{2,}", row.strip())[3] for row in rows[demo.OUTAGE_REQUESTS :]]
    assert events == list(demo.ROLL)
    assert "order per config holds" in text
    _, _, _, webhooks, retries, verified, order, _ = summary_row(lines, "roll", "whsec")
    assert (webhooks, retries, verified) == ("4/4", str(demo.OUTAGE_REQUESTS), "yes ✓")
    assert order.endswith("✓")


async def test_demo_fails_loudly_when_a_signature_does_not_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stranger = KeySet.generate().jwks()  # not the agent's keys: as if the JWKS were swapped

    def with_wrong_keys(token: str, **kwargs: Any) -> dict[str, Any]:
        return verify_webhook_jwt(token, **{**kwargs, "jwks": stranger})

    monkeypatch.setattr(demo, "verify_webhook_jwt", with_wrong_keys)
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code != 0
    assert "✗ FAILED: unknown_kid" in text
    assert "FAILED —" in text and "signature verified ✓" not in text
    assert "Next:" not in text


def test_python_m_examples_demo_exits_zero() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""  # the demo prints only to stdout
    assert "OK — 20 webhooks arrived" in result.stdout
    assert "removed" in result.stdout  # the temporary folder is cleaned up
