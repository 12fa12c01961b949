"""Receiver regressions, on real local servers and real SQLite: an unknown kid while the
JWKS refetch is rate-limited, JWKS discovery when the agent was down at start, agent-card
shapes and sizes, client API id validation, concurrent duplicate subscriptions, repeated
subscriptions in other processes (confirmed in the store) and their fresh fetch, what a
failed subscribe says, how long dedup keys are kept, and what the maintenance purge
removes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.server.app import PUSH_SIGNING_EXTENSION_URI
from a2a_push.signing import KeySet, WebhookSigner
from receiver.api import RECEIVER, create_app
from receiver.core import Receiver, card_jwks_uri
from receiver.settings import ReceiverSettings, load_settings
from receiver.store import Subscription, SubscriptionState
from receiver.verify import MAX_JWKS_BYTES, token_digest

from ..receiver_support import (
    API_KEY,
    WebhookRig,
    _free_port,
    status_update,
    until,
    webhook_rig,
)

AUTH = {"Authorization": f"Bearer {API_KEY}"}


# ---- a configurable agent: card, keys, GetTask, CreateTaskPushNotificationConfig ---------


@dataclass
class Agent:
    keyset: KeySet = field(default_factory=KeySet.generate)
    base: str = ""
    card: Any = None
    """The agent card (any JSON); None: one naming ``/keys`` as the JWKS URL."""
    card_raw: bytes | None = None
    create_gate: asyncio.Event | None = None
    """When set, CreateTaskPushNotificationConfig answers only once this event is set."""
    create_error: dict[str, Any] | None = None
    creates: int = 0
    state: str = "TASK_STATE_WORKING"
    """What GetTask says the task's state is."""
    get_tasks: int = 0

    @property
    def url(self) -> str:
        return self.base + "/rpc"

    def app(self) -> web.Application:
        async def card(request: web.Request) -> web.Response:
            if self.card_raw is not None:
                return web.Response(body=self.card_raw, content_type="application/json")
            extension = {
                "uri": PUSH_SIGNING_EXTENSION_URI,
                "params": {"jwksUri": self.base + "/keys"},
            }
            default = {"name": "agent", "capabilities": {"extensions": [extension]}}
            return web.json_response(default if self.card is None else self.card)

        async def keys(request: web.Request) -> web.Response:
            return web.json_response(self.keyset.jwks())

        async def rpc(request: web.Request) -> web.Response:
            data = await request.json()
            params = data["params"]
            if data["method"] == "GetTask":
                self.get_tasks += 1
                task = {"id": params["id"], "contextId": "c", "status": {"state": self.state}}
                return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": task})
            self.creates += 1
            if self.create_gate is not None:
                await self.create_gate.wait()
            if self.create_error is not None:
                error = self.create_error
                return web.json_response({"jsonrpc": "2.0", "id": data["id"], "error": error})
            return web.json_response({"jsonrpc": "2.0", "id": data["id"], "result": params})

        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", card)
        app.router.add_get("/keys", keys)  # nothing at /.well-known/jwks.json
        app.router.add_post("/rpc", rpc)
        return app


@asynccontextmanager
async def agent_server(agent: Agent, port: int | None = None) -> AsyncIterator[Agent]:
    server = TestServer(agent.app(), host="127.0.0.1", port=port or _free_port())
    await server.start_server()
    agent.base = str(server.make_url("")).rstrip("/")
    try:
        yield agent
    finally:
        await server.close()


def settings_for(tmp_path: Path, agent: dict[str, Any], **extra: Any) -> ReceiverSettings:
    return ReceiverSettings.model_validate(
        {
            "host": "127.0.0.1",
            "port": _free_port(),
            "data_dir": tmp_path / "receiver",
            "agents": [agent],
            "api_keys": [{"client_id": "alice", "api_key": API_KEY}],
            "fetch_coalesce_seconds": 0,
            **extra,
        }
    )


@asynccontextmanager
async def receiver_server(settings: ReceiverSettings) -> AsyncIterator[Receiver]:
    app = create_app(settings)
    server = TestServer(app, host="127.0.0.1", port=settings.port)
    await server.start_server()
    try:
        yield app[RECEIVER]
    finally:
        await server.close()


def signed_headers(
    agent: Agent, settings: ReceiverSettings, body: bytes, sub_id: str, task_id: str
) -> dict[str, str]:
    webhook_id = f"msg_{uuid.uuid4().hex}"
    jwt = WebhookSigner(agent.keyset, agent.url).sign(
        body=body,
        audience=settings.webhook_url,
        webhook_id=webhook_id,
        task_id=task_id,
        config_id=sub_id,
        seq=1,
    )
    return {
        "Content-Type": A2A_MEDIA_TYPE,
        HEADER_WEBHOOK_ID: webhook_id,
        HEADER_WEBHOOK_TIMESTAMP: str(int(time.time())),
        HEADER_SIGNATURE: jwt,
    }


async def stored_subscription(receiver: Receiver, agent_url: str, task_id: str) -> Subscription:
    sub = Subscription(
        id=f"sub_{uuid.uuid4().hex}",
        client_id="alice",
        agent_url=agent_url.rstrip("/"),
        task_id=task_id,
        token_digest=token_digest(uuid.uuid4().hex),
        state=SubscriptionState.ACTIVE,
        created_at=time.time() - 3600,
    )
    return await receiver.store.add_subscription(sub)


# ---- 1. an unknown kid while the JWKS refetch is rate-limited ----------------------------


async def test_a_webhook_signed_right_after_a_key_rotation_gets_503_retry_then_is_accepted(
    tmp_path: Path,
) -> None:
    async with webhook_rig(tmp_path) as rig:
        sub, _ = await rig.subscribe("a", "task-1")
        body = status_update("task-1")
        assert (await rig.post(body, rig.signed("a", body, sub)))[0] == 200  # JWKS fetched
        rig.agents["a"].keyset.rotate()  # the new key signs at once (docs/protocol.md)
        headers = {**rig.signed("a", body, sub), "Content-Type": A2A_MEDIA_TYPE}
        async with rig.session.post(rig.webhook_url, data=body, headers=headers) as resp:
            answer = await resp.json()
            # Not 401 (the sender would dead-letter it): 503, retried after Retry-After.
            assert (resp.status, answer["error"]) == (503, "jwks_refresh_pending")
            retry_after = int(resp.headers["Retry-After"])
        assert 1 <= retry_after <= 2 and answer["retryAfter"] == retry_after
        assert rig.agents["a"].jwks_hits == 1
        await asyncio.sleep(retry_after + 0.1)
        # The sender's retry: the same webhook-id and JWT.
        assert await rig.post(body, headers) == (200, {"status": "accepted"})
        assert rig.agents["a"].jwks_hits == 2


# ---- 2. JWKS discovery: retried when the agent was down; any card shape; a size cap ------


async def test_jwks_discovery_is_retried_when_the_agent_was_down_at_start(
    tmp_path: Path,
) -> None:
    agent = Agent()
    port = _free_port()
    agent.base = f"http://127.0.0.1:{port}"
    settings = settings_for(tmp_path, {"url": agent.url})  # no jwks_url: from the card
    async with receiver_server(settings) as receiver:
        jwks = receiver._verifiers[agent.url].jwks
        assert jwks is not None
        await jwks.locate()  # the start-up attempt: the agent is not up yet
        assert not jwks.located
        async with agent_server(agent, port), aiohttp.ClientSession() as session:
            sub = await stored_subscription(receiver, agent.url, "t1")
            body = status_update("t1")
            headers = signed_headers(agent, settings, body, sub.id, "t1")
            async with session.post(settings.webhook_url, data=body, headers=headers) as resp:
                # The default URL has no keys; the card is asked again with the next fetch.
                assert resp.status == 503
                retry_after = int(resp.headers["Retry-After"])
            await asyncio.sleep(retry_after + 0.1)
            async with session.post(settings.webhook_url, data=body, headers=headers) as resp:
                assert (resp.status, await resp.json()) == (200, {"status": "accepted"})
        assert jwks.located and jwks.url == agent.base + "/keys"


@pytest.mark.parametrize(
    "card",
    [
        [],
        [{"capabilities": {}}],
        "a string",
        None,
        {"capabilities": []},
        {"capabilities": "yes"},
        {"capabilities": {"extensions": {"uri": PUSH_SIGNING_EXTENSION_URI}}},
        {"capabilities": {"extensions": [{"uri": PUSH_SIGNING_EXTENSION_URI, "params": []}]}},
        {"capabilities": {"extensions": [{"uri": PUSH_SIGNING_EXTENSION_URI, "params": "x"}]}},
        {"capabilities": {"extensions": [{"uri": PUSH_SIGNING_EXTENSION_URI}]}},
        {"capabilities": {"extensions": [1, "x", None]}},
        {
            "capabilities": {
                "extensions": [
                    {"uri": PUSH_SIGNING_EXTENSION_URI, "params": {"jwksUri": "file:///etc/passwd"}}
                ]
            }
        },
    ],
)
def test_odd_agent_cards_name_no_jwks_url(card: Any) -> None:
    assert card_jwks_uri(card) is None


def test_the_push_signing_extension_names_the_jwks_url() -> None:
    ext = {"uri": PUSH_SIGNING_EXTENSION_URI, "params": {"jwksUri": "https://a.test/k"}}
    assert card_jwks_uri({"capabilities": {"extensions": [{"uri": "x"}, ext]}}) == (
        "https://a.test/k"
    )


@pytest.mark.parametrize("card", [[{"capabilities": {}}], {"capabilities": ["extensions"]}])
async def test_an_odd_card_keeps_the_default_jwks_url_without_crashing(
    tmp_path: Path, card: Any
) -> None:
    async with agent_server(Agent(card=card)) as agent:
        receiver = Receiver(settings_for(tmp_path, {"url": agent.url}))
        async with receiver:
            jwks = receiver._verifiers[agent.url].jwks
            assert jwks is not None
            await jwks.locate()
            # The agent answered: discovery is done, with the default URL.
            assert jwks.located and jwks.url == agent.base + "/.well-known/jwks.json"


async def test_an_oversized_agent_card_is_not_read_and_is_asked_again_later(
    tmp_path: Path,
) -> None:
    huge = json.dumps({"name": "x" * MAX_JWKS_BYTES}).encode()
    async with agent_server(Agent(card_raw=huge)) as agent:
        receiver = Receiver(settings_for(tmp_path, {"url": agent.url}))
        async with receiver:
            jwks = receiver._verifiers[agent.url].jwks
            assert jwks is not None
            await jwks.locate()
            assert not jwks.located and jwks.url == agent.base + "/.well-known/jwks.json"
            with pytest.raises(ValueError, match="over"):
                await receiver._card_jwks(receiver.settings.agents[0])


# ---- 3, 4. client API ids follow the webhook rule; Last-Event-ID fits int64 --------------


def _base(rig: WebhookRig) -> str:
    return rig.webhook_url.rsplit("/webhooks/", 1)[0]


@pytest.mark.parametrize(
    "task_id_json",
    ['"\\ud800"', '"a\\u0000b"', '"tab\\there"', '""', '"' + "t" * 257 + '"', "5", "null"],
)
async def test_subscribing_to_a_task_id_no_webhook_could_name_is_400(
    tmp_path: Path, task_id_json: str
) -> None:
    async with webhook_rig(tmp_path) as rig:
        raw = f'{{"agentUrl": "{rig.agents["a"].url}", "taskId": {task_id_json}}}'
        headers = {**AUTH, "Content-Type": "application/json"}
        async with rig.session.post(_base(rig) + "/subscriptions", data=raw, headers=headers) as r:
            assert r.status == 400 and r.content_type == "application/json"
            answer = await r.json()
        assert answer["error"] == "invalid" and "taskId" in answer["message"]
        assert await rig.receiver.store.list_subscriptions("alice") == []


async def test_a_256_character_task_id_passes_both_the_api_and_the_webhook(
    tmp_path: Path,
) -> None:
    task_id = "t" * 256
    async with webhook_rig(tmp_path) as rig:
        body = {"agentUrl": rig.agents["a"].url, "taskId": task_id}
        async with rig.session.post(_base(rig) + "/subscriptions", json=body, headers=AUTH) as r:
            # Valid: it reached the agent (whose fake refuses the method).
            assert (r.status, (await r.json())["error"]) == (502, "agent_error")
        sub, _ = await rig.subscribe("a", task_id)
        webhook = status_update(task_id)
        assert await rig.post(webhook, rig.signed("a", webhook, sub)) == (
            200,
            {"status": "accepted"},
        )


@pytest.mark.parametrize(
    "path", ["/tasks?contextId=a%00b", "/tasks?contextId=", "/tasks/a%00b", "/tasks/" + "t" * 257]
)
async def test_task_queries_with_invalid_ids_are_400(tmp_path: Path, path: str) -> None:
    async with (
        webhook_rig(tmp_path) as rig,
        rig.session.get(_base(rig) + path, headers=AUTH) as r,
    ):
        assert r.status == 400 and r.content_type == "application/json"
        assert (await r.json())["error"] == "invalid"


@pytest.mark.parametrize("last", ["9999999999999999999", str(2**63)])
async def test_a_last_event_id_past_int64_is_400_before_the_stream_starts(
    tmp_path: Path, last: str
) -> None:
    async with webhook_rig(tmp_path) as rig:
        for headers, query in (({"Last-Event-ID": last}, ""), ({}, f"?lastEventId={last}")):
            async with rig.session.get(
                _base(rig) + "/events" + query, headers={**AUTH, **headers}
            ) as r:
                assert r.status == 400 and r.content_type == "application/json"
                assert "Last-Event-ID" in (await r.json())["message"]


async def test_the_largest_int64_last_event_id_streams(tmp_path: Path) -> None:
    async with webhook_rig(tmp_path) as rig:
        headers = {**AUTH, "Last-Event-ID": str(2**63 - 1)}
        async with rig.session.get(_base(rig) + "/events", headers=headers) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            assert (await asyncio.wait_for(r.content.readline(), 5)) == b"retry: 2000\n"


# ---- 5. concurrent duplicate subscriptions -------------------------------------------------


async def _subscribe(
    session: aiohttp.ClientSession, settings: ReceiverSettings, agent: Agent
) -> tuple[int, Any]:
    body = {"agentUrl": agent.url, "taskId": "t1"}
    async with session.post(settings.base_url + "/subscriptions", json=body, headers=AUTH) as r:
        return r.status, await r.json()


async def _duplicate_while_creating(
    session: aiohttp.ClientSession,
    settings: ReceiverSettings,
    agent: Agent,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """Subscribe twice, the second while the agent holds the first's create; (first's
    answer, second's answer)."""
    gate = agent.create_gate = asyncio.Event()
    entered = 0  # subscribe() calls that reached the receiver
    real_subscribe = receiver.subscribe

    async def subscribe(*args: Any, **kwargs: Any) -> tuple[Subscription, bool]:
        nonlocal entered
        entered += 1
        return await real_subscribe(*args, **kwargs)

    monkeypatch.setattr(receiver, "subscribe", subscribe)
    try:
        first = asyncio.create_task(_subscribe(session, settings, agent))
        await until(lambda: agent.creates == 1, "the agent has the first create")
        second = asyncio.create_task(_subscribe(session, settings, agent))
        # subscribe() runs without yielding until it waits (for the first's outcome, or
        # for its own create): once it has been entered, the second has made its choice.
        await until(lambda: entered == 2, "the second request reached the receiver")
        assert not first.done()
    finally:
        gate.set()
    return await first, await second


async def test_a_duplicate_during_a_failing_create_gets_the_same_error_not_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(create_error={"code": -32602, "message": "bad params"})
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            first, second = await _duplicate_while_creating(
                session, settings, agent, receiver, monkeypatch
            )
            assert second[0] == 502 and second[1]["error"] == "agent_error"
            assert first == second
            assert agent.creates == 1
            assert await receiver.store.list_subscriptions("alice") == []


async def test_a_duplicate_during_a_successful_create_gets_the_confirmed_subscription(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            (status, created), second = await _duplicate_while_creating(
                session, settings, agent, receiver, monkeypatch
            )
            assert (status, second[0]) == (201, 200)
            assert second[1]["id"] == created["id"] and second[1]["state"] == "active"
            assert agent.creates == 1
            # Asked again later: the same one, at once.
            assert await _subscribe(session, settings, agent) == (200, second[1])


async def test_a_young_subscription_from_another_process_is_409_until_it_can_be_trusted(
    tmp_path: Path,
) -> None:
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            # Another worker has just stored its row and is still asking the agent.
            young = Subscription(
                id="sub_other_process",
                client_id="alice",
                agent_url=agent.url,
                task_id="t1",
                token_digest=token_digest("other"),
                state=SubscriptionState.ACTIVE,
                created_at=time.time(),
            )
            await receiver.store.add_subscription(young)
            body = {"agentUrl": agent.url, "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as r:
                assert r.status == 409 and r.headers["Retry-After"] == "2"
                assert (await r.json())["error"] == "subscription_pending"
            assert agent.creates == 0
            # Past the time an agent call can take, the row is what the other worker left.
            await receiver.store.remove_subscription(young.id)
            old = await stored_subscription(receiver, agent.url, "t1")
            assert await _subscribe(session, settings, agent) == (200, old.to_json())


async def test_a_confirmed_subscription_is_200_at_once_in_another_process_and_after_restart(
    tmp_path: Path,
) -> None:
    """The confirmation is in the store: a repeat that reaches another worker (here a
    second receiver on the same SQLite file), or this one restarted, gets the
    subscription at once, not 409 for the creation window."""
    agent = Agent()
    async with agent_server(agent):
        entry = {"url": agent.url, "jwks_url": agent.base + "/keys"}
        first, second = settings_for(tmp_path, entry), settings_for(tmp_path, entry)
        assert first.database_url == second.database_url and first.port != second.port
        async with aiohttp.ClientSession() as session:
            async with receiver_server(first), receiver_server(second) as other:
                status, created = await _subscribe(session, first, agent)
                assert status == 201
                assert await _subscribe(session, second, agent) == (200, created)
                stored = await other.store.get_subscription(created["id"])
                assert stored is not None and stored.confirmed_at is not None
            async with receiver_server(first):  # restarted
                assert await _subscribe(session, first, agent) == (200, created)
            assert agent.creates == 1


async def test_subscribing_again_fetches_the_task_again(tmp_path: Path) -> None:
    """After the webhooks were lost (refused while the agent's entry was wrong, and the
    sender gave up), subscribing again brings the current state, without a DELETE."""
    agent = Agent()
    async with agent_server(agent):
        settings = settings_for(tmp_path, {"url": agent.url, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            assert (await _subscribe(session, settings, agent))[0] == 201
            await _task_state(session, settings, "TASK_STATE_WORKING")
            fetched = agent.get_tasks
            agent.state = "TASK_STATE_COMPLETED"  # no webhook tells the receiver
            status, _ = await _subscribe(session, settings, agent)
            assert status == 200
            await _task_state(session, settings, "TASK_STATE_COMPLETED")
            assert agent.get_tasks == fetched + 1 and agent.creates == 1
            assert receiver.fetcher is not None
            await receiver.fetcher.idle()


async def test_subscribing_again_and_again_fetches_at_most_once_per_min_interval(
    tmp_path: Path,
) -> None:
    """A client repeating POST /subscriptions as fast as it can does not make the
    receiver call GetTask as fast: repeats wait out the task's minimum interval (and
    coalesce meanwhile), yet the task is still fetched again."""
    agent = Agent()
    interval = 0.5
    async with agent_server(agent):
        settings = settings_for(
            tmp_path,
            {"url": agent.url, "jwks_url": agent.base + "/keys"},
            fetch_min_interval_seconds=interval,
        )
        async with receiver_server(settings) as receiver, aiohttp.ClientSession() as session:
            assert (await _subscribe(session, settings, agent))[0] == 201
            await _task_state(session, settings, "TASK_STATE_WORKING")
            assert receiver.fetcher is not None
            await receiver.fetcher.idle()
            fetched = agent.get_tasks
            # Not final: a final task is never fetched again, whatever is asked.
            agent.state = "TASK_STATE_INPUT_REQUIRED"  # no webhook tells the receiver
            started = time.monotonic()
            repeats = 0
            while time.monotonic() - started < 3 * interval:
                answers = await asyncio.gather(
                    *(_subscribe(session, settings, agent) for _ in range(5))
                )
                assert {status for status, _ in answers} == {200}
                repeats += len(answers)
            elapsed = time.monotonic() - started
            await _task_state(session, settings, "TASK_STATE_INPUT_REQUIRED")
            await receiver.fetcher.idle()
            extra = agent.get_tasks - fetched
            # One fetch per interval at most, whatever the number of repeats: those that
            # started during the repeats, and one asked for by the last repeats that was
            # still waiting out its interval when they ended.
            assert repeats >= 10
            assert 1 <= extra <= elapsed / interval + 2, (extra, repeats, elapsed)
            assert agent.creates == 1


async def _task_state(
    session: aiohttp.ClientSession, settings: ReceiverSettings, state: str
) -> None:
    """Wait until the receiver serves task t1 in ``state``."""
    deadline = time.monotonic() + 10
    last: Any = None
    while time.monotonic() < deadline:
        async with session.get(settings.base_url + "/tasks/t1", headers=AUTH) as r:
            last = (r.status, await r.json())
        if last[0] == 200 and last[1]["status"]["state"] == state:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"task t1 never reached {state}; last: {last}")


# ---- what a failed subscribe says --------------------------------------------------------


async def test_an_agent_url_that_is_not_a_json_rpc_endpoint_is_named_in_the_error(
    tmp_path: Path,
) -> None:
    agent = Agent()
    async with agent_server(agent):
        wrong = agent.base + "/nowhere"  # the agent server answers 404, text/plain
        settings = settings_for(tmp_path, {"url": wrong, "jwks_url": agent.base + "/keys"})
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            body = {"agentUrl": wrong, "taskId": "t1"}
            async with session.post(
                settings.base_url + "/subscriptions", json=body, headers=AUTH
            ) as r:
                assert r.status == 502
                answer = await r.json()
        assert answer["error"] == "agent_error"
        assert answer["message"] == (
            f"CreateTaskPushNotificationConfig to {wrong}: the agent answered HTTP 404 "
            f"without a JSON-RPC body; is {wrong} the agent's JSON-RPC endpoint?"
        )


def test_agent_urls_in_messages_drop_their_user_and_password() -> None:
    from receiver.agent_client import shown_url

    assert shown_url("http://user:s3cret@agent.test:8/rpc?x=1") == "http://agent.test:8/rpc?x=1"
    assert shown_url("https://agent.test/rpc") == "https://agent.test/rpc"


@pytest.mark.parametrize("credentials", [None, "Bearer the-receivers-secret-0123"])
async def test_task_not_found_on_subscribe_explains_whose_credentials_are_used(
    tmp_path: Path, credentials: str | None
) -> None:
    agent = Agent(create_error={"code": -32001, "message": "Task not found"})
    async with agent_server(agent):
        entry: dict[str, Any] = {"url": agent.url, "jwks_url": agent.base + "/keys"}
        if credentials is not None:
            entry["credentials"] = credentials
        settings = settings_for(tmp_path, entry)
        async with receiver_server(settings), aiohttp.ClientSession() as session:
            status, answer = await _subscribe(session, settings, agent)
    assert (status, answer["error"]) == (404, "task_not_found")
    message = answer["message"]
    assert message.startswith("CreateTaskPushNotificationConfig: agent error -32001")
    assert "calls the agent with this agent's `credentials` setting" in message
    assert "a task created under other credentials is not visible to it" in message
    which = "none are configured" if credentials is None else "its configured ones"
    assert f"({which})" in message
    assert "the-receivers-secret" not in message


# ---- 6. dedup keys outlive the sender's retries; 7. the purge drops old history ----------


async def test_retries_hours_later_are_still_duplicates(tmp_path: Path) -> None:
    async with webhook_rig(tmp_path) as rig:
        sub_a, _ = await rig.subscribe("a", "task-1")
        _, token = await rig.subscribe("t", "task-2")
        body_a, body_t = status_update("task-1"), status_update("task-2")
        wid = "msg_stable_delivery_id"

        def jwt_headers() -> dict[str, str]:  # each attempt: the same id, a fresh JWT
            return {
                HEADER_WEBHOOK_ID: wid,
                HEADER_WEBHOOK_TIMESTAMP: str(int(time.time())),
                HEADER_SIGNATURE: rig.jwt("a", body_a, sub_a, webhook_id=wid),
            }

        token_headers = {HEADER_NOTIFICATION_TOKEN: token}  # token-only: the body hash
        assert (await rig.post(body_a, jwt_headers()))[1] == {"status": "accepted"}
        assert (await rig.post(body_t, token_headers))[1] == {"status": "accepted"}
        assert rig.receiver.fetcher is not None
        await rig.receiver.fetcher.idle()
        # The maintenance purge as it runs half an hour later: both still duplicates.
        await rig.receiver.purge(now=time.time() + 1800)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert await rig.post(body_t, token_headers) == (200, {"status": "duplicate"})
        # 2 h and 27 h later (the sender retries ~28 h): the webhook id still holds; an
        # id-less identical body is a new notification after an hour (a status that
        # came back, say WORKING after INPUT_REQUIRED, must not be dropped).
        await rig.receiver.purge(now=time.time() + 2 * 3600)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert await rig.post(body_t, token_headers) == (200, {"status": "accepted"})
        await rig.receiver.fetcher.idle()
        await rig.receiver.purge(now=time.time() + 27 * 3600)
        assert await rig.post(body_a, jwt_headers()) == (200, {"status": "duplicate"})
        assert rig.stored()[1] == 1
        await rig.receiver.purge(now=time.time() + 49 * 3600)
        assert rig.stored()[1] == 0


async def test_how_long_dedup_keys_are_kept_is_a_setting(tmp_path: Path) -> None:
    settings = load_settings(environ={"A2A_RECEIVER_DEDUP_RETENTION_HOURS": "72"})
    assert settings.dedup_retention_hours == 72
    assert load_settings(environ={}).dedup_retention_hours == 48
    async with webhook_rig(tmp_path) as rig:
        rig.receiver.settings = rig.receiver.settings.model_copy(
            update={"dedup_retention_hours": 1.0}
        )
        _, token = await rig.subscribe("t", "task-1")
        body = status_update("task-1")
        assert (await rig.post(body, {HEADER_NOTIFICATION_TOKEN: token}))[0] == 200
        await rig.receiver.purge(now=time.time() + 1800)
        assert rig.stored()[1] == 1
        await rig.receiver.purge(now=time.time() + 3700)
        assert rig.stored()[1] == 0


async def test_the_maintenance_purge_drops_deleted_subscriptions_and_old_events(
    tmp_path: Path,
) -> None:
    async with webhook_rig(tmp_path) as rig:
        kept, token = await rig.subscribe("t", "task-1")
        gone, gone_token = await rig.subscribe("t", "task-2")
        for task_id, tok in (("task-1", token), ("task-2", gone_token)):
            assert (await rig.post(status_update(task_id), {HEADER_NOTIFICATION_TOKEN: tok}))[
                0
            ] == 200
        assert rig.receiver.fetcher is not None
        await rig.receiver.fetcher.idle()
        await rig.unsubscribe(gone)
        store = rig.receiver.store
        # A week and a day later: task-2's subscription, task row and events are history;
        # task-1 (still subscribed) keeps its snapshot and its newest event.
        await rig.receiver.purge(now=time.time() + 8 * 86400)
        assert await store.get_subscription(gone.id) is None
        assert await store.get_snapshot(kept.agent_url, "task-2") is None
        assert await store.get_snapshot(kept.agent_url, "task-1") is not None
        events = await store.events_for_client("alice", after=0)
        assert [e.task_id for e in events] == ["task-1"]
        assert rig.stored() == (0, 0)
