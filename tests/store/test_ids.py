"""Delivery ids: 26 Crockford base32 digits of (milliseconds << 80 | 80 random bits)."""

from __future__ import annotations

import os
import random
import re
import time

import pytest

from a2a_push import ids

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def digits(value: int) -> str:
    """The definition: 26 base32 digits of ``value``, most significant first."""
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(ALPHABET[rem])
    return "".join(reversed(chars))


@pytest.mark.parametrize(
    "value",
    [0, 1, 31, 32, 2**80 - 1, 2**80, 2**125, 2**128 - 1, int(time.time() * 1000) << 80],
)
def test_base32_matches_the_digit_definition_at_the_edges(value: int) -> None:
    assert ids._base32(value) == digits(value)


def test_base32_matches_the_digit_definition_for_random_values() -> None:
    rng = random.Random(7)
    for _ in range(5_000):
        value = rng.getrandbits(128)
        assert ids._base32(value) == digits(value)


def test_new_delivery_id_encodes_the_time_then_random_bits() -> None:
    before = int(time.time() * 1000)
    delivery_id = ids.new_delivery_id()
    after = int(time.time() * 1000)
    assert re.fullmatch(r"msg_[0-9a-hjkmnp-tv-z]{26}", delivery_id)
    value = 0
    for char in delivery_id[4:]:
        value = value * 32 + ALPHABET.index(char)
    assert before <= value >> 80 <= after
    assert len({ids.new_delivery_id() for _ in range(1_000)}) == 1_000


def test_ids_sort_by_time_and_the_floor_splits_them() -> None:
    at = 1_700_000_000.5
    millis = int(at * 1000)
    made_at = [
        digits((m << 80) | int.from_bytes(os.urandom(10), "big"))
        for m in range(millis - 2, millis + 3)
    ]
    assert made_at == sorted(made_at)
    floor = ids.delivery_id_floor(at)[4:]
    assert [d > floor for d in made_at] == [False, False, True, True, True]
    # The smallest id of that millisecond is just above it.
    assert digits(millis << 80) > floor
    assert ids.delivery_id_floor(-5.0) == "msg_" + "0" * 25
