"""The receiver end to end: mock agent -> notifier (JWT) -> receiver -> GetTask -> client."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..receiver_support import BOB_KEY, rig, sse_frames


async def test_subscribed_task_is_fetched_and_served(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("roll 2d6")
        sub = await r.subscribe(task["id"])
        assert sub["state"] == "active" and sub["taskId"] == task["id"]
        done = await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        assert done["id"] == task["id"] and done["artifacts"]
        status, _ = await r.task(task["id"], key=BOB_KEY)
        assert status == 404  # bob has no subscription to it


async def test_input_required_flow_streams_over_sse(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        task = await r.send("book a table")
        await r.subscribe(task["id"])
        await r.wait_state(task["id"], "TASK_STATE_INPUT_REQUIRED")
        async with r.session.get(r.receiver_url + "/events", headers=r.api(), timeout=None) as resp:
            assert resp.status == 200
            text = ""
            while "TASK_STATE_INPUT_REQUIRED" not in text:
                text += (await asyncio.wait_for(resp.content.readany(), 5)).decode()
        frames = sse_frames(text)
        assert frames and frames[-1]["data"]["taskId"] == task["id"]


async def test_an_agent_url_written_another_way_works_for_subscribing_and_reading(
    tmp_path: Path,
) -> None:
    """A client that subscribes with the agent's URL in capitals and a trailing slash
    reads the task back with the same spelling (it is the same agent)."""
    async with rig(tmp_path) as r:
        task = await r.send("roll 2d6")
        spelled = r.agent_url.replace("http://", "HTTP://") + "/"
        async with r.session.post(
            r.receiver_url + "/subscriptions",
            json={"agentUrl": spelled, "taskId": task["id"]},
            headers=r.api(),
        ) as resp:
            assert resp.status == 201, await resp.text()
            assert (await resp.json())["agentUrl"] == r.agent_url.rstrip("/")
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        async with r.session.get(
            f"{r.receiver_url}/tasks/{task['id']}", params={"agentUrl": spelled}, headers=r.api()
        ) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["id"] == task["id"]
