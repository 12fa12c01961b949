"""What every PostgreSQL store of the package shares (the outbox, the gateway's state,
the receiver's store): which errors mean "the database cannot be reached", pooled
connections that raise those as ``StoreUnavailableError``, and DSNs shown without their
password. Needs asyncpg (the ``postgres`` extra).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

try:
    import asyncpg
except ModuleNotFoundError as exc:  # the core package installs without the extra
    raise ModuleNotFoundError(
        "PostgreSQL needs asyncpg, which the 'postgres' extra installs: "
        "pip install 'a2a-push[postgres]'",
        name="asyncpg",
    ) from exc

__all__ = ["UNAVAILABLE_ERRORS", "describe_dsn", "is_unavailable", "pooled_connection"]

log = logging.getLogger("a2a_push.store.postgres")

# Errors that mean "the database cannot be reached", as opposed to a bad query or value.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable; TimeoutError (connect or command) is one too
    asyncpg.exceptions.PostgresConnectionError,  # SQLSTATE class 08, connection lost
    asyncpg.exceptions.CannotConnectNowError,  # starting up or shutting down
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means "the database cannot be reached (for now)": one of
    ``UNAVAILABLE_ERRORS``, or SQLSTATE 55000 itself — e.g. a database that does not
    allow connections for now (``ALTER DATABASE … ALLOW_CONNECTIONS false``, during
    maintenance). Not the rest of class 55 (an object in use, a lock not available):
    those are answers about one statement, not an outage."""
    return isinstance(exc, UNAVAILABLE_ERRORS) or (
        type(exc) is asyncpg.exceptions.ObjectNotInPrerequisiteStateError
    )


# What asyncpg raises when a connection is killed under an operation (its protocol
# state machine or the pool's reset on release trips over the closed socket).
_CLIENT_STATE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


@contextlib.asynccontextmanager
async def pooled_connection(
    pool: Any,
    unavailable: Callable[[BaseException], Exception],
    *,
    transaction: bool = False,
) -> AsyncIterator[Any]:
    """A connection from ``pool`` (in a transaction if asked), with connection failures
    raised as ``unavailable(exc)`` (a ``StoreUnavailableError``).

    Released by hand: when the connection dies just after the work committed, the
    pool's reset on release fails, and that failure must not be reported as the work
    failing (callers would dead-letter or redo what is already durable). It is logged.
    """
    try:
        conn = await pool.acquire()
    except Exception as exc:
        if is_unavailable(exc) or isinstance(exc, _CLIENT_STATE_ERRORS):
            raise unavailable(exc) from exc
        raise
    try:
        if transaction:
            async with conn.transaction():
                yield conn
        else:
            yield conn
    except Exception as exc:
        # Whatever failed on a connection that is now closed failed because the
        # connection was lost (asyncpg reports that in several ways). A client-state
        # error on a live connection is a bug (misuse), raised as itself.
        if is_unavailable(exc) or _lost(conn):
            raise unavailable(exc) from exc
        raise
    finally:
        try:
            await pool.release(conn)
        except Exception as exc:  # the pool has closed the connection; nothing to undo
            log.warning("releasing a PostgreSQL connection failed (%s); it was dropped", exc)


def _lost(conn: Any) -> bool:
    """Whether a pooled connection has been closed under us."""
    try:
        return bool(conn.is_closed())
    except asyncpg.exceptions.InterfaceError:
        return True  # the pool already took it back: it saw the connection close


def describe_dsn(dsn: str) -> str:
    """``host:port/database`` of a DSN, for messages (never the password)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = parts.port or 5432
        database = parts.path.lstrip("/") or parts.username or "postgres"
    except ValueError:
        return "the configured database"
    return f"{host}:{port}/{database}"
