"""A small HTML builder that escapes by default.

Every ``str`` handed to :func:`h` as a child or attribute value is escaped; only
:class:`Markup` (what :func:`h` and :func:`join` return, and the page's own constant
strings wrapped on purpose) is inserted as is. Task ids, error texts, response excerpts
and payloads come from outside and are always plain ``str``: they show as text.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode

Child = "str | int | float | Markup | None | Iterable[Child]"


class Markup(str):
    """Text that is already HTML."""

    __slots__ = ()


def esc(value: object) -> Markup:
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(*parts: object) -> Markup:
    out: list[str] = []
    for part in parts:
        _render(part, out)
    return Markup("".join(out))


def _render(part: object, out: list[str]) -> None:
    if part is None or part is False:
        return
    if isinstance(part, Markup):
        out.append(part)
    elif isinstance(part, str | int | float):
        out.append(esc(part))
    elif isinstance(part, Iterable):
        for item in part:
            _render(item, out)
    else:
        out.append(esc(part))


_VOID = frozenset({"input", "br", "meta", "link", "hr", "img"})


def h(tag: str, attrs: Mapping[str, object] | None = None, *children: object) -> Markup:
    """``<tag attrs>children</tag>``; attribute values and str children escaped. An
    attribute whose value is None or False is left out; True writes it bare."""
    parts = [f"<{tag}"]
    for name, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{esc(value)}"')
    parts.append(">")
    if tag in _VOID:
        return Markup("".join(parts))
    return Markup("".join(parts) + join(*children) + f"</{tag}>")


def href(path: str, query: Mapping[str, object] | None = None) -> str:
    """A console link: ``path`` (ours) with ``query`` encoded (values from outside are
    encoded, never interpreted)."""
    if not query:
        return path
    given = {k: str(v) for k, v in query.items() if v not in (None, "")}
    return f"{path}?{urlencode(given)}" if given else path


def when(at: float | None) -> Markup | str:
    """A Unix time as UTC text in a <time> element ("" for None)."""
    if at is None:
        return ""
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + "Z"
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    return h("time", {"datetime": iso}, text)


def pretty_json(body: bytes) -> str:
    """The body indented, when it is JSON; else as text (undecodable bytes replaced)."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", errors="replace")


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], *, empty: str) -> Markup:
    head = h("thead", None, h("tr", None, [h("th", {"scope": "col"}, x) for x in headers]))
    body_rows = [h("tr", None, [h("td", None, cell) for cell in row]) for row in rows]
    if not body_rows:
        return h("p", {"class": "empty"}, empty)
    return h("table", None, head, h("tbody", None, body_rows))
