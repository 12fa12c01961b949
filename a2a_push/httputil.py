"""Small HTTP helpers shared by the services."""

from __future__ import annotations

import aiohttp


async def read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body from ``stream``, or None when it is over ``limit`` bytes.

    ``StreamReader.read(n)`` returns what has arrived so far (up to ``n``), not the body:
    loop until its end, and never hold more than ``limit + 1`` bytes.
    """
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)
