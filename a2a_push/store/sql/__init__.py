"""SQL for the durable backends, kept in .sql files: named queries and ordered migrations."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@cache
def queries(backend: str) -> dict[str, str]:
    """The named queries of ``sql/<backend>/queries.sql`` ("-- name: x" blocks)."""
    text = resources.files(__package__).joinpath(backend, "queries.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2])}


@cache
def migrations(backend: str) -> list[tuple[int, str]]:
    """Ordered (version, script) pairs from ``sql/<backend>/NNNN_*.sql``."""
    folder = resources.files(__package__).joinpath(backend)
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), entry.read_text("utf-8")))
    return sorted(found)
