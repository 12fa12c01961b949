"""The dead-letter hint and the deliveries help name the database as the commands take it."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2a_push.cli import main
from a2a_push.delivery.dispatcher import dead_letter_hint
from a2a_push.store import MemoryStore, SQLiteStore


def test_the_hint_for_a_sqlite_outbox_gives_its_path(tmp_path: Path) -> None:
    path = tmp_path / "my data" / "outbox.db"
    hint = dead_letter_hint(SQLiteStore(path))
    assert hint.startswith(
        f"`a2a-push deliveries list --state dead --database '{path}'` lists dead letters "
        f"(in the SQLite file {path.resolve()}) and `a2a-push deliveries replay --database "
        f"'{path}' ID` sends one again"
    )


def test_the_hint_for_postgres_hides_the_password_and_says_so() -> None:
    pytest.importorskip("asyncpg")
    from a2a_push.store.postgres import PostgresStore

    store = PostgresStore("postgresql://gw:s3cret@db.example:5433/outbox?sslmode=require")
    hint = dead_letter_hint(store)
    assert "s3cret" not in hint
    assert (
        "`a2a-push deliveries list --state dead --database "
        "'postgresql://gw:***@db.example:5433/outbox?sslmode=require'`"
    ) in hint
    assert hint.endswith("(*** stands for the database password)")


def test_the_hint_for_a_memory_store_says_the_commands_cannot_read_it() -> None:
    assert dead_letter_hint(MemoryStore()) == (
        "dead letters are kept in memory (nothing kept after exit): the a2a-push commands "
        "cannot read them"
    )


def test_deliveries_help_and_errors_show_the_postgres_form(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    form = "postgresql://user[:password]@host[:port]/database"
    assert main(["deliveries", "--help"]) == 0
    assert form in " ".join(capsys.readouterr().out.split())
    assert main(["deliveries", "list", "--help"]) == 0
    assert form in " ".join(capsys.readouterr().out.split())
    monkeypatch.delenv("A2A_PUSH_DATABASE", raising=False)
    assert main(["deliveries", "list"]) == 2
    assert form in capsys.readouterr().err
