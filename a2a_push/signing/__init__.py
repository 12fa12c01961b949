"""Webhook signing: JWT signing keys (JWKS, rotation), the webhook JWT and Standard Webhooks."""

from . import standard_webhooks
from .jwt import JWTVerificationError, WebhookSigner, verify_webhook_jwt
from .keys import (
    DEFAULT_ALGORITHM,
    Algorithm,
    KeySet,
    KeyStoreError,
    SigningKey,
    jwk_thumbprint,
    public_key_from_jwk,
)
from .standard_webhooks import StandardWebhooksVerificationError, is_standard_webhooks_secret

__all__ = [
    "DEFAULT_ALGORITHM",
    "Algorithm",
    "JWTVerificationError",
    "KeySet",
    "KeyStoreError",
    "SigningKey",
    "StandardWebhooksVerificationError",
    "WebhookSigner",
    "is_standard_webhooks_secret",
    "jwk_thumbprint",
    "public_key_from_jwk",
    "standard_webhooks",
    "verify_webhook_jwt",
]
