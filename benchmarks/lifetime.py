"""How benchmark helper processes end: their own watchdog, and how a parent stops them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time


async def run_until_stopped(max_seconds: float) -> None:
    """Return on SIGTERM, when the parent process goes away, or after ``max_seconds``:
    a helper process never outlives the benchmark that started it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    parent = os.getppid()
    deadline = time.monotonic() + max_seconds

    def watch() -> None:
        if time.monotonic() >= deadline or os.getppid() != parent:
            stop.set()
        else:
            loop.call_later(0.5, watch)

    watch()
    await stop.wait()


async def stop_process(proc: asyncio.subprocess.Process, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        async with asyncio.timeout(grace):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
