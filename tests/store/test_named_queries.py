"""The named-query files: fragments (``-- name: _x`` blocks) included as ``{{_x}}``."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_push.database import queries


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_shipped_queries_have_their_fragments_expanded(backend: str) -> None:
    named = queries(backend)
    assert not [name for name in named if name.startswith("_")]  # fragments are no queries
    assert not [name for name, sql in named.items() if "{{" in sql or "}}" in sql]
    # The claim queries read the delivery and config columns RowMapping maps, all of them.
    claims = ("due_lanes",) if backend == "sqlite" else ("claim_lanes", "finish_and_lease_many")
    for name in (*claims, "deliveries_with_configs"):
        sql = named[name]
        assert "d.traceparent" in sql and "c.created_at AS c_created_at" in sql, name
        assert "-- A fragment" not in sql, name  # the fragment's comment stays behind


def _package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, sql: str, shared: str = ""
) -> str:
    root = tmp_path / name
    (root / "sqlite").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sqlite" / "queries.sql").write_text(sql)
    if shared:
        (root / "fragments.sql").write_text(shared)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_fragment_is_included_where_it_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(
        tmp_path,
        monkeypatch,
        "named_queries_ok",
        "-- name: _cols\n-- the columns\na, b\n\n"
        "-- name: one\nSELECT {{_cols}} FROM t;\n\n"
        "-- name: two\nSELECT x, {{_cols}} FROM u WHERE {{_cols}} IS NOT NULL;\n",
    )
    assert queries("sqlite", package) == {
        "one": "SELECT a, b FROM t",
        "two": "SELECT x, a, b FROM u WHERE a, b IS NOT NULL",
    }


def test_fragments_shared_by_every_backend_come_from_fragments_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(
        tmp_path,
        monkeypatch,
        "named_queries_shared",
        "-- name: _mine\nz\n\n-- name: one\nSELECT {{_cols}}, {{_mine}} FROM t;\n",
        shared="-- shared\n\n-- name: _cols\n-- the columns\na, b\n\n-- name: _mine\nnot used\n",
    )
    # The backend's own fragment wins over a shared one of the same name.
    assert queries("sqlite", package) == {"one": "SELECT a, b, z FROM t"}


def test_an_unknown_fragment_is_refused_with_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _package(
        tmp_path, monkeypatch, "named_queries_bad", "-- name: one\nSELECT {{_nope}} FROM t;\n"
    )
    with pytest.raises(ValueError, match="no fragment named '_nope'"):
        queries("sqlite", package)
