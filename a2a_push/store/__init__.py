"""Config store and outbox contracts, and their backends (memory, SQLite; PostgreSQL later)."""

from __future__ import annotations

from pathlib import Path

from .base import (
    ConfigStore,
    Delivery,
    DeliveryFilter,
    DeliveryState,
    Outbox,
    OutboxStats,
    Outcome,
    Renderer,
    Store,
    StoredConfig,
    StoreOptions,
)
from .memory import MemoryStore
from .secrets import SecretBox, generate_key
from .sqlite import SQLiteStore

__all__ = [
    "ConfigStore",
    "Delivery",
    "DeliveryFilter",
    "DeliveryState",
    "MemoryStore",
    "Outbox",
    "OutboxStats",
    "Outcome",
    "Renderer",
    "SQLiteStore",
    "SecretBox",
    "Store",
    "StoreOptions",
    "StoredConfig",
    "generate_key",
    "open_store",
]


def open_store(url: str | Path, options: StoreOptions | None = None) -> Store:
    """A store for ``url``: ``memory://``, ``sqlite:///path/to/file.db`` or a plain file path.

    The store still needs ``await store.open()`` (or ``async with``).
    """
    text = str(url)
    if text == "memory://" or text == ":memory:":
        return MemoryStore(options)
    if text.startswith("sqlite://"):
        # As SQLAlchemy: sqlite:///relative.db, sqlite:////absolute/path.db
        path = text.removeprefix("sqlite:///")
        if path == text or not path:
            raise ValueError(
                "database: a sqlite URL needs a file path: sqlite:///relative.db "
                "or sqlite:////absolute/path.db"
            )
        return SQLiteStore(path, options)
    if text.startswith(("postgres://", "postgresql://")):
        raise ValueError(
            "database: the PostgreSQL backend is not available in this version; "
            "use a SQLite file path"
        )
    if "://" in text:
        raise ValueError(
            f"database: unsupported URL scheme in {text.split('://')[0]!r}; "
            "use memory://, sqlite:///path or a file path"
        )
    return SQLiteStore(text, options)
