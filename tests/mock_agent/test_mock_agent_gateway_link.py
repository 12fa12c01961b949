"""The mock agent's link to an a2a-push gateway, as a user runs it (``a2a-push
mock-agent --gateway URL``, in its own process, against a real gateway on 127.0.0.1):
checked at start, and a gateway lost at run time is one log line and a failed task,
never tracebacks or a SendMessage that hangs."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ..gateway_support import AGENT_KEY, OTHER_KEY, free_port, gateway_settings, running_gateway
from ..mock_agent_support import ALICE, REPO_ROOT, Agent, message, mock_agent_process
from .test_mock_agent_console import post

HEADERS = {**ALICE, "Content-Type": "application/json"}
FAILED = "TASK_STATE_FAILED"


async def start(*args: str) -> tuple[int, str, str]:
    """``a2a-push mock-agent ARGS`` on a free port, expected to stop by itself."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2a_push",
        "mock-agent",
        "--port",
        str(free_port()),
        *args,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def send(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message(text, **fields)},
    }


def errors(agent: Agent) -> list[str]:
    return [line for line in agent.stderr if " ERROR " in line]


async def test_with_nothing_at_the_gateway_url_it_stops_with_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = await start("--gateway", url, "--gateway-key", AGENT_KEY)
    assert (code, out) == (1, "")  # no banner: it never started
    assert err.splitlines() == [
        f"a2a-push: error: cannot reach the gateway at {url} (connection refused): is "
        "`a2a-push gateway` running there?"
    ]


async def test_a_gateway_key_in_the_environment_counts_only_with_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a --gateway-key typed with the command is a mistake without --gateway (the
    # CLI tests check that): a key exported for other runs is not used, and the agent
    # starts with its embedded notifier as usual.
    monkeypatch.setenv("A2A_PUSH_GATEWAY_KEY", AGENT_KEY)
    async with mock_agent_process(tmp_path) as agent:
        assert agent.process.returncode is None
    assert not any("gateway" in line for line in agent.stderr)
    # With --gateway, it is the key: the agent goes on to ask the gateway.
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = await start("--gateway", url)
    assert code == 1 and f"cannot reach the gateway at {url}" in err


async def test_a_key_the_gateway_refuses_stops_it_with_one_line(tmp_path: Path) -> None:
    key = "not-a-key-of-this-gateway"
    async with running_gateway(gateway_settings(str(tmp_path / "gw.db"))) as (url, _gw):
        code, out, err = await start("--gateway", url, "--gateway-key", key)
    assert (code, out) == (1, "")
    # Not "cannot reach": it was reached, and it said no.
    assert err.splitlines() == [
        f"a2a-push: error: the gateway at {url} refused the agent key (401): check "
        "--gateway-key and the gateway's agents"
    ]
    assert key not in err


async def test_a_gateway_gone_at_run_time_is_one_error_line_and_a_failed_task(
    tmp_path: Path,
) -> None:
    # It logged two ERROR tracebacks of ~80 lines, blamed a gateway that "refused" the
    # event, and a blocking SendMessage waited for good.
    async with contextlib.AsyncExitStack() as stack:
        gateway = running_gateway(gateway_settings(str(tmp_path / "gw.db")))
        url, _gw = await gateway.__aenter__()
        stopped = False
        try:
            agent = await stack.enter_async_context(
                mock_agent_process(
                    tmp_path,
                    *("--gateway", url, "--gateway-key", AGENT_KEY),
                    *("--gateway-retry-for", "3"),  # (60 s unless set)
                )
            )
            done = await post(agent.url + "/", HEADERS, send("hello"))  # the gateway is up
            assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            await gateway.__aexit__(None, None, None)
            stopped = True

            started = time.monotonic()
            answer = await asyncio.wait_for(post(agent.url + "/", HEADERS, send("hello")), 60)
            waited = time.monotonic() - started
            task = answer["result"]["task"]
            assert task["status"]["state"] == FAILED
            [said] = task["status"]["message"]["parts"]
            assert "push gateway did not take this task's events" in said["text"]
            [line] = errors(agent)
        finally:
            if not stopped:
                await gateway.__aexit__(None, None, None)
    # The client's retries for --gateway-retry-for (the last pause may run past it), not
    # for ever.
    assert 3 <= waited < 20
    assert f"task {task['id']}: could not hand its WORKING status update" in line
    assert f"cannot reach the gateway at {url} (connection refused)" in line
    gave_up = re.search(r"gave up after (\d+) tries in (\d+) s", line)
    assert gave_up is not None and "refused the event" not in line
    assert int(gave_up[1]) >= 2 and int(gave_up[2]) >= 3
    assert len(errors(agent)) == 1  # the FAILED status it tried to hand over next: INFO
    assert "Traceback" not in "".join(agent.stderr)


async def test_a_gateway_refusing_the_agent_at_run_time_fails_its_tasks_at_once(
    tmp_path: Path,
) -> None:
    database = str(tmp_path / "gw.db")
    port = free_port()
    async with contextlib.AsyncExitStack() as stack:
        gateway = running_gateway(gateway_settings(database, port))
        url, _gw = await gateway.__aenter__()
        try:
            agent = await stack.enter_async_context(
                mock_agent_process(tmp_path, "--gateway", url, "--gateway-key", AGENT_KEY)
            )
            booking = await post(agent.url + "/", HEADERS, send("book a table"))
            task = booking["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        finally:
            await gateway.__aexit__(None, None, None)
        # The gateway comes back on its port without this agent's key.
        only_b = [{"id": "agent-b", "api_key": OTHER_KEY}]
        back = running_gateway(gateway_settings(database, port, agents=only_b))
        await stack.enter_async_context(back)

        # A follow-up: the caller hears why; the task does not stay WORKING for good.
        follow_up = send("tomorrow", taskId=task["id"])
        answer = await asyncio.wait_for(post(agent.url + "/", HEADERS, follow_up), 30)
        assert answer["error"]["code"] == -32603
        assert (
            "the push gateway did not take the event: the gateway answered 401"
            in (answer["error"]["message"])
        )
        get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
        stored = (await post(agent.url + "/", HEADERS, get))["result"]
        assert stored["status"]["state"] == FAILED

        # A new task: a refusal is not retried, so a blocking SendMessage returns at once.
        started = time.monotonic()
        answer = await asyncio.wait_for(post(agent.url + "/", HEADERS, send("hello")), 30)
        assert answer["result"]["task"]["status"]["state"] == FAILED
        assert time.monotonic() - started < 10
        await agent.wait_for_stderr("WORKING status update.*\n", timeout=10)
        lines = errors(agent)
    assert len(lines) == 2, lines  # one per event not taken
    assert all("the gateway answered 401: the bearer key sent is not" in x for x in lines)
    assert "gave up after" not in "".join(lines)  # one try: a refusal is final
    assert "Traceback" not in "".join(agent.stderr)
