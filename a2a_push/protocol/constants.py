"""Wire constants: one definition for every header name, media type and default."""

from __future__ import annotations

from typing import Final

A2A_MEDIA_TYPE: Final = "application/a2a+json"

# Protocol versions we speak, newest first.
VERSION_1_0: Final = "1.0"
VERSION_0_3: Final = "0.3"
SUPPORTED_VERSIONS: Final = (VERSION_1_0, VERSION_0_3)

# v0.3 senders and receivers speak plain JSON; application/a2a+json came with v1.0.
JSON_MEDIA_TYPE: Final = "application/json"


def webhook_media_type(version: str) -> str:
    """The ``Content-Type`` of a webhook for a config of protocol ``version``:
    ``application/json`` for "0.3", ``application/a2a+json`` for anything else (1.0)."""
    return JSON_MEDIA_TYPE if version == VERSION_0_3 else A2A_MEDIA_TYPE


# Request / webhook header names (lower-case; HTTP headers are case-insensitive).
HEADER_A2A_VERSION: Final = "A2A-Version"
HEADER_WEBHOOK_ID: Final = "webhook-id"
HEADER_WEBHOOK_TIMESTAMP: Final = "webhook-timestamp"
HEADER_WEBHOOK_SIGNATURE: Final = "webhook-signature"
HEADER_AUTHORIZATION: Final = "Authorization"
HEADER_NOTIFICATION_TOKEN: Final = "X-A2A-Notification-Token"  # noqa: S105 - a header name
HEADER_NOTIFICATION_TOKEN_ALT: Final = "A2A-Notification-Token"  # noqa: S105
HEADER_SIGNATURE: Final = "X-A2A-Signature"
HEADER_CONTENT_TYPE: Final = "Content-Type"
HEADER_RETRY_AFTER: Final = "Retry-After"

# Standard Webhooks secrets carry this prefix.
STANDARD_WEBHOOKS_SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix

# Defaults (docs/configuration.md lists where each applies).
DEFAULT_MAX_CONFIGS_PER_TASK: Final = 10
DEFAULT_JWT_LIFETIME_SECONDS: Final = 300
DEFAULT_KEY_GRACE_PERIOD_SECONDS: Final = 24 * 3600
DEFAULT_MAX_PAYLOAD_BYTES: Final = 256 * 1024
