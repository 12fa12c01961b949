from __future__ import annotations

import asyncio
import functools
import importlib
import itertools
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from a2a_push.store import MemoryStore, SQLiteStore, Store, StoredConfig, StoreOptions
from a2a_push.testing import WebhookSink

BACKENDS = ["memory", "sqlite", "postgres"]

POSTGRES_DSN = os.environ.get(
    "A2A_PUSH_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)

# Schemas made by this test, dropped after it (see _drop_postgres_schemas).
_schemas: list[str] = []


def make_store(kind: str, tmp_path: Path, options: StoreOptions | None = None) -> Store:
    if kind == "memory":
        return MemoryStore(options)
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "a2a-push.db", options)
    if kind == "postgres":
        from a2a_push.store.postgres import PostgresStore

        return PostgresStore(require_postgres(), options, schema=postgres_schema())
    raise AssertionError(kind)


@pytest.fixture
async def sink() -> AsyncIterator[WebhookSink]:
    """A webhook sink on 127.0.0.1 (a module may define its own ``sink`` instead)."""
    async with WebhookSink() as s:
        yield s


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# The dev extra's optional modules that whole test files need (they importorskip them).
OPTIONAL_MODULES = ("a2a.server.request_handlers", "a2a.client", "starlette")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under CI=true, a missing optional module fails the run: CI must never pass by
    skipping the interop tests (elsewhere those files skip, as importorskip says)."""
    if os.environ.get("CI") != "true":
        return
    for name in OPTIONAL_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise pytest.UsageError(
                f"{name} cannot be imported ({exc}); CI=true: install '.[dev]'"
            ) from exc


# ---- PostgreSQL ---------------------------------------------------------------------


def require_postgres() -> str:
    """The test server's DSN. Skips the test when no server answers, except under
    CI=true, where that fails it: CI must never pass by skipping these tests."""
    problem = _postgres_problem()
    if problem is not None:
        reason = (
            f"PostgreSQL at {POSTGRES_DSN} is unreachable ({problem}); start one or set "
            "A2A_PUSH_TEST_POSTGRES_DSN"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the PostgreSQL tests must run)", pytrace=False)
        pytest.skip(reason)
    return POSTGRES_DSN


def postgres_schema() -> str:
    """A fresh schema name for one test (created by the store that uses it), dropped
    when the test ends, so tests never see each other's rows."""
    name = f"a2a_push_test_{uuid.uuid4().hex[:16]}"
    _schemas.append(name)
    return name


@functools.cache
def _postgres_problem() -> str | None:
    async def probe() -> None:
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_DSN, timeout=3)
        await conn.close()

    try:
        run_in_thread(probe)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run_in_thread(work: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine on an event loop of its own, even from inside a running one."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, asyncio.run(work())))
        except BaseException as exc:
            outcome.append((False, exc))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    if not _schemas:
        return
    doomed = list(_schemas)
    _schemas.clear()

    async def drop() -> None:
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_DSN, timeout=3)
        try:
            for name in doomed:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()

    if _postgres_problem() is None:
        run_in_thread(drop)


# ---- values -------------------------------------------------------------------------

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
