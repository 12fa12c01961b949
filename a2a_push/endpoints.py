"""What counts as one endpoint (for connection limits and breakers): scheme, host, port."""

from __future__ import annotations

from yarl import URL


def endpoint_of(url: str) -> str:
    """``scheme://host:port`` of a webhook URL (the default port made explicit)."""
    u = URL(url)
    return f"{u.scheme}://{u.host}:{u.port}"


def shown_endpoint(url: str) -> str:
    """A webhook URL as logs and events show it: :func:`endpoint_of` (never its
    user-info, path or query, which may hold secrets), or a placeholder when the URL
    cannot be parsed."""
    try:
        return endpoint_of(url)
    except (ValueError, TypeError):
        return "(an unparsable URL)"


def parse_endpoint(value: str) -> str:
    """An endpoint as deliveries keep it (``scheme://host:port``), from what an operator
    types to list deliveries by: an origin, or a URL (only its origin counts), with or
    without the default port. ``ValueError`` naming what is expected otherwise."""
    try:
        url = URL(value)
        port = url.port
    except (ValueError, TypeError):
        url, port = None, None
    if url is None or url.scheme not in ("http", "https") or not url.host or port is None:
        raise ValueError(
            f"{value[:100]!r} is not an http(s) origin; write scheme://host[:port], "
            "e.g. https://hooks.example.com"
        )
    return f"{url.scheme}://{url.host}:{port}"
