"""``a2a-push receiver`` / ``python -m receiver``: run the receiver service."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from a2a_push import logs
from a2a_push.cli.common import PROG, print_error, start_logging, unknown_variable
from a2a_push.errors import A2APushError
from a2a_push.httputil import run_app
from a2a_push.listen import CannotListen, bind_sockets
from a2a_push.signing.jwt import MAX_TOKEN_CHARS

from .settings import (
    CONFIG_ENV,
    DEFAULT_HOST,
    DEFAULT_LOG_LEVEL,
    DEFAULT_PORT,
    ENV_PREFIX,
    ReceiverSettings,
    SettingsError,
    load_settings,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The receiver's options (shared by ``a2a-push receiver`` and ``python -m receiver``).

    Every option but ``--config`` is also a config-file key and an ``A2A_RECEIVER_<NAME>``
    environment variable; flags default to None so that those apply when a flag is absent.
    """
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"a TOML or JSON config file (default: ${CONFIG_ENV}, if set)",
    )
    parser.add_argument("--host", help=f"listen address (default: {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"listen port (default: {DEFAULT_PORT})")
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="URL",
        dest="agents",
        help="an agent's A2A JSON-RPC URL to trust (repeat for several). The list replaces "
        f"{ENV_PREFIX}AGENTS and the config file's agents, but a URL the config file lists "
        "keeps its per-agent options there (auth methods, JWKS URL, credentials)",
    )
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="default: ./receiver-data")
    parser.add_argument("--database", metavar="PATH", help="default: DIR/receiver.db")
    parser.add_argument(
        "--public-url",
        metavar="URL",
        help="this receiver's URL as agents reach it (default: http://HOST:PORT)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="serve with N processes sharing the port and the store (default: 1); "
        "verification is CPU-bound, so up to one per core",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    # How errors are prefixed ("a2a-push: error: ..."): the command the user ran, which
    # the supervisor passes on to its workers (started as python -m receiver).
    parser.add_argument("--prog", help=argparse.SUPPRESS)
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help=f"DEBUG, INFO, WARNING, ERROR or CRITICAL (default: {DEFAULT_LOG_LEVEL})",
    )
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        help="log every HTTP request (off by default: one line per webhook adds up)",
    )
    logs.add_arguments(parser)


def _prog(args: argparse.Namespace) -> str:
    """The command name errors start with: ``a2a-push`` unless told otherwise."""
    return getattr(args, "prog", None) or PROG


def run(args: argparse.Namespace) -> int:
    """Load the settings (file < environment < flags) and serve until interrupted."""
    prog = _prog(args)
    overrides: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "data_dir": args.data_dir,
        "database": args.database,
        "public_url": args.public_url,
        "workers": args.workers,
        "log_level": args.log_level,
        "access_log": args.access_log,
        "log_format": args.log_format,
        "tracing": args.tracing,
    }
    unknown = unknown_variable(ENV_PREFIX, ReceiverSettings.model_fields, "receiver")
    if unknown is not None:
        print_error(unknown, prog)
        return 2
    try:
        settings = load_settings(
            config_file=args.config, overrides=overrides, extra_agents=args.agents
        )
    except SettingsError as exc:
        print_error(str(exc), prog)
        return 2
    if not settings.agents:
        print_error(
            f"no agents configured; pass --agent URL, set {ENV_PREFIX}AGENTS, or list them "
            "in a --config file",
            prog,
        )
        return 2
    if not start_logging(
        settings.log_level,
        settings.log_format,
        tracing_on=settings.tracing,
        service="a2a-push-receiver",
        tracing_setting=f"tracing (--tracing, {ENV_PREFIX}TRACING)",
        prog=prog,
    ):
        return 2
    try:
        if settings.workers > 1 and not args.worker:
            return _supervise(args, settings)
        return _serve(args, settings)
    except A2APushError as exc:  # the store cannot be opened: what to fix, in one line
        print_error(str(exc), prog)
        return 1


def _serve(args: argparse.Namespace, settings: ReceiverSettings) -> int:
    """Serve in this process (a single receiver, or one worker) until interrupted."""
    from .api import create_app
    from .core import Receiver
    from .metrics import MULTIPROCESS_ENV, ReceiverMetrics

    if args.worker:
        _die_with_supervisor(_prog(args))
        # One of several: the supervisor said what there is to say about the API keys,
        # and gave the workers a directory where each keeps its metrics for the others'
        # scrapes (None only for a worker started by hand).
        metrics = ReceiverMetrics(multiprocess_dir=os.environ.get(MULTIPROCESS_ENV))
        receiver = Receiver(settings, metrics=metrics, warn_default_keys=False)
        app = create_app(settings, receiver=receiver)
    else:
        app = create_app(settings)
    # Bound before the app starts (it opens the store and writes the generated API keys
    # file): a port that is taken stops the command with nothing written.
    try:
        sockets = _bind(settings, reuse_port=args.worker)
    except CannotListen as exc:
        print_error(str(exc), _prog(args))
        return 1
    banner = (
        f"receiver: webhooks at {settings.webhook_url}; client API at {settings.base_url}/ "
        f"(agents: {', '.join(a.key for a in settings.agents)})"
    )
    if args.worker:
        # One line for the receiver, not one per worker: the first worker says it.
        index, _, count = os.environ.get(WORKER_INDEX_ENV, "0/1").partition("/")
        banner = f"{banner}; {count} workers" if index == "0" else ""

    def started(_aiohttp_banner: str) -> None:
        # run_app calls its ``print`` once, after the app's startup (the store is open)
        # and after every site is listening: a port in use (before the startup, see
        # _bind) or a store that cannot be opened fails before this, so the banner never
        # announces a receiver that is not serving.
        logs.serving(banner)

    try:
        run_app(
            app,
            sock=sockets,
            # A JWT of up to the verifier's limit, after "Bearer ", gets through.
            max_field_size=MAX_TOKEN_CHARS + 1024,
            print=started,
            access_log=logging.getLogger("aiohttp.access") if settings.access_log else None,
        )
    except OSError as exc:  # the data folder cannot be written...
        print_error(str(exc), _prog(args))
        return 1
    finally:
        for sock in sockets:
            sock.close()
    return 0


# Set by the supervisor for its workers: its pid, and each worker's "index/count" (the
# first prints the banner).
SUPERVISOR_PID_ENV = "A2A_RECEIVER_SUPERVISOR_PID"
WORKER_INDEX_ENV = "A2A_RECEIVER_WORKER_INDEX"
_PR_SET_PDEATHSIG = 1


# How long a worker whose supervisor is gone gets to stop gracefully (it was sent
# SIGTERM) before it exits anyway.
ORPHAN_GRACE_SECONDS = 10.0
_ORPHAN_POLL_SECONDS = 0.5


def _die_with_supervisor(prog: str) -> None:
    """A worker ends when its supervisor does, even one killed with SIGKILL (which cannot
    forward a signal): on Linux the kernel sends the worker SIGTERM then (a graceful
    stop). A supervisor already gone before this ran: the worker stops now. Either way,
    a watch thread sees the supervisor go, asks for the graceful stop where no signal
    came, and ends the worker if it is still here :data:`ORPHAN_GRACE_SECONDS` later."""
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    if expected is None:
        return  # started by hand
    import signal

    signalled = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            signalled = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
        except (ImportError, OSError, AttributeError):  # a Python built without ctypes
            logging.getLogger(__name__).debug("no parent-death signal for this worker")
    parent = os.getppid()
    if str(parent) != expected and not _alive(int(expected)):
        # (A parent other than the supervisor, which is alive: a launcher in between.)
        print_error("the supervisor of this receiver worker has exited", prog)
        raise SystemExit(1)
    watch_parent(parent, prog, signalled=signalled)


def watch_parent(
    parent: int, prog: str, *, signalled: bool, grace: float = ORPHAN_GRACE_SECONDS
) -> None:
    """Watch, on a daemon thread, for this process's parent ``parent`` to go (the process
    is handed to another parent then). When it does: SIGTERM to this process, unless the
    kernel sends one already (``signalled``: a parent-death signal is set); and if the
    process has not stopped ``grace`` seconds later (a graceful stop that hangs), one
    error line and exit code 1, at once. A worker never outlives its supervisor for
    long, serving the port with settings nobody watches."""
    import signal
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_ORPHAN_POLL_SECONDS)
        if not signalled:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        print_error(
            f"the supervisor of this receiver worker has exited and the worker did not "
            f"stop within {grace:g} s; stopping it now",
            prog,
        )
        os._exit(1)

    threading.Thread(target=watch, name="a2a-receiver-supervisor-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process has that pid now: ours is gone
    return True


def _bind(settings: ReceiverSettings, *, reuse_port: bool) -> list[socket.socket]:
    """The receiver's sockets (see :func:`a2a_push.listen.bind_sockets`)."""
    return bind_sockets(
        settings.host,
        settings.port,
        reuse_port=reuse_port,
        port_setting="--port (or `port` in the config file, A2A_RECEIVER_PORT)",
    )


def _supervise(args: argparse.Namespace, settings: ReceiverSettings) -> int:
    """Run ``settings.workers`` receiver processes on one port (SO_REUSEPORT) and one store.

    The store's schema and the generated API keys are set up here first, so the workers
    never race to create them (and only this process logs that generated keys are used).
    The workers keep their metrics in a private temporary directory, so each scrape shows
    them all (see receiver.metrics); it is removed when they have stopped. SIGTERM /
    SIGINT are passed on; the exit code is the first failing worker's, else 0.
    """
    import asyncio
    import tempfile

    from .core import Receiver
    from .metrics import MULTIPROCESS_ENV

    async def prepare() -> None:
        receiver = Receiver(settings)
        await receiver.store.open()
        receiver._load_api_keys()
        await receiver.store.close()

    # The port is checked first (bound, then let go), so that a port that is taken
    # stops the command before anything is written; a worker that still cannot bind
    # (taken in between) fails the same way, and stops the others. Without
    # SO_REUSEPORT: another receiver's workers (which set it) must count as taken, or
    # two receivers would share the port and split each other's traffic.
    try:
        for sock in _bind(settings, reuse_port=False):
            sock.close()
    except CannotListen as exc:
        print_error(str(exc), _prog(args))
        return 1
    asyncio.run(prepare())
    # The workers' metric files: private (mode 0700), and gone when the receiver stops.
    metrics_dir = tempfile.mkdtemp(prefix="a2a-receiver-metrics-")
    try:
        return _run_workers(args, settings, {**os.environ, MULTIPROCESS_ENV: metrics_dir})
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _run_workers(args: argparse.Namespace, settings: ReceiverSettings, env: dict[str, str]) -> int:
    """Start the workers with ``env`` and wait for them; the exit code (see _supervise)."""
    import signal
    import subprocess
    import time

    from prometheus_client.multiprocess import mark_process_dead

    from .metrics import MULTIPROCESS_ENV

    command = [sys.executable, "-m", "receiver", *_worker_argv(args, settings)]
    env = {**env, SUPERVISOR_PID_ENV: str(os.getpid())}
    procs = [
        subprocess.Popen(  # noqa: S603
            command, env={**env, WORKER_INDEX_ENV: f"{i}/{settings.workers}"}
        )
        for i in range(settings.workers)
    ]
    buried: set[int] = set()

    def bury(proc: subprocess.Popen[bytes]) -> None:
        """Drop an exited worker's live gauges (its open streams are closed)."""
        if proc.pid not in buried:
            buried.add(proc.pid)
            mark_process_dead(proc.pid, env[MULTIPROCESS_ENV])  # type: ignore[no-untyped-call]

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    stopping = False

    def forward_and_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        forward(signum, frame)

    signal.signal(signal.SIGTERM, forward_and_stop)
    signal.signal(signal.SIGINT, forward_and_stop)
    # A worker that dies on its own takes the others down with it, with its exit code:
    # a supervisor (systemd, Kubernetes) then restarts the whole receiver, instead of it
    # serving on, silently, with fewer processes.
    failed: int | None = None
    while any(proc.poll() is None for proc in procs):
        for proc in procs:
            code = proc.poll()
            if code is not None:
                bury(proc)
            if code is not None and not stopping and failed is None:
                failed = code or 1
                print_error(
                    f"a receiver worker exited (code {code}); stopping the others", _prog(args)
                )
                stopping = True
                forward(signal.SIGTERM, None)
        time.sleep(0.2)
    for proc in procs:
        bury(proc)
    if failed is not None:
        return failed
    codes = [proc.returncode for proc in procs]
    return next((c for c in codes if c not in (0, -signal.SIGTERM, -signal.SIGINT)), 0)


def _worker_argv(args: argparse.Namespace, settings: ReceiverSettings) -> list[str]:
    """The options of one worker: the same settings, and ``--worker``.

    A worker inherits the environment and reads the same config file; the flags given here
    are passed on, and logging as the supervisor resolved it.
    """
    out = ["--worker", "--prog", _prog(args), "--log-level", settings.log_level]
    out.append("--access-log" if settings.access_log else "--no-access-log")
    out += ["--log-format", settings.log_format]
    out.append("--tracing" if settings.tracing else "--no-tracing")
    for flag, value in (
        ("--config", args.config),
        ("--host", args.host),
        ("--port", args.port),
        ("--data-dir", args.data_dir),
        ("--database", args.database),
        ("--public-url", args.public_url),
    ):
        if value is not None:
            out += [flag, str(value)]
    for agent in args.agents:
        out += ["--agent", agent]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m receiver",
        description="The a2a-push receiver: verifies A2A webhooks, fetches tasks, serves them.",
    )
    add_arguments(parser)
    parser.set_defaults(prog=parser.prog)  # its errors start as argparse's do
    return run(parser.parse_args(argv))
