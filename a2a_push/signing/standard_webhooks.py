"""Standard Webhooks signatures (https://www.standardwebhooks.com): sign and verify.

Signed content is ``{webhook-id}.{webhook-timestamp}.{body}``, HMAC-SHA256 keyed with the
base64-decoded secret after ``whsec_``; the header value is ``v1,<base64 signature>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from typing import Final

from a2a_push.errors import A2APushError, InvalidConfigError
from a2a_push.protocol.constants import STANDARD_WEBHOOKS_SECRET_PREFIX
from a2a_push.signing.jwt import check_raw_body, shown

SIGNATURE_VERSION: Final = "v1"
DEFAULT_TOLERANCE_SECONDS: Final = 300


class StandardWebhooksVerificationError(A2APushError):
    """A Standard Webhooks signature was refused; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def is_standard_webhooks_secret(token: str | None) -> bool:
    """Whether a config token is a Standard Webhooks secret (``whsec_...``)."""
    return token is not None and token.startswith(STANDARD_WEBHOOKS_SECRET_PREFIX)


def check_secret(token: str | None) -> None:
    """Refuse a push config's ``token`` that is a Standard Webhooks secret (``whsec_...``)
    no webhook could be signed with: ``InvalidConfigError`` with ``field`` ``"token"``.
    Any other token (a bearer value sent as it is), or none, passes."""
    if token and is_standard_webhooks_secret(token):
        _secret_key(token)


def _secret_key(secret: str) -> bytes:
    if not is_standard_webhooks_secret(secret):
        raise InvalidConfigError(
            "token",
            f"a Standard Webhooks secret must start with {STANDARD_WEBHOOKS_SECRET_PREFIX!r}",
        )
    encoded = secret[len(STANDARD_WEBHOOKS_SECRET_PREFIX) :]
    try:
        # Secrets are often shared without base64 padding; restore it before decoding.
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidConfigError(
            "token", "the Standard Webhooks secret after 'whsec_' is not valid base64"
        ) from exc
    if not key:
        raise InvalidConfigError("token", "the Standard Webhooks secret is empty")
    return key


def _signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value (``v1,<base64>``) for this message."""
    digest = _signature(_secret_key(secret), msg_id, timestamp, body)
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


def verify(
    secret: str,
    *,
    msg_id: str,
    timestamp: str | int,
    signature_header: str,
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: int | None = None,
) -> None:
    """Check a ``webhook-signature`` header against the raw body; raise if it does not match.

    The timestamp must be within ``tolerance`` seconds of ``now``; the header may carry
    several space-separated ``v1,<sig>`` entries (during secret rotation) and one match
    is enough. Raises :class:`StandardWebhooksVerificationError` with ``reason`` one of
    ``bad_timestamp``, ``timestamp_too_old``, ``timestamp_too_new`` or ``no_matching_signature``.
    """
    check_raw_body(body, "standard_webhooks.verify")
    key = _secret_key(secret)
    if isinstance(timestamp, bool) or not (
        isinstance(timestamp, int)
        or (len(timestamp) <= 12 and timestamp.isascii() and timestamp.isdigit())
    ):
        raise StandardWebhooksVerificationError(
            "bad_timestamp", f"timestamp {shown(str(timestamp), 40)} is not unix seconds"
        )
    ts = int(timestamp)
    current = int(time.time()) if now is None else now
    if ts < current - tolerance:
        raise StandardWebhooksVerificationError("timestamp_too_old", "the message is too old")
    if ts > current + tolerance:
        raise StandardWebhooksVerificationError(
            "timestamp_too_new", "the message timestamp is in the future"
        )

    expected = _signature(key, msg_id, ts, body)
    for entry in signature_header.split(" "):
        version, sep, encoded = entry.partition(",")
        if not sep or version != SIGNATURE_VERSION:
            continue
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, candidate):
            return
    raise StandardWebhooksVerificationError(
        "no_matching_signature", "no v1 signature in the header matches the message"
    )
