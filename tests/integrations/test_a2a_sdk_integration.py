"""The a2a-sdk drop-in: an SDK agent (examples/a2a_sdk_agent.py) served on 127.0.0.1 pushes
every task event to a local sink, in order, signed; joserfc checks the JWTs against the
agent's JWKS. The config store round-trips through the SDK's own request handler."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("a2a.server.request_handlers")
pytest.importorskip("starlette")

import httpx
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2
from joserfc import jwk as jose_jwk
from joserfc import jwt as jose_jwt

from a2a_push.integrations.a2a_sdk import (
    ANONYMOUS_OWNER,
    A2APushConfigStore,
    protocol_version_of,
)
from a2a_push.integrations.a2a_sdk import (
    _NamedUser as NamedUser,
)
from a2a_push.notifier import JWKS_PATH
from a2a_push.protocol.constants import HEADER_NOTIFICATION_TOKEN, HEADER_SIGNATURE
from a2a_push.testing import WebhookSink
from examples.a2a_sdk_agent import RunningAgent, serve_agent

A2A_HEADERS = {"A2A-Version": "1.0"}


@pytest.fixture
async def agent() -> AsyncIterator[RunningAgent]:
    async with serve_agent("127.0.0.1", 0, allow_webhook_hosts=["127.0.0.1"]) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


async def rpc(client: httpx.AsyncClient, agent: RunningAgent, method: str, params: Any) -> Any:
    response = await client.post(
        agent.url,
        headers=A2A_HEADERS,
        json={"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params},
    )
    assert response.status_code == 200, response.text
    return response.json()


def user_message(text: str) -> dict[str, Any]:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}


def event_of(body: bytes) -> tuple[str, dict[str, Any]]:
    payload = json.loads(body)
    assert len(payload) == 1, payload
    return next(iter(payload.items()))


async def test_sdk_agent_delivers_every_event_in_order_verified_by_joserfc(
    sink: WebhookSink, agent: RunningAgent, client: httpx.AsyncClient
) -> None:
    hook = sink.url("/hook")
    reply = await rpc(
        client,
        agent,
        "SendMessage",
        {
            "message": user_message("roll 4"),
            "configuration": {"taskPushNotificationConfig": {"url": hook, "token": "tok-1"}},
        },
    )
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"

    # task (submitted), working, 4 artifact updates, completed
    await sink.wait_for(7, timeout=15, path="/hook")
    webhooks = sink.on("/hook")
    assert len(webhooks) == 7

    jwks = (await client.get(agent.url.rstrip("/") + JWKS_PATH)).json()
    keys = jose_jwk.KeySet.import_key_set(jwks)
    algorithms = sorted({k["alg"] for k in jwks["keys"]})

    seqs: list[int] = []
    kinds: list[str] = []
    states: list[str] = []
    for webhook in webhooks:
        token = webhook.header(HEADER_SIGNATURE)
        assert token, "every webhook is signed"
        claims = jose_jwt.decode(token, keys, algorithms).claims
        assert claims["iss"] == agent.notifier.issuer
        assert claims["aud"] == hook
        assert claims["taskId"] == task["id"]
        assert claims["configId"] == task["id"]  # the SDK defaults a config's id to the task's
        assert claims["request_body_sha256"] == hashlib.sha256(webhook.body).hexdigest()
        assert webhook.header(HEADER_NOTIFICATION_TOKEN) == "tok-1"
        seqs.append(claims["seq"])
        kind, event = event_of(webhook.body)
        kinds.append(kind)
        if kind in ("task", "statusUpdate"):
            states.append(event["status"]["state"])

    assert all(a < b for a, b in itertools.pairwise(seqs)), seqs
    assert kinds == ["task", "statusUpdate", *["artifactUpdate"] * 4, "statusUpdate"]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    rolls = [event_of(w.body)[1]["artifact"]["parts"][0]["text"] for w in webhooks[2:6]]
    assert rolls == [p["text"] for p in task["artifacts"][0]["parts"]]


async def test_config_store_round_trips_through_the_sdk_request_handler(
    sink: WebhookSink, agent: RunningAgent, client: httpx.AsyncClient
) -> None:
    reply = await rpc(
        client,
        agent,
        "SendMessage",
        {
            "message": user_message("roll 1"),
            "configuration": {"taskPushNotificationConfig": {"url": sink.url("/inline")}},
        },
    )
    task_id = reply["result"]["task"]["id"]

    created = await rpc(
        client,
        agent,
        "CreateTaskPushNotificationConfig",
        {
            "taskId": task_id,
            "id": "second",
            "url": sink.url("/second"),
            "token": "tok-2",
            "authentication": {"scheme": "Bearer", "credentials": "secret"},
        },
    )
    # Clients are shown their config without its secrets (as a2a_push.server does).
    assert created["result"] == {
        "taskId": task_id,
        "id": "second",
        "url": sink.url("/second"),
        "authentication": {"scheme": "Bearer"},
    }

    # Its first webhook is the task's snapshot, read from the handler's task store, and
    # it carries the secrets.
    await sink.wait_for(1, timeout=10, path="/second")
    first = sink.on("/second")[0]
    assert first.header("Authorization") == "Bearer secret"
    assert first.header(HEADER_NOTIFICATION_TOKEN) == "tok-2"
    kind, snapshot = event_of(first.body)
    assert kind == "task" and snapshot["id"] == task_id
    assert snapshot["status"]["state"] == "TASK_STATE_COMPLETED"

    got = await rpc(
        client, agent, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "second"}
    )
    assert got["result"] == created["result"]

    listed = await rpc(client, agent, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    by_id = {c["id"]: c for c in listed["result"]["configs"]}
    assert set(by_id) == {task_id, "second"}
    assert by_id[task_id]["url"] == sink.url("/inline")

    # Stored by the notifier (durably, owner-scoped), not by the SDK.
    stored = await agent.notifier.get_config(task_id, "second", ANONYMOUS_OWNER)
    assert stored is not None and stored.token == "tok-2"
    for_dispatch = await A2APushConfigStore(agent.notifier).get_info_for_dispatch(task_id)
    assert {c.id: c.token for c in for_dispatch}["second"] == "tok-2"

    deleted = await rpc(
        client, agent, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "second"}
    )
    assert "error" not in deleted
    listed = await rpc(client, agent, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert [c["id"] for c in listed["result"]["configs"]] == [task_id]
    assert await agent.notifier.get_config(task_id, "second", ANONYMOUS_OWNER) is None


async def test_a_v03_clients_configs_are_v03_through_the_sdks_compatibility_layer(
    sink: WebhookSink, agent: RunningAgent, client: httpx.AsyncClient
) -> None:
    response = await client.post(
        agent.url,
        headers={"A2A-Version": "0.3"},
        json={
            "jsonrpc": "2.0",
            "id": "1",
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": str(uuid.uuid4()),
                    "role": "user",
                    "parts": [{"kind": "text", "text": "roll 1"}],
                },
                "configuration": {"pushNotificationConfig": {"url": sink.url("/v03")}},
            },
        },
    )
    reply = response.json()
    assert "result" in reply, reply
    task_id = reply["result"]["id"]
    [stored] = (await agent.notifier.list_configs(task_id, ANONYMOUS_OWNER))[0]
    assert stored.protocol_version == "0.3"
    # The dice roll's lifecycle: submitted, working, the artifact, completed; each as the
    # whole v0.3 task (docs/protocol.md), never a v1.0 StreamResponse or a bare event.
    await sink.wait_for(4, timeout=10, path="/v03")
    hooks = sink.on("/v03")
    assert all(h.header("A2A-Version") == "0.3" for h in hooks)
    bodies = [json.loads(h.body) for h in hooks]
    assert all(b["kind"] == "task" and b["id"] == task_id for b in bodies), bodies
    assert bodies[-1]["status"]["state"] == "completed"
    assert any(b.get("artifacts") for b in bodies)
    # A v1.0 client's Create through the same agent stays v1.0.
    created = await rpc(
        client,
        agent,
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "id": "v10", "url": sink.url("/v10")},
    )
    assert "result" in created, created
    v10 = await agent.notifier.get_config(task_id, "v10", ANONYMOUS_OWNER)
    assert v10 is not None and v10.protocol_version == "1.0"


def test_the_protocol_version_of_a_call_is_read_as_the_sdk_reads_it() -> None:
    def context(headers: dict[str, str] | None, method: str | None = None) -> Any:
        ctx = ServerCallContext()
        if headers is not None:
            ctx.state["headers"] = headers
        if method is not None:
            ctx.state["method"] = method
        return ctx

    assert protocol_version_of(context({"A2A-Version": "1.0"})) == "1.0"
    assert protocol_version_of(context({"a2a-version": "0.3.1"})) == "0.3"
    assert protocol_version_of(context({})) == "0.3"  # no header: 0.3, as in the SDK
    assert protocol_version_of(context({}, "tasks/pushNotificationConfig/set")) == "0.3"
    assert protocol_version_of(context(None)) == "1.0"  # not an HTTP call


async def test_refused_webhook_url_is_an_invalid_params_error(
    agent: RunningAgent, client: httpx.AsyncClient
) -> None:
    reply = await rpc(
        client,
        agent,
        "SendMessage",
        {
            "message": user_message("roll 1"),
            # not on the agent's allow list: the notifier's SSRF policy refuses it
            "configuration": {"taskPushNotificationConfig": {"url": "http://10.1.2.3/hook"}},
        },
    )
    assert reply["error"]["code"] == -32602, reply


async def test_config_store_scopes_by_sdk_user_and_dispatch_sees_all_owners(
    agent: RunningAgent,
) -> None:
    store = A2APushConfigStore(agent.notifier)
    alice = ServerCallContext(user=NamedUser("alice"))
    anonymous = ServerCallContext()
    url = "http://127.0.0.1:9/hook"

    returned = await store.set_info("task-x", a2a_pb2.TaskPushNotificationConfig(url=url), alice)
    assert returned.id == "task-x" and returned.task_id == "task-x"
    await store.set_info(
        "task-x", a2a_pb2.TaskPushNotificationConfig(id="anon", url=url), anonymous
    )

    assert [c.id for c in await store.get_info("task-x", alice)] == ["task-x"]
    assert [c.id for c in await store.get_info("task-x", anonymous)] == ["anon"]
    assert sorted(c.id for c in await store.get_info_for_dispatch("task-x")) == ["anon", "task-x"]

    await store.delete_info("task-x", anonymous)  # all of the caller's, none of alice's
    assert await store.get_info("task-x", anonymous) == []
    assert [c.id for c in await store.get_info("task-x", alice)] == ["task-x"]


class CountingTaskStore:
    """The SDK's InMemoryTaskStore (it scopes tasks by user), counting reads."""

    def __init__(self) -> None:
        from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore

        self.tasks = InMemoryTaskStore()
        self.reads = 0

    async def save(self, task: a2a_pb2.Task, context: ServerCallContext) -> None:
        await self.tasks.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> a2a_pb2.Task | None:
        self.reads += 1
        return await self.tasks.get(task_id, context)


async def _artifacts_after_restart(
    sink: WebhookSink,
    tasks: CountingTaskStore | None,
    *,
    owner: str = ANONYMOUS_OWNER,
    stored: bool = True,
) -> list[dict[str, Any]]:
    """A fresh A2APushSender (as after a restart) gets two artifact updates for a task
    whose status it never saw, stored by ``owner``; the bodies its v0.3 config receives."""
    from a2a_push.delivery.ssrf import AddressPolicy
    from a2a_push.integrations.a2a_sdk import A2APushSender
    from a2a_push.notifier import PushNotifier
    from a2a_push.protocol.types import TaskPushNotificationConfig
    from a2a_push.signing import KeySet
    from a2a_push.store import MemoryStore

    if tasks is not None and stored:
        working = a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_WORKING)
        user = ServerCallContext() if owner == ANONYMOUS_OWNER else alice_context()
        await tasks.save(a2a_pb2.Task(id="t1", context_id="ctx-1", status=working), user)
    notifier = PushNotifier(
        MemoryStore(),
        issuer="http://agent.test",
        keyset=KeySet.generate(),
        address_policy=AddressPolicy(allow_loopback=True),
    )
    async with notifier:
        await notifier.register_config(
            TaskPushNotificationConfig(url=sink.url("/v03")),
            owner=owner,
            task_id="t1",
            protocol_version="0.3",
        )
        sender = A2APushSender(notifier, task_store=tasks)  # type: ignore[arg-type]
        for n in (1, 2):
            artifact = a2a_pb2.Artifact(artifact_id=f"a{n}", parts=[a2a_pb2.Part(text="6")])
            await sender.send_notification(
                "t1",
                a2a_pb2.TaskArtifactUpdateEvent(
                    task_id="t1", context_id="ctx-1", artifact=artifact
                ),
            )
        await sink.wait_for(2, timeout=10, path="/v03")
    return [json.loads(hook.body) for hook in sink.on("/v03")]


def alice_context() -> ServerCallContext:
    return ServerCallContext(user=NamedUser("alice"))


@pytest.mark.parametrize("owner", [ANONYMOUS_OWNER, "alice"])
async def test_a_restarted_sender_reads_an_unseen_tasks_status_from_the_task_store(
    sink: WebhookSink, owner: str
) -> None:
    # With the handler's task store, the v0.3 config gets the whole task, as docs/protocol.md
    # says for v0.3, even though this sender never saw the task's status; a task the
    # store scopes to a user is read as the owner of the task's configs.
    tasks = CountingTaskStore()
    bodies = await _artifacts_after_restart(sink, tasks, owner=owner)
    for n, body in enumerate(bodies, 1):
        assert body["kind"] == "task", body
        assert body["id"] == "t1" and body["contextId"] == "ctx-1"
        assert body["status"]["state"] == "working"
        assert [a["artifactId"] for a in body["artifacts"]] == [f"a{n}"]
    assert tasks.reads == (1 if owner == ANONYMOUS_OWNER else 2)  # then remembered


async def test_an_unseen_task_not_in_the_store_is_looked_for_once(sink: WebhookSink) -> None:
    tasks = CountingTaskStore()
    bodies = await _artifacts_after_restart(sink, tasks, owner="alice", stored=False)
    assert [b["kind"] for b in bodies] == ["artifact-update"] * 2
    assert tasks.reads == 2  # as anonymous, then as alice; not again for the second


async def test_without_a_task_store_an_unseen_tasks_artifact_goes_in_its_event_form(
    sink: WebhookSink,
) -> None:
    bodies = await _artifacts_after_restart(sink, None)
    assert [b["kind"] for b in bodies] == ["artifact-update"] * 2
