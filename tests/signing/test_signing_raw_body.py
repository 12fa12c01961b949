"""Receiver-side verification is given the raw body bytes; text or a JSON string for the
JWK Set is refused with a message saying what to pass (not a hashlib or concat error)."""

from __future__ import annotations

import time

import pytest

from a2a_push.signing import KeySet, WebhookSigner, standard_webhooks, verify_webhook_jwt

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"statusUpdate":{"taskId":"t1"}}'
URL = "https://client.example.com/hooks/a2a"


def signed() -> tuple[KeySet, str]:
    keyset = KeySet.generate()
    token = WebhookSigner(keyset, "https://agent.example.com").sign(
        body=BODY, audience=URL, webhook_id="msg_1", task_id="t1", config_id="c1", seq=1
    )
    return keyset, token


def test_verify_webhook_jwt_takes_bytes_not_text() -> None:
    keyset, token = signed()
    with pytest.raises(TypeError, match=r"body must be the raw request body as bytes.*not str"):
        verify_webhook_jwt(token, jwks=keyset.jwks(), body=BODY.decode(), audience=URL, issuer=None)  # type: ignore[arg-type]
    claims = verify_webhook_jwt(token, jwks=keyset.jwks(), body=BODY, audience=URL, issuer=None)
    assert claims["jti"] == "msg_1"


def test_verify_webhook_jwt_takes_the_jwks_parsed() -> None:
    import json

    keyset, token = signed()
    with pytest.raises(TypeError, match=r"jwks must be the JWK Set as a dict.*json\.loads"):
        verify_webhook_jwt(
            token,
            jwks=json.dumps(keyset.jwks()),  # type: ignore[arg-type]
            body=BODY,
            audience=URL,
            issuer=None,
        )


def test_standard_webhooks_verify_takes_bytes_not_text() -> None:
    now = int(time.time())
    header = standard_webhooks.sign(SECRET, "msg_1", now, BODY)
    with pytest.raises(TypeError, match=r"body must be the raw request body as bytes.*not str"):
        standard_webhooks.verify(
            SECRET,
            msg_id="msg_1",
            timestamp=now,
            signature_header=header,
            body=BODY.decode(),  # type: ignore[arg-type]
        )
    standard_webhooks.verify(
        SECRET, msg_id="msg_1", timestamp=now, signature_header=header, body=BODY
    )
