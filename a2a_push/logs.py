"""Logging for the services (gateway, receiver): one format, and no tracebacks from
asyncpg's pool while the database is away (the stores log the outage themselves)."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _OneLine(logging.Filter):
    """Keeps a record, minus its traceback: the exception's text joins the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def configure(level: str | int) -> None:
    """Log to stderr at ``level``. asyncpg's pool retries reconnecting while PostgreSQL
    is down or restarting, each time with a full traceback: one line each instead."""
    logging.basicConfig(level=level, format=FORMAT)
    logging.getLogger("asyncpg.pool").addFilter(_OneLine())
