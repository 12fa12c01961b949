"""The a2a-push receiver: verifies A2A webhooks, fetches tasks with GetTask, serves them.

``receiver.verify`` is the verification library on its own; ``Receiver`` is the
embeddable core; ``create_app`` wraps it in an aiohttp application.
"""

from .api import create_app
from .core import Receiver
from .settings import AgentSettings, ReceiverSettings, SettingsError, load_settings
from .store import ReceiverStore, Subscription, TaskEvent, TaskSnapshot
from .verify import (
    AuthMethod,
    JWKSCache,
    VerifiedWebhook,
    VerifyPolicy,
    WebhookRejected,
    WebhookVerifier,
    token_digest,
)

__all__ = [
    "AgentSettings",
    "AuthMethod",
    "JWKSCache",
    "Receiver",
    "ReceiverSettings",
    "ReceiverStore",
    "SettingsError",
    "Subscription",
    "TaskEvent",
    "TaskSnapshot",
    "VerifiedWebhook",
    "VerifyPolicy",
    "WebhookRejected",
    "WebhookVerifier",
    "create_app",
    "load_settings",
    "token_digest",
]
