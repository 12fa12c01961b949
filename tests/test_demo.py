"""``make demo`` works: every webhook arrives, verified and in order, and failures fail it."""

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


async def run_collecting() -> tuple[int, list[str]]:
    lines: list[str] = []
    code = await demo.run_demo(out=lines.append)
    return code, lines


def rows_for(lines: list[str], config: str) -> list[str]:
    """The timeline rows for one config ("  0.123s  plain  task (submitted) ...")."""
    return [line for line in lines if re.match(rf"\s*\d+\.\d+s\s+{config}\s", line)]


def summary_row(lines: list[str], config: str) -> list[str]:
    (row,) = [line for line in lines if line.startswith(f"  {config}  ")]
    return re.split(r"\s{2,}", row.strip())


async def test_demo_succeeds_and_shows_every_event_for_both_configs() -> None:
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code == 0, text
    for config in ("plain", "stdwh"):
        delivered = [row for row in rows_for(lines, config) if " 200 " in row]
        for event in demo.EXPECTED:
            assert sum(event in row for row in delivered) == 1, (config, event, text)
        assert all("signature verified ✓" in row for row in rows_for(lines, config))
        _, _, webhooks, _, verified, order = summary_row(lines, config)
        assert (webhooks, verified) == ("4/4", "yes ✓") and order.endswith("✓")
    assert "verified" in text and "FAILED" not in text
    assert "\x1b[" not in text  # no colour codes when not writing to a terminal


async def test_demo_shows_the_503_retries() -> None:
    code, lines = await run_collecting()
    assert code == 0
    assert "answers 503" in "\n".join(lines) and "retries after 503" in "\n".join(lines)
    outages = [row for row in rows_for(lines, "stdwh") if " 503 " in row]
    assert len(outages) == demo.OUTAGE_REQUESTS
    assert any("durable retry" in row for row in rows_for(lines, "stdwh"))
    _, _, webhooks, retries, verified, order = summary_row(lines, "stdwh")
    assert (webhooks, retries, verified) == ("4/4", str(demo.OUTAGE_REQUESTS), "yes ✓")
    assert order.endswith("✓")


async def test_demo_fails_loudly_when_a_signature_does_not_verify(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stranger = KeySet.generate().jwks()  # not the notifier's keys

    def with_wrong_keys(token: str, **kwargs: Any) -> dict[str, Any]:
        return verify_webhook_jwt(token, **{**kwargs, "jwks": stranger})

    monkeypatch.setattr(demo, "verify_webhook_jwt", with_wrong_keys)
    code, lines = await run_collecting()
    text = "\n".join(lines)
    assert code == 1
    assert "✗ FAILED: unknown_kid" in text
    assert "FAILED —" in text and "signature verified ✓" not in text


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
    assert "OK — 8 webhooks arrived" in result.stdout
