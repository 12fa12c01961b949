"""Config store and outbox contracts, and their backends (memory, SQLite, PostgreSQL).

``PostgresStore`` is imported on first use, so the package imports without asyncpg
(the ``postgres`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote, urlsplit, urlunsplit

from .base import (
    ATTEMPT_ERROR_CLASSES,
    ATTEMPT_VERDICTS,
    MAX_ATTEMPT_RESPONSE_BYTES,
    Attempt,
    AttemptBucket,
    AttemptVerdict,
    ConfigStore,
    Delivery,
    DeliveryFilter,
    DeliveryState,
    EndpointStats,
    FsyncCounts,
    InitialDelivery,
    Outbox,
    OutboxStats,
    Outcome,
    Renderer,
    Store,
    StoredConfig,
    StoreOptions,
    matching_ids,
)
from .memory import MemoryStore
from .secrets import SecretBox, generate_key
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "ATTEMPT_ERROR_CLASSES",
    "ATTEMPT_VERDICTS",
    "MAX_ATTEMPT_RESPONSE_BYTES",
    "Attempt",
    "AttemptBucket",
    "AttemptVerdict",
    "ConfigStore",
    "Delivery",
    "DeliveryFilter",
    "DeliveryState",
    "EndpointStats",
    "FsyncCounts",
    "InitialDelivery",
    "MemoryStore",
    "Outbox",
    "OutboxStats",
    "Outcome",
    "PostgresStore",
    "Renderer",
    "SQLiteStore",
    "SecretBox",
    "Store",
    "StoreOptions",
    "StoredConfig",
    "generate_key",
    "matching_ids",
    "open_store",
]


def __getattr__(name: str) -> object:
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


POSTGRES_SCHEMES = ("postgres://", "postgresql://")


def is_postgres_url(url: str | Path) -> bool:
    """Whether ``url`` names a PostgreSQL database (else it is SQLite or memory)."""
    return str(url).startswith(POSTGRES_SCHEMES)


_SECRET_QUERY_KEYS: Final = frozenset({"password", "sslpassword"})


def shown_database(database: str) -> str:
    """``database`` for a command to suggest: a URL's password (``user:***@``) and any
    ``password=``/``sslpassword=`` query parameter show as ``***``; the user name and
    everything else stay, so the command still names the same database."""
    if "://" not in database:
        return database  # a file path
    parts = urlsplit(database)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}{':***' if colon else ''}@{hostport}"
    query = "&".join(
        f"{piece.partition('=')[0]}=***"
        if unquote(piece.partition("=")[0]).lower() in _SECRET_QUERY_KEYS
        else piece
        for piece in parts.query.split("&")
    )
    if netloc == parts.netloc and query == parts.query:
        return database  # nothing to hide (urlunsplit would also drop sqlite:///'s //)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def open_store(url: str | Path, options: StoreOptions | None = None) -> Store:
    """A store for ``url``: ``memory://``, ``sqlite:///path/to/file.db``, a plain file path,
    or ``postgresql://user@host:port/database`` (``postgres://`` too; needs the
    ``postgres`` extra).

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
    if is_postgres_url(text):
        try:
            from .postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if exc.name != "asyncpg":
                raise
            raise ValueError(
                "database: the PostgreSQL backend needs asyncpg, which the 'postgres' "
                "extra installs: pip install 'a2a-push[postgres]'"
            ) from exc
        return PostgresStore(text, options)
    if "://" in text:
        raise ValueError(
            f"database: unsupported URL scheme in {text.split('://')[0]!r}; "
            "use memory://, sqlite:///path, postgresql://host/database or a file path"
        )
    return SQLiteStore(text, options)
