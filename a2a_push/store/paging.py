"""Opaque page tokens for config listing (keyset paging on the config id)."""

from __future__ import annotations

import base64
import binascii

from ..errors import InvalidConfigError


def check_page_size(page_size: object) -> int:
    """A config listing's page size: a positive integer (0 gave an empty page that looked
    like the end of the list; a negative one, a different answer on each backend)."""
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise InvalidConfigError("pageSize", f"must be a positive integer, got {page_size!r}")
    return page_size


def encode_page_token(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_page_token(token: str | None) -> str | None:
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        # Strict: junk is an error, never silently "from the start".
        raw = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
        last_id = raw.decode("utf-8")
        if not last_id or "\x00" in last_id:
            raise ValueError("not an id")  # no config id is empty or holds NUL
        return last_id
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise InvalidConfigError("pageToken", "not a page token this server issued") from exc
