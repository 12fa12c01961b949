"""What the services (gateway, receiver) do around running: one log format, no
tracebacks from asyncpg's pool while the database is away (the stores log the outage
themselves), and a single announcement once they serve."""

from __future__ import annotations

import gc
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


def serving(banner: str) -> None:
    """Called once the app has started and listens (aiohttp ``run_app(print=...)``):
    announce it, and freeze what startup allocated (modules, settings, keys...) out of
    the garbage collector's reach, so full collections scan only what was allocated
    since: their pauses, which stop the event loop, drop from tens of ms to little."""
    gc.collect()  # startup's own garbage first: frozen objects are never freed
    gc.freeze()
    if banner:  # (a worker of several that leaves the announcing to the first)
        print(banner, flush=True)
