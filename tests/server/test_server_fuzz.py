"""Property-based tests: random and mutated requests to the JSON-RPC endpoint and the REST
routes never get a 5xx, always get a JSON answer, and never change the store when rejected.

One aiohttp server (real SQLite store) serves every example of a test; hypothesis drives
it from a synchronous test through the server's own event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import Task, TaskPushNotificationConfig, TaskState, TaskStatus
from a2a_push.server import PushConfigService, default_owner_resolver, mount
from a2a_push.store import SQLiteStore, StoredConfig

TASK = "task-1"
ALICE = {"Authorization": "Bearer alice"}
OWNER = default_owner_resolver(ALICE)
HOOK = "https://93.184.215.14/hook"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Harness:
    loop: asyncio.AbstractEventLoop
    client: TestClient[web.Request, web.Application]
    notifier: PushNotifier

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def configs(self) -> list[StoredConfig]:
        configs, _ = await self.notifier.store.list_configs(TASK, OWNER, page_size=1000)
        return configs


async def _lookup(task_id: str, owner: str) -> Task | None:
    if task_id != TASK or owner != OWNER:
        return None
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    loop = asyncio.new_event_loop()
    db: Path = tmp_path_factory.mktemp("fuzz") / "push.db"

    async def start() -> Harness:
        # resolve_on_register=False: random host names must not cost DNS lookups.
        notifier = PushNotifier(
            SQLiteStore(db),
            issuer="http://agent.test",
            run_dispatcher=False,
            resolve_on_register=False,
        )
        await notifier.start()
        await notifier.register_config(
            TaskPushNotificationConfig(id="seed", task_id=TASK, url=HOOK), owner=OWNER
        )
        app = web.Application()
        mount(app, PushConfigService(notifier, task_lookup=_lookup), max_body_bytes=4096)
        client: TestClient[web.Request, web.Application] = TestClient(TestServer(app))
        await client.start_server()
        return Harness(loop, client, notifier)

    h = loop.run_until_complete(start())
    yield h

    async def stop() -> None:
        await h.client.close()
        await h.notifier.stop()

    loop.run_until_complete(stop())
    loop.close()


# --------------------------------------------------------------------------- strategies

# Text that includes CR, LF, NUL, other controls and non-ASCII.
nasty_text = st.text(
    alphabet=st.one_of(
        st.sampled_from("\r\n\x00\t\x7f\x85\u2028 /:%?#@"), st.characters(codec="utf-8")
    ),
    max_size=20,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    nasty_text,
    st.sampled_from(["", TASK, "seed", HOOK, "http://10.0.0.1/", "ftp://x/", "Bearer"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

V10_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (
        "CreateTaskPushNotificationConfig",
        {
            "taskId": TASK,
            "url": HOOK,
            "token": "tok",
            "authentication": {"scheme": "Bearer", "credentials": "c"},
        },
    ),
    ("CreateTaskPushNotificationConfig", {"taskId": TASK, "config": {"url": HOOK}}),
    ("GetTaskPushNotificationConfig", {"taskId": TASK, "id": "seed"}),
    ("ListTaskPushNotificationConfigs", {"taskId": TASK, "pageSize": 2, "pageToken": ""}),
    ("DeleteTaskPushNotificationConfig", {"task_id": TASK, "id": "not-there"}),
    (
        "tasks/pushNotificationConfig/set",
        {
            "taskId": TASK,
            "pushNotificationConfig": {
                "url": HOOK,
                "authentication": {"schemes": ["Bearer"], "credentials": "c"},
            },
        },
    ),
    ("tasks/pushNotificationConfig/get", {"id": TASK, "pushNotificationConfigId": "seed"}),
    ("tasks/pushNotificationConfig/list", {"id": TASK}),
    ("tasks/pushNotificationConfig/delete", {"id": TASK, "pushNotificationConfigId": "nope"}),
]


@st.composite
def mutated(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """``value`` with some members dropped, replaced, retyped or added, at any depth."""
    if not isinstance(value, dict) or depth > 3:
        return draw(st.one_of(st.just(value), json_values)) if draw(st.booleans()) else value
    out = dict(value)
    for key in list(out):
        action = draw(st.sampled_from(["keep", "keep", "drop", "replace", "recurse"]))
        if action == "drop":
            del out[key]
        elif action == "replace":
            out[key] = draw(json_values)
        elif action == "recurse":
            out[key] = draw(mutated(out[key], depth + 1))
    if draw(st.booleans()):
        out[draw(st.sampled_from(["url", "token", "id", "taskId", "task_id", "pageSize"]))] = draw(
            json_values
        )
    return out


@st.composite
def jsonrpc_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "value", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "value":
        return json.dumps(draw(json_values)).encode()
    method, params = draw(st.sampled_from(V10_REQUESTS))
    request = {"jsonrpc": "2.0", "id": draw(st.integers(0, 10**6)), "method": method}
    request["params"] = params
    return json.dumps(draw(mutated(request)), ensure_ascii=draw(st.booleans())).encode()


header_values = st.one_of(
    st.sampled_from(["1.0", "0.3", "", "1", "2.0", "1.0.1"]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=10),
)


# --------------------------------------------------------------------------- checks


def check_answer(status: int, text: str, *, jsonrpc: bool) -> bool:
    """Assert the answer is sane; True when the call was rejected."""
    assert status < 500, (status, text)
    if status == 204:
        assert text == ""
        return False
    body = json.loads(text)
    if jsonrpc:
        assert isinstance(body, dict) and ("error" in body) != ("result" in body), body
        if "error" in body:
            assert body["error"]["code"] != -32603, body
            assert isinstance(body["error"]["message"], str)
            return True
        return status >= 400
    if status >= 400:
        assert isinstance(body, dict) and isinstance(body["error"]["message"], str), body
        assert body["error"]["code"] == status
        return True
    return False


@FUZZ
@given(body=jsonrpc_bodies(), version=st.none() | header_values)
def test_jsonrpc_endpoint_survives_random_requests(
    harness: Harness, body: bytes, version: str | None
) -> None:
    async def go() -> None:
        before = await harness.configs()
        headers = {"Content-Type": "application/json", **ALICE}
        if version is not None:
            headers["A2A-Version"] = version
        resp = await harness.client.post("/", data=body, headers=headers)
        rejected = check_answer(resp.status, await resp.text(), jsonrpc=True)
        if rejected:
            assert await harness.configs() == before

    harness.run(go())


@st.composite
def rest_calls(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes | None]:
    task = draw(st.one_of(st.just(TASK), nasty_text.filter(bool)))
    path = f"/tasks/{quote(task, safe='')}/pushNotificationConfigs"
    verb = draw(st.sampled_from(["POST", "GET", "GET", "DELETE"]))
    if verb != "POST" and (verb == "DELETE" or draw(st.booleans())):
        config_id = draw(st.one_of(st.just("seed"), nasty_text.filter(bool)))
        path += "/" + quote(config_id, safe="")
    query = draw(
        st.dictionaries(
            st.sampled_from(["pageSize", "pageToken", "page_size", "x"]),
            st.one_of(st.sampled_from(["1", "0", "-1", "abc", "99999999999999"]), nasty_text),
            max_size=3,
        )
    )
    body = None
    if verb == "POST":
        base = {"url": HOOK, "token": "t", "authentication": {"scheme": "Basic"}}
        value = draw(st.one_of(mutated(base), json_values))
        body = draw(st.one_of(st.just(json.dumps(value).encode()), st.binary(max_size=100)))
    return verb, path, query, body


@FUZZ
@given(call=rest_calls(), version=st.none() | header_values)
def test_rest_routes_survive_random_requests(
    harness: Harness, call: tuple[str, str, dict[str, str], bytes | None], version: str | None
) -> None:
    verb, path, query, body = call

    async def go() -> None:
        before = await harness.configs()
        headers = {"Content-Type": "application/json", **ALICE}
        if version is not None:
            headers["A2A-Version"] = version
        resp = await harness.client.request(verb, path, params=query, data=body, headers=headers)
        text = await resp.text()
        if resp.status in (404, 405) and not text.startswith("{"):
            return  # the router's own answer for a path that is not ours (e.g. "%2F")
        if check_answer(resp.status, text, jsonrpc=False):
            assert await harness.configs() == before

    harness.run(go())
