"""Attacks on and bad input to the receiver's webhook endpoint, on real local servers.

A receiver (real SQLite) trusts three fake agents whose JWK Sets and GetTask are served by
a local aiohttp server: ``a`` (jwt, standard-webhooks), ``b`` (jwt, token), ``t`` (token
only). Subscriptions are stored directly; webhooks are signed here with the agents' keys,
so every claim is under the test's control. Every refusal must be a JSON error with the
right status, and must store nothing (no notification, no dedup key).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization

from a2a_push.protocol.constants import (
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.signing import KeySet, SigningKey, WebhookSigner, standard_webhooks

from ..receiver_support import (
    SW_SECRET,
    WEBHOOK_MAX_BODY,
    WebhookRig,
    artifact_update,
    status_update,
    task_snapshot,
    v03_task,
    webhook_rig,
)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[WebhookRig]:
    async with webhook_rig(tmp_path) as r:
        yield r


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(r: WebhookRig, body: bytes, task_id: str, config_id: str) -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": r.agents["a"].issuer,
        "aud": r.webhook_url,
        "iat": now,
        "exp": now + 300,
        "jti": f"msg_{uuid.uuid4().hex}",
        "taskId": task_id,
        "configId": config_id,
        "seq": 1,
        "request_body_sha256": hashlib.sha256(body).hexdigest(),
    }


def _hs256(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    head = _b64(json.dumps({"alg": "HS256", "kid": kid, "typ": "JWT"}).encode())
    payload = _b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{payload}".encode(), hashlib.sha256).digest()
    return f"{head}.{payload}.{_b64(mac)}"


def _with_jwt(token: str) -> dict[str, str]:
    return {HEADER_SIGNATURE: token, HEADER_WEBHOOK_TIMESTAMP: str(int(time.time()))}


async def _refused(
    r: WebhookRig, body: bytes, headers: dict[str, str], status: int, reason: str
) -> dict[str, Any]:
    got, answer = await r.post(body, headers)
    assert (got, answer.get("error")) == (status, reason), answer
    assert set(answer) == {"error", "message"} and answer["message"]
    assert r.stored() == (0, 0)
    return dict(answer)


async def _accepted(r: WebhookRig, body: bytes, headers: dict[str, str]) -> None:
    status, answer = await r.post(body, headers)
    assert (status, answer) == (200, {"status": "accepted"})


# ---- forged and mis-addressed JWTs ---------------------------------------------------------


async def test_alg_none_jwt_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    claims = _claims(rig, body, "task-1", sub.id)
    head = _b64(json.dumps({"alg": "none", "kid": rig.agents["a"].keyset.active.kid}).encode())
    token = f"{head}.{_b64(json.dumps(claims).encode())}."
    await _refused(rig, body, _with_jwt(token), 401, "bad_algorithm")


async def test_hs256_keyed_with_the_agents_public_key_pem_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    key = rig.agents["a"].keyset.active
    pem = key.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    token = _hs256(_claims(rig, body, "task-1", sub.id), pem, key.kid)
    await _refused(rig, body, _with_jwt(token), 401, "bad_algorithm")


async def test_hs256_keyed_with_the_agents_public_jwk_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    key = rig.agents["a"].keyset.active
    secret = json.dumps(rig.agents["a"].keyset.jwks()["keys"][0]).encode()
    token = _hs256(_claims(rig, body, "task-1", sub.id), secret, key.kid)
    await _refused(rig, body, _with_jwt(token), 401, "bad_algorithm")


async def test_expired_jwt_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, now=int(time.time()) - 1000)
    await _refused(rig, body, _with_jwt(token), 401, "expired")


async def test_jwt_issued_in_the_future_beyond_the_clock_skew_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, now=int(time.time()) + 200)
    await _refused(rig, body, _with_jwt(token), 401, "iat_in_future")


async def test_unknown_kid_is_refused_and_refetches_the_jwks_at_most_once(
    rig: WebhookRig,
) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    stranger = WebhookSigner(KeySet.generate(), rig.agents["a"].issuer)
    token = stranger.sign(
        body=body,
        audience=rig.webhook_url,
        webhook_id="msg_1",
        task_id="task-1",
        config_id=sub.id,
        seq=1,
    )
    await _refused(rig, body, _with_jwt(token), 401, "unknown_kid")
    assert rig.agents["a"].jwks_hits == 1
    answers = await asyncio.gather(*(rig.post(body, _with_jwt(token)) for _ in range(30)))
    # Forged kids inside the min-refresh window are answered from the cache: "retry"
    # (the kid could be a key rotated since the fetch), without asking the agent.
    assert {(status, a["error"]) for status, a in answers} == {(503, "jwks_refresh_pending")}
    assert all(a["retryAfter"] >= 1 for _, a in answers)
    assert rig.agents["a"].jwks_hits == 1
    assert rig.stored() == (0, 0)


async def test_unknown_kid_does_not_hammer_an_agent_whose_jwks_is_down(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    rig.agents["a"].jwks_status = 500
    body = status_update("task-1")
    headers = rig.signed("a", body)
    answers = await asyncio.gather(*(rig.post(body, headers) for _ in range(10)))
    assert {(status, a["error"]) for status, a in answers} == {(503, "jwks_unavailable")}
    assert rig.agents["a"].jwks_hits == 1
    assert rig.stored() == (0, 0)


async def test_jwt_from_an_untrusted_issuer_is_refused(
    rig: WebhookRig, caplog: pytest.LogCaptureFixture
) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, issuer="http://evil.test")
    with caplog.at_level("WARNING", logger="receiver.core"):
        answer = await _refused(rig, body, _with_jwt(token), 401, "unknown_issuer")
    # Unverified (no agent's keys were tried): not echoed to the caller, who is told
    # what to set if it is one of ours; the operator finds the issuer in the log.
    assert "evil.test" not in answer["message"]
    assert "not one this receiver trusts" in answer["message"]
    assert "set its `issuer` in its [[agents]] entry" in answer["message"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert any("'http://evil.test'" in r.getMessage() for r in warnings), caplog.text


async def test_an_untrusted_issuer_is_logged_on_one_line_and_never_echoed(
    rig: WebhookRig, caplog: pytest.LogCaptureFixture
) -> None:
    """The unverified iss is the caller's to choose: it may carry markup or line breaks
    (a forged log line). The 401 body leaves it out; the log shows it repr'd, cut."""
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    issuer = "http://x.test/<script>\n2025-01-01 00:00:00 INFO forged: ok\r" + "A" * 500
    token = rig.jwt("a", body, sub, issuer=issuer)
    with caplog.at_level("WARNING", logger="receiver.core"):
        answer = await _refused(rig, body, _with_jwt(token), 401, "unknown_issuer")
    assert "x.test" not in answer["message"] and "forged" not in answer["message"]
    assert "<script>" not in answer["message"]
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING" and r.name == "receiver.core" and "x.test" in r.getMessage()
    ]
    assert len(logged) == 1, caplog.text
    line = logged[0]
    assert "\n" not in line and "\r" not in line  # escaped by repr: one line
    assert "\\n2025-01-01" in line
    assert "A" * 500 not in line  # cut


async def test_an_origin_issuer_is_matched_with_or_without_its_trailing_slash(
    tmp_path: Path,
) -> None:
    # A gateway's start-up line showed "http://HOST:PORT/" while its JWTs carry no
    # slash: an issuer copied from it refused every webhook (unknown_issuer). One
    # trailing slash after an origin is the same issuer; anything else is not.
    async with webhook_rig(tmp_path, {"a": "http://agent-a.test/"}) as r:
        sub_a, _ = await r.subscribe("a", "task-a")
        sub_b, _ = await r.subscribe("b", "task-b")
        for agent, sub, issuer in (
            ("a", sub_a, "http://agent-a.test"),  # configured with the slash
            ("a", sub_a, "http://agent-a.test/"),
            ("b", sub_b, "http://agent-b.test/"),  # configured without it
        ):
            body = status_update(sub.task_id)
            await _accepted(r, body, _with_jwt(r.jwt(agent, body, sub, issuer=issuer)))
        stored = r.stored()
        for issuer in ("http://agent-a.test//", "http://agent-a.test/x"):
            body = status_update("task-a")
            got, answer = await r.post(body, _with_jwt(r.jwt("a", body, sub_a, issuer=issuer)))
            assert (got, answer["error"]) == (401, "unknown_issuer"), (issuer, answer)
        assert r.stored() == stored


async def test_jwt_naming_another_trusted_agent_as_issuer_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, issuer=rig.agents["b"].issuer)  # verified with b's keys
    await _refused(rig, body, _with_jwt(token), 401, "unknown_kid")


async def test_jwt_with_a_wrong_issuer_is_refused_even_with_a_valid_token(
    rig: WebhookRig,
) -> None:
    sub, token = await rig.subscribe("b", "task-1")
    body = status_update("task-1")
    headers = {
        **_with_jwt(rig.jwt("b", body, sub, issuer="http://evil.test")),
        HEADER_NOTIFICATION_TOKEN: token,
    }
    answer = await _refused(rig, body, headers, 401, "bad_issuer")
    # The operator learns which issuer came, the exact line to set in the agent's entry,
    # and what to set when a gateway sends.
    message = answer["message"]
    assert "'http://evil.test'" in message and rig.agents["b"].key in message
    assert 'set issuer = "http://evil.test" in this agent\'s [[agents]] entry' in message
    assert "gateway's public URL" in message


async def test_jwt_for_another_audience_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, audience="http://127.0.0.1:1/webhooks/a2a")
    await _refused(rig, body, _with_jwt(token), 401, "bad_audience")


async def test_body_changed_by_one_byte_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = rig.signed("a", body, sub)
    tampered = body.replace(b"WORKING", b"WORKINH")
    assert len(tampered) == len(body) and tampered != body
    await _refused(rig, tampered, headers, 401, "body_hash_mismatch")


async def test_jwt_signed_by_another_agents_key_with_the_same_kid_is_refused(
    rig: WebhookRig,
) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    real = rig.agents["a"].keyset.active
    impostor = SigningKey.generate()
    impostor.kid = real.kid
    token = WebhookSigner(KeySet([impostor]), rig.agents["a"].issuer).sign(
        body=body,
        audience=rig.webhook_url,
        webhook_id="msg_1",
        task_id="task-1",
        config_id=sub.id,
        seq=1,
    )
    await _refused(rig, body, _with_jwt(token), 401, "bad_signature")


async def test_jwt_signed_by_another_trusted_agents_key_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    # b's own key, claiming to be a: b's kid is not in a's JWK Set.
    token = (
        rig.agents["b"]
        .signer(rig.agents["a"].issuer)
        .sign(
            body=body,
            audience=rig.webhook_url,
            webhook_id="msg_1",
            task_id="task-1",
            config_id=sub.id,
            seq=1,
        )
    )
    await _refused(rig, body, _with_jwt(token), 401, "unknown_kid")


async def test_another_agent_cannot_post_to_a_task_it_does_not_serve(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    # Validly signed by b as b, even naming a's subscription as its config.
    await _refused(rig, body, _with_jwt(rig.jwt("b", body, sub)), 404, "unknown_task")


async def test_jwt_task_claim_must_match_the_body(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    await rig.subscribe("a", "task-2")
    body = status_update("task-2")
    token = rig.jwt("a", body, sub, task_id="task-1")
    await _refused(rig, body, _with_jwt(token), 400, "task_mismatch")


async def test_webhook_id_must_match_the_jwt_jti(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = {**rig.signed("a", body, sub), HEADER_WEBHOOK_ID: "msg_other"}
    await _refused(rig, body, headers, 401, "id_mismatch")


async def test_non_ascii_webhook_id_with_a_valid_jwt_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = {**rig.signed("a", body, sub), HEADER_WEBHOOK_ID: "msg_é"}
    await _refused(rig, body, headers, 401, "id_mismatch")


@pytest.mark.parametrize("claim", ["task_id", "config_id"])
async def test_jwt_id_claims_must_be_printable_ids(rig: WebhookRig, claim: str) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    token = rig.jwt("a", body, sub, **{claim: "bad\ud800id"})
    await _refused(rig, body, _with_jwt(token), 400, "bad_claim")


async def test_jwt_seq_beyond_64_bits_is_stored_without_it(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, _with_jwt(rig.jwt("a", body, sub, seq=2**64)))
    with contextlib.closing(sqlite3.connect(rig.db_path)) as conn:
        assert conn.execute("SELECT seq FROM notifications").fetchall() == [(None,)]


async def test_a_valid_jwt_with_another_subscriptions_token_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("b", "task-1")
    _, other_token = await rig.subscribe("b", "task-2")
    body = status_update("task-1")
    headers = {**rig.signed("b", body, sub), HEADER_NOTIFICATION_TOKEN: other_token}
    await _refused(rig, body, headers, 401, "bad_token")


async def test_jwt_with_a_deeply_nested_header_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    good = rig.jwt("a", body, sub)
    nested = _b64(b"[" * 3000)  # json.loads recursion, under the header size cap
    token = nested + good[good.index(".") :]
    await _refused(rig, body, _with_jwt(token), 401, "malformed")


async def test_jwt_with_a_deeply_nested_payload_is_refused(rig: WebhookRig) -> None:
    body = status_update("task-1")
    good = rig.jwt("a", body)
    head, _, sig = good.split(".")
    token = f"{head}.{_b64(b'[' * 4000)}.{sig}"  # under aiohttp's 8 KiB header limit
    await _refused(rig, body, _with_jwt(token), 401, "malformed")


async def test_jwt_with_non_ascii_characters_is_refused(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    good = rig.jwt("a", body, sub)
    await _refused(rig, body, _with_jwt(good + "é"), 401, "malformed")


# ---- bodies ------------------------------------------------------------------------------


async def test_oversized_body_gets_413(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = b" " * WEBHOOK_MAX_BODY + status_update("task-1")
    await _refused(rig, body, rig.signed("a", body, sub), 413, "too_large")


async def test_oversized_chunked_body_gets_413(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = b" " * WEBHOOK_MAX_BODY + status_update("task-1")
    headers = rig.signed("a", body, sub)

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 8192):
            yield body[i : i + 8192]
            await asyncio.sleep(0.001)

    await _refused(rig, pieces(), headers, 413, "too_large")  # type: ignore[arg-type]


async def test_body_arriving_in_pieces_is_read_whole(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    padding = {"metadata": {"padding": "x" * (WEBHOOK_MAX_BODY // 2)}}
    body = json.dumps({"statusUpdate": {**json.loads(status_update("task-1"))["statusUpdate"]}})
    event = json.loads(body)
    event["statusUpdate"].update(padding)
    raw = json.dumps(event).encode()
    headers = rig.signed("a", raw, sub)

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(raw), 4096):
            yield raw[i : i + 4096]
            await asyncio.sleep(0.001)

    status, answer = await rig.post(pieces(), headers)
    assert (status, answer) == (200, {"status": "accepted"})
    assert rig.stored() == (1, 1)


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
async def test_wrong_content_type_gets_415(rig: WebhookRig, content_type: str | None) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    status, answer = await rig.post(body, rig.signed("a", body, sub), content_type=content_type)
    assert (status, answer["error"]) == (415, "unsupported_media_type")
    assert rig.stored() == (0, 0)


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"",
        b"\xff\xfe\x00",
        b"[1, 2]",
        b'"a string"',
        b"{}",
        b'{"statusUpdate": "not an object"}',
        b'{"statusUpdate": {"contextId": "c"}}',
        b'{"statusUpdate": {"taskId": ""}}',
        b'{"statusUpdate": {"taskId": 7}}',
        b'{"statusUpdate": {"taskId": "\\ud800"}}',
        b'{"task": {"id": "t"}, "statusUpdate": {"taskId": "t"}}',
        b'{"kind": "unknown", "id": "t"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"a": ' * 3000 + b"1" + b"}" * 3000,
    ],
    ids=lambda b: repr(b[:24]),
)
async def test_malformed_body_after_a_valid_signature_gets_400(
    rig: WebhookRig, body: bytes
) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    await _refused(rig, body, rig.signed("a", body, sub), 400, "malformed")


# ---- tasks and subscriptions -------------------------------------------------------------


async def test_valid_jwt_for_an_unknown_task_gets_404(rig: WebhookRig) -> None:
    body = status_update("task-nobody-asked-for")
    headers = rig.signed("a", body, task_id="task-nobody-asked-for")
    await _refused(rig, body, headers, 404, "unknown_task")


async def test_deleted_subscription_gets_410(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    await rig.unsubscribe(sub)
    body = status_update("task-1")
    await _refused(rig, body, rig.signed("a", body, sub), 410, "subscription_ended")


async def test_deleted_token_subscription_gets_410(rig: WebhookRig) -> None:
    sub, token = await rig.subscribe("t", "task-1")
    await rig.unsubscribe(sub)
    body = status_update("task-1")
    await _refused(rig, body, {HEADER_NOTIFICATION_TOKEN: token}, 410, "subscription_ended")


async def test_bad_token_gets_401(rig: WebhookRig) -> None:
    await rig.subscribe("t", "task-1")
    body = status_update("task-1")
    await _refused(rig, body, {HEADER_NOTIFICATION_TOKEN: "guessed-token"}, 401, "bad_token")


async def test_token_valid_for_another_task_gets_404(rig: WebhookRig) -> None:
    await rig.subscribe("t", "task-1")
    _, token = await rig.subscribe("t", "task-2")
    body = status_update("task-1")
    await _refused(rig, body, {HEADER_NOTIFICATION_TOKEN: token}, 404, "unknown_task")


async def test_token_alone_is_refused_for_an_agent_that_must_sign(rig: WebhookRig) -> None:
    _, token = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _refused(rig, body, {HEADER_NOTIFICATION_TOKEN: token}, 401, "auth_method_not_allowed")


async def test_request_without_credentials_gets_401(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    await _refused(rig, status_update("task-1"), {}, 401, "no_credentials")


async def test_token_with_bytes_that_are_not_utf8_is_refused(rig: WebhookRig) -> None:
    await rig.subscribe("t", "task-1")
    host, port = rig.webhook_url.split("/")[2].split(":")
    body = status_update("task-1")
    request = (
        b"POST /webhooks/a2a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-A2A-Notification-Token: tok\xff\xfe\xed\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401"), answer
    assert json.loads(payload)["error"] == "bad_token"
    assert rig.stored() == (0, 0)


# ---- freshness and replays ---------------------------------------------------------------


async def test_webhook_timestamp_outside_the_freshness_window_gets_401(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    for skew in (-1000, 1000):
        headers = {
            **rig.signed("a", body, sub),
            HEADER_WEBHOOK_TIMESTAMP: str(int(time.time()) + skew),
        }
        await _refused(rig, body, headers, 401, "stale")


async def test_webhook_timestamp_that_is_not_a_number_gets_400(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = {**rig.signed("a", body, sub), HEADER_WEBHOOK_TIMESTAMP: "1e9"}
    await _refused(rig, body, headers, 400, "bad_header")


async def test_replayed_webhook_is_a_duplicate_and_stored_once(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = rig.signed("a", body, sub)
    await _accepted(rig, body, headers)
    for _ in range(3):
        assert await rig.post(body, headers) == (200, {"status": "duplicate"})
    assert rig.stored() == (1, 1)


async def test_retry_with_a_fresh_jwt_and_the_same_webhook_id_is_a_duplicate(
    rig: WebhookRig,
) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    first = rig.signed("a", body, sub)
    await _accepted(rig, body, first)
    webhook_id = first[HEADER_WEBHOOK_ID]
    retry = {
        **first,
        HEADER_SIGNATURE: rig.jwt("a", body, sub, webhook_id=webhook_id),
    }
    assert await rig.post(body, retry) == (200, {"status": "duplicate"})
    assert rig.stored() == (1, 1)


async def test_concurrent_replays_are_stored_once(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = rig.signed("a", body, sub)
    answers = await asyncio.gather(*(rig.post(body, headers) for _ in range(10)))
    statuses = sorted(a["status"] for _, a in answers)
    assert statuses == ["accepted"] + ["duplicate"] * 9
    assert rig.stored() == (1, 1)


async def test_token_only_sender_without_webhook_id_repeating_a_body_is_a_duplicate(
    rig: WebhookRig,
) -> None:
    _, token = await rig.subscribe("t", "task-1")
    body = status_update("task-1")
    headers = {HEADER_NOTIFICATION_TOKEN: token}
    await _accepted(rig, body, headers)
    assert await rig.post(body, headers) == (200, {"status": "duplicate"})
    assert rig.stored() == (1, 1)
    await _accepted(rig, status_update("task-1", "TASK_STATE_COMPLETED"), headers)
    assert rig.stored() == (2, 2)


# ---- Standard Webhooks -------------------------------------------------------------------


def _standard(body: bytes, secret: str = SW_SECRET, ts: int | None = None) -> dict[str, str]:
    webhook_id = f"msg_{uuid.uuid4().hex}"
    ts = int(time.time()) if ts is None else ts
    return {
        HEADER_WEBHOOK_ID: webhook_id,
        HEADER_WEBHOOK_TIMESTAMP: str(ts),
        HEADER_WEBHOOK_SIGNATURE: standard_webhooks.sign(secret, webhook_id, ts, body),
    }


async def test_standard_webhooks_good_signature_is_accepted(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, _standard(body))
    assert rig.stored() == (1, 1)


async def test_standard_webhooks_bad_signature_gets_401(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    other = "whsec_" + base64.b64encode(b"another secret of 32 bytes......").decode()
    await _refused(rig, body, _standard(body, other), 401, "bad_signature")


async def test_standard_webhooks_signature_over_another_body_gets_401(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = _standard(body)
    await _refused(rig, status_update("task-1", "TASK_STATE_FAILED"), headers, 401, "bad_signature")


async def test_standard_webhooks_without_webhook_id_gets_400(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    headers = _standard(body)
    del headers[HEADER_WEBHOOK_ID]
    await _refused(rig, body, headers, 400, "bad_header")


async def test_standard_webhooks_stale_timestamp_gets_401(rig: WebhookRig) -> None:
    await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _refused(rig, body, _standard(body, ts=int(time.time()) - 3600), 401, "stale")


# ---- what a receiver must accept ---------------------------------------------------------

BODIES: dict[str, Callable[[str], bytes]] = {
    "task": task_snapshot,
    "statusUpdate": status_update,
    "artifactUpdate": artifact_update,
    "v0.3 Task": v03_task,
    "status_update (ProtoJSON snake_case)": lambda task_id: json.dumps(
        {"status_update": {"task_id": task_id, "status": {"state": "TASK_STATE_WORKING"}}}
    ).encode(),
    "artifact_update (ProtoJSON snake_case)": lambda task_id: json.dumps(
        {"artifact_update": {"task_id": task_id, "artifact": {"artifact_id": "a", "parts": []}}}
    ).encode(),
}


@pytest.mark.parametrize("variant", list(BODIES))
async def test_stream_response_variant_is_accepted(rig: WebhookRig, variant: str) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = BODIES[variant]("task-1")
    await _accepted(rig, body, rig.signed("a", body, sub))
    assert rig.stored() == (1, 1)


async def test_jwt_in_x_a2a_signature_is_accepted(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, {HEADER_SIGNATURE: rig.jwt("a", body, sub)})


async def test_jwt_in_authorization_bearer_is_accepted(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, {"Authorization": f"Bearer {rig.jwt('a', body, sub)}"})


@pytest.mark.parametrize("header", [HEADER_NOTIFICATION_TOKEN, HEADER_NOTIFICATION_TOKEN_ALT])
async def test_token_in_either_header_is_accepted(rig: WebhookRig, header: str) -> None:
    _, token = await rig.subscribe("t", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, {header: token, HEADER_WEBHOOK_ID: "msg_1"})
    assert rig.stored() == (1, 1)


async def test_jwt_and_the_subscriptions_token_together_are_accepted(rig: WebhookRig) -> None:
    sub, token = await rig.subscribe("b", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, {**rig.signed("b", body, sub), HEADER_NOTIFICATION_TOKEN: token})


async def test_accepted_webhook_is_followed_by_a_get_task(rig: WebhookRig) -> None:
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    await _accepted(rig, body, rig.signed("a", body, sub))
    for _ in range(200):
        snap = await rig.receiver.store.get_snapshot(rig.agents["a"].key, "task-1")
        if snap is not None:
            break
        await asyncio.sleep(0.01)
    assert snap is not None and snap.task["id"] == "task-1"
    assert rig.agents["a"].get_task_hits >= 1


async def test_pyjwt_made_token_with_an_accepted_algorithm_is_accepted(rig: WebhookRig) -> None:
    # An independent JOSE implementation's token verifies too (not only our own signer).
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    key = rig.agents["a"].keyset.active
    token = pyjwt.encode(
        _claims(rig, body, "task-1", sub.id), key.private_key, "ES256", headers={"kid": key.kid}
    )
    await _accepted(rig, body, {HEADER_SIGNATURE: token})


async def test_an_untrusted_issuer_is_a_warning_once_then_debug(
    rig: WebhookRig, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone can send webhooks naming an unknown issuer: the operator is told once per
    issuer, and repeating it cannot flood the log at WARNING."""
    sub, _ = await rig.subscribe("a", "task-1")
    body = status_update("task-1")
    with caplog.at_level("DEBUG", logger="receiver.core"):
        for issuer in ("http://one.test", "http://one.test", "http://two.test", "http://one.test"):
            token = rig.jwt("a", body, sub, issuer=issuer)
            await _refused(rig, body, _with_jwt(token), 401, "unknown_issuer")
    named = [
        (r.levelname, "one.test" in r.getMessage())
        for r in caplog.records
        if r.name == "receiver.core" and "names issuer" in r.getMessage()
    ]
    assert named == [("WARNING", True), ("DEBUG", True), ("WARNING", False), ("DEBUG", True)]


async def test_an_unreadable_or_issuerless_jwt_is_named_as_such(rig: WebhookRig) -> None:
    """Not "unknown issuer" for a JWT that names none or cannot be read: the sender is
    told what is wrong with what it sent."""
    body = status_update("task-1")
    good = rig.jwt("a", body)
    head, _, sig = good.split(".")
    no_iss = f"{head}.{_b64(json.dumps({'sub': 'x'}).encode())}.{sig}"
    answer = await _refused(rig, body, _with_jwt(no_iss), 401, "no_issuer")
    assert "no iss claim" in answer["message"]
    for broken in ("only.two", f"{head}.{_b64(b'not json')}.{sig}", "a.b.c.d"):
        await _refused(rig, body, _with_jwt(broken), 401, "malformed")
