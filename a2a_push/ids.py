"""Identifiers: time-ordered delivery ids (sortable like ULIDs) and config ids."""

from __future__ import annotations

import os
import time
import uuid

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
# Every pair of digits, by its 10 bits: a 26-digit id is 13 lookups, not 26 divmods.
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_PAIR_SHIFTS = tuple(range(115, 0, -10))


def _base32(value: int) -> str:
    """The 128-bit ``value`` as 26 base32 digits, most significant first: the top digit
    holds 3 bits, then 12 pairs of digits, then the last digit."""
    pairs = "".join([_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])
    return _ALPHABET[value >> 125] + pairs + _ALPHABET[value & 31]


def new_delivery_id() -> str:
    """``msg_`` + 26 base32 chars: 48-bit milliseconds then 80 random bits.

    Sorting ids sorts deliveries by creation time, which keyset paging relies on.
    """
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "msg_" + _base32(value)


def delivery_id_floor(at: float) -> str:
    """The smallest delivery id :func:`new_delivery_id` can make at Unix time ``at`` or
    later, less one: ``id > delivery_id_floor(t)`` selects, by the id alone (the primary
    key), deliveries made from ``t`` on."""
    return "msg_" + _base32(max(0, int(at * 1000)) << 80)[:-1]


def new_config_id() -> str:
    return str(uuid.uuid4())


def new_key() -> str:
    return uuid.uuid4().hex
