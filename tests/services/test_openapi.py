"""``GET /openapi.json`` of the gateway and the receiver: valid OpenAPI 3.1, one
operation for each route the app's router serves (no more, no fewer), and real answers
that match the schemas their operations document."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from openapi_spec_validator import validate

from a2a_push.gateway.app import create_app as create_gateway_app
from a2a_push.gateway.app import openapi_document as gateway_document
from a2a_push.mock_agent import create_app as create_agent_app
from a2a_push.openapi import Body, Operation, UndocumentedRouteError, operations, route
from a2a_push.protocol.types import TaskState
from receiver.api import RECEIVER
from receiver.api import create_app as create_receiver_app

from ..gateway_support import ADMIN_KEY, AGENT_KEY, gateway_settings, status
from ..receiver_support import AGENT_PUBLIC, Rig, receiver_settings, sse_frames


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route ``app.router`` serves, read here from aiohttp."""
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops}


class Checker:
    """Checks answers against the operation the document gives for their route."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.checked: set[tuple[str, str, int]] = set()

    async def answer(self, resp: aiohttp.ClientResponse, method: str, path: str) -> Any:
        """``resp``'s JSON body, after checking its status is documented for ``method
        path`` and the body matches the schema given for it."""
        responses = self.doc["paths"][path][method.lower()]["responses"]
        assert str(resp.status) in responses, (method, path, resp.status, await resp.text())
        media = responses[str(resp.status)]["content"]
        assert resp.content_type in media, (method, path, resp.content_type)
        body = await resp.json(content_type=None)
        schema = {**media[resp.content_type]["schema"], "components": self.doc["components"]}
        jsonschema.Draft202012Validator(schema).validate(body)
        self.checked.add((method, path, resp.status))
        return body


async def fetch_document(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with session.get(base + "/openapi.json") as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        doc: dict[str, Any] = await resp.json()
    validate(doc)  # openapi-spec-validator: a valid OpenAPI 3.1 document
    assert doc["openapi"].startswith("3.1.")
    for path, ops in doc["paths"].items():
        if "get" in ops:  # aiohttp answers HEAD wherever GET is served
            assert "head" in ops, path
    return doc


@asynccontextmanager
async def live(app: web.Application, port: int | None = None) -> AsyncIterator[str]:
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


# ---- the gateway -------------------------------------------------------------------------


async def test_the_gateway_documents_every_route_it_serves(tmp_path: Path) -> None:
    app = create_gateway_app(gateway_settings(f"sqlite:///{tmp_path}/gw.db"))
    agent = {"Authorization": f"Bearer {AGENT_KEY}"}
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with live(app) as base, aiohttp.ClientSession() as session:
        doc = await fetch_document(session, base)
        assert documented(doc) == served(app)
        api = {(m, path) for m, path in documented(doc) if not path.startswith("/console")}
        assert len(api) == 34
        console = documented(doc) - api  # the console's pages (HTML), tagged "console"
        assert len(console) == 27
        assert all(doc["paths"][p][m.lower()]["tags"] == ["console"] for m, p in console)
        check = Checker(doc)

        async with session.get(base + "/v1/agent", headers=agent) as resp:
            assert await check.answer(resp, "GET", "/v1/agent") == {"agentId": "agent-a"}
        async with session.get(base + "/v1/agent", headers=admin) as resp:
            await check.answer(resp, "GET", "/v1/agent")  # 401: not an agent key

        event = status("t-1", TaskState.WORKING).model_dump(by_alias=True, exclude_none=True)
        async with session.post(
            base + "/v1/tasks/t-1/events", json={"statusUpdate": event}, headers=agent
        ) as resp:
            accepted = await check.answer(resp, "POST", "/v1/tasks/{task_id}/events")
        assert accepted["taskId"] == "t-1"
        async with session.post(
            base + "/v1/tasks/t-1/events", json={"statusUpdate": {}}, headers=agent
        ) as resp:
            await check.answer(resp, "POST", "/v1/tasks/{task_id}/events")
        async with session.post(base + "/v1/tasks/t-1/events", json={}) as resp:
            await check.answer(resp, "POST", "/v1/tasks/{task_id}/events")

        configs = "/v1/tasks/{taskId}/pushNotificationConfigs"
        hook = {"url": "http://127.0.0.1:9/hook", "id": "c-1"}
        async with session.post(
            base + "/v1/tasks/t-1/pushNotificationConfigs", json=hook, headers=agent
        ) as resp:
            created = await check.answer(resp, "POST", configs)
        assert created["id"] == "c-1"
        async with session.get(
            base + "/v1/tasks/t-1/pushNotificationConfigs", headers=agent
        ) as resp:
            listed = await check.answer(resp, "GET", configs)
        assert [c["id"] for c in listed["configs"]] == ["c-1"]
        async with session.get(
            base + "/v1/tasks/t-1/pushNotificationConfigs/nope", headers=agent
        ) as resp:
            await check.answer(resp, "GET", configs + "/{id}")
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTaskPushNotificationConfigs"}
        async with session.post(
            base + "/v1/rpc", json={**rpc, "params": {"taskId": "t-1"}}, headers=agent
        ) as resp:
            answer = await check.answer(resp, "POST", "/v1/rpc")
        assert [c["id"] for c in answer["result"]["configs"]] == ["c-1"]

        async with session.get(base + "/admin/deliveries", headers=admin) as resp:
            deliveries = (await check.answer(resp, "GET", "/admin/deliveries"))["deliveries"]
        assert len(deliveries) == 1
        async with session.get(
            base + "/admin/deliveries/" + deliveries[0]["id"], headers=admin
        ) as resp:
            await check.answer(resp, "GET", "/admin/deliveries/{id}")
        async with session.get(
            base + "/admin/deliveries/" + deliveries[0]["id"] + "/attempts", headers=admin
        ) as resp:
            await check.answer(resp, "GET", "/admin/deliveries/{id}/attempts")
        async with session.get(base + "/admin/deliveries?limit=0", headers=admin) as resp:
            await check.answer(resp, "GET", "/admin/deliveries")
        async with session.post(
            base + "/admin/deliveries/replay", json={"ids": [deliveries[0]["id"]]}, headers=admin
        ) as resp:
            await check.answer(resp, "POST", "/admin/deliveries/replay")
        async with session.post(
            base + "/admin/deliveries/replay", json={"id": []}, headers=admin
        ) as resp:
            await check.answer(resp, "POST", "/admin/deliveries/replay")
        async with session.get(base + "/admin/endpoints", headers=admin) as resp:
            await check.answer(resp, "GET", "/admin/endpoints")
        key = deliveries[0]["configKey"]
        async with session.post(base + f"/admin/configs/{key}/disable", headers=admin) as resp:
            assert (await check.answer(resp, "POST", "/admin/configs/{key}/{action}")) == {
                "key": key,
                "enabled": False,
            }
        async with session.get(base + "/admin/endpoints", headers=agent) as resp:
            await check.answer(resp, "GET", "/admin/endpoints")
        async with session.get(base + "/healthz") as resp:
            await check.answer(resp, "GET", "/healthz")
        async with session.get(base + "/.well-known/jwks.json") as resp:
            jwks = await check.answer(resp, "GET", "/.well-known/jwks.json")
        assert jwks["keys"]
        async with session.get(base + "/metrics") as resp:
            assert resp.status == 200 and resp.content_type == "text/plain"
            assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert len(check.checked) == 20  # (method, path, status) answers checked


async def test_a_route_without_an_operation_cannot_be_served_undocumented(
    tmp_path: Path,
) -> None:
    async def extra(request: web.Request) -> web.Response:
        return web.json_response({})

    app = create_gateway_app(gateway_settings(f"sqlite:///{tmp_path}/gw.db"))
    app.router.add_get("/extra", extra)  # not through openapi.route: no operation
    with pytest.raises(UndocumentedRouteError, match="GET /extra"):
        gateway_document(app)
    async with (
        live(app) as base,
        aiohttp.ClientSession() as session,
        session.get(base + "/openapi.json") as resp,
    ):
        assert resp.status == 500  # never a document that lacks the route

    # The reverse: an operation for a route that is not served.
    other = create_gateway_app(gateway_settings(f"sqlite:///{tmp_path}/gw2.db"))
    operations(other)[("GET", "/ghost")] = Operation("a ghost", {200: Body()})
    with pytest.raises(UndocumentedRouteError, match="GET /ghost"):
        gateway_document(other)

    # Added through openapi.route, the same route is in the document.
    third = create_gateway_app(gateway_settings(f"sqlite:///{tmp_path}/gw3.db"))
    route(third, "GET", "/extra", extra, Operation("extra", {200: Body()}))
    doc = gateway_document(third)
    assert {("GET", "/extra"), ("HEAD", "/extra")} <= documented(doc)
    assert documented(doc) == served(third)


# ---- the receiver ------------------------------------------------------------------------


@asynccontextmanager
async def receiver_rig(tmp_path: Path) -> AsyncIterator[tuple[Rig, web.Application]]:
    """A mock agent and a receiver, as receiver_support.rig, with the receiver's app."""
    agent_app = create_agent_app(
        data_dir=tmp_path / "agent",
        allow_webhook_hosts=["127.0.0.1"],
        public_url=AGENT_PUBLIC,
        step_delay=0.05,
    )
    async with live(agent_app) as agent_base:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        settings = receiver_settings(tmp_path, agent_base + "/", port)
        app = create_receiver_app(settings)
        async with live(app, port), aiohttp.ClientSession() as session:
            yield Rig(agent_base + "/", settings.base_url, app[RECEIVER], session), app


async def test_the_receiver_documents_every_route_it_serves(tmp_path: Path) -> None:
    async with receiver_rig(tmp_path) as (r, app):
        base, session = r.receiver_url, r.session
        doc = await fetch_document(session, base)
        assert documented(doc) == served(app)
        assert len(documented(doc)) == 19
        sse = doc["paths"]["/events"]["get"]["responses"]["200"]["content"]
        assert list(sse) == ["text/event-stream"]
        webhook_headers = {p["name"] for p in doc["paths"]["/webhooks/a2a"]["post"]["parameters"]}
        assert {"X-A2A-Signature", "X-A2A-Notification-Token", "webhook-signature"} <= (
            webhook_headers
        )
        check = Checker(doc)

        task = await r.send("roll 2d6")
        async with session.post(
            base + "/subscriptions",
            json={"agentUrl": r.agent_url, "taskId": task["id"]},
            headers=r.api(),
        ) as resp:
            sub = await check.answer(resp, "POST", "/subscriptions")
        async with session.post(
            base + "/subscriptions", json={"agentUrl": r.agent_url}, headers=r.api()
        ) as resp:
            await check.answer(resp, "POST", "/subscriptions")
        await r.wait_state(task["id"], "TASK_STATE_COMPLETED")
        async with session.get(base + "/subscriptions", headers=r.api()) as resp:
            await check.answer(resp, "GET", "/subscriptions")
        async with session.get(base + "/subscriptions/" + sub["id"], headers=r.api()) as resp:
            await check.answer(resp, "GET", "/subscriptions/{id}")
        async with session.get(base + "/tasks", headers=r.api()) as resp:
            await check.answer(resp, "GET", "/tasks")
        async with session.get(base + "/tasks/" + task["id"], headers=r.api()) as resp:
            snapshot = await check.answer(resp, "GET", "/tasks/{task_id}")
        assert snapshot["id"] == task["id"]
        async with session.get(base + "/tasks", headers={"Authorization": "Bearer x"}) as resp:
            await check.answer(resp, "GET", "/tasks")

        text = ""
        async with session.get(base + "/events", headers=r.api()) as resp:
            assert resp.status == 200 and resp.content_type in sse
            while "TASK_STATE_COMPLETED" not in text:
                text += (await asyncio.wait_for(resp.content.readany(), 5)).decode()
        event_schema = {"$ref": "#/components/schemas/ClientEvent", "components": doc["components"]}
        frames = sse_frames(text)
        assert frames
        for frame in frames:
            jsonschema.Draft202012Validator(event_schema).validate(frame["data"])

        async with session.post(
            base + "/webhooks/a2a", json={"task": task}, headers={"X-A2A-Notification-Token": "x"}
        ) as resp:
            refused = await check.answer(resp, "POST", "/webhooks/a2a")
        assert resp.status == 401 and refused["error"]
        async with session.delete(base + "/subscriptions/" + sub["id"], headers=r.api()) as resp:
            deleted = await check.answer(resp, "DELETE", "/subscriptions/{id}")
        assert deleted["removedOnAgent"] is True
        async with session.get(
            base + "/subscriptions/" + secrets.token_hex(4), headers=r.api()
        ) as resp:
            await check.answer(resp, "GET", "/subscriptions/{id}")
        async with session.get(base + "/healthz") as resp:
            await check.answer(resp, "GET", "/healthz")
    assert len(check.checked) == 11  # (method, path, status) answers checked
