"""Steady writes through an SQLiteWriter, for the WAL tests: in the test's process, or
as a process of its own (``python -m tests.wal_writer_worker DB ROWS``), so that
several processes write to one file as the receiver's workers do."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from a2a_push.database.sqlite_writer import SQLiteWriter, prepare_writer_connection

BLOB = 4096
PRODUCERS = 4


def create(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")
    finally:
        conn.close()


def wal_restarts(db: Path, *, settled: bool = False) -> int:
    """The WAL header's checkpoint sequence number: how often the WAL started over.

    ``settled``: read until the header's own checksum holds, for a reader racing another
    connection that may be rewriting the header (starting the WAL over), and a read then
    sees part of the old header and part of the new one. (Two reads that agreed were not
    enough: a torn read once came twice and counted a restart backwards.)"""
    deadline = time.monotonic() + 5
    while True:
        with open(f"{db}-wal", "rb") as f:
            header = f.read(32)
        if not settled or _header_intact(header):
            return int(struct.unpack(">I", header[12:16])[0])
        # A header being rewritten is whole again within microseconds.
        assert time.monotonic() < deadline, f"no intact WAL header in 5 s: {header.hex()}"


def _header_intact(header: bytes) -> bool:
    """The WAL header's checksum (over its first 24 bytes, in the byte order its magic
    number names) matches the one it carries."""
    if len(header) < 32:
        return False
    (magic,) = struct.unpack(">I", header[:4])
    if magic not in (0x377F0682, 0x377F0683):
        return False
    words = struct.unpack((">" if magic & 1 else "<") + "6I", header[:24])
    s0 = s1 = 0
    for i in range(0, 6, 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return (s0, s1) == struct.unpack(">2I", header[24:32])


@dataclass
class Steady:
    writer_restarts: int  # catch-ups that started the WAL over, by this writer
    header_restarts: int  # the WAL header's count when the writes ended (all writers)
    largest_wal: int  # bytes, sampled every 5 ms


async def write_steadily(db: Path, rows: int) -> Steady:
    """``rows`` blobs of 4 KiB from four producers that never let the queue run dry;
    checkpoints every 20 ms, the writer's catch-up past 512 KiB of WAL."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    prepare_writer_connection(conn)
    writer = SQLiteWriter(
        conn,
        f"{db}-wal",
        durable=False,
        name="steady",
        checkpoint_every=0.02,
        wal_catch_up_bytes=512 * 1024,
    )
    writer.start()
    blob = os.urandom(BLOB)
    wal = Path(f"{db}-wal")
    largest = 0

    async def producer(n: int) -> None:
        for _ in range(n):
            await writer.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", (blob,)))

    async def sample() -> None:
        nonlocal largest
        while True:
            largest = max(largest, wal.stat().st_size)  # noqa: ASYNC240 (microseconds)
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    try:
        await asyncio.wait_for(
            asyncio.gather(*(producer(rows // PRODUCERS) for _ in range(PRODUCERS))), 120
        )
    finally:
        sampler.cancel()
        await writer.close()
        header = wal_restarts(db)
        conn.close()  # the last connection to close copies the WAL back and removes it
    return Steady(writer.wal_restarts, header, largest)


if __name__ == "__main__":
    result = asyncio.run(write_steadily(Path(sys.argv[1]), int(sys.argv[2])))
    print(json.dumps(asdict(result)))
