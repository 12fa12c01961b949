"""A throwaway store, for unit tests and demos: nothing survives the process.

It is the SQLite backend on a private temporary file that ``close()`` removes, committed
without fsync: the same algorithm and the same SQL as the durable stores, so it cannot
drift from them. Secrets are kept in clear (``encryption_keys`` is ignored).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from .base import StoreOptions
from .sqlite import SQLiteStore


class MemoryStore(SQLiteStore):
    """The store contracts for a single process's lifetime (see the module docstring)."""

    def __init__(self, options: StoreOptions | None = None) -> None:
        options = options or StoreOptions()
        # The file is made by open(), in a folder of its own; until then this path names
        # nothing (no file is created for a store never opened).
        unopened = Path(tempfile.gettempdir()) / "a2a-push-memory-store-not-open.db"
        super().__init__(unopened, replace(options, encryption_keys=None), synchronous="NORMAL")
        self.options = options
        self._folder: Path | None = None

    @property
    def location(self) -> str:
        return "memory (nothing kept after exit)"

    @property
    def command_database(self) -> str | None:
        return None  # in this process only

    async def open(self) -> None:
        if self._folder is None and not self._closed:
            self._folder = Path(tempfile.mkdtemp(prefix="a2a-push-memory-"))
            self.path = self._folder / "outbox.db"
        await super().open()

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
