"""examples/receiver_client.py against a real receiver and the mock agent on 127.0.0.1:
the agent's signed webhooks reach the receiver, and the example sees the task's states
in order over ``/events`` and returns the final snapshot read over REST."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from examples.receiver_client import ReceiverError, follow_task, main

from ..receiver_support import API_KEY, Rig, rig

# The ``book`` skill: asks for a date, then (after a follow-up message) books and completes.
BOOK_FLOW = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
]


def _is_subsequence(seen: list[str], flow: list[str]) -> bool:
    rest = iter(flow)
    return all(state in rest for state in seen)


async def _accepted_webhooks(r: Rig) -> float:
    async with r.session.get(r.receiver_url + "/metrics") as resp:
        text = await resp.text()
    match = re.search(r'^a2a_receiver_webhooks_total\{result="accepted"\} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


async def test_follow_task_sees_each_state_in_order_and_returns_the_final_task(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("book a table for two")
        seen: list[dict[str, Any]] = []
        follow = asyncio.create_task(
            follow_task(r.receiver_url, API_KEY, r.agent_url, task["id"], on_update=seen.append)
        )
        # The task waits for the client: the follower must still be following it.
        await r.wait_state(task["id"], "TASK_STATE_INPUT_REQUIRED")
        await asyncio.sleep(0.2)
        assert not follow.done()
        await _reply(r, task["id"])
        final = await asyncio.wait_for(follow, timeout=20)

        states = [s["status"]["state"] for s in seen]
        deduped = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
        assert _is_subsequence(deduped, BOOK_FLOW), states
        assert "TASK_STATE_INPUT_REQUIRED" in states
        assert states[-1] == "TASK_STATE_COMPLETED"
        assert states.count("TASK_STATE_COMPLETED") == 1
        assert all(s["id"] == task["id"] for s in seen)

        assert final["id"] == task["id"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [a["name"] for a in final.get("artifacts", [])] == ["order"]
        assert final == seen[-1]
        # Webhooks, not only the subscription's one fetch, carried the states.
        assert await _accepted_webhooks(r) >= 1


async def _reply(r: Rig, task_id: str) -> None:
    message = {
        "messageId": f"reply-{task_id}",
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": "Friday 8pm"}],
    }
    await r.rpc("SendMessage", {"message": message})


async def test_follow_task_raises_the_receivers_refusal(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 1d6")
        with pytest.raises(ReceiverError) as refused:
            await follow_task(r.receiver_url, "not-a-key", r.agent_url, task["id"])
        assert refused.value.status == 401
        with pytest.raises(ReceiverError) as missing:
            await follow_task(r.receiver_url, API_KEY, r.agent_url, "no-such-task")
        assert (missing.value.status, missing.value.code) == (404, "task_not_found")


async def test_main_prints_the_final_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 2d6")
        argv = ["--receiver", r.receiver_url, "--api-key", API_KEY]
        argv += ["--agent-url", r.agent_url, "--task-id", task["id"]]
        code = await asyncio.wait_for(asyncio.to_thread(main, argv), timeout=20)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert f"{task['id']}: TASK_STATE_COMPLETED" in err
        assert '"state": "TASK_STATE_COMPLETED"' in out
        assert "dice-result" in out

        code = await asyncio.to_thread(main, [*argv[:2], "--api-key", "wrong", *argv[4:]])
        assert code == 1
        assert "receiver_client: error: 401" in capsys.readouterr().err
