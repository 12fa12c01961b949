from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from a2a_push.store import MemoryStore, SQLiteStore, Store, StoredConfig, StoreOptions

BACKENDS = ["memory", "sqlite"]


def make_store(kind: str, tmp_path: Path, options: StoreOptions | None = None) -> Store:
    if kind == "memory":
        return MemoryStore(options)
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "a2a-push.db", options)
    raise AssertionError(kind)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


_counter = itertools.count(1)


def config(
    task_id: str = "task-1",
    *,
    id: str | None = None,
    owner: str = "alice",
    url: str = "http://127.0.0.1:9/hook",
    token: str | None = None,
    version: str = "1.0",
    **extra: object,
) -> StoredConfig:
    n = next(_counter)
    return StoredConfig(
        key=uuid.uuid4().hex,
        id=id or f"cfg-{n}",
        task_id=task_id,
        owner=owner,
        url=url,
        token=token,
        protocol_version=version,
        created_at=1000.0 + n,
        **extra,  # type: ignore[arg-type]
    )


def ids() -> Callable[[], str]:
    return lambda: f"msg_{uuid.uuid4().hex}"
