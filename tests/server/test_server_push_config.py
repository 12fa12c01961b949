"""Push-config methods over JSON-RPC (v1.0 and v0.3 aliases) and REST, on real aiohttp
test servers with real SQLite stores."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import Task, TaskState, TaskStatus
from a2a_push.server import (
    PUSH_SIGNING_EXTENSION_URI,
    PushConfigService,
    agent_card_push_fields,
    default_owner_resolver,
    mount,
)
from a2a_push.server.app import LEGACY_PUSH_SIGNING_EXTENSION_URI
from a2a_push.store import SQLiteStore
from a2a_push.testing import WebhookSink

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}
V10 = {"A2A-Version": "1.0"}
HOOK = "https://93.184.215.14/hook"  # a public IP literal: no DNS lookup at registration
TASK = "task-1"

Client = TestClient[web.Request, web.Application]


class Tasks:
    """The agent's tasks: (task id -> owners who may see it)."""

    def __init__(self) -> None:
        self.visible: dict[str, set[str]] = {}

    def add(self, task_id: str, *who: dict[str, str]) -> None:
        self.visible.setdefault(task_id, set()).update(default_owner_resolver(h) for h in who)

    async def lookup(self, task_id: str, owner: str) -> Task | None:
        if owner not in self.visible.get(task_id, set()):
            return None
        return Task(id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING))


Setup = Callable[..., Awaitable[tuple[Client, PushNotifier]]]


@pytest.fixture
def tasks() -> Tasks:
    t = Tasks()
    t.add(TASK, ALICE)
    return t


@pytest.fixture
async def setup(aiohttp_client: Any, tmp_path: Path, tasks: Tasks) -> AsyncIterator[Setup]:
    notifiers: list[PushNotifier] = []

    async def make(
        *,
        notifier_kw: dict[str, Any] | None = None,
        mount_kw: dict[str, Any] | None = None,
        **service_kw: Any,
    ) -> tuple[Client, PushNotifier]:
        kw: dict[str, Any] = {"run_dispatcher": False}
        kw.update(notifier_kw or {})
        db = tmp_path / f"push-{len(notifiers)}.db"
        notifier = PushNotifier(SQLiteStore(db), issuer="http://agent.test", **kw)
        await notifier.start()
        notifiers.append(notifier)
        app = web.Application()
        mount(
            app,
            PushConfigService(notifier, task_lookup=tasks.lookup, **service_kw),
            **(mount_kw or {}),
        )
        return await aiohttp_client(app), notifier

    yield make
    for n in notifiers:
        await n.stop()


_ids = iter(range(1, 1_000_000))


async def rpc(
    client: Client,
    method: str,
    params: Any,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    request_id = next(_ids)
    resp = await client.post(
        "/",
        json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
        headers={**V10, **ALICE, **(headers or {})},
    )
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    assert body["id"] == request_id and body["jsonrpc"] == "2.0"
    return body


def error_reason(error: dict[str, Any]) -> str:
    info = next(d for d in error["data"] if d["@type"].endswith("google.rpc.ErrorInfo"))
    assert info["domain"] == "a2a-protocol.org"
    return str(info["reason"])


def bad_field(error: dict[str, Any]) -> str:
    bad = next(d for d in error["data"] if d["@type"].endswith("google.rpc.BadRequest"))
    return str(bad["fieldViolations"][0]["field"])


async def stored(
    notifier: PushNotifier, task_id: str = TASK, who: dict[str, str] = ALICE
) -> list[Any]:
    configs, _ = await notifier.store.list_configs(task_id, default_owner_resolver(who))
    return configs


# ---- v1.0 JSON-RPC ---------------------------------------------------------------------------


async def test_create_get_list_delete_over_jsonrpc_v10(setup: Setup) -> None:
    client, notifier = await setup()
    created = await rpc(client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "url": HOOK})
    config = created["result"]
    assert config["taskId"] == TASK and config["url"] == HOOK and config["id"]

    got = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": config["id"]})
    assert got["result"] == config

    listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": TASK})
    assert listed["result"] == {"configs": [config], "nextPageToken": ""}

    deleted = await rpc(
        client, "DeleteTaskPushNotificationConfig", {"taskId": TASK, "id": config["id"]}
    )
    assert deleted["result"] == {}
    assert await stored(notifier) == []


async def test_snake_case_params_are_accepted(setup: Setup) -> None:
    client, _ = await setup()
    created = await rpc(
        client, "CreateTaskPushNotificationConfig", {"task_id": TASK, "id": "c1", "url": HOOK}
    )
    assert created["result"]["id"] == "c1"
    got = await rpc(client, "GetTaskPushNotificationConfig", {"task_id": TASK, "id": "c1"})
    assert got["result"]["taskId"] == TASK
    listed = await rpc(client, "ListTaskPushNotificationConfigs", {"task_id": TASK, "page_size": 1})
    assert [c["id"] for c in listed["result"]["configs"]] == ["c1"]
    v03 = await rpc(
        client,
        "tasks/pushNotificationConfig/get",
        {"id": TASK, "push_notification_config_id": "c1"},
    )
    assert v03["result"]["pushNotificationConfig"]["id"] == "c1"


async def test_create_accepts_the_task_id_and_config_wrapper(setup: Setup) -> None:
    client, notifier = await setup()
    created = await rpc(
        client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "config": {"url": HOOK}}
    )
    assert created["result"]["taskId"] == TASK
    assert len(await stored(notifier)) == 1


async def test_list_pages_through_every_config(setup: Setup) -> None:
    client, _ = await setup()
    for i in range(5):
        await rpc(
            client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "id": f"c{i}", "url": HOOK}
        )
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = (
            await rpc(
                client,
                "ListTaskPushNotificationConfigs",
                {"taskId": TASK, "pageSize": 2, "pageToken": token},
            )
        )["result"]
        pages += 1
        assert len(page["configs"]) <= 2
        seen += [c["id"] for c in page["configs"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == [f"c{i}" for i in range(5)] and pages == 3


async def test_a_bad_page_token_is_invalid_params(setup: Setup) -> None:
    client, _ = await setup()
    body = await rpc(
        client, "ListTaskPushNotificationConfigs", {"taskId": TASK, "pageToken": "\u00e9t\u00e9"}
    )
    assert body["error"]["code"] == -32602 and bad_field(body["error"]) == "pageToken"
    body = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": TASK, "pageSize": -1})
    assert body["error"]["code"] == -32602 and bad_field(body["error"]) == "pageSize"


async def test_delete_is_idempotent_but_an_unknown_task_is_not_found(setup: Setup) -> None:
    client, _ = await setup()
    again = await rpc(client, "DeleteTaskPushNotificationConfig", {"taskId": TASK, "id": "nope"})
    assert again["result"] == {}
    unknown = await rpc(client, "DeleteTaskPushNotificationConfig", {"taskId": "ghost", "id": "x"})
    assert unknown["error"]["code"] == -32001


async def test_unknown_task_is_task_not_found_with_error_info(setup: Setup) -> None:
    client, notifier = await setup()
    body = await rpc(client, "CreateTaskPushNotificationConfig", {"taskId": "ghost", "url": HOOK})
    assert body["error"]["code"] == -32001
    assert error_reason(body["error"]) == "TASK_NOT_FOUND"
    assert await stored(notifier, "ghost") == []


async def test_a_missing_config_is_not_found(setup: Setup) -> None:
    client, _ = await setup()
    body = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": "nope"})
    assert body["error"]["code"] == -32001


# ---- v0.3 aliases ----------------------------------------------------------------------------


async def test_v03_aliases_use_v03_shapes(setup: Setup) -> None:
    client, notifier = await setup()
    v03 = {"A2A-Version": "0.3"}
    params = {
        "taskId": TASK,
        "pushNotificationConfig": {
            "id": "c1",
            "url": HOOK,
            "authentication": {"schemes": ["Bearer"], "credentials": "s3cret"},
        },
    }
    created = await rpc(client, "tasks/pushNotificationConfig/set", params, v03)
    assert created["result"] == {
        "taskId": TASK,
        "pushNotificationConfig": {
            "id": "c1",
            "url": HOOK,
            "authentication": {"schemes": ["Bearer"]},
        },
    }
    got = await rpc(
        client,
        "tasks/pushNotificationConfig/get",
        {"id": TASK, "pushNotificationConfigId": "c1"},
        v03,
    )
    assert got["result"] == created["result"]
    listed = await rpc(client, "tasks/pushNotificationConfig/list", {"id": TASK}, v03)
    assert listed["result"] == [created["result"]]
    [config] = await stored(notifier)
    assert config.protocol_version == "0.3"
    deleted = await rpc(
        client,
        "tasks/pushNotificationConfig/delete",
        {"id": TASK, "pushNotificationConfigId": "c1"},
        v03,
    )
    assert deleted["result"] is None
    assert await stored(notifier) == []


async def test_v03_set_without_id_is_keyed_by_the_task(setup: Setup) -> None:
    client, _ = await setup()
    params = {"taskId": TASK, "pushNotificationConfig": {"url": HOOK}}
    created = await rpc(client, "tasks/pushNotificationConfig/set", params, {"A2A-Version": ""})
    assert created["result"]["pushNotificationConfig"]["id"] == TASK
    got = await rpc(client, "tasks/pushNotificationConfig/get", {"id": TASK}, {"A2A-Version": ""})
    assert got["result"]["pushNotificationConfig"]["url"] == HOOK


async def test_v03_invalid_params_name_the_v03_field(setup: Setup) -> None:
    client, notifier = await setup()
    params = {"taskId": TASK, "pushNotificationConfig": {"url": "ftp://example.com/x"}}
    body = await rpc(client, "tasks/pushNotificationConfig/set", params, {"A2A-Version": "0.3"})
    assert body["error"]["code"] == -32602
    assert "url" in bad_field(body["error"])
    assert await stored(notifier) == []


# ---- owners, redaction, push off, versions --------------------------------------------------


async def test_another_owner_gets_task_not_found(setup: Setup) -> None:
    client, _ = await setup()
    created = await rpc(
        client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "id": "c1", "url": HOOK}
    )
    assert "result" in created
    for method, params in [
        ("GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"}),
        ("ListTaskPushNotificationConfigs", {"taskId": TASK}),
        ("DeleteTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"}),
        ("CreateTaskPushNotificationConfig", {"taskId": TASK, "url": HOOK}),
    ]:
        body = await rpc(client, method, params, BOB)
        assert body["error"]["code"] == -32001, method
    still = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"})
    assert still["result"]["id"] == "c1"


async def test_configs_on_a_shared_task_are_private_to_their_owner(
    setup: Setup, tasks: Tasks
) -> None:
    tasks.add(TASK, BOB)
    client, _ = await setup()
    await rpc(client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "id": "c1", "url": HOOK})
    listed = await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": TASK}, BOB)
    assert listed["result"] == {"configs": [], "nextPageToken": ""}
    got = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"}, BOB)
    assert got["error"]["code"] == -32001


async def test_the_owner_is_a_digest_never_the_credential(setup: Setup) -> None:
    client, notifier = await setup()
    await rpc(client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "url": HOOK})
    [config] = await stored(notifier)
    assert config.owner == hashlib.sha256(b"Bearer alice-token").hexdigest()
    assert default_owner_resolver({}) == "anonymous"
    assert default_owner_resolver({"authorization": "x"}) == default_owner_resolver(
        {"Authorization": "x"}
    )


async def test_secrets_are_redacted_in_responses(setup: Setup) -> None:
    client, notifier = await setup()
    params = {
        "taskId": TASK,
        "id": "c1",
        "url": HOOK,
        "token": "tok-SECRET",
        "authentication": {"scheme": "Bearer", "credentials": "cred-SECRET"},
    }
    responses = [
        await rpc(client, "CreateTaskPushNotificationConfig", params),
        await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"}),
        await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": TASK}),
        await rpc(client, "tasks/pushNotificationConfig/list", {"id": TASK}),
    ]
    for body in responses:
        text = json.dumps(body)
        assert "SECRET" not in text and "Bearer" in text
    [config] = await stored(notifier)
    assert config.token == "tok-SECRET" and config.auth_credentials == "cred-SECRET"


async def test_secrets_are_shown_when_redaction_is_off(setup: Setup) -> None:
    client, _ = await setup(redact_secrets=False)
    params = {"taskId": TASK, "id": "c1", "url": HOOK, "token": "tok"}
    await rpc(client, "CreateTaskPushNotificationConfig", params)
    got = await rpc(client, "GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c1"})
    assert got["result"]["token"] == "tok"


async def test_push_disabled_refuses_every_method(setup: Setup) -> None:
    client, _ = await setup(push_enabled=False)
    for method, params in [
        ("CreateTaskPushNotificationConfig", {"taskId": TASK, "url": HOOK}),
        ("GetTaskPushNotificationConfig", {"taskId": TASK, "id": "c"}),
        ("ListTaskPushNotificationConfigs", {"taskId": TASK}),
        ("DeleteTaskPushNotificationConfig", {"taskId": TASK, "id": "c"}),
        (
            "tasks/pushNotificationConfig/set",
            {"taskId": TASK, "pushNotificationConfig": {"url": HOOK}},
        ),
        ("tasks/pushNotificationConfig/list", {"id": TASK}),
    ]:
        body = await rpc(client, method, params)
        assert body["error"]["code"] == -32003, method
        assert error_reason(body["error"]) == "PUSH_NOTIFICATION_NOT_SUPPORTED"


@pytest.mark.parametrize("version", ["2.0", "0.2", "abc", "1.x", "1" * 5000, "1." + "0" * 5000])
async def test_an_unsupported_version_is_refused(setup: Setup, version: str) -> None:
    client, notifier = await setup()
    body = await rpc(
        client,
        "CreateTaskPushNotificationConfig",
        {"taskId": TASK, "url": HOOK},
        {"A2A-Version": version},
    )
    assert body["error"]["code"] == -32009
    assert error_reason(body["error"]) == "VERSION_NOT_SUPPORTED"
    assert await stored(notifier) == []


async def test_without_a_version_v10_method_names_are_served_as_v10(setup: Setup) -> None:
    client, _ = await setup()
    resp = await client.post(
        "/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "ListTaskPushNotificationConfigs",
            "params": {"taskId": TASK},
        },
        headers=ALICE,
    )
    assert (await resp.json())["result"] == {"configs": [], "nextPageToken": ""}
    patch = await rpc(
        client, "ListTaskPushNotificationConfigs", {"taskId": TASK}, {"A2A-Version": "1.0.1"}
    )
    assert "result" in patch


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"taskId": TASK}, "url"),
        ({"taskId": TASK, "url": "ftp://93.184.215.14/x"}, "url"),
        ({"taskId": TASK, "url": "http://10.0.0.1/hook"}, "url"),
        # Both once failed with -32603 (a ValueError, an IndexError from the URL parser).
        ({"taskId": TASK, "url": "http://-1.1/hook"}, "url"),
        ({"taskId": TASK, "url": "http://[]@/"}, "url"),
        ({"taskId": TASK, "url": 5}, "url"),
        ({"taskId": TASK, "url": HOOK, "token": "a\r\nX-Evil: 1"}, "token"),
        (
            {
                "taskId": TASK,
                "url": HOOK,
                "authentication": {"scheme": "Bearer", "credentials": "a\nb"},
            },
            "authentication.credentials",
        ),
        (
            {"taskId": TASK, "url": HOOK, "authentication": {"scheme": "Bea\rrer"}},
            "authentication.scheme",
        ),
        ({"taskId": TASK, "url": HOOK, "authentication": "Bearer"}, "authentication"),
        ({"url": HOOK}, "taskId"),
        ({"taskId": 7, "url": HOOK}, "taskId"),
        # Lone surrogates are not text: nothing to store in UTF-8 or send in a header.
        ({"taskId": TASK, "url": HOOK, "token": "\ud800x"}, "token"),
        ({"taskId": TASK, "url": HOOK, "id": "\udfff"}, "id"),
        (
            {
                "taskId": TASK,
                "url": HOOK,
                "authentication": {"scheme": "Bearer", "credentials": "a\ud800"},
            },
            "authentication.credentials",
        ),
        # The wrapper form's inner task must be the one named outside.
        ({"taskId": TASK, "config": {"url": HOOK, "taskId": "other"}}, "config.taskId"),
        # Ids go to indexed columns (PostgreSQL: -32603 past 2.7 kB), URLs and logs:
        # bounded, and no control characters (a CR or LF would forge a log line).
        ({"taskId": TASK, "url": HOOK, "id": "c" * 257}, "id"),
        ({"taskId": "t" * 3000, "url": HOOK}, "taskId"),
        ({"taskId": TASK, "url": HOOK, "id": "c1) delivered\n2030-01-01 CRITICAL x"}, "id"),
        ({"taskId": TASK, "url": HOOK, "tenant": "a\r\nb"}, "tenant"),
        ({"taskId": TASK, "url": HOOK, "id": "c\u2028d"}, "id"),
    ],
)
async def test_invalid_configs_name_the_field_and_store_nothing(
    setup: Setup, params: dict[str, Any], field: str
) -> None:
    client, notifier = await setup()
    body = await rpc(client, "CreateTaskPushNotificationConfig", params)
    assert body["error"]["code"] == -32602
    assert bad_field(body["error"]) == field
    assert field in body["error"]["message"]
    assert await stored(notifier) == []


async def test_params_must_be_an_object(setup: Setup) -> None:
    client, _ = await setup()
    body = await rpc(client, "GetTaskPushNotificationConfig", [TASK, "c1"])
    assert body["error"]["code"] == -32602


async def post_raw(client: Client, body: bytes, **headers: str) -> tuple[int, Any]:
    resp = await client.post(
        "/", data=body, headers={"Content-Type": "application/json", **headers}
    )
    text = await resp.text()
    return resp.status, json.loads(text) if text else None


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", -32700),
        (b"", -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs"}]', -32600),
        (b'"hello"', -32600),
        (b"42", -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "x"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/nope"}', -32601),
    ],
)
async def test_bad_requests_get_jsonrpc_errors(setup: Setup, raw: bytes, code: int) -> None:
    client, _ = await setup()
    status, body = await post_raw(client, raw)
    assert status == 200
    assert body["error"]["code"] == code and body["jsonrpc"] == "2.0"


async def test_a_lone_surrogate_request_id_still_gets_a_jsonrpc_answer(setup: Setup) -> None:
    client, _ = await setup()
    raw = b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ListTaskPushNotificationConfigs", '
    raw += b'"params": {"taskId": "' + TASK.encode() + b'"}}'
    status, body = await post_raw(client, raw, **ALICE)
    assert status == 200 and body["jsonrpc"] == "2.0" and body["id"] == "\ud800"


async def test_an_oversized_body_is_413_json(setup: Setup) -> None:
    client, notifier = await setup(mount_kw={"max_body_bytes": 1024})
    big = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": TASK, "url": HOOK, "token": "x" * 2000},
        }
    ).encode()
    status, body = await post_raw(client, big, **ALICE, **V10)
    assert status == 413 and body["error"]["code"] == -32600

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the read is capped
        for i in range(0, len(big), 100):
            yield big[i : i + 100]

    resp = await client.post(
        "/", data=chunks(), headers={"Content-Type": "application/json", **ALICE, **V10}
    )
    assert resp.status == 413 and "error" in await resp.json()
    assert await stored(notifier) == []


async def test_a_non_json_content_type_is_415(setup: Setup) -> None:
    client, _ = await setup()
    status, body = await post_raw(client, b"{}", **{"Content-Type": "text/plain"})
    # InvalidRequest: ContentTypeNotSupported (-32005) is about message parts' media types.
    assert status == 415 and body["error"]["code"] == -32600
    assert "application/json" in body["error"]["message"]
    resp = await client.post(
        "/tasks/task-1/pushNotificationConfigs",
        data=b"{}",
        headers={"Content-Type": "text/plain", **ALICE},
    )
    assert resp.status == 415
    assert (await resp.json(content_type=None))["error"]["code"] == 415


async def test_a2a_json_media_type_is_accepted(setup: Setup) -> None:
    client, _ = await setup()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ListTaskPushNotificationConfigs",
        "params": {"taskId": TASK},
    }
    status, out = await post_raw(
        client, json.dumps(body).encode(), **{"Content-Type": "application/a2a+json"}, **ALICE
    )
    assert status == 200 and "result" in out


async def test_a_notification_is_served_without_a_body(setup: Setup) -> None:
    client, notifier = await setup()
    body = {
        "jsonrpc": "2.0",
        "method": "CreateTaskPushNotificationConfig",
        "params": {"taskId": TASK, "url": HOOK},
    }
    status, out = await post_raw(client, json.dumps(body).encode(), **ALICE, **V10)
    assert status == 204 and out is None
    assert len(await stored(notifier)) == 1


# ---- REST ------------------------------------------------------------------------------------


async def test_rest_create_get_list_delete(setup: Setup) -> None:
    client, notifier = await setup(mount_kw={"rest_prefix": "/v1"})
    base = f"/v1/tasks/{TASK}/pushNotificationConfigs"
    resp = await client.post(base, json={"url": HOOK, "token": "t"}, headers={**ALICE, **V10})
    assert resp.status == 200 and resp.content_type == "application/a2a+json"
    config = await resp.json(content_type=None)
    assert config["taskId"] == TASK and "token" not in config

    resp = await client.get(f"{base}/{config['id']}", headers=ALICE)
    assert await resp.json(content_type=None) == config
    resp = await client.get(base, params={"pageSize": "1"}, headers=ALICE)
    assert await resp.json(content_type=None) == {"configs": [config], "nextPageToken": ""}
    resp = await client.delete(f"{base}/{config['id']}", headers=ALICE)
    assert resp.status == 200 and await resp.json(content_type=None) == {}
    assert await stored(notifier) == []


async def test_rest_serves_the_tenant_scoped_paths_too(setup: Setup) -> None:
    client, notifier = await setup(mount_kw={"rest_prefix": "/v1"})
    base = f"/v1/acme/tasks/{TASK}/pushNotificationConfigs"
    resp = await client.post(base, json={"url": HOOK}, headers={**ALICE, **V10})
    assert resp.status == 200, await resp.text()
    config = await resp.json(content_type=None)
    assert config["taskId"] == TASK and config["tenant"] == "acme"
    resp = await client.get(f"{base}/{config['id']}", headers=ALICE)
    assert await resp.json(content_type=None) == config
    resp = await client.get(base, headers=ALICE)
    assert (await resp.json(content_type=None))["configs"] == [config]
    resp = await client.post(base, json={"url": HOOK, "tenant": "other"}, headers=ALICE)
    assert resp.status == 400  # a body naming another tenant than the path
    assert "tenant" in (await resp.json(content_type=None))["error"]["message"]
    resp = await client.delete(f"{base}/{config['id']}", headers=ALICE)
    assert resp.status == 200
    assert await stored(notifier) == []


async def test_rest_errors_are_google_rpc_status(setup: Setup) -> None:
    client, notifier = await setup()
    resp = await client.get("/tasks/ghost/pushNotificationConfigs", headers=ALICE)
    assert resp.status == 404
    error = (await resp.json(content_type=None))["error"]
    assert error["code"] == 404 and error["status"] == "NOT_FOUND"
    info = error["details"][0]
    assert info["reason"] == "TASK_NOT_FOUND" and info["domain"] == "a2a-protocol.org"

    resp = await client.post(
        f"/tasks/{TASK}/pushNotificationConfigs", json={"url": "http://10.0.0.1/"}, headers=ALICE
    )
    assert resp.status == 400
    error = (await resp.json(content_type=None))["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "url" in error["message"]

    resp = await client.post(
        f"/tasks/{TASK}/pushNotificationConfigs",
        data=b"{x",
        headers={"Content-Type": "application/json", **ALICE},
    )
    assert resp.status == 400
    resp = await client.get(
        f"/tasks/{TASK}/pushNotificationConfigs", params={"pageSize": "x"}, headers=ALICE
    )
    assert resp.status == 400
    resp = await client.post(
        f"/tasks/{TASK}/pushNotificationConfigs",
        json={"taskId": "other", "url": HOOK},
        headers=ALICE,
    )
    assert resp.status == 400
    resp = await client.post(  # the wrapper form must not name another task either
        f"/tasks/{TASK}/pushNotificationConfigs",
        json={"config": {"url": HOOK, "taskId": "other"}},
        headers=ALICE,
    )
    assert resp.status == 400
    assert await stored(notifier) == []


async def test_rest_takes_the_v03_rest_bindings_request_and_answers_with_its_name(
    setup: Setup,
) -> None:
    """What the official SDK's v0.3 REST client sends (its CreateTaskPushNotificationConfig
    proto as JSON, proto field names) and how it reads the answer (ParseDict)."""
    pytest.importorskip("a2a.compat.v0_3.a2a_v0_3_pb2")
    from a2a.compat.v0_3 import a2a_v0_3_pb2
    from google.protobuf.json_format import ParseDict

    client, notifier = await setup()
    body = {
        "parent": f"tasks/{TASK}",
        "config_id": "c9",
        "config": {"push_notification_config": {"url": HOOK, "token": "t"}},
    }
    v03 = {**ALICE, "A2A-Version": "0.3"}
    base = f"/tasks/{TASK}/pushNotificationConfigs"
    resp = await client.post(base, json=body, headers=v03)
    assert resp.status == 200, await resp.text()
    parsed = ParseDict(
        await resp.json(content_type=None),
        a2a_v0_3_pb2.TaskPushNotificationConfig(),
        ignore_unknown_fields=True,
    )
    assert parsed.name == f"tasks/{TASK}/pushNotificationConfigs/c9"
    assert parsed.push_notification_config.url == HOOK
    resp = await client.get(f"{base}/c9", headers=v03)
    got = await resp.json(content_type=None)
    assert got["name"] == parsed.name and got["pushNotificationConfig"]["id"] == "c9"
    [config] = await stored(notifier)
    assert config.id == "c9" and config.protocol_version == "0.3"


async def test_rest_speaks_v03_when_asked(setup: Setup) -> None:
    client, notifier = await setup()
    v03 = {**ALICE, "A2A-Version": "0.3"}
    base = f"/tasks/{TASK}/pushNotificationConfigs"
    resp = await client.post(
        base, json={"pushNotificationConfig": {"id": "c1", "url": HOOK}}, headers=v03
    )
    assert (await resp.json(content_type=None))["pushNotificationConfig"]["id"] == "c1"
    resp = await client.get(base, headers=v03)
    assert [c["pushNotificationConfig"]["id"] for c in await resp.json(content_type=None)] == ["c1"]
    [config] = await stored(notifier)
    assert config.protocol_version == "0.3"
    resp = await client.get(base, params={"A2A-Version": "9.9"}, headers=ALICE)
    assert resp.status == 400
    assert (await resp.json(content_type=None))["error"]["details"][0][
        "reason"
    ] == "VERSION_NOT_SUPPORTED"


# ---- JWKS, agent card, first webhook ---------------------------------------------------------


async def test_jwks_is_served(setup: Setup) -> None:
    client, notifier = await setup()
    resp = await client.get("/.well-known/jwks.json")
    assert resp.status == 200 and await resp.json() == notifier.jwks()


async def test_agent_card_push_fields_add_the_extension_once() -> None:
    card = {"name": "a", "capabilities": {"streaming": True, "extensions": [{"uri": "x:other"}]}}
    once = agent_card_push_fields(card, "https://agent/.well-known/jwks.json")
    twice = agent_card_push_fields(once, "https://agent/keys.json")
    caps = twice["capabilities"]
    assert caps["pushNotifications"] is True and caps["streaming"] is True
    pushes = [e for e in caps["extensions"] if e["uri"] == PUSH_SIGNING_EXTENSION_URI]
    assert len(pushes) == 1 and pushes[0]["params"] == {"jwksUri": "https://agent/keys.json"}
    assert pushes[0]["required"] is False
    assert {"uri": "x:other"} in caps["extensions"]
    assert "pushNotifications" not in card["capabilities"]  # the input is not modified


async def test_agent_card_push_fields_replace_the_extensions_legacy_uri() -> None:
    legacy = {"uri": LEGACY_PUSH_SIGNING_EXTENSION_URI, "params": {"jwksUri": "https://old/k"}}
    card = {"name": "a", "capabilities": {"extensions": [legacy, {"uri": ["odd"]}]}}
    out = agent_card_push_fields(card, "https://agent/keys.json")
    uris = [e["uri"] for e in out["capabilities"]["extensions"]]
    assert uris == [["odd"], PUSH_SIGNING_EXTENSION_URI]


async def test_the_first_webhook_to_an_api_created_config_is_the_task_snapshot(
    setup: Setup,
) -> None:
    async with WebhookSink() as sink:
        client, _ = await setup(
            notifier_kw={
                "run_dispatcher": True,
                "address_policy": AddressPolicy(allow_loopback=True),
            }
        )
        body = await rpc(
            client, "CreateTaskPushNotificationConfig", {"taskId": TASK, "url": sink.url()}
        )
        assert "result" in body
        await sink.wait_for(1)
        snapshot = json.loads(sink.received[0].body)
        assert snapshot["task"]["id"] == TASK
        assert snapshot["task"]["status"]["state"] == "TASK_STATE_WORKING"


async def test_handle_is_usable_without_http(setup: Setup, tasks: Tasks) -> None:
    _, notifier = await setup()
    service = PushConfigService(notifier, task_lookup=tasks.lookup)
    owner = default_owner_resolver(ALICE)
    result = await service.handle(
        "CreateTaskPushNotificationConfig",
        {"taskId": TASK, "url": HOOK},
        version="1.0",
        owner=owner,
    )
    assert result["taskId"] == TASK


# ---- the official SDK's REST clients -------------------------------------------------


async def test_the_sdks_rest_clients_create_and_read_configs(setup: Setup) -> None:
    """The a2a-sdk's v1.0 RestTransport (with a tenant: the tenant-scoped paths) and its
    v0.3 compatibility REST transport (the v0.3 binding's shapes, under /v1: served by
    the tenant-scoped routes, v0.3 having no tenant), against one mount()."""
    pytest.importorskip("a2a.compat.v0_3.rest_transport")
    import httpx
    from a2a.client.transports.rest import RestTransport
    from a2a.compat.v0_3.rest_transport import CompatRestTransport
    from a2a.types import a2a_pb2

    v10, notifier = await setup()
    async with httpx.AsyncClient(headers=ALICE, timeout=10) as http:
        rest = RestTransport(http, a2a_pb2.AgentCard(), str(v10.make_url("")))
        created = await rest.create_task_push_notification_config(
            a2a_pb2.TaskPushNotificationConfig(tenant="acme", task_id=TASK, id="c1", url=HOOK)
        )
        assert (created.task_id, created.id, created.url) == (TASK, "c1", HOOK)
        got = await rest.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(tenant="acme", task_id=TASK, id="c1")
        )
        assert got.id == "c1" and got.tenant == "acme"
        [stored_config] = await stored(notifier)
        assert stored_config.tenant == "acme" and stored_config.protocol_version == "1.0"

        compat = CompatRestTransport(http, None, str(v10.make_url("")))
        created = await compat.create_task_push_notification_config(
            a2a_pb2.TaskPushNotificationConfig(task_id=TASK, id="c2", url=HOOK, token="t")
        )
        assert (created.task_id, created.id, created.url) == (TASK, "c2", HOOK)
        got = await compat.get_task_push_notification_config(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=TASK, id="c2")
        )
        assert (got.task_id, got.id) == (TASK, "c2")
        v03_config = await notifier.get_config(TASK, "c2", default_owner_resolver(ALICE))
        assert v03_config is not None and v03_config.protocol_version == "0.3"
