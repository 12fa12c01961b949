"""How the receiver finds and refreshes an agent's JWK Set, on real local servers and real
SQLite: a key rotated while the refetch is rate-limited, discovery retried when the agent
was down at start, agent cards of any shape, and a size cap on the card."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from a2a_push.protocol.constants import A2A_MEDIA_TYPE
from a2a_push.server.app import LEGACY_PUSH_SIGNING_EXTENSION_URI, PUSH_SIGNING_EXTENSION_URI
from receiver.core import Receiver, card_jwks_uri
from receiver.verify import MAX_JWKS_BYTES

from ..receiver_support import (
    Agent,
    _free_port,
    agent_server,
    receiver_server,
    settings_for,
    signed_headers,
    status_update,
    stored_subscription,
    webhook_rig,
)

# ---- an unknown kid while the JWKS refetch is rate-limited ----------------------------


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


# ---- JWKS discovery: retried when the agent was down; any card shape; a size cap ------


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


@pytest.mark.parametrize("uri", [PUSH_SIGNING_EXTENSION_URI, LEGACY_PUSH_SIGNING_EXTENSION_URI])
async def test_the_card_names_the_jwks_under_the_extension_uri_old_or_new(
    tmp_path: Path, uri: str
) -> None:
    # Agents built on earlier releases still declare the extension's legacy URI.
    async with agent_server(Agent(extension_uri=uri)) as agent, aiohttp.ClientSession() as session:
        settings = settings_for(tmp_path, {"url": agent.url})
        async with receiver_server(settings) as receiver:
            jwks = receiver._verifiers[agent.url].jwks
            assert jwks is not None
            await jwks.locate()
            assert jwks.located and jwks.url == agent.base + "/keys"
            sub = await stored_subscription(receiver, agent.url, "t1")
            body = status_update("t1")
            headers = signed_headers(agent, settings, body, sub.id, "t1")
            async with session.post(settings.webhook_url, data=body, headers=headers) as resp:
                assert (resp.status, await resp.json()) == (200, {"status": "accepted"})


def test_the_current_extension_uri_is_a_name_under_the_projects_own_namespace() -> None:
    assert PUSH_SIGNING_EXTENSION_URI == "urn:a2a-push:ext:push-signing:v1"
    assert LEGACY_PUSH_SIGNING_EXTENSION_URI == "https://a2a-push.dev/extensions/push-signing/v1"
    ext = {"uri": [LEGACY_PUSH_SIGNING_EXTENSION_URI], "params": {"jwksUri": "https://a.test/k"}}
    assert card_jwks_uri({"capabilities": {"extensions": [ext]}}) is None  # no crash


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
