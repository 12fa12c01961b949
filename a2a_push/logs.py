"""What the services (gateway, receiver, mock agent) do around running: one log
format (text, or JSON lines), no tracebacks from asyncpg's pool while the database is
away (the stores log the outage themselves), and a single announcement once they
serve."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal

from . import tracing

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")

# The structured fields a record may carry (as ``extra=``), in the order a JSON line
# shows them. None of them may hold a secret: an endpoint is an origin
# (scheme://host:port), never a URL's path or query.
FIELDS: Final = (
    "delivery_id",
    "task_id",
    "config_id",
    "endpoint",
    "attempt",
    "status",
    "latency_ms",
    "verdict",
    "error_class",
    "agent",
    "reason",
    "trace_id",
)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, then the
    :data:`FIELDS` the record carries, and the trace id of the span current when it
    was logged (when tracing, and no trace_id was given)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = record.__dict__
        for name in FIELDS:
            value = fields.get(name)
            if value is not None:
                line[name] = value
        if "trace_id" not in line:
            trace_id = tracing.current_trace_id()
            if trace_id is not None:
                line["trace_id"] = trace_id
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line["error"] = f"{type(exc).__name__}: {exc}"
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


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


def add_arguments(
    parser: argparse.ArgumentParser,
    *,
    log_format: str | None = None,
    tracing: bool | None = None,
    default_note: str = "",
) -> None:
    """The services' ``--log-format`` and ``--tracing`` options (defaults: None, left to
    their settings, unless given)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=log_format,
        help=f"text (the default) or json: one JSON object per line{default_note}",
    )
    parser.add_argument(
        "--tracing",
        action=argparse.BooleanOptionalAction,
        default=tracing,
        help="OpenTelemetry spans, exported with OTLP where OTEL_EXPORTER_OTLP_ENDPOINT "
        f"says (needs the otel extra){default_note}",
    )


def configure(level: str | int, log_format: LogFormat = "text") -> None:
    """Log to stderr at ``level``, as text lines or as JSON lines (``log_format``).
    asyncpg's pool retries reconnecting while PostgreSQL is down or restarting, each
    time with a full traceback: one line each instead."""
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JSONFormatter())
        logging.basicConfig(level=level, handlers=[handler])
    else:
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
