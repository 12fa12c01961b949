"""Builds the headers of one webhook attempt, exactly as docs/protocol.md specifies."""

from __future__ import annotations

import time

from ..protocol.constants import (
    HEADER_A2A_VERSION,
    HEADER_AUTHORIZATION,
    HEADER_CONTENT_TYPE,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
    webhook_media_type,
)
from ..signing import WebhookSigner
from ..signing import standard_webhooks as stdwh
from ..store import Delivery, StoredConfig


def webhook_headers(
    delivery: Delivery,
    config: StoredConfig,
    signer: WebhookSigner | None,
    now: int | None = None,
) -> dict[str, str]:
    """Headers for one attempt; the timestamp and JWT are fresh on every attempt."""
    timestamp = int(time.time()) if now is None else now
    headers = {
        HEADER_CONTENT_TYPE: webhook_media_type(config.protocol_version),
        HEADER_A2A_VERSION: config.protocol_version,
        HEADER_WEBHOOK_ID: delivery.id,
        HEADER_WEBHOOK_TIMESTAMP: str(timestamp),
    }
    jwt: str | None = None
    if signer is not None:
        jwt = signer.sign(
            body=delivery.body,
            audience=config.url,
            webhook_id=delivery.id,
            task_id=delivery.task_id,
            config_id=config.id,
            seq=delivery.seq,
            now=timestamp,
        )
        headers[HEADER_SIGNATURE] = jwt
    if config.auth_scheme and config.auth_credentials:
        # The spec's MUST: the client's own scheme and credentials.
        headers[HEADER_AUTHORIZATION] = f"{config.auth_scheme} {config.auth_credentials}"
    elif jwt is not None:
        headers[HEADER_AUTHORIZATION] = f"Bearer {jwt}"
    token = config.token
    if token:
        if stdwh.is_standard_webhooks_secret(token):
            headers[HEADER_WEBHOOK_SIGNATURE] = stdwh.sign(
                token, delivery.id, timestamp, delivery.body
            )
        else:
            headers[HEADER_NOTIFICATION_TOKEN] = token
    return headers
