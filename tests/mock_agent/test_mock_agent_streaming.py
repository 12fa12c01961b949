"""Streaming in the mock agent (SendStreamingMessage, SubscribeToTask and their v0.3 names)
on a real aiohttp server, read as Server-Sent Events with aiohttp: the Task first, then
every update in order, where streams end, several subscribers, clients that go away, and
one task followed by polling, by stream and by webhook at once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from a2a_push.mock_agent import AGENT, MockAgent, create_app
from a2a_push.testing import WebhookSink

from ..gateway_support import gateway_settings, running_gateway
from ..mock_agent_support import ALICE, ALICE_V03, BOB, message, running_agent
from ..mock_agent_support import describe_event as describe
from ..mock_agent_support import result as http_result

STEP = 0.05
TIMEOUT = 10.0


@dataclass
class Running:
    url: str
    agent: MockAgent
    server: TestServer
    session: aiohttp.ClientSession


@asynccontextmanager
async def serving(
    tmp_path: Path, *, step_delay: float = STEP, keepalive: float = 15.0
) -> AsyncIterator[Running]:
    app = create_app(
        data_dir=tmp_path / f"agent-{uuid.uuid4().hex[:6]}",
        allow_webhook_hosts=["127.0.0.1"],
        public_url="http://agent.test",
        step_delay=step_delay,
        keepalive=keepalive,
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield Running(str(server.make_url("")).rstrip("/"), app[AGENT], server, session)
    finally:
        await server.close()


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    async with serving(tmp_path) as r:
        yield r


class Stream:
    """One SSE response: its JSON-RPC messages as they arrive."""

    def __init__(self, response: aiohttp.ClientResponse, request_id: Any) -> None:
        self.response = response
        self.request_id = request_id
        self.results: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any] | None:
        """The next result; None when the stream has ended."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                line = await self.response.content.readline()
                if not line:
                    return None
                text = line.decode().rstrip("\r\n")
                if not text.startswith("data: "):
                    continue
                envelope = json.loads(text.removeprefix("data: "))
                assert envelope["jsonrpc"] == "2.0" and envelope["id"] == self.request_id
                assert "error" not in envelope, envelope
                result: dict[str, Any] = envelope["result"]
                self.results.append(result)
                return result

    async def keepalive(self) -> None:
        """Read up to the next SSE comment (a keep-alive)."""
        async with asyncio.timeout(TIMEOUT):
            while not (await self.response.content.readline()).startswith(b":"):
                pass

    async def rest(self) -> list[dict[str, Any]]:
        """Every result until the stream ends."""
        while await self.next() is not None:
            pass
        return self.results


@asynccontextmanager
async def open_stream(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str] = ALICE,
) -> AsyncIterator[Stream]:
    request_id = f"req-{uuid.uuid4().hex[:8]}"
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with session.post(url + "/", json=body, headers=headers) as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream", await response.text()
        yield Stream(response, request_id)


async def stream_error(
    r: Running, method: str, params: dict[str, Any], headers: dict[str, str] = ALICE
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    async with r.session.post(r.url + "/", json=body, headers=headers) as response:
        assert response.status == 200
        assert response.content_type == "application/json"  # an error comes before any stream
        answer = await response.json()
    assert "result" not in answer, answer
    error: dict[str, Any] = answer["error"]
    return error


def assemble(artifacts: dict[str, list[str]], result: dict[str, Any]) -> None:
    """Apply one event to ``artifacts`` (artifact id -> texts) as a client would."""
    if "task" in result:
        for artifact in result["task"].get("artifacts", []):
            artifacts[artifact["artifactId"]] = [p["text"] for p in artifact["parts"]]
    elif "artifactUpdate" in result:
        update = result["artifactUpdate"]
        texts = [p["text"] for p in update["artifact"]["parts"]]
        key = update["artifact"]["artifactId"]
        if update.get("append"):
            artifacts[key] = [*artifacts[key], *texts]  # KeyError: an append with no start
        else:
            artifacts[key] = texts


def assembled(results: list[dict[str, Any]]) -> dict[str, list[str]]:
    artifacts: dict[str, list[str]] = {}
    for result in results:
        assemble(artifacts, result)
    return artifacts


def task_artifacts(task: dict[str, Any]) -> dict[str, list[str]]:
    return {a["artifactId"]: [p["text"] for p in a["parts"]] for a in task.get("artifacts", [])}


async def get_task(r: Running, task_id: str, headers: dict[str, str] = ALICE) -> dict[str, Any]:
    task: dict[str, Any] = await http_result(r.session, r.url, "GetTask", {"id": task_id}, headers)
    return task


async def wait_state(r: Running, task_id: str, state: str) -> dict[str, Any]:
    async with asyncio.timeout(TIMEOUT):
        while True:
            task = await get_task(r, task_id)
            if task["status"]["state"] == state:
                return task
            await asyncio.sleep(0.01)


async def start(r: Running, text: str) -> str:
    params = {"message": message(text), "configuration": {"returnImmediately": True}}
    answer = await http_result(r.session, r.url, "SendMessage", params)
    task_id: str = answer["task"]["id"]
    return task_id


# ---- SendStreamingMessage ------------------------------------------------------------------


async def test_the_card_says_streaming(running: Running) -> None:
    async with running.session.get(running.url + "/.well-known/agent-card.json") as response:
        card = await response.json()
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is True


async def test_a_stream_sends_the_task_then_every_update_in_order_and_closes_at_completed(
    running: Running,
) -> None:
    async with open_stream(
        running.session, running.url, "SendStreamingMessage", {"message": message("report")}
    ) as s:
        results = await s.rest()
        assert s.response.headers["Cache-Control"] == "no-cache"
    assert [describe(r) for r in results] == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        *["artifact:report"] * 4,
        "status:TASK_STATE_COMPLETED",
    ]
    task_id = results[0]["task"]["id"]
    assert all(r[next(iter(r))].get("taskId", task_id) == task_id for r in results)
    chunks = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert [c.get("append", False) for c in chunks] == [False, True, True, True]
    assert [c.get("lastChunk", False) for c in chunks] == [False, False, False, True]

    # GetTask shows the artifact the chunks assemble into.
    task = await get_task(running, task_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert assembled(results) == task_artifacts(task)
    [texts] = task_artifacts(task).values()
    assert texts[0] == "# Quarterly report\n" and len(texts) == 4


async def test_the_stream_closes_at_input_required_and_a_follow_up_streams_the_rest(
    running: Running,
) -> None:
    params = {"message": message("book a boat"), "configuration": {"historyLength": 0}}
    async with open_stream(running.session, running.url, "SendStreamingMessage", params) as s:
        first = await s.rest()
    assert [describe(r) for r in first] == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "status:TASK_STATE_INPUT_REQUIRED",
    ]
    assert "history" not in first[0]["task"]  # historyLength shapes the first Task
    task_id = first[0]["task"]["id"]

    follow_up = {"message": message("on Friday", taskId=task_id)}
    async with open_stream(running.session, running.url, "SendStreamingMessage", follow_up) as s:
        second = await s.rest()
    assert [describe(r) for r in second] == [
        "task:TASK_STATE_WORKING",
        "artifact:order",
        "status:TASK_STATE_COMPLETED",
    ]
    assert second[0]["task"]["id"] == task_id
    assert [m["parts"][0]["text"] for m in second[0]["task"]["history"]][-1] == "on Friday"


async def test_streaming_refusals_come_as_json_before_any_stream(running: Running) -> None:
    done = await start(running, "fail")
    await wait_state(running, done, "TASK_STATE_FAILED")

    error = await stream_error(running, "SubscribeToTask", {"id": done})
    assert error["code"] == -32004
    assert "terminal state" in error["message"] and "GetTask" in error["message"]
    error = await stream_error(running, "tasks/resubscribe", {"id": done}, ALICE_V03)
    assert error["code"] == -32004
    error = await stream_error(running, "SubscribeToTask", {"id": "no-such-task"})
    assert error["code"] == -32001
    error = await stream_error(running, "SubscribeToTask", {"id": done}, BOB)  # not Bob's
    assert error["code"] == -32001
    error = await stream_error(running, "SubscribeToTask", {})
    assert (error["code"], "id" in error["message"]) == (-32602, True)
    error = await stream_error(running, "SubscribeToTask", [done])  # type: ignore[arg-type]
    assert error["code"] == -32602
    error = await stream_error(running, "SendStreamingMessage", {"message": {"parts": 3}})
    assert error["code"] == -32602
    follow_up = {"message": message("again", taskId=done)}
    error = await stream_error(running, "SendStreamingMessage", follow_up)
    assert error["code"] == -32004


async def test_a_streaming_notification_starts_the_task_and_answers_204(
    running: Running,
) -> None:
    before = len(running.agent.tasks.records())
    body = {
        "jsonrpc": "2.0",
        "method": "SendStreamingMessage",
        "params": {"message": message("hi")},
    }
    async with running.session.post(running.url + "/", json=body, headers=ALICE) as response:
        assert response.status == 204
    [record] = running.agent.tasks.records()[before:]
    assert not record.subscribers
    await wait_state(running, record.task.id, "TASK_STATE_COMPLETED")


# ---- SubscribeToTask -----------------------------------------------------------------------


async def test_several_subscribers_each_get_every_event_from_the_moment_they_attach(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, step_delay=0.15) as r:
        task_id = await start(r, "report")
        async with open_stream(r.session, r.url, "SubscribeToTask", {"id": task_id}) as early:
            assert describe(await early.next() or {}) in (
                "task:TASK_STATE_SUBMITTED",
                "task:TASK_STATE_WORKING",
            )
            # Wait until the first chunk is out, then attach a second subscriber.
            while describe(await early.next() or {}) != "artifact:report":
                pass
            async with open_stream(r.session, r.url, "SubscribeToTask", {"id": task_id}) as late:
                late_results = await late.rest()
            early_results = await early.rest()

    snapshot = late_results[0]["task"]
    assert snapshot["status"]["state"] == "TASK_STATE_WORKING"
    # The snapshot holds what was sent before it (the first chunk), the stream the rest:
    # the late subscriber misses nothing and gets nothing twice.
    assert [len(a["parts"]) for a in snapshot["artifacts"]] == [1]
    seen_before = len(early_results) - (len(late_results) - 1)
    assert late_results[1:] == early_results[seen_before:]
    assert [describe(x) for x in late_results[1:]] == [
        *["artifact:report"] * 3,
        "status:TASK_STATE_COMPLETED",
    ]
    assert assembled(late_results) == assembled(early_results)
    assert [len(texts) for texts in assembled(late_results).values()] == [4]


async def test_subscribing_to_a_task_waiting_for_input_follows_it_after_the_follow_up(
    running: Running,
) -> None:
    task_id = await start(running, "book a table")
    await wait_state(running, task_id, "TASK_STATE_INPUT_REQUIRED")
    async with open_stream(running.session, running.url, "SubscribeToTask", {"id": task_id}) as s:
        assert describe(await s.next() or {}) == "task:TASK_STATE_INPUT_REQUIRED"
        params = {"message": message("Monday", taskId=task_id)}
        await http_result(running.session, running.url, "SendMessage", params)
        rest = await s.rest()
    assert [describe(x) for x in rest] == [
        "task:TASK_STATE_INPUT_REQUIRED",
        "status:TASK_STATE_WORKING",
        "artifact:order",
        "status:TASK_STATE_COMPLETED",
    ]


async def test_v03_clients_stream_v03_events_with_final_set_where_the_stream_ends(
    running: Running,
) -> None:
    v03_message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "user",
        "parts": [{"kind": "text", "text": "book a car"}],
    }
    async with open_stream(
        running.session, running.url, "message/stream", {"message": v03_message}, ALICE_V03
    ) as s:
        first = await s.rest()
    assert [r["kind"] for r in first] == ["task", "status-update", "status-update"]
    assert [r["status"]["state"] for r in first] == ["submitted", "working", "input-required"]
    assert [r.get("final") for r in first] == [None, False, True]
    task_id = first[0]["id"]

    async with open_stream(
        running.session, running.url, "tasks/resubscribe", {"id": task_id}, ALICE_V03
    ) as s:
        assert (await s.next() or {})["status"]["state"] == "input-required"
        follow_up = {**v03_message, "messageId": str(uuid.uuid4()), "taskId": task_id}
        follow_up["parts"] = [{"kind": "text", "text": "Tuesday"}]
        await http_result(
            running.session, running.url, "message/send", {"message": follow_up}, ALICE_V03
        )
        rest = (await s.rest())[1:]
    assert [r["kind"] for r in rest] == ["status-update", "artifact-update", "status-update"]
    assert rest[1]["artifact"]["name"] == "order"
    assert [r.get("final") for r in rest] == [False, None, True]
    assert rest[-1]["status"]["state"] == "completed"


async def test_a_task_canceled_while_streamed_ends_its_stream_canceled(
    running: Running,
) -> None:
    async with open_stream(
        running.session, running.url, "SendStreamingMessage", {"message": message("echo me")}
    ) as s:
        task_id = (await s.next() or {})["task"]["id"]
        canceled = await http_result(running.session, running.url, "CancelTask", {"id": task_id})
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        results = await s.rest()
    assert describe(results[-1]) == "status:TASK_STATE_CANCELED"
    assert {describe(x) for x in results[1:-1]} <= {"status:TASK_STATE_WORKING"}


async def test_in_gateway_mode_the_stream_and_the_gateways_webhooks_agree(
    tmp_path: Path, sink: WebhookSink
) -> None:
    settings = gateway_settings(str(tmp_path / "gateway.db"))
    async with (
        running_gateway(settings) as (gateway_url, _gateway),
        running_agent(tmp_path, gateway_url) as url,
        aiohttp.ClientSession() as session,
    ):
        params = {
            "message": message("roll 2d6"),
            "configuration": {"taskPushNotificationConfig": {"url": sink.url("/gw")}},
        }
        async with open_stream(session, url, "SendStreamingMessage", params) as s:
            streamed = await s.rest()
        await sink.wait_for(len(streamed), path="/gw")
    stories = [describe(x) for x in streamed]
    assert stories == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "artifact:dice-result",
        "status:TASK_STATE_COMPLETED",
    ]
    hooks = [json.loads(h.body) for h in sink.on("/gw")]
    assert [describe(h) for h in hooks] == stories
    assert hooks[1:] == streamed[1:]


# ---- clients that go away, slow clients, shutdown ------------------------------------------


async def test_a_client_that_goes_away_is_forgotten_and_the_task_runs_on(
    running: Running,
) -> None:
    async with open_stream(
        running.session, running.url, "SendStreamingMessage", {"message": message("report")}
    ) as s:
        task_id = (await s.next() or {})["task"]["id"]
        record = next(x for x in running.agent.tasks.records() if x.task.id == task_id)
        assert len(record.subscribers) == 1
        s.response.close()  # the client goes away mid-task
    task = await wait_state(running, task_id, "TASK_STATE_COMPLETED")
    assert [len(t) for t in task_artifacts(task).values()] == [4]
    assert not record.subscribers


async def test_an_idle_stream_whose_client_went_away_is_noticed_by_its_keepalive(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, keepalive=0.1) as r:
        task_id = await start(r, "login")
        await wait_state(r, task_id, "TASK_STATE_AUTH_REQUIRED")
        record = next(x for x in r.agent.tasks.records() if x.task.id == task_id)
        async with open_stream(r.session, r.url, "SubscribeToTask", {"id": task_id}) as s:
            assert describe(await s.next() or {}) == "task:TASK_STATE_AUTH_REQUIRED"
            await s.keepalive()  # ": keep-alive" comments while nothing happens
            await s.keepalive()
            assert len(record.subscribers) == 1
            s.response.close()
        for _ in range(200):  # the next keep-alive write fails: detached
            if not record.subscribers:
                break
            await asyncio.sleep(0.05)
        assert not record.subscribers
        # Nothing happened to the task.
        assert (await get_task(r, task_id))["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"


async def test_a_subscriber_that_stops_reading_is_dropped_and_the_task_never_waits(
    running: Running,
) -> None:
    running.agent.stream_queue_limit = 2
    task_id = await start(running, "report")
    owner = await running.agent.service.resolve_owner(ALICE)
    record = running.agent.tasks.get(task_id, owner)
    assert record is not None
    _snapshot, stalled = await running.agent.follow(record)  # and never read
    task = await wait_state(running, task_id, "TASK_STATE_COMPLETED")
    assert stalled.overflowed and stalled.closed and stalled.pending == 0
    assert await stalled.get(0.1) is None  # its stream ends (the client may resubscribe)
    assert not record.subscribers
    assert [len(t) for t in task_artifacts(task).values()] == [4]


async def test_stopping_the_agent_ends_its_open_streams(tmp_path: Path) -> None:
    async with serving(tmp_path) as r:
        task_id = await start(r, "book a bike")
        await wait_state(r, task_id, "TASK_STATE_INPUT_REQUIRED")
        async with open_stream(r.session, r.url, "SubscribeToTask", {"id": task_id}) as s:
            await s.next()
            began = time.monotonic()
            await r.server.close()  # would wait for the open handler otherwise
            assert await s.next() is None
        assert time.monotonic() - began < 5


# ---- one task, three ways ------------------------------------------------------------------


async def test_one_task_followed_by_polling_by_stream_and_by_webhook_tells_one_story(
    tmp_path: Path, sink: WebhookSink
) -> None:
    async with serving(tmp_path, step_delay=0.1) as r:
        params = {
            "message": message("report"),
            "configuration": {"taskPushNotificationConfig": {"url": sink.url("/three")}},
        }
        polled: list[str] = []
        task_id = ""
        started = asyncio.Event()

        async def poll() -> dict[str, Any]:
            await started.wait()
            while True:
                task = await get_task(r, task_id)
                state = task["status"]["state"]
                if not polled or polled[-1] != state:
                    polled.append(state)
                if state == "TASK_STATE_COMPLETED":
                    return task
                await asyncio.sleep(0.01)

        poller = asyncio.create_task(poll())
        async with open_stream(r.session, r.url, "SendStreamingMessage", params) as s:
            task_id = (await s.next() or {})["task"]["id"]
            started.set()
            streamed = await s.rest()
        polled_task = await asyncio.wait_for(poller, TIMEOUT)
        await sink.wait_for(len(streamed), path="/three")
        await asyncio.sleep(0.3)  # nothing more may follow
        hooks = [json.loads(h.body) for h in sink.on("/three")]

    # The stream and the webhooks: the same events, in the same order, byte-for-byte the
    # same StreamResponse for every update (the first webhook is the task as registered).
    assert len(hooks) == len(streamed)
    assert describe(hooks[0]) == describe(streamed[0]) == "task:TASK_STATE_SUBMITTED"
    assert hooks[1:] == streamed[1:]
    # Polling saw some of those states, in the same order, ending at the same one.
    story = [describe(x).split(":")[1] for x in streamed if "artifactUpdate" not in x]
    assert polled == [state for state in story if state in polled]
    assert polled[-1] == story[-1] == "TASK_STATE_COMPLETED" and len(polled) >= 2
    # One artifact, assembled alike from the stream, from the webhooks and by GetTask.
    assert assembled(streamed) == assembled(hooks) == task_artifacts(polled_task)
    assert [len(t) for t in task_artifacts(polled_task).values()] == [4]
