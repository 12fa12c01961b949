"""The group-commit writer of an SQLite database, shared by the notifier's outbox and
the receiver's store; and ``create_private_file``, how every database file that holds
secrets is created.

All writes are queued and run as one transaction per batch: concurrent writes share one
commit. The statements run on the event loop itself (microseconds each; a second thread
would spend more handing the GIL back and forth than it saves), while making a commit
durable, an ``fsync`` of the WAL file, runs on a worker thread and is awaited only by
batches that need it. Before committing, the writer lets the event loop run for as long
as that keeps adding writes (at most ``_GATHER_TURNS`` turns): under load one commit then
carries many writes, and a commit's cost is mostly the pages it writes, which they share.

Failures never leave a caller waiting: a transaction that cannot start fails its batch
(``StoreUnavailableError``) and the writer goes on; after a failed fsync (the kernel may
have dropped pages that a later fsync would not report) or a connection stuck in a
transaction, every write is refused until the process restarts.

Checkpoints (copying the WAL back into the database file) are the writer's too, since
only it can make the WAL start over. While writes happen, a thread checkpoints every
``_CHECKPOINT_EVERY`` seconds on a connection of its own, alongside the writes; but a
checkpoint that runs alongside writes never catches up with them, and SQLite reuses the
WAL from its start only once everything in it has been copied. So once the WAL holds
more than ``_WAL_CATCH_UP_BYTES``, the writer catches up between two batches, off the
event loop (see ``_restart_wal``): it holds writes off, this process's and any other's,
while it copies what the thread could not (milliseconds; tens on a slow disk), then
starts the WAL over. Without this the WAL grows as long as writes keep coming
(gigabytes under steady load), and so does every reader's work. A catch-up that
other connections kept from finishing is tried again after 10 ms, then 20, 40… up to
the checkpoint interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from ..errors import StoreUnavailableError, StoreUnusableError

T = TypeVar("T")
_Op = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]", bool]
_MAX_BATCH = 512
_GATHER_TURNS = 8
_CHECKPOINT_EVERY: Final = 1.0  # seconds between checkpoints while writes happen
# Past this much WAL the writer catches up, so that the WAL starts over (see above).
_WAL_CATCH_UP_BYTES: Final = 32 * 1024 * 1024
# After it starts over, a WAL file larger than this is truncated to it.
_WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
# How long a catch-up waits for other processes' transactions on the file.
_CATCH_UP_WAIT_MS: Final = 100
# After a catch-up that other connections kept from finishing, the first wait before the
# next try (it doubles with each failure, up to the checkpoint interval).
_CATCH_UP_RETRY: Final = 0.01
# An fsync of the WAL that takes at least this long counts as slow (``debug_state``): it
# holds up every publish of its commit, so it shows in publish and delivery latency.
SLOW_FSYNC: Final = 0.02

log = logging.getLogger("a2a_push.store.sqlite")


def _timed_fsync(fd: int) -> float:
    """fsync ``fd``; the seconds it took (timed on the thread that runs it, so a wait
    for that thread does not count)."""
    started = time.perf_counter()
    os.fsync(fd)
    return time.perf_counter() - started


def enable_wal(conn: sqlite3.Connection, *, wait: float = 5.0) -> None:
    """Put the database file in WAL mode (a setting of the file: later connections find
    it so). The switch needs the file to itself, and SQLite may refuse it as busy without
    waiting when other processes open a new file at the same moment; it is tried again
    for up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    if str(mode).lower() != "wal":
        raise StoreUnusableError(
            f"SQLite could not put the database in WAL mode (its journal mode is {mode}): "
            "use a file on a local file system"
        )


def prepare_writer_connection(conn: sqlite3.Connection) -> None:
    """Settings of the connection a :class:`SQLiteWriter` writes with, in WAL mode, once
    its schema is migrated. Its commits neither fsync (the writer fsyncs the WAL itself,
    off the event loop, for the batches that must be durable), nor wait for a lock, nor
    checkpoint (the writer does, off the event loop): the event loop never blocks on
    any of them. Deleted content is overwritten (secrets of deleted configs, or stored
    in clear before encryption was turned on, do not linger in free pages), whatever
    the SQLite build's default."""
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA busy_timeout = 0")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute(f"PRAGMA journal_size_limit = {_WAL_SIZE_LIMIT}")


class SQLiteWriter:
    """Runs queued write functions on ``conn`` (set up by
    :func:`prepare_writer_connection`) in group commits; fsyncs the WAL at ``wal_path``
    for batches holding a durable write when ``durable``; checkpoints the WAL."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        wal_path: str,
        *,
        durable: bool,
        name: str,
        checkpoint_every: float = _CHECKPOINT_EVERY,
        wal_catch_up_bytes: int = _WAL_CATCH_UP_BYTES,
    ) -> None:
        self._conn = conn
        self._durable = durable
        self._name = name
        self._wal_fd: int | None = None
        self._syncer: ThreadPoolExecutor | None = None
        self._queue: list[_Op] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Set when the writer cannot go on (a failed fsync, the writer stopped): every
        # write then fails with it instead of waiting.
        self._broken: StoreUnavailableError | None = None
        self._in_hand: list[_Op] = []  # the batch being committed
        self._wal_path = wal_path
        self.commits = 0  # batches committed
        # CPU time the event loop's thread spent running batches (their statements and
        # commits), in seconds: against the loop's own CPU time, the store's share.
        self.busy_seconds = 0.0
        # The WAL's fsyncs (on their thread): how many, their time in all, the longest,
        # and how many took SLOW_FSYNC or longer, in seconds: the disk's share of latency.
        self.fsyncs = 0
        self.fsync_seconds = 0.0
        self.fsync_max_seconds = 0.0
        self.slow_fsyncs = 0
        self._checkpoint_every = checkpoint_every
        self._wal_catch_up_bytes = wal_catch_up_bytes
        self._checkpointer: asyncio.Task[None] | None = None
        self._checkpoint_thread: ThreadPoolExecutor | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None  # used on that thread
        self._checkpoint_failing = False
        self._catch_up = False  # the writer checkpoints between its next two batches
        self._catch_up_retry = _CATCH_UP_RETRY
        self._frame_bytes = 4096 + 24  # a WAL frame: a page and its header (see start)
        self.wal_frames = 0  # frames in the WAL at the last checkpoint
        self.wal_restarts = 0  # catch-ups that started the WAL over

    def start(self) -> None:
        self._wal_fd = os.open(self._wal_path, os.O_RDONLY)
        self._syncer = ThreadPoolExecutor(1, thread_name_prefix=f"{self._name}-fsync")
        self._task = asyncio.create_task(self._writer_loop(), name=f"{self._name}-writer")
        self._frame_bytes = 24 + int(self._conn.execute("PRAGMA page_size").fetchone()[0])
        self._checkpoint_thread = ThreadPoolExecutor(
            1, thread_name_prefix=f"{self._name}-checkpoint"
        )
        self._checkpointer = asyncio.create_task(
            self._checkpoint_loop(), name=f"{self._name}-checkpoints"
        )

    async def close(self) -> None:
        """Finish what is queued, then stop (whatever state the writer is in)."""
        self._closed = True
        self._wake.set()
        if self._checkpointer is not None and not self._checkpointer.done():
            # (Done already when the loop it ran in has ended: nothing to wait for.)
            self._checkpointer.cancel()
            # wait() raises neither the loop's cancellation nor its error, and close()
            # is often called while a cancellation is being handled (a shutdown).
            await asyncio.wait([self._checkpointer])
        if self._checkpoint_thread is not None:
            # A checkpoint under way finishes first (it is never cut off midway).
            await asyncio.get_running_loop().run_in_executor(None, self._stop_checkpoints)
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                if not self._task.cancelled():
                    raise  # close() itself was cancelled
                log.error("the SQLite writer had been cancelled; closing anyway")
            except Exception as exc:
                # It already failed every write; the rest must still be closed.
                log.error("the SQLite writer had stopped: %s; closing anyway", exc)
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        if self._syncer is not None:
            self._syncer.shutdown(wait=True)

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, sync: bool = True) -> T:
        """Run ``fn`` in the next group commit; ``sync=False``: its batch needs no fsync
        for it (bookkeeping whose loss on power failure only repeats work)."""
        if self._closed and self._task is not None and self._task.done():
            raise StoreUnavailableError("the SQLite writer is closed")
        if self._broken is not None:
            raise StoreUnavailableError(str(self._broken))
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((fn, fut, sync))
        self._wake.set()
        return await fut

    def debug_state(self) -> dict[str, object]:
        task = self._task
        return {
            "writer_running": task is not None and not task.done(),
            "writer_error": repr(task.exception())
            if task is not None and task.done() and not task.cancelled()
            else None,
            "writer_broken": str(self._broken) if self._broken else None,
            "queued": len(self._queue),
            "commits": self.commits,
            "busy_seconds": self.busy_seconds,
            "fsyncs": self.fsyncs,
            "fsync_seconds": self.fsync_seconds,
            "fsync_max_seconds": self.fsync_max_seconds,
            "slow_fsyncs": self.slow_fsyncs,
            "wake_set": self._wake.is_set(),
            "wal_frames": self.wal_frames,
            "wal_restarts": self.wal_restarts,
            "checkpoints_running": self._checkpointer is not None and not self._checkpointer.done(),
            "checkpoints_failing": self._checkpoint_failing,
        }

    async def _writer_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                await self._gather()
                self._wake.clear()
                while self._queue:
                    batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                    if not await self._commit_batch(batch):
                        # Another connection (another process) holds the write lock: wait
                        # without blocking the event loop, then try the same batch again.
                        self._queue[:0] = batch
                        await asyncio.sleep(0.005)
                    elif self._catch_up:
                        await self._catch_up_checkpoint()
                if self._catch_up:
                    await self._catch_up_checkpoint()
                # (Writes queued during that catch-up are run first: returning with them
                # queued would leave their callers waiting for ever.)
                if self._closed and not self._queue:
                    return
        except BaseException as exc:
            # The writer must never leave a caller waiting: the batch in hand and whatever
            # is queued fail, and so does every later write.
            if self._broken is None:
                self._broken = StoreUnavailableError(
                    f"the SQLite writer stopped ({type(exc).__name__}: {exc}); restart the process"
                )
            stranded, self._queue = self._in_hand + self._queue, []
            _settle(stranded, [(False, self._broken)] * len(stranded))
            raise

    # ---- checkpoints ---------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        """While writes happen: checkpoint on a thread alongside them, and have the writer
        catch up when the WAL has grown past ``wal_catch_up_bytes``."""
        loop = asyncio.get_running_loop()
        seen = self.commits
        while True:
            await asyncio.sleep(self._checkpoint_every)
            if self.commits == seen:
                continue
            seen = self.commits
            try:
                frames = await loop.run_in_executor(
                    self._checkpoint_thread, self._checkpoint_alongside
                )
            except Exception as exc:  # never let checkpoints stop for good
                self._checkpoint_failed(exc)
                continue
            if frames is not None:
                self.wal_frames = frames
                if frames * self._frame_bytes >= self._wal_catch_up_bytes:
                    self._catch_up = True
                    self._wake.set()

    def _checkpoint_alongside(self) -> int | None:
        """On the checkpoint thread: a PASSIVE checkpoint on its own connection (it waits
        for no one); the number of frames in the WAL, or None when it could not run (a
        failure, or another connection's checkpoint under way)."""
        try:
            if self._checkpoint_conn is None:
                path = self._wal_path.removesuffix("-wal")
                self._checkpoint_conn = sqlite3.connect(
                    path, isolation_level=None, check_same_thread=False
                )
            ((busy, frames, _copied),) = self._checkpoint_conn.execute(
                "PRAGMA wal_checkpoint(PASSIVE)"
            ).fetchall()
        except sqlite3.Error as exc:
            self._checkpoint_failed(exc)
            return None
        self._checkpoint_worked()
        return None if busy else int(frames)

    async def _catch_up_checkpoint(self) -> None:
        """Between two batches, on the fsync thread (idle between batches), while this
        process's writes queue: see :func:`_restart_wal`."""
        self._catch_up = False
        if self._broken is not None:
            return
        try:
            restarted = await asyncio.get_running_loop().run_in_executor(
                self._syncer, _restart_wal, self._conn
            )
        except sqlite3.Error as exc:
            self._checkpoint_failed(exc)
            return
        self._checkpoint_worked()
        if restarted:
            self.wal_restarts += 1
            self.wal_frames = 0
            self._catch_up_retry = _CATCH_UP_RETRY
        elif not self._closed:
            # Another process's checkpoint or readers kept it from finishing. Try again
            # soon rather than at the next checkpoint (a second apart by default, and only
            # once one is not itself kept from running): two processes writing flat out
            # grew the WAL by tens of MiB meanwhile. The waits double up to the checkpoint
            # interval, since each try holds this process's writes off for a while.
            delay = self._catch_up_retry
            self._catch_up_retry = min(delay * 2, self._checkpoint_every)
            asyncio.get_running_loop().call_later(delay, self._retry_catch_up)

    def _retry_catch_up(self) -> None:
        if not self._closed and self._broken is None:
            self._catch_up = True
            self._wake.set()

    def _checkpoint_failed(self, exc: Exception) -> None:
        # One line when checkpoints start failing (a full or failing disk), not one a second.
        if not self._checkpoint_failing:
            self._checkpoint_failing = True
            log.warning(
                "%s: a WAL checkpoint failed (%s: %s); trying again every %g s while "
                "writes happen (the WAL file grows meanwhile)",
                self._name,
                type(exc).__name__,
                exc,
                self._checkpoint_every,
            )

    def _checkpoint_worked(self) -> None:
        if self._checkpoint_failing:
            self._checkpoint_failing = False
            log.info("%s: WAL checkpoints work again", self._name)

    def _stop_checkpoints(self) -> None:
        assert self._checkpoint_thread is not None
        self._checkpoint_thread.shutdown(wait=True)
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None

    # ---- batches ---------------------------------------------------------------------

    async def _commit_batch(self, batch: list[_Op]) -> bool:
        """Run and commit one batch and settle its callers; False when the write lock is
        held by another connection (nothing was run)."""
        if self._broken is not None:
            # Nothing more is written once durability cannot be promised, queued or not.
            _settle(batch, [(False, self._broken)] * len(batch))
            return True
        # Cleared only on a normal return: if the writer dies on the way, its handler
        # settles this batch along with the queue.
        self._in_hand = batch
        done = await self._commit_in_hand(batch)
        self._in_hand = []
        return done

    async def _commit_in_hand(self, batch: list[_Op]) -> bool:
        try:
            results = self._run_batch(batch)
        except sqlite3.Error as exc:
            # BEGIN failed (disk I/O error, disk full...): nothing of the batch was
            # committed. Its callers get the error; the writer carries on, unless the
            # connection is stuck in a transaction it cannot roll back.
            log.error("an SQLite write transaction failed: %s", exc)
            _settle(batch, [(False, _unavailable(exc))] * len(batch))
            self._check_connection()
            await asyncio.sleep(0.01)
            return True
        if results is None:
            return False
        self._check_connection()
        self.commits += 1
        # Ops the one-by-one fallback could not start (another process took the lock in
        # between) go back to the front of the queue, to be retried after the back-off.
        retry = [op for op, result in zip(batch, results, strict=True) if result is None]
        if retry:
            self._queue[:0] = retry
            pairs = [(op, r) for op, r in zip(batch, results, strict=True) if r is not None]
            batch, results = [op for op, _ in pairs], [r for _, r in pairs]
        done: list[tuple[bool, Any]] = [r for r in results if r is not None]
        if self._durable and any(sync for _, _, sync in batch):
            try:
                assert self._wal_fd is not None
                loop = asyncio.get_running_loop()
                took = await loop.run_in_executor(self._syncer, _timed_fsync, self._wal_fd)
                self.fsyncs += 1
                self.fsync_seconds += took
                self.fsync_max_seconds = max(self.fsync_max_seconds, took)
                if took >= SLOW_FSYNC:
                    self.slow_fsyncs += 1
            except OSError as exc:
                # After a failed fsync the kernel may have dropped the pages it could not
                # write and a later fsync can still succeed: nothing written from now on
                # could be promised durable. The writes that needed durability fail, the
                # others (already committed) stand, and the store refuses further writes.
                log.critical("fsync of the SQLite WAL failed: %s; refusing writes", exc)
                self._broken = StoreUnavailableError(
                    f"an fsync of the SQLite WAL failed ({exc}); writes are refused until "
                    "the process restarts: check the disk first"
                )
                done = [
                    (False, self._broken) if sync else result
                    for (_, _, sync), result in zip(batch, done, strict=True)
                ]
        _settle(batch, done)
        return True

    async def _gather(self) -> None:
        """Let the event loop run while that keeps queueing writes (see _GATHER_TURNS)."""
        queued = len(self._queue)
        for _ in range(_GATHER_TURNS):
            if queued >= _MAX_BATCH or self._closed:
                return
            await asyncio.sleep(0)
            if len(self._queue) == queued:
                return
            queued = len(self._queue)

    def _run_batch(self, batch: list[_Op]) -> list[tuple[bool, Any] | None] | None:
        """Run a batch as one transaction; None when the write lock is held elsewhere.

        When an op fails, the batch is rolled back and each op runs on its own, so the
        others still commit; an op that could not start then (the lock was taken by
        another process meanwhile) has None for a result."""
        started = time.thread_time()
        try:
            return self._transact(batch)
        finally:
            self.busy_seconds += time.thread_time() - started

    def _transact(self, batch: list[_Op]) -> list[tuple[bool, Any] | None] | None:
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return None
            raise
        try:
            results: list[tuple[bool, Any] | None] = [(True, fn(conn)) for fn, _, _ in batch]
            conn.execute("COMMIT")
            return results
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # a failure here: nothing committed, raised
            failure = exc
        if len(batch) == 1:
            return [(False, failure)]
        # One op failed: run each alone so the others still commit.
        return [self._run_one(conn, fn) for fn, _, _ in batch]

    @staticmethod
    def _run_one(
        conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]
    ) -> tuple[bool, Any] | None:
        """``fn`` in a transaction of its own; None when the lock is held elsewhere."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return None
            return False, exc
        try:
            value = fn(conn)
            conn.execute("COMMIT")
            return True, value
        except Exception as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error as failed:
                    # Reported to this op alone: the ops before it stay committed, and
                    # the writer checks the connection after the batch.
                    return False, failed
            return False, exc

    def _check_connection(self) -> None:
        """After a failure: a connection left inside a transaction is rolled back, or, if
        that fails too, the store stops taking writes (every BEGIN would fail)."""
        conn = self._conn
        if conn is None or not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.critical("SQLite connection stuck in a transaction: %s; refusing writes", exc)
            self._broken = StoreUnavailableError(
                f"the SQLite connection cannot roll back ({exc}); restart the process"
            )


def _restart_wal(conn: sqlite3.Connection) -> bool:
    """Copy the whole WAL back and start it over (the writer's catch-up); False when
    other connections kept it from finishing (then the next catch-up tries again).

    A RESTART checkpoint waits (at most ``_CATCH_UP_WAIT_MS``) for other processes'
    writes and reads of the WAL to end and holds theirs off meanwhile: a PASSIVE one
    would never finish while another process keeps writing. The first write after a
    restart fsyncs the new WAL header, so a no-op write (``user_version`` set to itself)
    makes it here, on this thread, rather than in the next batch on the event loop."""
    conn.execute(f"PRAGMA busy_timeout = {_CATCH_UP_WAIT_MS}")
    try:
        ((busy, _frames, _copied),) = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        if busy:
            return False
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return True  # another process writes first (and syncs the header itself)
            raise
        try:
            ((version,),) = conn.execute("PRAGMA user_version").fetchall()
            conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return True
    finally:
        conn.execute("PRAGMA busy_timeout = 0")


def _settle(batch: Sequence[_Op], results: Sequence[tuple[bool, Any]]) -> None:
    """Hand each queued write its result; SQLite errors that say the file cannot be
    written now (I/O, a full disk, locks) become StoreUnavailableError, which callers
    treat as transient. Others ("no such table", a read-only or corrupt file) stay
    themselves: trying again later would fail the same way."""
    for (_, fut, _sync), (ok, value) in zip(batch, results, strict=True):
        if fut.done():
            continue
        if ok:
            fut.set_result(value)
        elif isinstance(value, sqlite3.OperationalError) and _is_outage(value):
            fut.set_exception(_unavailable(value))
        else:
            fut.set_exception(value)


_OUTAGES: Final = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_CANTOPEN",
    "SQLITE_PROTOCOL",
    "SQLITE_NOMEM",
    "SQLITE_INTERRUPT",
)


def _is_outage(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says the file cannot be written now, rather than never."""
    name = getattr(exc, "sqlite_errorname", None)  # Python 3.11+, errors from SQLite
    if isinstance(name, str):
        return name.startswith(_OUTAGES)
    text = str(exc).lower()
    return any(word in text for word in ("lock", "busy", "i/o", "disk is full", "unable to open"))


def _unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    error = StoreUnavailableError(f"SQLite: {exc}")
    error.__cause__ = exc
    return error


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def create_private_file(path: Path) -> None:
    """Create a new database file readable by its owner alone (0600, in a new folder of
    mode 0700): it holds secrets (config tokens, sealed keys). SQLite gives the file's
    WAL and shared-memory files the same mode. An existing file keeps its mode."""
    folder = path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)  # mkdir's mode is filtered by the umask
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
