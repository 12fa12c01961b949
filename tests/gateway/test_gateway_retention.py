"""Gateway upkeep: finished tasks are forgotten after task_retention_days (in batches,
never a task that still has push configs), retired signing keys past their grace are
deleted; on SQLite and PostgreSQL. Time is driven by ``now`` and by old timestamps
written directly, never by waiting."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from a2a_push.gateway.app import Gateway
from a2a_push.gateway.settings import GatewaySettingsError, load_gateway_settings
from a2a_push.gateway.state import GatewayState, PostgresGatewayState, SQLiteGatewayState
from a2a_push.protocol.types import TaskState, TaskStatus
from a2a_push.store import StoredConfig

from ..conftest import postgres_schema, require_postgres
from ..gateway_support import gateway_settings

DAY = 86400.0
TERMINAL = (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED)
LIVE = (
    TaskState.SUBMITTED,
    TaskState.WORKING,
    TaskState.INPUT_REQUIRED,
    TaskState.AUTH_REQUIRED,
)


def _status(state: TaskState) -> dict[str, Any]:
    return TaskStatus(state=state).to_json_dict()


async def _age(state: GatewayState, task_id: str, updated_at: float) -> None:
    """Make a task's last update ``updated_at`` (as if written then)."""
    if isinstance(state, SQLiteGatewayState):
        state._db().execute(
            "UPDATE gateway_tasks SET updated_at = ? WHERE task_id = ?", (updated_at, task_id)
        )
        return

    async def op(conn: Any) -> None:
        await conn.execute(
            "UPDATE gateway_tasks SET updated_at = $1 WHERE task_id = $2", updated_at, task_id
        )

    assert isinstance(state, PostgresGatewayState)
    await state._run(op)


async def _retire(state: GatewayState, kid: str, retired_at: float) -> None:
    if isinstance(state, SQLiteGatewayState):
        state._db().execute(
            "UPDATE gateway_signing_keys SET retired_at = ? WHERE kid = ?", (retired_at, kid)
        )
        return

    async def op(conn: Any) -> None:
        await conn.execute(
            "UPDATE gateway_signing_keys SET retired_at = $1 WHERE kid = $2", retired_at, kid
        )

    assert isinstance(state, PostgresGatewayState)
    await state._run(op)


@pytest.fixture(params=["sqlite", "postgres"])
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    """A started gateway (its outbox and state open) on SQLite or PostgreSQL."""
    if request.param == "sqlite":
        database = str(tmp_path / "outbox.db")
    else:
        dsn = require_postgres()
        schema = postgres_schema()
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        finally:
            await conn.close()
        database = f"{dsn}?search_path={schema}"  # the schema is dropped by conftest
    gw = Gateway(gateway_settings(database))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def test_old_terminal_tasks_are_purged_live_and_recent_ones_kept(gateway: Gateway) -> None:
    state, now = gateway.state, time.time()
    for s in TERMINAL + LIVE:
        await state.claim_task(f"old-{s.name}", "agent-a", context_id="c", status=_status(s))
        await _age(state, f"old-{s.name}", now - 8 * DAY)
        await state.claim_task(f"new-{s.name}", "agent-a", context_id="c", status=_status(s))
        await _age(state, f"new-{s.name}", now - 6 * DAY)
    await state.claim_task("no-status", "agent-a")  # claimed by a config, never posted
    await _age(state, "no-status", now - 30 * DAY)

    assert await gateway.purge_finished_tasks(now=now) == len(TERMINAL)
    for s in TERMINAL:
        assert await state.owner(f"old-{s.name}") is None
        assert await state.owner(f"new-{s.name}") is not None
    for s in LIVE:
        assert await state.owner(f"old-{s.name}") is not None
    assert await state.owner("no-status") is not None
    assert await gateway.purge_finished_tasks(now=now) == 0
    # Two days later the recent ones are past their 7 days too.
    assert await gateway.purge_finished_tasks(now=now + 2 * DAY) == len(TERMINAL)


async def test_a_purged_task_id_is_a_new_task_first_come(gateway: Gateway) -> None:
    state, now = gateway.state, time.time()
    await gateway.record("agent-a", "t1", _status(TaskState.COMPLETED), "ctx")
    assert not await gateway.owns("agent-b", "t1")
    await _age(state, "t1", now - 8 * DAY)
    assert await gateway.purge_finished_tasks(now=now) == 1
    assert await gateway.known_task("t1", "agent-a/default") is None  # Get/List: not found
    # Another agent names it first: it is its task now, and the old owner's is refused.
    found = await gateway.record("agent-b", "t1", _status(TaskState.WORKING), "ctx-b")
    assert found is not None and found.agent_id == "agent-b"
    assert found.status == _status(TaskState.WORKING)
    assert await gateway.record("agent-a", "t1", None, None) is None
    assert not await gateway.owns("agent-a", "t1")
    assert await gateway.known_task("t1", "agent-b/default") is not None


async def test_a_task_with_push_configs_keeps_its_owner(gateway: Gateway) -> None:
    state, now = gateway.state, time.time()
    for task in ("configured", "bare"):
        await gateway.record("agent-a", task, _status(TaskState.COMPLETED), "ctx")
        await _age(state, task, now - 8 * DAY)
    config = StoredConfig(
        key="k1",
        id="cfg",
        task_id="configured",
        owner="agent-a/default",
        url="https://example.com/hook",
        protocol_version="1.0",
        created_at=now,
    )
    await gateway.notifier.store.put_config(config)
    assert await gateway.purge_finished_tasks(now=now) == 1
    assert await state.owner("bare") is None
    # Another agent cannot take it over and have its events sent to these configs.
    assert (await state.owner("configured")) is not None
    assert await gateway.record("agent-b", "configured", None, None) is None
    await gateway.notifier.store.delete_config("configured", "cfg", "agent-a/default")
    assert await gateway.purge_finished_tasks(now=now) == 1


async def test_the_purge_deletes_in_batches(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    state, now = gateway.state, time.time()
    for i in range(25):
        await state.claim_task(f"t{i}", "agent-a", status=_status(TaskState.FAILED))
        await _age(state, f"t{i}", now - 10 * DAY)
    calls: list[int] = []
    purge = state.purge_tasks

    async def counting(*, updated_before: float, limit: int = 1000) -> int:
        deleted = await purge(updated_before=updated_before, limit=limit)
        assert deleted <= limit
        calls.append(deleted)
        return deleted

    state.purge_tasks = counting  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="a2a_push.gateway.app"):
        assert await gateway.purge_finished_tasks(now=now, batch=10) == 25
    assert calls == [10, 10, 5]
    lines = [r.getMessage() for r in caplog.records if "purged" in r.getMessage()]
    assert lines == ["purged 25 finished task(s) last updated over 7 day(s) ago"]
    # The state's own limit, statement by statement.
    for i in range(3):
        await state.claim_task(f"u{i}", "agent-a", status=_status(TaskState.CANCELED))
        await _age(state, f"u{i}", now - 10 * DAY)
    assert await purge(updated_before=now, limit=2) == 2
    assert await purge(updated_before=now, limit=2) == 1


async def test_retention_0_or_null_keeps_tasks_for_ever(tmp_path: Path) -> None:
    for value in (0, None):
        settings = gateway_settings(str(tmp_path / f"{value}.db"), task_retention_days=value)
        gw = Gateway(settings)
        await gw.start()
        try:
            await gw.record("agent-a", "t", _status(TaskState.COMPLETED), "c")
            await _age(gw.state, "t", 0.0)
            assert await gw.purge_finished_tasks() == 0
            assert await gw.state.owner("t") is not None
        finally:
            await gw.stop()


async def test_retired_keys_past_their_grace_are_pruned(gateway: Gateway) -> None:
    state, now = gateway.state, time.time()
    grace = gateway._keyset.grace_period
    first = gateway._keyset.active.kid
    await state.rotate_key()
    second = (await state.load_keys())[-1].kid
    await state.rotate_key()
    active = (await state.load_keys())[-1].kid
    await _retire(state, first, now - grace - 60)  # past its grace
    await _retire(state, second, now - grace + 60)  # still published
    await gateway.reload_keys()
    assert {k.kid for k in gateway._keyset.keys} == {first, second, active}

    assert await gateway.prune_keys(now=now) == [first]
    assert [k.kid for k in await state.load_keys()] == [second, active]
    # Dropped from memory too; the JWKS still has the active key and the one in grace.
    assert {k.kid for k in gateway._keyset.keys} == {second, active}
    assert gateway._keyset.active.kid == active
    assert {k["kid"] for k in gateway.notifier.jwks()["keys"]} == {second, active}
    assert await gateway.prune_keys(now=now) == []
    # Once its grace is over, the second goes too; the active key never does.
    assert await gateway.prune_keys(now=now + 3600 + grace) == [second]
    assert [k.kid for k in await state.load_keys()] == [active]


async def test_the_upkeep_runs_at_start_and_survives_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = str(tmp_path / "outbox.db")
    # One issuer across the restarts (a new one is warned about, and this test counts
    # the warnings).
    issuer = {"public_url": "http://gateway.test"}
    gw = Gateway(gateway_settings(database, task_retention_days=0, **issuer))  # it keeps them
    await gw.start()
    await gw.record("agent-a", "old", _status(TaskState.COMPLETED), "c")
    await _age(gw.state, "old", time.time() - 8 * DAY)
    await gw.stop()

    # At start: the background job forgets it, with one line saying how many.
    gw = Gateway(gateway_settings(database, **issuer))
    with caplog.at_level(logging.INFO, logger="a2a_push.gateway.app"):
        await gw.start()
        try:
            await asyncio.wait_for(_until(lambda: gw.state.owner("old"), None), 30)
        finally:
            await gw.stop()
    assert [r.getMessage() for r in caplog.records if "purged" in r.getMessage()] == [
        "purged 1 finished task(s) last updated over 7 day(s) ago"
    ]
    assert gw._maintenance is None and gw._key_watcher is None
    caplog.clear()

    # A failure is one warning line (no traceback); the job goes on and stops cleanly.
    gw = Gateway(gateway_settings(database, **issuer))
    called = asyncio.Event()

    async def failing(*, updated_before: float, limit: int = 1000) -> int:
        called.set()
        raise sqlite3.OperationalError("disk I/O error")

    gw.state.purge_tasks = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="a2a_push.gateway.app"):
        await gw.start()
        try:
            await asyncio.wait_for(called.wait(), 30)
            await asyncio.wait_for(_until(lambda: _warned(caplog), True), 30)
            assert gw._maintenance is not None and not gw._maintenance.done()
        finally:
            await gw.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "purging finished tasks failed; retrying in an hour (OperationalError: disk I/O error)"
    ]
    assert warnings[0].exc_info is None


async def _warned(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.levelno >= logging.WARNING for r in caplog.records)


async def _until(probe: Any, expected: Any) -> None:
    while await probe() != expected:  # noqa: ASYNC110 (polls the database, no event)
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "Input should be greater than or equal to 0"),
        ("nan", "Input should be a finite number"),
        ("inf", "Input should be a finite number"),
        ("week", "Input should be a valid number"),
    ],
)
def test_a_bad_task_retention_is_refused_naming_it(value: str, message: str) -> None:
    where = "setting task_retention_days (from A2A_GATEWAY_TASK_RETENTION_DAYS): "
    with pytest.raises(GatewaySettingsError, match=re.escape(where + message)):
        load_gateway_settings(environ={"A2A_GATEWAY_TASK_RETENTION_DAYS": value})


def test_task_retention_from_a_file_and_the_environment(tmp_path: Path) -> None:
    assert load_gateway_settings(environ={}).task_retention_days == 7
    assert load_gateway_settings(environ={}).task_retention_seconds == 7 * DAY
    env = {"A2A_GATEWAY_TASK_RETENTION_DAYS": "0.5"}
    assert load_gateway_settings(environ=env).task_retention_seconds == DAY / 2
    never = load_gateway_settings(environ={"A2A_GATEWAY_TASK_RETENTION_DAYS": "0"})
    assert never.task_retention_seconds is None
    config = tmp_path / "gw.toml"
    config.write_text("task_retention_days = 30\n")
    assert load_gateway_settings(config_file=config, environ={}).task_retention_days == 30
    config.write_text('task_retention_days = "soon"\n')
    with pytest.raises(GatewaySettingsError, match="task_retention_days"):
        load_gateway_settings(config_file=config, environ={})
