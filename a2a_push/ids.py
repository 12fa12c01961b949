"""Identifiers: time-ordered delivery ids (sortable like ULIDs) and config ids."""

from __future__ import annotations

import os
import time
import uuid

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def new_delivery_id() -> str:
    """``msg_`` + 26 base32 chars: 48-bit milliseconds then 80 random bits.

    Sorting ids sorts deliveries by creation time, which keyset paging relies on.
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "msg_" + "".join(reversed(chars))


def delivery_id_floor(at: float) -> str:
    """The smallest delivery id :func:`new_delivery_id` can make at Unix time ``at`` or
    later, less one: ``id > delivery_id_floor(t)`` selects, by the id alone (the primary
    key), deliveries made from ``t`` on."""
    value = max(0, int(at * 1000)) << 80
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "msg_" + "".join(reversed(chars))[:-1]


def new_config_id() -> str:
    return str(uuid.uuid4())


def new_key() -> str:
    return uuid.uuid4().hex
