"""A backend following one A2A task through the a2a-push receiver's client API.

The receiver takes the agent's webhooks, verifies them and fetches the task; a client
backend never talks to the agent about push notifications. It only:

1. subscribes: ``POST /subscriptions {"agentUrl", "taskId"}`` (``Authorization: Bearer
   <API key>``); the receiver registers its webhook with the agent and fetches the task;
2. follows ``GET /events`` (Server-Sent Events, one ``event: task`` per stored snapshot
   of the client's tasks) until this task reaches a final state, reconnecting with
   ``Last-Event-ID`` when the stream drops, so no snapshot is missed or repeated;
3. reads the final snapshot over REST: ``GET /tasks/{id}?agentUrl=...``.

:func:`follow_task` is the whole client; it uses aiohttp and
``a2a_push.protocol.types.TaskState`` only. To run it against the mock agent::

    a2a-push mock-agent --port 9000 --allow-webhook-host 127.0.0.1
    a2a-push receiver --port 8090 --agent http://127.0.0.1:9000/ --data-dir ./receiver-data
    KEY=$(python -c 'import json;print(json.load(open("receiver-data/api-keys.json"))["default"])')
    python -m examples.receiver_client --receiver http://127.0.0.1:8090 --api-key "$KEY" \\
        --agent-url http://127.0.0.1:9000/ --task-id <TASK_ID>

with ``<TASK_ID>`` a task created on the agent (``SendMessage``, see docs/receiver.md
"Running it"; ``roll 2d6`` completes by itself). It prints each state as it arrives,
then the final task as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp

from a2a_push.protocol.types import TaskState

# The receiver sends a keepalive comment every 15 s: a read silent for longer means a dead
# connection, which is dropped and resumed.
_READ_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=45)


class ReceiverError(Exception):
    """The receiver refused a request: its status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


async def _json_or_raise(resp: aiohttp.ClientResponse) -> Any:
    body = await resp.json(content_type=None)
    if resp.status >= 400:
        raise ReceiverError(resp.status, body.get("error", "?"), body.get("message", ""))
    return body


async def _sse(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str, str]]:
    """The (id, event, data) of each event on a ``text/event-stream`` response."""
    fields: dict[str, str] = {}
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if not line:  # a blank line ends an event
            if "data" in fields:
                yield fields.get("id", ""), fields.get("event", "message"), fields["data"]
            fields = {}
        elif not line.startswith(":"):  # ":" lines are keepalive comments
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data" and "data" in fields:  # a multi-line data field
                value = fields["data"] + "\n" + value
            fields[name] = value


async def follow_task(
    receiver_url: str,
    api_key: str,
    agent_url: str,
    task_id: str,
    *,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    reconnect_delay: float = 2.0,
) -> dict[str, Any]:
    """Subscribe to ``task_id`` on ``agent_url``, follow it until it is final, and return
    its final snapshot (A2A v1.0 Task JSON) as the receiver serves it over REST.

    ``on_update`` is called with every snapshot of the task the stream delivers, in order.
    """
    base = receiver_url.rstrip("/")
    auth = {"Authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession(headers=auth, timeout=_READ_TIMEOUT) as session:
        while True:  # 409/503 come with Retry-After: the receiver is busy, not refusing
            body = {"agentUrl": agent_url, "taskId": task_id}
            async with session.post(base + "/subscriptions", json=body) as resp:
                if resp.status in (409, 503) and "Retry-After" in resp.headers:
                    await asyncio.sleep(float(resp.headers["Retry-After"]))
                    continue
                subscription = await _json_or_raise(resp)
                break
        agent = subscription["agentUrl"]  # normalised: compare events with this spelling

        last_id = "0"  # every stored snapshot, the one the subscription fetched included
        done = False
        while not done:
            try:
                headers = {"Last-Event-ID": last_id}
                async with session.get(base + "/events", headers=headers) as resp:
                    if resp.status != 200:
                        await _json_or_raise(resp)
                    async for event_id, kind, data in _sse(resp):
                        last_id = event_id or last_id
                        event = json.loads(data)
                        if kind != "task" or (event["agentUrl"], event["taskId"]) != (
                            agent,
                            task_id,
                        ):
                            continue
                        if on_update is not None:
                            on_update(event["task"])
                        if TaskState(event["task"]["status"]["state"]).is_terminal:
                            done = True
                            break
            except (TimeoutError, aiohttp.ClientConnectionError):
                pass  # the stream dropped: resume after the last event seen
            except ReceiverError as exc:
                if exc.status != 503:  # 503: the receiver's database is down for a moment
                    raise
            if not done:
                await asyncio.sleep(reconnect_delay)

        async with session.get(f"{base}/tasks/{task_id}", params={"agentUrl": agent}) as resp:
            return dict(await _json_or_raise(resp))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--receiver", default="http://127.0.0.1:8090", help="receiver URL")
    parser.add_argument("--api-key", required=True, help="the client's receiver API key")
    parser.add_argument("--agent-url", required=True, help="the agent, as the receiver knows it")
    parser.add_argument("--task-id", required=True)
    args = parser.parse_args(argv)

    def show(task: dict[str, Any]) -> None:
        print(f"{task['id']}: {task['status']['state']}", file=sys.stderr, flush=True)

    try:
        task = asyncio.run(
            follow_task(args.receiver, args.api_key, args.agent_url, args.task_id, on_update=show)
        )
    except (ReceiverError, aiohttp.ClientError) as exc:
        print(f"receiver_client: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(task, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
