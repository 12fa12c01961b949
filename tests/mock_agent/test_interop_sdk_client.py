"""Interop: the official a2a-sdk *client* drives the mock agent (a2a_push/mock_agent/).

The mock agent runs on a real aiohttp server on 127.0.0.1; the SDK builds its client from
the agent card (ClientFactory.create_from_url, JSON-RPC transport over httpx) and sends
protobuf requests: SendMessage with an inline push config, the four push-config methods,
GetTask until terminal, the booking flow, CancelTask and an unknown task. Every webhook
arrives in order at a local sink and verifies against the agent's JWKS with joserfc, an
independent JOSE library (aud, iss, taskId, strictly increasing seq per config and the
body digest).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a.client")

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import a2a_pb2
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from joserfc import jwk as jose_jwk
from joserfc import jwt as jose_jwt

from a2a_push.mock_agent import serving
from a2a_push.notifier import JWKS_PATH
from a2a_push.protocol.constants import HEADER_NOTIFICATION_TOKEN, HEADER_SIGNATURE
from a2a_push.testing import ReceivedWebhook, WebhookSink

from ..mock_agent_support import describe_event

STEP_DELAY = 0.05
TIMEOUT = 10.0

SUBMITTED = a2a_pb2.TASK_STATE_SUBMITTED
WORKING = a2a_pb2.TASK_STATE_WORKING
COMPLETED = a2a_pb2.TASK_STATE_COMPLETED
CANCELED = a2a_pb2.TASK_STATE_CANCELED
INPUT_REQUIRED = a2a_pb2.TASK_STATE_INPUT_REQUIRED
TERMINAL = frozenset({COMPLETED, CANCELED, a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_REJECTED})


@dataclass
class RunningAgent:
    url: str  # the base URL, also the JWT issuer


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[RunningAgent]:
    # The card and the JWT issuer name the real port: `serving` binds it first.
    async with serving(tmp_path / "agent", step_delay=STEP_DELAY) as (url, _app):
        yield RunningAgent(url=url)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT) as c:
        yield c


@pytest.fixture
async def client(agent: RunningAgent, http: httpx.AsyncClient) -> AsyncIterator[Client]:
    # Built from the agent card the mock agent serves: the SDK resolves the card and
    # picks the JSON-RPC interface itself.
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
    sdk_client = await factory.create_from_url(agent.url)
    try:
        yield sdk_client
    finally:
        await sdk_client.close()


@pytest.fixture(params=[PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3])
async def streaming_client(
    request: pytest.FixtureRequest, agent: RunningAgent, http: httpx.AsyncClient
) -> AsyncIterator[Client]:
    """A streaming SDK client on the card's v1.0 interface, or (the card without it) on
    its v0.3 one: the SDK's v0.3 compatibility transport (message/stream,
    tasks/resubscribe)."""
    card = await A2ACardResolver(http, agent.url).get_agent_card()
    keep = [a2a_pb2.AgentInterface() for _ in card.supported_interfaces]
    for copy, interface in zip(keep, card.supported_interfaces, strict=True):
        copy.CopyFrom(interface)
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(i for i in keep if i.protocol_version == request.param)
    sdk_client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
    expected = JsonRpcTransport if request.param == PROTOCOL_VERSION_1_0 else CompatJsonRpcTransport
    assert type(getattr(sdk_client, "_transport", None)) is expected
    try:
        yield sdk_client
    finally:
        await sdk_client.close()


# ---- helpers -------------------------------------------------------------------------


def user_message(text: str, task_id: str = "") -> a2a_pb2.Message:
    return a2a_pb2.Message(
        message_id=str(uuid.uuid4()),
        role=a2a_pb2.ROLE_USER,
        task_id=task_id,
        parts=[a2a_pb2.Part(text=text)],
    )


async def send(
    client: Client,
    text: str,
    *,
    task_id: str = "",
    push: a2a_pb2.TaskPushNotificationConfig | None = None,
    return_immediately: bool = False,
) -> a2a_pb2.Task:
    configuration = a2a_pb2.SendMessageConfiguration(return_immediately=return_immediately)
    if push is not None:
        configuration.task_push_notification_config.CopyFrom(push)
    request = a2a_pb2.SendMessageRequest(
        message=user_message(text, task_id), configuration=configuration
    )
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1, responses  # non-streaming: one response
    [response] = responses
    assert response.HasField("task"), response
    return response.task


async def get_until_terminal(client: Client, task_id: str) -> a2a_pb2.Task:
    async with asyncio.timeout(TIMEOUT):
        while True:
            task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
            assert task.id == task_id
            if task.status.state in TERMINAL:
                return task
            await asyncio.sleep(0.02)


async def key_set(http: httpx.AsyncClient, agent: RunningAgent) -> tuple[Any, list[str]]:
    response = await http.get(agent.url + JWKS_PATH)
    assert response.status_code == 200, response.text
    jwks = response.json()
    return jose_jwk.KeySet.import_key_set(jwks), sorted({k["alg"] for k in jwks["keys"]})


def describe(hook: ReceivedWebhook) -> str:
    """Each webhook as 'task:STATE', 'status:STATE' or 'artifact:NAME'."""
    return describe_event(json.loads(hook.body))


async def verified_webhooks(
    sink: WebhookSink,
    path: str,
    count: int,
    *,
    http: httpx.AsyncClient,
    agent: RunningAgent,
    task_id: str,
    token: str | None = None,
) -> list[str]:
    """Wait for ``count`` webhooks on ``path``; verify each with joserfc; their kinds."""
    await sink.wait_for(count, timeout=TIMEOUT, path=path)
    await asyncio.sleep(4 * STEP_DELAY)  # nothing more may follow
    hooks = sink.on(path)
    assert len(hooks) == count, [describe(h) for h in hooks]

    keys, algorithms = await key_set(http, agent)
    seqs: list[int] = []
    config_ids: set[str] = set()
    for hook in hooks:
        signature = hook.header(HEADER_SIGNATURE)
        assert signature, "every webhook is signed"
        claims = jose_jwt.decode(signature, keys, algorithms).claims
        assert claims["aud"] == sink.url(path)
        assert claims["iss"] == agent.url
        assert claims["taskId"] == task_id
        assert claims["request_body_sha256"] == hashlib.sha256(hook.body).hexdigest()
        assert json.loads(hook.body)  # the raw body is the signed JSON
        if token is not None:
            assert hook.header(HEADER_NOTIFICATION_TOKEN) == token
        seqs.append(claims["seq"])
        config_ids.add(claims["configId"])
    assert all(a < b for a, b in itertools.pairwise(seqs)), seqs
    assert len(config_ids) == 1, config_ids  # one config per path
    return [describe(h) for h in hooks]


# ---- the card ------------------------------------------------------------------------


async def test_the_sdk_builds_a_jsonrpc_client_from_our_agent_card(
    agent: RunningAgent, client: Client
) -> None:
    card = await client.get_extended_agent_card(a2a_pb2.GetExtendedAgentCardRequest())
    assert card.name == "a2a-push mock agent"
    assert card.capabilities.push_notifications is True
    assert card.capabilities.streaming is True
    bindings = {(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces}
    assert (TransportProtocol.JSONRPC, PROTOCOL_VERSION_1_0) in bindings
    assert {s.id for s in card.skills} >= {"roll", "book", "fail", "reject", "echo"}
    # The SDK chose its v1.0 JSON-RPC transport (not the v0.3 compat one) at our URL.
    transport = getattr(client, "_transport", None)
    assert type(transport) is JsonRpcTransport
    assert transport.url == agent.url + "/"


# ---- SendMessage with an inline push config, then GetTask until terminal --------------


async def test_send_with_an_inline_push_config_and_get_task_until_completed(
    agent: RunningAgent, client: Client, sink: WebhookSink, http: httpx.AsyncClient
) -> None:
    push = a2a_pb2.TaskPushNotificationConfig(url=sink.url("/roll"), token="tok-roll")
    task = await send(client, "roll 3d6", push=push, return_immediately=True)
    assert task.status.state == SUBMITTED
    assert task.id

    done = await get_until_terminal(client, task.id)
    assert done.status.state == COMPLETED
    [artifact] = done.artifacts
    assert artifact.name == "dice-result"
    assert len(artifact.parts[1].data.struct_value["rolls"]) == 3

    kinds = await verified_webhooks(
        sink, "/roll", 4, http=http, agent=agent, task_id=task.id, token="tok-roll"
    )
    assert kinds == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "artifact:dice-result",
        "status:TASK_STATE_COMPLETED",
    ]


async def test_a_blocking_send_returns_the_terminal_task_and_reject_fail_end_in_their_states(
    client: Client,
) -> None:
    task = await send(client, "hello sdk")
    assert task.status.state == COMPLETED
    assert task.artifacts[0].name == "echo"
    assert task.artifacts[0].parts[0].text == "hello sdk"

    failed = await send(client, "fail")
    assert failed.status.state == a2a_pb2.TASK_STATE_FAILED
    rejected = await send(client, "reject")
    assert rejected.status.state == a2a_pb2.TASK_STATE_REJECTED


# ---- the four push-config methods --------------------------------------------------------


async def test_push_config_create_get_list_delete_through_the_sdk(
    agent: RunningAgent, client: Client, sink: WebhookSink, http: httpx.AsyncClient
) -> None:
    # A booking waits in INPUT_REQUIRED: time to manage its configs.
    task = await send(client, "book a boat")
    assert task.status.state == INPUT_REQUIRED

    created = await client.create_task_push_notification_config(
        a2a_pb2.TaskPushNotificationConfig(
            task_id=task.id, id="second", url=sink.url("/second"), token="tok-2"
        )
    )
    assert (created.task_id, created.id, created.url) == (task.id, "second", sink.url("/second"))

    got = await client.get_task_push_notification_config(
        a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id="second")
    )
    assert (got.task_id, got.id, got.url) == (task.id, "second", sink.url("/second"))

    other = await client.create_task_push_notification_config(
        a2a_pb2.TaskPushNotificationConfig(task_id=task.id, url=sink.url("/other"))
    )
    assert other.id  # the agent assigns an id when the client gives none
    assert other.task_id == task.id

    listed = await client.list_task_push_notification_configs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert {(c.id, c.url) for c in listed.configs} == {
        ("second", sink.url("/second")),
        (other.id, sink.url("/other")),
    }

    # Its first webhook (the task as it is now) arrives before the config goes away.
    await sink.wait_for(1, timeout=TIMEOUT, path="/other")
    await client.delete_task_push_notification_config(  # returns None in the SDK
        a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=other.id)
    )
    listed = await client.list_task_push_notification_configs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.id for c in listed.configs] == ["second"]
    with pytest.raises(TaskNotFoundError) as info:
        await client.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id=other.id)
        )
    assert info.value.data == {"taskId": task.id, "configId": other.id}

    # The follow-up completes the booking; "second" sees it (its first webhook is the
    # task as it was when the config was created), the deleted one sees nothing more.
    done = await send(client, "next Monday", task_id=task.id)
    assert done.status.state == COMPLETED

    second = await verified_webhooks(
        sink, "/second", 4, http=http, agent=agent, task_id=task.id, token="tok-2"
    )
    assert second == [
        "task:TASK_STATE_INPUT_REQUIRED",
        "status:TASK_STATE_WORKING",
        "artifact:order",
        "status:TASK_STATE_COMPLETED",
    ]
    others = sink.on("/other")
    assert [describe(h) for h in others] == ["task:TASK_STATE_INPUT_REQUIRED"]


# ---- the booking flow ----------------------------------------------------------------


async def test_the_booking_flow_with_the_sdk_client(
    agent: RunningAgent, client: Client, sink: WebhookSink, http: httpx.AsyncClient
) -> None:
    push = a2a_pb2.TaskPushNotificationConfig(url=sink.url("/book"), token="tok-book")
    task = await send(client, "book a table for two", push=push)
    assert task.status.state == INPUT_REQUIRED
    assert "date" in task.status.message.parts[0].text

    done = await send(client, "next Friday", task_id=task.id)
    assert done.id == task.id
    assert done.context_id == task.context_id
    assert done.status.state == COMPLETED
    [order] = done.artifacts
    assert order.name == "order"
    data = order.parts[1].data.struct_value
    assert data["date"] == "next Friday"
    assert data["item"] == "a table for two"

    fetched = await client.get_task(a2a_pb2.GetTaskRequest(id=task.id))
    assert fetched.status.state == COMPLETED
    assert [m.role for m in fetched.history] == [
        a2a_pb2.ROLE_USER,
        a2a_pb2.ROLE_AGENT,
        a2a_pb2.ROLE_USER,
        a2a_pb2.ROLE_AGENT,
    ]

    kinds = await verified_webhooks(
        sink, "/book", 6, http=http, agent=agent, task_id=task.id, token="tok-book"
    )
    assert kinds == [
        "task:TASK_STATE_SUBMITTED",
        "status:TASK_STATE_WORKING",
        "status:TASK_STATE_INPUT_REQUIRED",
        "status:TASK_STATE_WORKING",
        "artifact:order",
        "status:TASK_STATE_COMPLETED",
    ]


# ---- CancelTask ------------------------------------------------------------------------


async def test_cancel_a_running_task_then_cancel_again_is_task_not_cancelable(
    agent: RunningAgent, client: Client, sink: WebhookSink, http: httpx.AsyncClient
) -> None:
    push = a2a_pb2.TaskPushNotificationConfig(url=sink.url("/cancel"))
    task = await send(client, "please echo slowly", push=push, return_immediately=True)
    assert task.status.state == SUBMITTED

    canceled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task.id))
    assert canceled.id == task.id
    assert canceled.status.state == CANCELED

    with pytest.raises(TaskNotCancelableError) as info:
        await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task.id))
    assert info.value.data == {"taskId": task.id}

    fetched = await client.get_task(a2a_pb2.GetTaskRequest(id=task.id))
    assert fetched.status.state == CANCELED
    assert not fetched.artifacts

    await sink.wait_for(2, timeout=TIMEOUT, path="/cancel")
    count = len(sink.on("/cancel"))
    kinds = await verified_webhooks(sink, "/cancel", count, http=http, agent=agent, task_id=task.id)
    assert kinds[0] == "task:TASK_STATE_SUBMITTED"
    assert kinds[-1] == "status:TASK_STATE_CANCELED"
    assert set(kinds[1:-1]) <= {"status:TASK_STATE_WORKING"}


async def test_cancel_of_a_completed_task_is_task_not_cancelable(
    agent: RunningAgent, client: Client, sink: WebhookSink, http: httpx.AsyncClient
) -> None:
    push = a2a_pb2.TaskPushNotificationConfig(url=sink.url("/done"))
    task = await send(client, "roll 1d20", push=push)
    assert task.status.state == COMPLETED

    with pytest.raises(TaskNotCancelableError) as info:
        await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task.id))
    assert info.value.data == {"taskId": task.id}

    # The refused cancel changed nothing and sent nothing.
    fetched = await client.get_task(a2a_pb2.GetTaskRequest(id=task.id))
    assert fetched.status.state == COMPLETED
    kinds = await verified_webhooks(sink, "/done", 4, http=http, agent=agent, task_id=task.id)
    assert kinds[-1] == "status:TASK_STATE_COMPLETED"


# ---- streaming (v1.0, and v0.3 through the SDK's compatibility transport) ----------------


def stream_kind(response: a2a_pb2.StreamResponse) -> str:
    """'task:STATE', 'status:STATE' or 'artifact:NAME'."""
    if response.HasField("task"):
        return f"task:{a2a_pb2.TaskState.Name(response.task.status.state)}"
    if response.HasField("status_update"):
        return f"status:{a2a_pb2.TaskState.Name(response.status_update.status.state)}"
    assert response.HasField("artifact_update"), response
    return f"artifact:{response.artifact_update.artifact.name}"


def assemble_chunks(responses: list[a2a_pb2.StreamResponse]) -> dict[str, list[str]]:
    artifacts: dict[str, list[str]] = {}
    for response in responses:
        if response.HasField("task"):
            for artifact in response.task.artifacts:
                artifacts[artifact.artifact_id] = [p.text for p in artifact.parts]
        elif response.HasField("artifact_update"):
            update = response.artifact_update
            texts = [p.text for p in update.artifact.parts]
            before = artifacts[update.artifact.artifact_id] if update.append else []
            artifacts[update.artifact.artifact_id] = [*before, *texts]
    return artifacts


REPORT_STORY = [
    "task:TASK_STATE_SUBMITTED",
    "status:TASK_STATE_WORKING",
    *["artifact:report"] * 4,
    "status:TASK_STATE_COMPLETED",
]


async def test_the_sdks_streaming_send_gets_the_task_then_every_update_and_the_webhooks(
    streaming_client: Client, client: Client, sink: WebhookSink
) -> None:
    push = a2a_pb2.TaskPushNotificationConfig(url=sink.url("/stream"), token="tok-s")
    request = a2a_pb2.SendMessageRequest(
        message=user_message("report"),
        configuration=a2a_pb2.SendMessageConfiguration(task_push_notification_config=push),
    )
    async with asyncio.timeout(TIMEOUT):
        responses = [r async for r in streaming_client.send_message(request)]
    assert [stream_kind(r) for r in responses] == REPORT_STORY
    task_id = responses[0].task.id
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert [(c.append, c.last_chunk) for c in chunks] == [
        (False, False),
        (True, False),
        (True, False),
        (True, True),
    ]
    # GetTask (the non-streaming client) shows the artifact the chunks assemble into.
    done = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
    assert done.status.state == COMPLETED
    assert assemble_chunks(responses) == {
        a.artifact_id: [p.text for p in a.parts] for a in done.artifacts
    }
    # Every streamed event went out as a webhook too (the snapshot, then each update).
    await sink.wait_for(len(responses), timeout=TIMEOUT, path="/stream")
    await asyncio.sleep(4 * STEP_DELAY)
    hooks = sink.on("/stream")
    assert len(hooks) == len(responses)
    assert all(h.header(HEADER_NOTIFICATION_TOKEN) == "tok-s" for h in hooks)


async def test_the_sdks_subscribe_follows_a_running_task_and_is_refused_once_it_ended(
    streaming_client: Client, client: Client
) -> None:
    task = await send(client, "report", return_immediately=True)
    async with asyncio.timeout(TIMEOUT):
        responses = [
            r async for r in streaming_client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task.id))
        ]
    kinds = [stream_kind(r) for r in responses]
    assert kinds[0].startswith("task:") and responses[0].task.id == task.id
    assert kinds[-1] == "status:TASK_STATE_COMPLETED"
    assert kinds[1:] == REPORT_STORY[len(REPORT_STORY) - len(kinds) + 1 :]
    assert [len(t) for t in assemble_chunks(responses).values()] == [4]

    with pytest.raises(UnsupportedOperationError):
        async with asyncio.timeout(TIMEOUT):
            async for _ in streaming_client.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task.id)):
                pass
    with pytest.raises(TaskNotFoundError):
        async with asyncio.timeout(TIMEOUT):
            missing = a2a_pb2.SubscribeToTaskRequest(id=str(uuid.uuid4()))
            async for _ in streaming_client.subscribe(missing):
                pass


# ---- an unknown task -----------------------------------------------------------------


async def test_an_unknown_task_is_task_not_found_for_every_method(
    client: Client, sink: WebhookSink
) -> None:
    missing = str(uuid.uuid4())
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "GetTask": lambda: client.get_task(a2a_pb2.GetTaskRequest(id=missing)),
        "CancelTask": lambda: client.cancel_task(a2a_pb2.CancelTaskRequest(id=missing)),
        "CreateTaskPushNotificationConfig": lambda: client.create_task_push_notification_config(
            a2a_pb2.TaskPushNotificationConfig(task_id=missing, url=sink.url("/never"))
        ),
        "GetTaskPushNotificationConfig": lambda: client.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=missing, id="any")
        ),
        "ListTaskPushNotificationConfigs": lambda: client.list_task_push_notification_configs(
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=missing)
        ),
        "SendMessage (follow-up)": lambda: send(client, "hello?", task_id=missing),
    }
    for name, call in calls.items():
        with pytest.raises(TaskNotFoundError) as info:
            await call()
        assert info.value.data is not None, name
        assert info.value.data["taskId"] == missing, name
    assert sink.on("/never") == []
