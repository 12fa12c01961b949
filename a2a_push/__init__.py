"""a2a-push: durable, signed, retried, ordered A2A push notifications."""

from .delivery.dispatcher import DispatcherOptions
from .delivery.ratelimit import RateLimits
from .delivery.retry import RetryPolicy
from .delivery.ssrf import AddressPolicy
from .delivery.transport import Timeouts
from .errors import (
    A2APushError,
    InvalidConfigError,
    NotifierNotStartedError,
    TooManyConfigsError,
    UnsafeURLError,
)
from .notifier import PublishResult, PushNotifier, Retention

__all__ = [
    "A2APushError",
    "AddressPolicy",
    "DispatcherOptions",
    "InvalidConfigError",
    "NotifierNotStartedError",
    "PublishResult",
    "PushNotifier",
    "RateLimits",
    "Retention",
    "RetryPolicy",
    "Timeouts",
    "TooManyConfigsError",
    "UnsafeURLError",
]

__version__ = "0.1.0"
