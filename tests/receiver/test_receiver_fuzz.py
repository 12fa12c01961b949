"""Property-based tests of the receiver's webhook endpoint: random and near-valid bodies
with random, garbled and half-valid credentials never get a 5xx, always get a JSON answer,
and never store anything. The one 5xx a stranger can get is a 503 ``jwks_refresh_pending``
(with ``Retry-After``): a JWT naming a key the agent's JWK Set lacked, while a refetch is
rate-limited, may be signed with a key rotated moments ago, so the sender must retry.

One receiver (real SQLite) and its fake agents serve every example; hypothesis drives them
from synchronous tests through the servers' own event loop. Nothing a test sends can be
acceptable: the only active subscription is for ``task-live``, which no body names, and
the other subscriptions are deleted. So every answer is a refusal, and the store must
stay empty.
"""

from __future__ import annotations

import asyncio
import base64
import json
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from a2a_push.protocol.constants import (
    A2A_MEDIA_TYPE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.signing import KeySet, WebhookSigner, standard_webhooks

from ..receiver_support import SW_SECRET, WebhookRig, webhook_rig

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIVE_TASK = "task-live"
TASK_IDS = ["task-deleted", "task-unknown", "task-t-deleted"]


@dataclass
class Harness:
    loop: asyncio.AbstractEventLoop
    rig: WebhookRig
    tokens: list[str]  # of every subscription, the live one included
    config_ids: list[str]
    stranger: WebhookSigner

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def assert_untouched(self) -> None:
        assert self.rig.stored() == (0, 0)
        status, body = self.run(self._health())
        assert (status, body) == (200, {"status": "ok"})

    async def _health(self) -> tuple[int, Any]:
        url = self.rig.webhook_url.rsplit("/webhooks/", 1)[0] + "/healthz"
        async with self.rig.session.get(url) as resp:
            return resp.status, await resp.json()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    loop = asyncio.new_event_loop()
    tmp: Path = tmp_path_factory.mktemp("receiver-fuzz")
    context = webhook_rig(tmp)

    async def start() -> Harness:
        rig = await context.__aenter__()
        live, live_token = await rig.subscribe("a", LIVE_TASK)
        dead, dead_token = await rig.subscribe("a", "task-deleted")
        dead_b, dead_b_token = await rig.subscribe("b", "task-deleted")
        dead_t, dead_t_token = await rig.subscribe("t", "task-t-deleted")
        for sub in (dead, dead_b, dead_t):
            await rig.unsubscribe(sub)
        return Harness(
            loop,
            rig,
            [live_token, dead_token, dead_b_token, dead_t_token],
            [live.id, dead.id, dead_b.id, dead_t.id],
            WebhookSigner(KeySet.generate(), rig.agents["a"].issuer),
        )

    h = loop.run_until_complete(start())
    try:
        yield h
    finally:
        loop.run_until_complete(context.__aexit__(None, None, None))
        loop.close()


# ---- strategies --------------------------------------------------------------------------

# Header values an HTTP client can send: no control characters (CR/LF would be refused by
# the client itself). Raw bytes are fuzzed separately, over a socket.
header_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=120)
b64url = st.text(string.ascii_letters + string.digits + "-_", max_size=200)
# st.text() never yields lone surrogates, which JSON can carry ("\ud800") and SQLite
# cannot store; nor often the control characters an id must not have.
odd_ids = st.text(st.sampled_from(["\ud800", "\udcff", "x", "\n", "\x00", " "]), min_size=1)
task_ids = st.one_of(st.sampled_from(TASK_IDS), st.text(max_size=300), odd_ids)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)


@st.composite
def stream_responses(draw: st.DrawFn) -> Any:
    """A StreamResponse or v0.3 Task, often valid, sometimes with a wrong part."""
    task_id: Any = draw(st.one_of(task_ids, json_values))
    kind = draw(
        st.sampled_from(
            [
                "task",
                "statusUpdate",
                "status_update",
                "artifactUpdate",
                "artifact_update",
                "message",
                "v0.3",
            ]
        )
    )
    payload: dict[str, Any] = {
        "contextId": draw(st.one_of(st.just("ctx-1"), json_values)),
        "status": {"state": draw(st.sampled_from(["TASK_STATE_WORKING", "working", 5]))},
    }
    payload["id" if kind in ("task", "v0.3") else draw(st.sampled_from(["taskId", "task_id"]))] = (
        task_id
    )
    payload.update(draw(st.dictionaries(st.text(max_size=12), json_values, max_size=3)))
    if kind == "v0.3":
        return {
            "kind": draw(st.sampled_from(["task", "status-update", "artifact-update", 1])),
            **payload,
        }
    body: dict[str, Any] = {kind: draw(st.one_of(st.just(payload), json_values))}
    if draw(st.booleans()):
        body.update(draw(st.dictionaries(st.sampled_from(["task", "message", "x"]), json_values)))
    return body


def _dump(value: Any) -> bytes:
    return json.dumps(value).encode()


bodies = st.one_of(
    st.binary(max_size=2048),
    json_values.map(_dump),
    stream_responses().map(_dump),
    st.integers(1, 6000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 4000).map(lambda n: b'{"task": ' * n + b"{}" + b"}" * n),
)
content_types = st.one_of(
    st.sampled_from(
        [A2A_MEDIA_TYPE, "application/json", "application/json; charset=utf-8", "text/plain"]
    ),
    st.none(),
    header_text,
)


def _garble(token: str, data: st.DataObject) -> str:
    how = data.draw(st.sampled_from(["flip", "truncate", "segment", "swap", "extra"]))
    parts = token.split(".")
    if how == "flip":
        i = data.draw(st.integers(0, len(token) - 1))
        return token[:i] + data.draw(st.sampled_from("A_-x.=é ")) + token[i + 1 :]
    if how == "truncate":
        return token[: data.draw(st.integers(0, len(token) - 1))]
    if how == "segment":
        i = data.draw(st.integers(0, 2))
        parts[i] = data.draw(b64url)
        return ".".join(parts)
    if how == "swap":
        return ".".join(reversed(parts))
    return token + "." + data.draw(b64url)


def _segment(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _jwt(h: Harness, body: bytes, data: st.DataObject) -> str | None:
    rig = h.rig
    kind = data.draw(
        st.sampled_from(
            ["none", "text", "valid", "other-body", "stranger", "garbled", "forged-claims", "b"]
        )
    )
    if kind == "none":
        return None
    if kind == "text":
        return data.draw(header_text)
    if kind == "forged-claims":  # any header and payload, with a signature that means nothing
        header = data.draw(st.one_of(json_values, st.just({"alg": "ES256", "kid": "k"})))
        claims = data.draw(
            st.one_of(
                json_values,
                st.dictionaries(
                    st.sampled_from(["iss", "aud", "iat", "exp", "jti", "taskId", "seq"]),
                    json_values,
                ).map(lambda c: {**c, "iss": rig.agents["a"].issuer}),
            )
        )
        return f"{_segment(header)}.{_segment(claims)}.{data.draw(b64url)}"
    signer = {
        "stranger": h.stranger,
        "b": rig.agents["b"].signer(),
    }.get(kind, rig.agents["a"].signer())
    now = int(time.time()) + data.draw(st.sampled_from([0, 0, 0, -400, 400, -10_000]))
    token = signer.sign(
        body=body + b" " if kind == "other-body" else body,
        audience=data.draw(st.sampled_from([rig.webhook_url, rig.webhook_url + "/x"])),
        webhook_id=data.draw(st.one_of(st.just("msg_1"), header_text)),
        task_id=data.draw(task_ids),
        config_id=data.draw(st.one_of(st.sampled_from(h.config_ids), st.text(max_size=40))),
        seq=data.draw(st.integers(-(2**70), 2**70)),
        now=now,
    )
    return _garble(token, data) if kind == "garbled" else token


def _headers(h: Harness, body: bytes, data: st.DataObject) -> dict[str, str]:
    headers: dict[str, str] = {}
    token = _jwt(h, body, data)
    if token is not None:
        where = data.draw(st.sampled_from([HEADER_SIGNATURE, "Authorization"]))
        headers[where] = token if where == HEADER_SIGNATURE else f"Bearer {token}"
    elif data.draw(st.booleans()):
        headers["Authorization"] = data.draw(header_text)
    if data.draw(st.booleans()):
        name = data.draw(
            st.sampled_from([HEADER_NOTIFICATION_TOKEN, HEADER_NOTIFICATION_TOKEN_ALT])
        )
        headers[name] = data.draw(st.one_of(st.sampled_from(h.tokens), header_text))
    webhook_id = data.draw(st.one_of(st.none(), st.just("msg_1"), header_text))
    if webhook_id is not None:
        headers[HEADER_WEBHOOK_ID] = webhook_id
    now = int(time.time())
    stamp = data.draw(
        st.one_of(
            st.none(),
            st.just(str(now)),
            st.integers(-(2**40), 2**40).map(str),
            header_text,
        )
    )
    if stamp is not None:
        headers[HEADER_WEBHOOK_TIMESTAMP] = stamp
    if data.draw(st.booleans()):
        msg_id = headers.get(HEADER_WEBHOOK_ID, "msg_1")
        valid = standard_webhooks.sign(SW_SECRET, msg_id, now, body)
        headers[HEADER_WEBHOOK_SIGNATURE] = data.draw(
            st.one_of(st.just(valid), header_text, st.just("v1," + "A" * 44 + " " + valid))
        )
    return headers


async def _post(rig: WebhookRig, body: bytes, headers: dict[str, str], ctype: str | None) -> int:
    sent = dict(headers)
    if ctype is not None:
        sent["Content-Type"] = ctype
    async with rig.session.post(rig.webhook_url, data=body, headers=sent) as resp:
        assert resp.content_type == "application/json", await resp.text()
        answer = await resp.json()
        assert isinstance(answer, dict)
        if resp.status >= 300:
            assert isinstance(answer.get("error"), str) and isinstance(answer.get("message"), str)
        if resp.status == 503 and answer["error"] == "jwks_refresh_pending":
            assert int(resp.headers["Retry-After"]) >= 1
            return 401  # as good as a refusal: an unknown kid, asked again after the wait
        return resp.status


# ---- properties --------------------------------------------------------------------------


@FUZZ
@given(body=bodies, content_type=content_types, data=st.data())
def test_random_webhooks_never_5xx_and_store_nothing(
    harness: Harness, body: bytes, content_type: str | None, data: st.DataObject
) -> None:
    assume(LIVE_TASK.encode() not in body)
    headers = _headers(harness, body, data)
    status = harness.run(_post(harness.rig, body, headers, content_type))
    assert 400 <= status < 500, status
    assert harness.rig.stored() == (0, 0)


def _named_task(response: Any) -> Any:
    """The task id a (near-valid) StreamResponse names, wherever it put it."""
    if not isinstance(response, dict):
        return None
    inner = next((v for k, v in response.items() if k != "kind" and isinstance(v, dict)), None)
    for payload in (inner, response):
        if isinstance(payload, dict):
            for key in ("id", "taskId", "task_id"):
                if key in payload:
                    return payload[key]
    return None


@FUZZ
@given(response=stream_responses(), data=st.data())
def test_validly_signed_near_valid_bodies_never_5xx_and_store_nothing(
    harness: Harness, response: Any, data: st.DataObject
) -> None:
    # A correct JWT from a trusted agent over the exact body, usually naming the body's
    # task: everything after the signature check (body parsing, subscription lookup,
    # token check) is exercised.
    body = _dump(response)
    assume(LIVE_TASK.encode() not in body)
    rig = harness.rig
    named = _named_task(response)
    claim_task = named if isinstance(named, str) and data.draw(st.booleans()) else None
    agent = data.draw(st.sampled_from(["a", "b"]))
    token = (
        rig.agents[agent]
        .signer()
        .sign(
            body=body,
            audience=rig.webhook_url,
            webhook_id=f"msg_{data.draw(st.integers(0, 10**9))}",
            task_id=claim_task if claim_task is not None else data.draw(task_ids),
            config_id=data.draw(st.one_of(st.sampled_from(harness.config_ids), odd_ids)),
            seq=data.draw(st.integers(-(2**70), 2**70)),
        )
    )
    headers = {HEADER_SIGNATURE: token}
    if data.draw(st.booleans()):
        headers[HEADER_NOTIFICATION_TOKEN] = data.draw(st.sampled_from(harness.tokens))
    status = harness.run(_post(rig, body, headers, A2A_MEDIA_TYPE))
    assert 400 <= status < 500, status
    assert rig.stored() == (0, 0)


@FUZZ
@given(body=bodies, data=st.data())
def test_known_tokens_with_random_bodies_never_5xx_and_store_nothing(
    harness: Harness, body: bytes, data: st.DataObject
) -> None:
    assume(LIVE_TASK.encode() not in body)
    name = data.draw(st.sampled_from([HEADER_NOTIFICATION_TOKEN, HEADER_NOTIFICATION_TOKEN_ALT]))
    headers = {name: data.draw(st.sampled_from(harness.tokens))}
    if data.draw(st.booleans()):
        headers[HEADER_WEBHOOK_ID] = data.draw(header_text)
    status = harness.run(_post(harness.rig, body, headers, A2A_MEDIA_TYPE))
    assert 400 <= status < 500, status
    assert harness.rig.stored() == (0, 0)


RAW_HEADER_NAMES = [
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_SIGNATURE,
    "Authorization",
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_TIMESTAMP,
    HEADER_WEBHOOK_SIGNATURE,
    "Content-Type",
]
raw_values = st.binary(max_size=200).filter(lambda v: b"\r" not in v and b"\n" not in v)


async def _raw_post(rig: WebhookRig, headers: list[tuple[str, bytes]], body: bytes) -> bytes:
    host, port = rig.webhook_url.split("/")[2].split(":")
    lines = [b"POST /webhooks/a2a HTTP/1.1", b"Host: receiver", b"Connection: close"]
    lines += [name.encode() + b": " + value for name, value in headers]
    if all(name != "Content-Type" for name, _ in headers):
        lines.append(b"Content-Type: application/json")
    lines.append(b"Content-Length: " + str(len(body)).encode())
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@FUZZ
@given(
    headers=st.lists(st.tuples(st.sampled_from(RAW_HEADER_NAMES), raw_values), max_size=6),
    body=st.one_of(st.binary(max_size=512), stream_responses().map(_dump)),
    token=st.one_of(st.none(), st.integers(0, 3)),
)
def test_raw_header_bytes_never_5xx_and_store_nothing(
    harness: Harness, headers: list[tuple[str, bytes]], body: bytes, token: int | None
) -> None:
    assume(LIVE_TASK.encode() not in body)
    if token is not None:  # a real token, with bytes that may not be UTF-8 around it
        headers = [*headers, (HEADER_NOTIFICATION_TOKEN, harness.tokens[token].encode())]
    answer = harness.run(_raw_post(harness.rig, headers, body))
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer
    assert harness.rig.stored() == (0, 0)


def test_the_receiver_is_healthy_and_empty_after_the_fuzzing(harness: Harness) -> None:
    harness.assert_untouched()
