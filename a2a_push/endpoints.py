"""What counts as one endpoint (for connection limits and breakers): scheme, host, port."""

from __future__ import annotations

from yarl import URL


def endpoint_of(url: str) -> str:
    """``scheme://host:port`` of a webhook URL (the default port made explicit)."""
    u = URL(url)
    return f"{u.scheme}://{u.host}:{u.port}"
