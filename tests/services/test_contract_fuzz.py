"""Both services fuzzed against their own OpenAPI documents: a live gateway process on
PostgreSQL and a live receiver process, every operation of each ``/openapi.json``, with
requests generated from the document (schemathesis, on hypothesis), bounded in examples
and time. For every request: no 5xx, the status, content type and body are the ones the
document gives, and a refused request (4xx) changed nothing stored.

The totals (operations, examples, failures) are printed at the end of each test
(``pytest -s`` shows them)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..conftest import postgres_schema, require_postgres, run_in_thread
from ..gateway_support import ADMIN_KEY, AGENT_KEY, free_port

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES = 20  # per operation
SECONDS = 45.0  # per service, whatever the examples: the fuzzing stops by itself
CLIENT_KEY = "fuzz-client-key-0123456789"


@contextmanager
def _process(argv: list[str], ready: str, log: Path, env: dict[str, str]) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while ready not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text(errors="replace")[-3000:]


def _fuzz(
    base_url: str,
    headers_for: Callable[[Any], dict[str, str]],
    stored: Callable[[], str],
) -> dict[str, Any]:
    """Every operation of the service's document, ``EXAMPLES`` cases each (fewer once
    ``SECONDS`` have gone by); the totals, with the failures as text."""
    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    started = time.monotonic()
    totals: dict[str, Any] = {"operations": 0, "examples": 0, "refused": 0, "failures": []}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() == "HEAD":
            continue  # aiohttp's HEAD of each GET: the GET is fuzzed
        if operation.label == "GET /events":
            # A stream that stays open: each call would wait out its timeout. Its frames
            # are checked against the document in test_openapi.py.
            continue
        totals["operations"] += 1
        _fuzz_operation(operation, base_url, headers_for(operation), stored, started, totals)
    return totals


def _fuzz_operation(
    operation: Any,
    base_url: str,
    headers: dict[str, str],
    stored: Callable[[], str],
    started: float,
    totals: dict[str, Any],
) -> None:
    from hypothesis import HealthCheck, Phase, given, settings

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: Any) -> None:
        if time.monotonic() - started > SECONDS:
            return
        totals["examples"] += 1
        totals.setdefault("per_operation", {}).setdefault(operation.label, 0)
        totals["per_operation"][operation.label] += 1
        before = stored()
        response = case.call(base_url=base_url, headers=headers, timeout=10)
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as exc:  # a failed check: recorded, the fuzzing goes on
            totals["failures"].append(f"{case.method} {case.path}: {exc}"[:2000])
        if 400 <= response.status_code < 500:
            totals["refused"] += 1
            after = stored()
            if after != before:
                changed = sorted(set(after.split(",")) - set(before.split(",")))
                totals["failures"].append(
                    f"{case.method} {case.formatted_path} was refused with "
                    f"{response.status_code} and changed what is stored "
                    f"({', '.join(c.split(':')[0] for c in changed)}): {response.text[:200]}"
                )

    run()


def _report(service: str, totals: dict[str, Any]) -> None:
    print(
        f"\n{service}: {totals['operations']} operations, {totals['examples']} examples "
        f"({totals['refused']} refused), {len(totals['failures'])} failures"
    )
    for label, count in sorted(totals.get("per_operation", {}).items()):
        print(f"  {count:4d}  {label}")
    assert totals["failures"] == [], "\n".join(totals["failures"][:20])
    assert totals["operations"] > 5 and totals["examples"] > totals["operations"]


@contextmanager
def _postgres_digest(dsn: str, schema: str) -> Iterator[Callable[[], str]]:
    """What the schema holds, as text, read over one connection kept open on an event
    loop of its own (a connection per read cost more than the requests fuzzed)."""
    import asyncpg

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(work, loop).result(30)

    async def connect() -> Any:
        return await asyncpg.connect(dsn, server_settings={"search_path": schema})

    async def digest() -> str:
        tables = [
            r[0]
            for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = $1 ORDER BY table_name",
                schema,
            )
        ]
        if not tables:
            return ""
        # One query for every table; the names come from the catalogue of this test's
        # own schema.
        row = await conn.fetchrow(
            "SELECT "
            + ", ".join(
                f"(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                f'FROM "{table}" t)'
                for table in tables
            )
        )
        return ",".join(f"{table}:{rows}" for table, rows in zip(tables, row, strict=True))

    try:
        conn = on_loop(connect())
        try:
            yield lambda: str(on_loop(digest()))
        finally:
            on_loop(conn.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _sqlite_digest(path: Path) -> Callable[[], str]:
    def digest() -> str:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            hashed = hashlib.sha256()
            for table in tables:
                # The names come from the file's own catalogue.
                for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                    hashed.update(repr((table, row)).encode())
            return hashed.hexdigest()
        finally:
            conn.close()

    return digest


def test_the_gateway_on_postgresql_answers_as_its_document_says(tmp_path: Path) -> None:
    dsn = require_postgres()
    schema = postgres_schema()

    async def create() -> None:
        import asyncpg

        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'CREATE SCHEMA "{schema}"')
        finally:
            await conn.close()

    run_in_thread(create)
    port = free_port()
    argv = [sys.executable, "-m", "a2a_push", "gateway", "--port", str(port)]
    argv += ["--database", f"{dsn}?search_path={schema}", "--data-dir", str(tmp_path / "d")]
    argv += ["--admin-key", ADMIN_KEY, "--agent-key", f"fuzz:{AGENT_KEY}"]
    argv += ["--log-level", "WARNING"]

    def headers_for(operation: Any) -> dict[str, str]:
        key = ADMIN_KEY if operation.path.startswith("/admin") else AGENT_KEY
        return {"Authorization": f"Bearer {key}"}

    with (
        _process(argv, "listening on", tmp_path / "gateway.log", dict(os.environ)),
        _postgres_digest(dsn, schema) as stored,
    ):
        totals = _fuzz(f"http://127.0.0.1:{port}", headers_for, stored)
    _report("gateway (PostgreSQL)", totals)


def test_the_receiver_answers_as_its_document_says(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "receiver"
    argv = [sys.executable, "-m", "receiver", "--port", str(port), "--data-dir", str(data)]
    argv += ["--agent", "http://127.0.0.1:9/", "--log-level", "WARNING"]
    env = dict(os.environ, A2A_RECEIVER_API_KEYS=f"fuzz:{CLIENT_KEY}")

    def headers_for(operation: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {CLIENT_KEY}"}

    with _process(argv, "receiver: webhooks at", tmp_path / "receiver.log", env):
        totals = _fuzz(
            f"http://127.0.0.1:{port}", headers_for, _sqlite_digest(data / "receiver.db")
        )
    _report("receiver", totals)
