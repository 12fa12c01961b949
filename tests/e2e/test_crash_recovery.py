"""kill -9 under load: nothing acknowledged is lost, order per task holds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
from a2a_push.store import SQLiteStore
from a2a_push.testing import SinkResponse, WebhookSink

ROOT = Path(__file__).resolve().parents[2]


async def test_sigkill_mid_load_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    tasks, events = 5, 60
    async with WebhookSink() as sink:
        for i in range(tasks):
            sink.set_default(f"/task-{i}", SinkResponse(200, delay=0.02))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.notifier_worker",
            "--db",
            str(db),
            "--url",
            sink.url(""),
            "--tasks",
            str(tasks),
            "--events",
            str(events),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        acknowledged: dict[str, tuple[str, int]] = {}
        try:
            async with asyncio.timeout(60):
                assert (await proc.stdout.readline()).strip() == b"READY"
                # Kill it while publishing is under way and deliveries are in flight.
                while sink.count < 40 or len(acknowledged) < 100:
                    line = (await proc.stdout.readline()).decode().split()
                    if line and line[0] == "P":
                        acknowledged[line[1]] = (line[2], int(line[3]))
                    elif line and line[0] == "DONE":
                        break
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        delivered_before = sink.count
        assert delivered_before < tasks * events, "the worker finished before it was killed"

        restarted = PushNotifier(
            SQLiteStore(db),
            issuer="http://worker.test",
            address_policy=AddressPolicy(allow_loopback=True),
        )
        async with restarted:
            deadline = time.monotonic() + 30
            while True:
                received = {r.header("webhook-id") for r in sink.received}
                if set(acknowledged) <= received:
                    break
                assert time.monotonic() < deadline, (
                    f"{len(set(acknowledged) - received)} acknowledged deliveries never arrived; "
                    f"dispatcher: {restarted.dispatcher.debug_state()}"
                )
                await asyncio.sleep(0.05)

        # Per task, first arrivals come in sequence order; repeats are only re-sends of
        # what was in flight when the process died (receivers dedup on webhook-id).
        seen: set[str] = set()
        by_task: dict[str, list[int]] = {}
        duplicates = 0
        for r in sink.received:
            wid = r.header("webhook-id") or ""
            if wid in seen:
                duplicates += 1
                continue
            seen.add(wid)
            claims = json.loads(_b64(str(r.header("X-A2A-Signature")).split(".")[1]))
            by_task.setdefault(claims["taskId"], []).append(claims["seq"])
        for seqs in by_task.values():
            assert seqs == sorted(seqs)
        assert duplicates <= tasks  # at most one in flight per (config, task) lane


def _b64(segment: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
