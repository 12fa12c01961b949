"""The mock agent as a user starts it (``python -m a2a_push.mock_agent`` and ``a2a-push
mock-agent``, each in its own process on 127.0.0.1): its --port checks, a busy port, the
banner, the warnings about failing webhooks, and the README's curl example against it."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_push.protocol.constants import HEADER_NOTIFICATION_TOKEN
from a2a_push.testing import WebhookSink

from ..gateway_support import free_port
from ..mock_agent_support import REPO_ROOT, mock_agent_process

README = REPO_ROOT / "README.md"
MOCK_AGENT_SECTION = "Quickstart: run the receiver (receiver operators)"

# The two ways to start it, and the name each puts before "error:".
COMMANDS = {
    "module": (["-m", "a2a_push.mock_agent"], "a2a-push"),
    "console": (["-m", "a2a_push", "mock-agent"], "a2a-push"),
}


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---- --port and binding --------------------------------------------------------------


@pytest.mark.parametrize("how", COMMANDS)
@pytest.mark.parametrize("port", ["99999", "0"])
def test_a_port_out_of_range_is_a_one_line_usage_error(how: str, port: str) -> None:
    args, _ = COMMANDS[how]
    result = run([*args, "--port", port])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "OverflowError" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "error:" in last and "--port" in last and port in last
    assert "1 to 65535" in last
    assert result.stdout == ""  # nothing announced


def test_a_port_that_is_not_a_number_is_a_usage_error() -> None:
    result = run(["-m", "a2a_push.mock_agent", "--port", "http"])
    assert result.returncode == 2
    assert "argument --port: 'http' is not a port number (1 to 65535)" in result.stderr


@pytest.mark.parametrize("how", COMMANDS)
def test_a_busy_port_is_one_line_naming_it_and_no_banner(how: str) -> None:
    args, prog = COMMANDS[how]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run([*args, "--port", str(port)])
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{prog}: error: port {port} is in use; pick another with --port or stop the "
        "process using it"
    ]
    assert result.stdout == ""  # the banner comes only once the port is bound


@pytest.mark.parametrize("how", COMMANDS)
def test_an_unusable_data_dir_is_one_line_naming_it(how: str, tmp_path: Path) -> None:
    args, prog = COMMANDS[how]
    (tmp_path / "push.db").mkdir()  # the outbox file's name taken by a folder
    port = str(free_port())
    for data_dir in ("/proc/no-such-folder", str(tmp_path)):
        result = run([*args, "--port", port, "--data-dir", data_dir])
        assert result.returncode == 1, result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"{prog}: error: ") and "check --data-dir" in line
        assert result.stdout == ""


def test_log_level_is_checked() -> None:
    result = run(["-m", "a2a_push.mock_agent", "--log-level", "loud"])
    assert result.returncode == 2
    assert "--log-level" in result.stderr and "WARNING" in result.stderr


# ---- a running agent ------------------------------------------------------------------


def readme_curl() -> tuple[str, dict[str, str], dict[str, Any]]:
    """The README's mock-agent curl example: (URL, headers, JSON body)."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {MOCK_AGENT_SECTION}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    (block,) = [b for b in blocks if "SendMessage" in b and "taskPushNotificationConfig" in b]
    command = "\n".join(line for line in block.splitlines() if not line.startswith("#"))
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "curl"
    url = next(w for w in words if w.startswith("http://"))
    headers = dict(words[i + 1].split(": ", 1) for i, word in enumerate(words) if word == "-H")
    body = json.loads(words[words.index("-d") + 1])
    # It talks to the agent the section starts.
    started = re.search(r"a2a-push mock-agent --port (\d+)", section)
    assert started is not None and url == f"http://127.0.0.1:{started[1]}/"
    return url, headers, body


async def post(url: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(body), headers=headers) as response,
    ):
        assert response.status == 200
        answer: dict[str, Any] = await response.json()
        return answer


def with_webhook(body: dict[str, Any], url: str) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    body["params"]["configuration"]["taskPushNotificationConfig"]["url"] = url
    return body


async def test_the_readme_curl_example_is_accepted_with_its_inline_config(
    tmp_path: Path,
) -> None:
    _, headers, body = readme_curl()
    assert body["method"] == "SendMessage"
    inline = body["params"]["configuration"]["taskPushNotificationConfig"]
    assert set(inline) == {"url", "token"}
    assert headers["A2A-Version"] == "1.0" and headers["Content-Type"] == "application/json"

    async with mock_agent_process(tmp_path) as agent:
        answer = await post(agent.url + "/", headers, body)  # exactly as in the README
        assert "error" not in answer, answer
        task_id = answer["result"]["task"]["id"]
        listed = await post(
            agent.url + "/",
            headers,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "ListTaskPushNotificationConfigs",
                "params": {"taskId": task_id},
            },
        )
        (config,) = listed["result"]["configs"]
        assert config["url"] == inline["url"]  # the inline config was registered


async def test_the_readme_body_pushes_signed_webhooks_with_its_token(tmp_path: Path) -> None:
    _, headers, body = readme_curl()
    token = body["params"]["configuration"]["taskPushNotificationConfig"]["token"]
    async with WebhookSink() as sink, mock_agent_process(tmp_path) as agent:
        answer = await post(agent.url + "/", headers, with_webhook(body, sink.url("/webhook")))
        assert "error" not in answer, answer
        await sink.wait_for(4, timeout=20)  # roll: task, working, dice-result, completed
        assert all(hook.header(HEADER_NOTIFICATION_TOKEN) == token for hook in sink.received)


async def test_a_failing_webhook_is_logged_as_retried_then_dead_lettered(
    tmp_path: Path,
) -> None:
    _, headers, body = readme_curl()
    async with (
        WebhookSink() as sink,
        mock_agent_process(tmp_path, "--retry-schedule", "0.2") as agent,
    ):
        sink.set_default("/down", 503)
        down = sink.url("/down")
        answer = await post(agent.url + "/", headers, with_webhook(body, down))
        assert "error" not in answer, answer
        task_id = answer["result"]["task"]["id"]
        # Default --log-level (WARNING): the retry, then the dead letter, one line each.
        # The URL's origin and the config's id (a webhook URL's path may hold a secret).
        origin = re.escape(sink.url("/").rstrip("/"))
        retry = await agent.wait_for_stderr(rf"webhook to {origin} \(push config [^)]+\) failed")
        dead = await agent.wait_for_stderr(
            rf"webhook to {origin} \(push config [^)]+\) dead-lettered"
        )
    assert " INFO a2a_push.webhooks: " in retry
    assert " WARNING a2a_push.webhooks: " in dead
    for line in (retry, dead):
        assert f"task {task_id}" in line and "HTTP 503" in line
    assert "after 3 attempts (HTTP 503); retrying in" in retry
    assert "`a2a-push deliveries list --state dead` lists dead letters (in the SQLite" in dead
    token = body["params"]["configuration"]["taskPushNotificationConfig"]["token"]
    assert token not in "".join(agent.stderr)  # the config's token is never logged
    assert "Traceback" not in "".join(agent.stderr)
