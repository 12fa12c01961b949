"""Standard Webhooks signing: the spec's test vector and interop with the reference library."""

from __future__ import annotations

import base64
import os
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from a2a_push.errors import InvalidConfigError
from a2a_push.protocol.constants import (
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.signing import standard_webhooks
from a2a_push.signing.standard_webhooks import (
    StandardWebhooksVerificationError,
    is_standard_webhooks_secret,
    sign,
    verify,
)

VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def test_sign_matches_the_spec_test_vector() -> None:
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE


def test_verify_accepts_the_spec_test_vector() -> None:
    verify(
        VECTOR_SECRET,
        msg_id=VECTOR_ID,
        timestamp=str(VECTOR_TIMESTAMP),
        signature_header=VECTOR_SIGNATURE,
        body=VECTOR_BODY,
        now=VECTOR_TIMESTAMP,
    )


def test_reference_library_verifies_our_signature() -> None:
    secret = new_secret()
    timestamp = int(time.time())
    body = b'{"kind":"status-update","taskId":"t-1"}'
    headers = {
        HEADER_WEBHOOK_ID: "msg_1",
        HEADER_WEBHOOK_TIMESTAMP: str(timestamp),
        HEADER_WEBHOOK_SIGNATURE: sign(secret, "msg_1", timestamp, body),
    }
    assert Webhook(secret).verify(body, headers) == {"kind": "status-update", "taskId": "t-1"}


def test_reference_library_rejects_our_signature_over_another_body() -> None:
    secret = new_secret()
    timestamp = int(time.time())
    headers = {
        HEADER_WEBHOOK_ID: "msg_1",
        HEADER_WEBHOOK_TIMESTAMP: str(timestamp),
        HEADER_WEBHOOK_SIGNATURE: sign(secret, "msg_1", timestamp, b'{"a":1}'),
    }
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b'{"a":2}', headers)


def test_we_verify_the_reference_library_signature() -> None:
    secret = new_secret()
    timestamp = int(time.time())
    body = '{"hello":"world"}'
    header = Webhook(secret).sign("msg_2", datetime.fromtimestamp(timestamp, tz=UTC), body)
    verify(
        secret,
        msg_id="msg_2",
        timestamp=timestamp,
        signature_header=header,
        body=body.encode(),
    )


def test_verify_rejects_a_changed_byte() -> None:
    with pytest.raises(StandardWebhooksVerificationError) as caught:
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID,
            timestamp=VECTOR_TIMESTAMP,
            signature_header=VECTOR_SIGNATURE,
            body=b'{"test": 2432232315}',
            now=VECTOR_TIMESTAMP,
        )
    assert caught.value.reason == "no_matching_signature"


def test_verify_rejects_a_changed_msg_id() -> None:
    with pytest.raises(StandardWebhooksVerificationError):
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID + "x",
            timestamp=VECTOR_TIMESTAMP,
            signature_header=VECTOR_SIGNATURE,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP,
        )


def test_verify_rejects_a_stale_timestamp() -> None:
    with pytest.raises(StandardWebhooksVerificationError) as caught:
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID,
            timestamp=VECTOR_TIMESTAMP,
            signature_header=VECTOR_SIGNATURE,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP + 301,
        )
    assert caught.value.reason == "timestamp_too_old"


def test_verify_rejects_a_timestamp_in_the_future() -> None:
    with pytest.raises(StandardWebhooksVerificationError) as caught:
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID,
            timestamp=VECTOR_TIMESTAMP,
            signature_header=VECTOR_SIGNATURE,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP - 301,
        )
    assert caught.value.reason == "timestamp_too_new"


def test_verify_accepts_a_timestamp_at_the_tolerance_edge() -> None:
    verify(
        VECTOR_SECRET,
        msg_id=VECTOR_ID,
        timestamp=VECTOR_TIMESTAMP,
        signature_header=VECTOR_SIGNATURE,
        body=VECTOR_BODY,
        now=VECTOR_TIMESTAMP + 300,
    )


@pytest.mark.parametrize("timestamp", ["", "abc", "1614265330.5", "-1614265330", "١٢٣", "9" * 5000])
def test_verify_rejects_a_timestamp_that_is_not_unix_seconds(timestamp: str) -> None:
    with pytest.raises(StandardWebhooksVerificationError) as caught:
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID,
            timestamp=timestamp,
            signature_header=VECTOR_SIGNATURE,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP,
        )
    assert caught.value.reason == "bad_timestamp"


def test_verify_rejects_a_wrong_secret() -> None:
    with pytest.raises(StandardWebhooksVerificationError) as caught:
        verify(
            new_secret(),
            msg_id=VECTOR_ID,
            timestamp=VECTOR_TIMESTAMP,
            signature_header=VECTOR_SIGNATURE,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP,
        )
    assert caught.value.reason == "no_matching_signature"


def test_verify_accepts_any_one_of_several_signatures() -> None:
    other = sign(new_secret(), VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY)
    verify(
        VECTOR_SECRET,
        msg_id=VECTOR_ID,
        timestamp=VECTOR_TIMESTAMP,
        signature_header=f"{other} {VECTOR_SIGNATURE}",
        body=VECTOR_BODY,
        now=VECTOR_TIMESTAMP,
    )


def test_verify_ignores_other_versions_and_garbage_entries() -> None:
    signature = VECTOR_SIGNATURE.split(",", 1)[1]
    header = f"v1a,{signature} junk v1,!!notbase64!! v2,{signature}"
    with pytest.raises(StandardWebhooksVerificationError):
        verify(
            VECTOR_SECRET,
            msg_id=VECTOR_ID,
            timestamp=VECTOR_TIMESTAMP,
            signature_header=header,
            body=VECTOR_BODY,
            now=VECTOR_TIMESTAMP,
        )
    verify(
        VECTOR_SECRET,
        msg_id=VECTOR_ID,
        timestamp=VECTOR_TIMESTAMP,
        signature_header=f"{header} {VECTOR_SIGNATURE}",
        body=VECTOR_BODY,
        now=VECTOR_TIMESTAMP,
    )


def test_sign_and_verify_work_on_bodies_that_are_not_utf8() -> None:
    secret = new_secret()
    body = b"\xff\xfe\x00binary"
    header = sign(secret, "msg_3", 1_700_000_000, body)
    verify(
        secret,
        msg_id="msg_3",
        timestamp=1_700_000_000,
        signature_header=header,
        body=body,
        now=1_700_000_000,
    )


def test_unpadded_secret_signs_like_its_padded_form() -> None:
    raw = base64.b64encode(os.urandom(20)).decode()
    assert raw.endswith("=")
    padded, unpadded = "whsec_" + raw, "whsec_" + raw.rstrip("=")
    assert sign(padded, "m", 1, b"x") == sign(unpadded, "m", 1, b"x")


@pytest.mark.parametrize(
    "secret",
    ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not*base64!", "Bearer whsec_abc"],
)
def test_invalid_secret_is_rejected_as_a_config_error(secret: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        sign(secret, "m", 1, b"x")
    assert caught.value.field == "token"


def test_verify_with_an_invalid_secret_is_a_config_error() -> None:
    with pytest.raises(InvalidConfigError):
        verify("nope", msg_id="m", timestamp=1, signature_header="v1,AAAA", body=b"", now=1)


@pytest.mark.parametrize(
    ("token", "expected"),
    [(VECTOR_SECRET, True), ("whsec_", True), ("opaque-token", False), ("", False), (None, False)],
)
def test_is_standard_webhooks_secret(token: str | None, expected: bool) -> None:
    assert is_standard_webhooks_secret(token) is expected


def test_module_is_exported_from_the_signing_package() -> None:
    assert standard_webhooks.sign is sign
