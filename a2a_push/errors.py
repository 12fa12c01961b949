"""Typed errors raised by a2a_push. Each names what was wrong and, where it can, the field."""

from __future__ import annotations


class A2APushError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidConfigError(A2APushError, ValueError):
    """A push notification config was rejected; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UnsafeURLError(InvalidConfigError):
    """A webhook URL points at an address the SSRF policy refuses."""

    def __init__(self, message: str, field: str = "url") -> None:
        super().__init__(field, message)


class TooManyConfigsError(InvalidConfigError):
    """The per-task cap on push notification configs was reached."""

    def __init__(self, task_id: str, limit: int) -> None:
        super().__init__(
            "taskId",
            f"task {task_id!r} already has the maximum of {limit} push notification configs",
        )
        self.limit = limit


class ConfigNotFoundError(A2APushError, LookupError):
    """No config with that id exists for that task and owner."""


class SecretDecryptionError(A2APushError):
    """A stored secret could not be decrypted with the configured keys (never read as plaintext)."""


class StoreClosedError(A2APushError, RuntimeError):
    """The store was used after close()."""


class NotifierNotStartedError(A2APushError, RuntimeError):
    """A ``PushNotifier`` was used before ``start()`` (or ``async with``) or after ``stop()``."""


class StoreUnavailableError(A2APushError):
    """The database cannot be reached (down, restarting, unreachable, out of connections).

    Transient: the store reconnects by itself, so the same call may succeed later.
    """


class StoreBusyError(A2APushError):
    """The store could not do this now, though it is reachable: a lock or statement
    timeout, a deadlock, a serialization failure, a database file another process holds
    locked. Nothing was written; the same call may succeed when tried again."""


class StoreUnusableError(A2APushError):
    """The database answers but cannot be used as given: no such database or role, a
    refused password, or (for tools that never migrate) no outbox where one was expected.
    Not transient: the message says what to fix."""
