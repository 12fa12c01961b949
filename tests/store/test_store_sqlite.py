"""What only a durable backend can show: persistence, encryption at rest, migrations."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from a2a_push.database.sqlite_writer import SQLiteWriter, enable_wal
from a2a_push.errors import SecretDecryptionError, StoreUnavailableError, StoreUnusableError
from a2a_push.store import FsyncCounts, Outcome, SQLiteStore, StoreOptions, generate_key, open_store

from .. import wal_writer_worker
from ..conftest import config, ids

NOW = 1_700_000_000.0
ROWS = 12_288  # 4 KiB blobs for the WAL tests
WRITTEN = ROWS * wal_writer_worker.BLOB
ROOT = Path(__file__).resolve().parents[2]


def raw_bytes(db: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal"):
        f = db.with_name(db.name + suffix)
        if f.exists():
            data += f.read_bytes()
    return data


async def test_secrets_are_encrypted_at_rest(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    token, credentials = "tok-SECRET-1234567890", "cred-SECRET-abcdefghij"
    async with SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])) as store:
        c = await store.put_config(
            config(token=token, auth_scheme="Bearer", auth_credentials=credentials)
        )
        got = await store.get_config_by_key(c.key)
        assert got is not None and got.token == token and got.auth_credentials == credentials
    data = raw_bytes(db)
    assert token.encode() not in data and credentials.encode() not in data
    assert b"Bearer" in data  # the scheme is not secret


async def test_a_deleted_configs_secrets_do_not_linger_in_the_file(tmp_path: Path) -> None:
    # Stored in clear (no key): once deleted, its bytes are overwritten, not left in a
    # free page (the writer sets secure_delete, whatever the build's default).
    db = tmp_path / "push.db"
    token = "tok-CLEAR-0987654321"
    async with SQLiteStore(db) as store:
        await store.put_config(config(id="a", token=token))
        assert await store.delete_config("task-1", "a", "alice")
    # (Closed: the WAL, which held the insert's page, is checkpointed and gone.)
    assert token.encode() not in raw_bytes(db)


async def test_wrong_key_is_an_error_never_plaintext(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    async with SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])) as store:
        c = await store.put_config(config(token="tok"))
    async with SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])) as store:
        with pytest.raises(SecretDecryptionError):
            await store.get_config_by_key(c.key)
    async with SQLiteStore(db) as store:  # no key at all
        with pytest.raises(SecretDecryptionError):
            await store.get_config_by_key(c.key)


async def test_claim_reports_undecryptable_config_instead_of_failing(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    async with SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])) as store:
        await store.put_config(config(token="tok"))
        await store.enqueue("task-1", "task", lambda v: b"{}", new_id=ids(), now=NOW)
    async with SQLiteStore(db, StoreOptions(encryption_keys=[generate_key()])) as store:
        (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
        assert d.config is None and d.config_error is not None
        assert "decrypt" in d.config_error


async def test_key_rotation_and_turning_encryption_on(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    async with SQLiteStore(db) as store:
        c = await store.put_config(config(token="tok-plain"))
    k1, k2 = generate_key(), generate_key()
    async with SQLiteStore(db, StoreOptions(encryption_keys=[k1])) as store:
        with pytest.raises(SecretDecryptionError):
            await store.get_config_by_key(c.key)  # clear rows are refused once a key is set
        assert await store.reencrypt_secrets(previous_keys=None) == 1
    async with SQLiteStore(db, StoreOptions(encryption_keys=[k2, k1])) as store:
        assert (await store.get_config_by_key(c.key)).token == "tok-plain"  # type: ignore[union-attr]
        await store.reencrypt_secrets()
    async with SQLiteStore(db, StoreOptions(encryption_keys=[k2])) as store:
        assert (await store.get_config_by_key(c.key)).token == "tok-plain"  # type: ignore[union-attr]


async def test_everything_survives_reopen(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    async with SQLiteStore(db) as store:
        await store.put_config(config(id="a"))
        await store.enqueue("task-1", "task", lambda v: b"one", new_id=ids(), now=NOW)
        (d,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW)
        await store.complete(
            [
                Outcome(
                    d.id, d.config_key, d.task_id, "retry", attempts=1, next_attempt_at=NOW + 100
                )
            ],
            now=NOW,
        )
        await store.enqueue("task-1", "statusUpdate", lambda v: b"two", new_id=ids(), now=NOW)
    async with SQLiteStore(db) as store:
        assert await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 99) == []
        (again,) = await store.claim_due(10, lease_seconds=30, worker_id="w", now=NOW + 100)
        assert again.body == b"one" and again.attempts == 1
        seq, _ = await store.enqueue("task-1", "x", lambda v: b"3", new_id=ids(), now=NOW)
        assert seq == 3


async def test_migrations_are_versioned_and_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "push.db"
    for _ in range(2):
        async with SQLiteStore(db):
            pass
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_concurrent_publishes_share_commits(tmp_path: Path) -> None:
    import asyncio

    async with SQLiteStore(tmp_path / "push.db") as store:
        for i in range(20):
            await store.put_config(config(f"t{i}", id="a"))
        results = await asyncio.gather(
            *(
                store.enqueue(f"t{i % 20}", "x", lambda v: b"{}", new_id=ids(), now=NOW)
                for i in range(400)
            )
        )
        assert all(len(r[1]) == 1 for r in results)
        seqs: dict[str, list[int]] = {}
        for i, (seq, _) in enumerate(results):
            seqs.setdefault(f"t{i % 20}", []).append(seq)
        assert all(sorted(v) == list(range(1, 21)) for v in seqs.values())
        assert (await store.stats(now=NOW)).pending == 400


async def test_the_writer_counts_the_loop_threads_time_in_its_batches(tmp_path: Path) -> None:
    # What B1 splits the event loop's CPU time by: the store's batches against the rest.
    async with SQLiteStore(tmp_path / "push.db") as store:
        before = store.debug_state()
        assert before["commits"] == 0 and before["busy_seconds"] == 0.0
        loop_cpu = time.thread_time()
        await store.put_config(config("t", id="a"))
        for _ in range(50):
            await store.enqueue("t", "x", lambda v: b"{}", new_id=ids(), now=NOW)
            await asyncio.sleep(0.001)  # the loop idles between batches: not counted
        loop_cpu = time.thread_time() - loop_cpu
        after = store.debug_state()
    assert after["commits"] == 51
    busy = after["busy_seconds"]
    assert isinstance(busy, float) and 0.0 < busy < loop_cpu


async def test_the_writer_times_its_fsyncs_and_counts_the_slow_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an operator reads when publish or delivery latency has rare spikes: the disk's
    # fsyncs (B3 prints them beside its p99s).
    import os

    import a2a_push.database.sqlite_writer as writer_module

    real_fsync = os.fsync
    slow = {"next": False}

    def fsync(fd: int) -> None:
        if slow["next"]:
            slow["next"] = False
            time.sleep(writer_module.SLOW_FSYNC * 1.5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with SQLiteStore(tmp_path / "push.db") as store:
        assert store.debug_state()["fsyncs"] == 0
        await store.put_config(config("t", id="a"))
        for _ in range(5):
            await store.enqueue("t", "x", lambda v: b"{}", new_id=ids(), now=NOW)
        quick = store.debug_state()
        slow["next"] = True
        await store.enqueue("t", "x", lambda v: b"{}", new_id=ids(), now=NOW)
        after = store.debug_state()
    # Each of these commits held a publish or a config write: each was fsynced.
    assert quick["fsyncs"] == quick["commits"] == 6
    assert quick["slow_fsyncs"] == 0 or quick["fsync_max_seconds"] >= writer_module.SLOW_FSYNC
    assert after["fsyncs"] == 7 and after["slow_fsyncs"] == quick["slow_fsyncs"] + 1
    longest, total = after["fsync_max_seconds"], after["fsync_seconds"]
    assert isinstance(longest, float) and isinstance(total, float)
    assert writer_module.SLOW_FSYNC * 1.5 <= longest <= total
    assert store.fsync_counts() == FsyncCounts(7, total, after["slow_fsyncs"], longest)  # type: ignore[arg-type]


async def test_no_fsyncs_are_counted_under_synchronous_normal(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "push.db", synchronous="NORMAL") as store:
        await store.put_config(config("t", id="a"))
        await store.enqueue("t", "x", lambda v: b"{}", new_id=ids(), now=NOW)
        state = store.debug_state()
    assert state["commits"] == 2
    assert state["fsyncs"] == state["slow_fsyncs"] == 0 and state["fsync_seconds"] == 0.0


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path / "a.db"), SQLiteStore)
    assert open_store("sqlite:///rel.db").path == Path("rel.db")  # type: ignore[attr-defined]
    assert open_store("sqlite:////abs/x.db").path == Path("/abs/x.db")  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="sqlite"):
        open_store("sqlite://")
    with pytest.raises(ValueError, match="unsupported"):
        open_store("mysql://x")


async def test_a_write_lock_held_elsewhere_is_waited_for_without_blocking(tmp_path: Path) -> None:
    import asyncio
    import threading
    import time

    db = tmp_path / "push.db"
    async with SQLiteStore(db) as store:
        await store.put_config(config(id="a"))
        assert isinstance(store, SQLiteStore)
        writer = _writer(store)
        # The writer never waits for the lock inside SQLite (on the event loop), but
        # backs off with asyncio and tries again.
        assert writer._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        attempts = 0  # transactions the writer tried to begin
        real_run_batch = writer._run_batch

        def counted(batch):  # type: ignore[no-untyped-def]
            nonlocal attempts
            attempts += 1
            return real_run_batch(batch)

        writer._run_batch = counted  # type: ignore[method-assign]
        locked, release = threading.Event(), threading.Event()

        def other_process_writing() -> None:
            conn = sqlite3.connect(db, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            locked.set()
            release.wait(60)  # released by the test (the timeout only guards against a hang)
            conn.execute("COMMIT")
            conn.close()

        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.002)
                ticks += 1

        holder = threading.Thread(target=other_process_writing)
        holder.start()
        ticking = asyncio.create_task(ticker())
        try:
            assert await asyncio.to_thread(locked.wait, 10)
            publish = asyncio.create_task(
                store.enqueue("task-1", "x", lambda v: b"{}", new_id=ids(), now=NOW)
            )
            # Once the publish has run into the lock, the event loop must keep running
            # other tasks while it waits: the ticker goes on ticking, the publish pending.
            # (Were the wait blocking, the loop would stand still until the lock is free,
            # and the publish would be done before the ticker could tick again.)
            deadline = time.monotonic() + 10
            while attempts == 0:
                assert time.monotonic() < deadline, "the publish never tried to write"
                await asyncio.sleep(0.001)
            ticked_from = ticks
            while ticks < ticked_from + 10:
                assert time.monotonic() < deadline, "the ticker stopped ticking"
                assert not publish.done(), "the publish was not kept waiting for the lock"
                await asyncio.sleep(0.001)
            assert not publish.done()
        finally:
            release.set()
            ticking.cancel()
        seq, delivered_ids = await asyncio.wait_for(publish, 10)
        assert seq == 1 and len(delivered_ids) == 1
        await asyncio.to_thread(holder.join)


def _writer(store: SQLiteStore) -> SQLiteWriter:
    assert store._writer is not None
    return store._writer


async def test_a_failed_write_transaction_fails_its_callers_and_the_writer_goes_on(
    tmp_path: Path,
) -> None:
    import asyncio

    async with SQLiteStore(tmp_path / "push.db") as store:
        await store.put_config(config(id="a"))
        writer = _writer(store)
        real_run_batch = writer._run_batch

        def fails_once(batch):  # type: ignore[no-untyped-def]
            writer._run_batch = real_run_batch  # type: ignore[method-assign]
            raise sqlite3.OperationalError("disk I/O error")  # as at BEGIN on a bad disk

        writer._run_batch = fails_once  # type: ignore[method-assign]
        with pytest.raises(StoreUnavailableError, match="disk I/O error"):
            await asyncio.wait_for(
                store.enqueue("task-1", "x", lambda v: b"{}", new_id=ids(), now=NOW), 5
            )
        seq, queued = await asyncio.wait_for(
            store.enqueue("task-1", "x", lambda v: b"{}", new_id=ids(), now=NOW), 5
        )
        assert seq == 1 and len(queued) == 1  # the failed one left nothing behind


async def test_after_a_failed_fsync_writes_are_refused_not_left_hanging(tmp_path: Path) -> None:
    import asyncio

    async with SQLiteStore(tmp_path / "push.db") as store:
        await store.put_config(config(id="a"))
        writer = _writer(store)
        real_fd = writer._wal_fd
        writer._wal_fd = 1 << 20  # no such descriptor: os.fsync raises OSError (EBADF)
        try:
            with pytest.raises(StoreUnavailableError, match="fsync"):
                await asyncio.wait_for(
                    store.enqueue("task-1", "x", lambda v: b"{}", new_id=ids(), now=NOW), 5
                )
            with pytest.raises(StoreUnavailableError, match="restart"):
                await store.put_config(config("task-2", id="b"))
        finally:
            writer._wal_fd = real_fd


class _FailsFirstCall(ThreadPoolExecutor):
    """An executor whose first job raises OSError (an fsync failing on a disk error)."""

    failed = False

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        if not self.failed:
            self.failed = True

            def fail() -> None:
                raise OSError(5, "Input/output error")

            return super().submit(fail)
        return super().submit(fn, *args, **kwargs)


async def test_writes_queued_behind_a_failed_fsync_are_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import a2a_push.database.sqlite_writer as writer_module

    monkeypatch.setattr(writer_module, "_MAX_BATCH", 1)  # one write per commit and fsync
    async with SQLiteStore(tmp_path / "push.db") as store:
        await store.put_config(config(id="a"))
        writer = _writer(store)
        real = writer._syncer
        writer._syncer = _FailsFirstCall(1)
        try:
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        store.enqueue("task-1", "x", lambda v: b"{}", new_id=ids(), now=NOW)
                        for _ in range(3)
                    ),
                    return_exceptions=True,
                ),
                5,
            )
        finally:
            writer._syncer.shutdown()
            writer._syncer = real
        # The first fsync failed; later ones would succeed, but nothing written after a
        # failed fsync can be promised durable: all three are refused.
        assert all(isinstance(r, StoreUnavailableError) for r in results), results


async def test_a_writer_that_dies_fails_its_callers_and_the_store_still_closes(
    tmp_path: Path,
) -> None:
    import asyncio

    store = SQLiteStore(tmp_path / "push.db")
    await store.open()
    await store.put_config(config(id="a"))

    def bug() -> None:
        raise RuntimeError("a bug in the writer")  # in the middle of a batch

    _writer(store)._check_connection = bug  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError, match="writer stopped"):
        await asyncio.wait_for(store.put_config(config(id="b")), 5)  # the batch in hand
    with pytest.raises(StoreUnavailableError, match="writer stopped"):
        await asyncio.wait_for(store.put_config(config(id="c")), 5)  # later writes
    await asyncio.wait_for(store.close(), 5)


class _LockTakenAt:
    """The writer's connection, but its ``n``-th BEGIN IMMEDIATE finds the database
    locked by another process (once)."""

    def __init__(self, conn: sqlite3.Connection, n: int) -> None:
        self._conn, self._n = conn, n

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "BEGIN IMMEDIATE":
            self._n -= 1
            if self._n == 0:
                raise sqlite3.OperationalError("database is locked")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


async def test_a_write_that_finds_the_lock_taken_in_the_one_by_one_fallback_is_retried(
    tmp_path: Path,
) -> None:
    import asyncio

    async with SQLiteStore(tmp_path / "push.db") as store:
        await store.put_config(config(id="a"))
        writer = _writer(store)
        real = writer._conn
        # BEGINs: 1 the batch (op "bad" fails, rolled back), 2 "bad" alone, 3 "good"
        # alone: another process holds the lock just then.
        writer._conn = _LockTakenAt(real, 3)  # type: ignore[assignment]

        def bad(conn: sqlite3.Connection) -> None:
            raise ValueError("bad op")

        def good(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT count(*) FROM configs").fetchone()[0])

        try:
            results = await asyncio.wait_for(
                asyncio.gather(store._write(bad), store._write(good), return_exceptions=True), 5
            )
        finally:
            writer._conn = real
        assert isinstance(results[0], ValueError)  # its own error, not a lock error
        assert results[1] == 1  # retried once the lock was free, not failed


async def test_a_closed_store_says_so_and_is_not_opened_again(tmp_path: Path) -> None:
    """Like the PostgreSQL store: after close(), open() refuses (it used to return as if
    open, and every write then failed with 'not open (call open() first)')."""
    from a2a_push.errors import StoreClosedError

    store = SQLiteStore(tmp_path / "push.db")
    with pytest.raises(StoreClosedError, match=r"not open \(call open\(\) first\)"):
        await store.get_config("t", "c", "alice")
    await store.open()
    await store.put_config(config("t1", id="c1"))
    await store.close()
    with pytest.raises(StoreClosedError, match="was closed and cannot be opened again"):
        await store.open()
    with pytest.raises(StoreClosedError, match=r"the SQLite store was closed$"):
        await store.put_config(config("t1", id="c2"))
    with pytest.raises(StoreClosedError, match=r"the SQLite store was closed$"):
        await store.get_config("t1", "c1", "alice")
    again = SQLiteStore(tmp_path / "push.db")  # a new one opens the same file
    await again.open()
    try:
        kept = await again.get_config("t1", "c1", "alice")
        assert kept is not None and kept.id == "c1"
    finally:
        await again.close()


async def test_an_error_that_would_recur_is_not_called_an_outage(tmp_path: Path) -> None:
    """StoreUnavailableError means "try again later" (a dispatcher leaves the delivery to
    its lease, a service answers 503): only for a file that cannot be written now. A
    missing table would fail the same way every time: it reaches the caller as itself."""
    store = SQLiteStore(tmp_path / "push.db")
    await store.open()
    try:
        other = sqlite3.connect(tmp_path / "push.db")
        other.execute("ALTER TABLE configs RENAME TO configs_gone")
        other.commit()
        other.close()
        with pytest.raises(sqlite3.OperationalError, match="no such table") as caught:
            await store.put_config(config("t1", id="c1"))
        assert not isinstance(caught.value, StoreUnavailableError)
    finally:
        await store.close()


async def test_the_wal_starts_over_while_writes_keep_coming(tmp_path: Path) -> None:
    """A checkpoint that runs alongside writes never catches up with them, and SQLite
    reuses the WAL from its start only once all of it is copied: without the writer's
    own catch-up, the WAL would hold everything written (here 48 MiB) until writes stop."""
    db = tmp_path / "steady.db"
    wal_writer_worker.create(db)
    result = await wal_writer_worker.write_steadily(db, ROWS)
    assert result.writer_restarts >= 2
    assert result.header_restarts >= 2
    assert result.largest_wal < WRITTEN, f"the WAL grew to {result.largest_wal:,} bytes"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == ROWS


async def test_the_wal_starts_over_with_two_processes_writing(tmp_path: Path) -> None:
    """As the receiver's workers do: each process's writer catches up with a RESTART
    checkpoint, which holds the other's writes off until the WAL is copied (a PASSIVE
    one would never finish while the other process writes)."""
    import asyncio
    import json
    import sys

    db = tmp_path / "shared.db"
    wal_writer_worker.create(db)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.wal_writer_worker",
            str(db),
            str(ROWS // 2),
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        for _ in range(2)
    ]
    outputs = [await asyncio.wait_for(p.communicate(), 150) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    results = [json.loads(out) for out, _ in outputs]
    assert max(r["header_restarts"] for r in results) >= 2
    largest = max(r["largest_wal"] for r in results)
    assert largest < WRITTEN, f"the WAL grew to {largest:,} bytes"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == ROWS


def test_a_catch_up_starts_the_wal_over_while_another_connection_keeps_writing(
    tmp_path: Path,
) -> None:
    """The catch-up holds other connections' (processes') writes off until the WAL is
    copied, then makes the first write of the new WAL itself."""
    import threading
    import time

    from a2a_push.database.sqlite_writer import _restart_wal, prepare_writer_connection

    db = tmp_path / "shared.db"
    wal_writer_worker.create(db)
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    prepare_writer_connection(conn)
    stop = threading.Event()
    written = threading.Event()

    def other_process() -> None:
        other = sqlite3.connect(db, isolation_level=None, timeout=10)
        try:
            while not stop.is_set():
                other.execute("INSERT INTO t (v) VALUES (randomblob(4096))")
                written.set()
                time.sleep(0.001)  # a group-commit writer's pause between commits
        finally:
            other.close()

    writing = threading.Thread(target=other_process)
    writing.start()
    starts: list[int] = []
    try:
        assert written.wait(10)
        for _ in range(5):
            before = wal_writer_worker.wal_restarts(db, settled=True)
            assert _restart_wal(conn)
            # When the other connection held the write lock right after the checkpoint,
            # its commit starts the new WAL: that may end a moment after we return.
            deadline = time.monotonic() + 5
            while (
                wal_writer_worker.wal_restarts(db, settled=True) == before
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            starts.append(wal_writer_worker.wal_restarts(db, settled=True) - before)
    finally:
        stop.set()
        writing.join()
        conn.close()
    assert all(n >= 1 for n in starts), starts


async def test_writers_leave_checkpoints_off_the_event_loop(tmp_path: Path) -> None:
    """Both SQLite stores write through connections that never checkpoint in a commit
    (that would copy the WAL and fsync the database on the event loop) and that cut a
    WAL file which has started over down to a bounded size."""
    from receiver.sqlite_store import SQLiteReceiverStore

    async with SQLiteStore(tmp_path / "push.db") as store:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 * 1024 * 1024
    receiver_store = SQLiteReceiverStore(tmp_path / "receiver.db")
    await receiver_store.open()
    try:
        conn = receiver_store._db()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 64 * 1024 * 1024
    finally:
        await receiver_store.close()


async def test_a_store_closed_while_its_task_is_being_cancelled_closes_everything(
    tmp_path: Path,
) -> None:
    """Shutdowns close stores from a task being cancelled (a finally block): close()
    must not take that cancellation for its own and stop halfway, leaving the
    connection and its threads open (a gateway then never exits)."""
    import asyncio

    store = SQLiteStore(tmp_path / "push.db")
    await store.open()
    await store.put_config(config(id="a"))
    running = asyncio.Event()

    async def owner() -> None:
        try:
            running.set()
            await asyncio.sleep(3600)
        finally:
            await store.close()

    task = asyncio.create_task(owner())
    await running.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    conn = store._conn
    assert conn is not None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")  # closed


async def test_opening_waits_for_another_process_switching_a_new_file_to_wal(
    tmp_path: Path,
) -> None:
    # Processes opening a new file together: while one holds the file (as its switch to
    # WAL does), another's switch was refused at once ("database is locked").
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.3, holder.execute, ("COMMIT",))
    timer.start()
    store = SQLiteStore(path)
    try:
        await store.open()
        assert (await store.stats()).pending == 0
    finally:
        timer.join()
        await store.close()
        holder.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_database_that_cannot_use_wal_is_refused_clearly() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(StoreUnusableError, match="WAL mode"):
            enable_wal(conn)
    finally:
        conn.close()


async def test_a_write_queued_during_a_catch_up_runs_even_when_close_comes_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer returned once closed, after its between-batches catch-up, with the
    # write queued meanwhile still queued: its caller (a publish) waited for ever.
    import time

    from a2a_push.database import sqlite_writer

    real = sqlite_writer._restart_wal

    def slow_restart(conn: sqlite3.Connection) -> bool:
        time.sleep(0.3)  # a long checkpoint (a slow disk)
        return real(conn)

    monkeypatch.setattr(sqlite_writer, "_restart_wal", slow_restart)
    store = SQLiteStore(tmp_path / "push.db")
    await store.open()
    writer = store._writer
    assert writer is not None
    writer._catch_up = True  # as the checkpoint loop does once the WAL is large
    writer._wake.set()
    await asyncio.sleep(0.05)  # the writer is in its catch-up now
    put = asyncio.create_task(store.put_config(config(id="late")))
    await asyncio.sleep(0.01)
    await store.close()
    stored = await asyncio.wait_for(put, 5)
    assert stored.id == "late"


@pytest.mark.parametrize("name", [":memory:", ""])
def test_an_in_memory_name_is_refused_with_the_store_to_use(name: str) -> None:
    # It used to leave an empty file named ":memory:" in the working directory, then
    # fail to switch to WAL mode.
    with pytest.raises(ValueError, match=r"MemoryStore\(\)"):
        SQLiteStore(name)


async def test_a_catch_up_kept_from_finishing_is_tried_again_soon(tmp_path: Path) -> None:
    """A reader in the WAL keeps a catch-up from starting it over. The writer tries again
    within milliseconds once the reader is gone, not at its next checkpoint (here 60 s
    away, as a second is by default: two processes writing flat out would grow the WAL
    by tens of MiB meanwhile)."""
    from a2a_push.database.sqlite_writer import prepare_writer_connection

    db = tmp_path / "held.db"
    wal_writer_worker.create(db)
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    prepare_writer_connection(conn)
    writer = SQLiteWriter(
        conn, f"{db}-wal", durable=False, name="held", checkpoint_every=60, wal_catch_up_bytes=1
    )
    writer.start()
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        for _ in range(20):
            await writer.write(lambda c: c.execute("INSERT INTO t (v) VALUES (zeroblob(4096))"))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchone()  # holds its snapshot in the WAL
        writer._catch_up = True  # what the checkpoint loop sets past wal_catch_up_bytes
        await writer.write(lambda c: c.execute("INSERT INTO t (v) VALUES (zeroblob(4096))"))
        await asyncio.sleep(0.4)
        assert writer.wal_restarts == 0  # the reader kept every try from finishing
        reader.execute("COMMIT")
        started = time.monotonic()
        for _ in range(300):  # 3 s at most
            if writer.wal_restarts:
                break
            await asyncio.sleep(0.01)
        assert writer.wal_restarts == 1, "not tried again"
        assert time.monotonic() - started < 1.5  # the waits double from 10 ms
    finally:
        reader.close()
        await writer.close()
        conn.close()
