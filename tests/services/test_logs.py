"""Service logging: asyncpg's reconnect warnings stay one line each."""

from __future__ import annotations

import logging

import pytest

from a2a_push import logs


def test_asyncpg_pool_warnings_lose_their_traceback_not_their_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logs.configure("WARNING")
    caplog.set_level(logging.WARNING)
    try:
        raise ConnectionRefusedError("connect call failed ('127.0.0.1', 5432)")
    except ConnectionRefusedError:
        logging.getLogger("asyncpg.pool").warning(
            "Failed to restore the pool; retrying", exc_info=True
        )
        logging.getLogger("a2a_push.other").warning("kept whole", exc_info=True)
    pool, other = caplog.records[-2:]
    assert pool.exc_info is None
    assert pool.getMessage() == (
        "Failed to restore the pool; retrying "
        "(ConnectionRefusedError: connect call failed ('127.0.0.1', 5432))"
    )
    assert other.exc_info is not None  # only asyncpg's pool is trimmed


def test_serving_announces_and_freezes_what_startup_allocated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import gc

    try:
        logs.serving("gateway: listening on 127.0.0.1:1")
        assert gc.get_freeze_count() > 0
        assert capsys.readouterr().out == "gateway: listening on 127.0.0.1:1\n"
    finally:
        gc.unfreeze()
