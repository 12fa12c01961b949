"""Running the docs' code blocks (see doc_blocks for the markers).

A block and the blocks marked ``continues`` after it form one session: a temporary
working directory, one bash process (variables, ``cd`` and background jobs carry over),
one Python process for the ``python`` blocks (doc_pyworker: one namespace), and the
background processes, killed when the session ends.

Shell blocks run command by command (comment lines are left out; ``\\`` continuations
and multi-line quotes make one command). A command that keeps running (a server:
``a2a-push gateway|receiver|mock-agent|listen``, ``python -m receiver``, ``curl -N``, or
any command after a ``# terminal N (keeps running)`` comment) is started in the
background, and the harness waits until its port accepts connections (or, with no port,
until it prints something); ``a2a-push listen --count N`` must then exit 0 by the end of
the session. Every other command must exit 0; ``curl`` runs with ``--fail-with-body``, so
an HTTP error fails the block. Python blocks run in the session's namespace, top-level
``await`` allowed; ``web.run_app`` starts the app and returns (doc_pyworker).

Before a block runs, per file and consistently: ports of local URLs and ``--port`` /
``port=`` settings are mapped to free ports, a ``postgresql://`` DSN to a database of
the file's own (created here, dropped at the end), and the placeholders of
``doc_setups.PLACEHOLDERS`` are filled.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .doc_blocks import ROOT, Block

BLOCK_TIMEOUT = 60.0  # seconds for one command or one python block
PORT_TIMEOUT = 30.0  # seconds for a background server to accept connections
NO_PORT_WAIT = 3.0  # seconds to wait for a background command with no port to print
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"

# Default ports of the commands that serve (when no --port is given).
DEFAULT_PORTS = {"gateway": 8080, "receiver": 8090, "mock-agent": 9000, "listen": 8000}
_SERVING = re.compile(
    r"^(?:\w+=\S*\s+)*(?:"
    r"(?:\S*/)?a2a-push\s+(?P<cmd>gateway|receiver|mock-agent|listen)\b"
    r"|python3?\s+-m\s+(?P<mod>receiver)\b"
    r"|(?P<curl>curl\b.*\s-\w*N\b)"
    r")"
)
_KEEPS_RUNNING = re.compile(r"^#\s*terminal\s+\d+\s*\(keeps running\)", re.IGNORECASE)
_LOCAL_PORT = re.compile(
    r"(?P<pre>(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):)(?P<port>\d{2,5})\b"
)
# ("127.0.0.1", 8081), as web.TCPSite takes them
_HOST_PORT_ARGS = re.compile(r"(?P<pre>[\"']127\.0\.0\.1[\"'],\s*)(?P<port>\d{2,5})\b")
_FLAG_PORT = re.compile(r"(?P<pre>--port[ =]|\bport\s*=\s*)(?P<port>\d{2,5})\b")
_DSN = re.compile(r"postgres(?:ql)?://[^\s'\"]+")
NOT_MAPPED = {5432}  # PostgreSQL's: the DSN is mapped as a whole


class BlockFailed(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


# ---- per file: ports and the PostgreSQL database ------------------------------------


@dataclass
class FileContext:
    file: str
    ports: dict[int, int] = field(default_factory=dict)
    database: str | None = None  # the DSN of this file's database, once made

    def port(self, doc_port: int) -> int:
        if doc_port not in self.ports:
            self.ports[doc_port] = free_port()
        return self.ports[doc_port]

    def map_ports(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            port = int(m.group("port"))
            if port in NOT_MAPPED or port < 1024 or port in self.ports.values():
                return m.group(0)  # not a doc's port, or one mapped already
            return m.group("pre") + str(self.port(port))

        for pattern in (_LOCAL_PORT, _HOST_PORT_ARGS, _FLAG_PORT):
            text = pattern.sub(sub, text)
        return text

    def map_databases(self, text: str) -> str:
        if not _DSN.search(text):
            return text
        if self.database is None:
            self.database = create_database(self.file)
        dsn = self.database
        return _DSN.sub(lambda _: dsn, text)

    def close(self) -> None:
        if self.database is not None:
            drop_database(self.database)
            self.database = None


def _postgres(statement: str) -> None:
    from ..conftest import POSTGRES_DSN, run_in_thread

    async def run() -> None:
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_DSN, timeout=5)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    run_in_thread(run)


def create_database(file: str) -> str:
    from ..conftest import POSTGRES_DSN, require_postgres

    require_postgres()  # skips without a server (fails under CI=true)
    name = "doctest_" + re.sub(r"\W", "_", Path(file).stem.lower()) + "_" + uuid.uuid4().hex[:8]
    _postgres(f'CREATE DATABASE "{name}"')
    return POSTGRES_DSN.rsplit("/", 1)[0] + "/" + name


def drop_database(dsn: str) -> None:
    _postgres(f'DROP DATABASE IF EXISTS "{dsn.rsplit("/", 1)[1]}" WITH (FORCE)')


# ---- the processes of a session -----------------------------------------------------


@dataclass
class Background:
    command: str
    pid: int
    log: Path
    port: int | None
    must_exit: bool  # a2a-push listen --count N: must exit 0 by the end of the session

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


class Shell:
    """One bash process; commands run in it one at a time (``set -m``: each background
    job is a process group of its own, killed as one)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.sentinel = f"__doctest_{uuid.uuid4().hex}__"
        self.run('set -m; curl() { command curl --fail-with-body "$@"; }', timeout=10)

    def run(self, command: str, timeout: float = BLOCK_TIMEOUT) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        script = f'{{ {command}\n}} < /dev/null\nprintf "\\n{self.sentinel} %s\\n" "$?"\n'
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        out = b""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        marker = f"\n{self.sentinel} ".encode()
        while marker not in out or not out.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                so_far = tail(out.decode(errors="replace"))
                raise BlockFailed(f"timed out after {timeout:.0f} s; output so far:\n{so_far}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise BlockFailed(
                        f"the shell ended; output:\n{tail(out.decode(errors='replace'))}"
                    )
                out += chunk
        text, _, rc = out.decode(errors="replace").rpartition(f"\n{self.sentinel} ")
        return int(rc.strip()), text

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class PythonWorker:
    """A doc_pyworker process. Started ahead of need (``take``: one is kept spare, so
    its imports overlap other work); the session's directory and web.run_app's default
    port come with each block."""

    _spare: PythonWorker | None = None

    @classmethod
    def take(cls, env: dict[str, str]) -> PythonWorker:
        spare, cls._spare = cls._spare, None
        if spare is not None and spare.env == env and spare.proc.poll() is None:
            worker = spare
        else:
            if spare is not None:
                spare.kill()  # started for another environment (or ended): not left running
            worker = cls(env)
        cls._spare = cls(env)
        return worker

    @classmethod
    def drop_spare(cls) -> None:
        if cls._spare is not None:
            cls._spare.kill()
            cls._spare = None

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        fd, log = tempfile.mkstemp(prefix="doctest-python-", suffix=".log")
        os.close(fd)
        self.log = Path(log)
        self.proc = subprocess.Popen(
            [
                str(VENV_BIN / "python"),
                "-u",
                str(Path(__file__).with_name("doc_pyworker.py")),
                str(self.log),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            raise BlockFailed(f"timed out after {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise BlockFailed("the Python process ended")
        return dict(json.loads(line))

    def run(
        self, code: str, where: dict[str, Any], timeout: float = BLOCK_TIMEOUT
    ) -> tuple[dict[str, Any], str]:
        """Run ``code``; ``where``: filename, line, cwd and default_port."""
        start = self.log.stat().st_size
        answer = self.request({"op": "exec", "code": code, **where}, timeout)
        with self.log.open(errors="replace") as f:
            f.seek(start)
            return answer, f.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BlockFailed, OSError, ValueError):
                self.request({"op": "close"}, 40)
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.unlink(missing_ok=True)


# ---- sessions -----------------------------------------------------------------------


class Session:
    """What one block and its ``continues`` successors share."""

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.dir = Path(tempfile.mkdtemp(prefix="doctest-"))
        self.env = dict(os.environ)
        self.env["PATH"] = f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PYTHONPATH"] = str(ROOT)  # setups import tests/ and examples/
        for name in [
            n for n in self.env if n.startswith(("A2A_GATEWAY_", "A2A_RECEIVER_", "A2A_PUSH_"))
        ]:
            del self.env[name]
        self._shell: Shell | None = None
        self._python: PythonWorker | None = None
        self.background: list[Background] = []
        self.ran: list[str] = []  # ids of the blocks run in this session
        self.outputs: dict[str, str] = {}  # block id -> what its last command printed
        self.last_output = ""  # the previous command's output (placeholders read it)
        self.replacements: list[tuple[str, str]] = []  # set by setups, for the next block
        self.filled: dict[object, str] = {}  # placeholder -> its value in this session
        self.after: list[Callable[[], None]] = []  # checks setups run when the session ends
        self.transcript: list[str] = []

    @property
    def shell(self) -> Shell:
        if self._shell is None:
            self._shell = Shell(self.dir, self.env)
        return self._shell

    @property
    def python(self) -> PythonWorker:
        if self._python is None:
            self._python = PythonWorker.take(self.env)
        return self._python

    # -- used by setups and the runner --

    def sh(
        self, command: str, *, what: str = "", timeout: float = BLOCK_TIMEOUT, retry_for: float = 0
    ) -> str:
        """Run one shell command in the session; it must exit 0 (within ``retry_for``
        seconds of trying again). Returns its output."""
        command = self.context.map_databases(self.context.map_ports(command))
        if command.endswith("&") and not command.endswith("&&"):
            command, what = command[:-1].rstrip(), "background"  # the doc's own job
        if _SERVING.match(command) or what == "background":
            self.start_background(command)
            return ""
        deadline = time.monotonic() + retry_for
        while True:
            rc, out = self.shell.run(command, timeout)
            if rc == 0 or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        self.transcript.append(f"$ {command}\n{out}")
        if rc != 0:
            raise BlockFailed(f"exit code {rc}: {command}\n{tail(out)}")
        self.last_output = out
        return out

    def py(self, code: str, *, filename: str = "<setup>", line: int = 1) -> str:
        where = {
            "filename": filename,
            "line": line,
            "cwd": str(self.dir),
            "default_port": self.context.port(8080),  # web.run_app's
        }
        answer, out = self.python.run(code, where)
        self.transcript.append(f">>> {filename}:{line}\n{out}")
        if not answer["ok"]:
            raise BlockFailed(f"{answer['error']}\noutput:\n{tail(out)}")
        for port in answer.get("listening", []):
            wait_for_port(port, None, f"web.run_app in {filename}:{line}")
        self.last_output = out
        return out

    def start_background(
        self, command: str, *, port: int | None = None, what: str = ""
    ) -> Background:
        """Start ``command`` in the background and wait until it serves (its ``port``:
        given, its ``--port``, or its default; without one, until it prints)."""
        m = _SERVING.match(command)
        flag = re.search(r"--port[ =](\d+)", command)
        if port is not None:
            pass
        elif flag:
            port = int(flag.group(1)) or None  # --port 0: it picks one (it prints which)
        elif m and (m.group("cmd") or m.group("mod")):
            # its default port, mapped like the ones the docs write: give it explicitly
            port = self.context.port(DEFAULT_PORTS[m.group("cmd") or m.group("mod")])
            end = m.end("cmd") if m.group("cmd") else m.end("mod")
            command = f"{command[:end]} --port {port}{command[end:]}"
        must_exit = bool(m and m.group("cmd") == "listen" and re.search(r"--count\b", command))
        log = self.dir / f".doctest-bg-{len(self.background)}.log"
        rc, out = self.shell.run(f"{{ {command}\n}} > {shlex.quote(str(log))} 2>&1 &\necho $!", 10)
        if rc != 0:
            raise BlockFailed(f"could not start: {command}\n{out}")
        job = Background(what or command, int(out.strip().splitlines()[-1]), log, port, must_exit)
        self.background.append(job)
        self.transcript.append(f"$ {command} &   (background, pid {job.pid})")
        wait_for_port(port, job, command)
        return job

    def close(self) -> list[str]:
        """End the session: check what must have happened, stop everything. The
        problems found (empty when all is well)."""
        problems: list[str] = []
        for job in self.background:
            if job.must_exit:
                try:
                    rc, _ = self.shell.run(f"wait {job.pid}", PORT_TIMEOUT)
                except BlockFailed as exc:
                    rc = -1
                    problems.append(f"{job.command}: {exc}")
                if rc != 0:
                    problems.append(f"{job.command} exited {rc}:\n{tail(job.output())}")
        for check in self.after:
            try:
                check()
            except AssertionError as exc:
                problems.append(str(exc))
        if self._python is not None:
            self._python.close()
        stop_groups([job.pid for job in self.background])
        if self._shell is not None:
            self._shell.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems

    def logs(self) -> str:
        parts = [
            f"--- {job.command} (pid {job.pid}):\n{tail(job.output(), 2500)}"
            for job in self.background
        ]
        return "\n".join(parts)


def stop_groups(pids: list[int], grace: float = 3.0) -> None:
    """TERM the background jobs' process groups, then KILL what is left after ``grace``."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def wait_for_port(port: int | None, job: Background | None, what: str) -> None:
    """Until ``port`` accepts connections; with no port, until the job prints something
    (at most NO_PORT_WAIT seconds: its output may go elsewhere)."""
    start = time.monotonic()
    while time.monotonic() < start + PORT_TIMEOUT:
        if port is not None and port_open(port):
            return
        if port is None and (
            job is None or job.output().strip() or time.monotonic() > start + NO_PORT_WAIT
        ):
            return
        if job is not None and port is not None and not _alive(job.pid):
            raise BlockFailed(f"ended before it served: {what}\n{tail(job.output())}")
        time.sleep(0.05)
    log = tail(job.output()) if job else ""
    raise BlockFailed(f"port {port} did not open within {PORT_TIMEOUT:.0f} s: {what}\n{log}")


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---- shell blocks as commands -------------------------------------------------------


@dataclass(frozen=True)
class Command:
    text: str
    background: bool  # a "# terminal N (keeps running)" comment came before it


def commands(text: str) -> list[Command]:
    """The commands of a shell block: comment lines dropped, continuations joined."""
    out: list[Command] = []
    keeps_running = False
    current = ""
    for line in text.splitlines():
        if not current:
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                keeps_running = keeps_running or bool(_KEEPS_RUNNING.match(stripped))
                continue
            if stripped.startswith("$ "):  # a console prompt
                line = stripped[2:]
        current += line + "\n"
        if current.rstrip("\n").endswith("\\") or not _complete(current):
            continue
        out.append(Command(current.strip(), keeps_running))
        current, keeps_running = "", False
    if current.strip():
        out.append(Command(current.strip(), keeps_running))
    return out


def _complete(text: str) -> bool:
    """The quotes and parentheses of ``text`` are closed."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    depth = 0
    for word in re.findall(r"\$\(|\)", re.sub(r"'[^']*'", "", text)):
        depth += 1 if word == "$(" else -1
    return depth <= 0


# ---- running blocks -----------------------------------------------------------------


class Harness:
    """Runs the tested blocks in file order, one session per chain of ``continues``."""

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = blocks
        self.contexts: dict[str, FileContext] = {}
        self.session: Session | None = None
        self.failed: set[str] = set()

    def context(self, file: str) -> FileContext:
        for name in [n for n in self.contexts if n != file]:
            self.end_session()
            self.contexts.pop(name).close()
        if file not in self.contexts:
            self.contexts[file] = FileContext(file)
        return self.contexts[file]

    def end_session(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            problems = session.close()
            if problems:
                raise BlockFailed(f"when session of {session.ran} ended:\n" + "\n".join(problems))

    def close(self) -> None:
        try:
            self.end_session()
        finally:
            PythonWorker.drop_spare()
            for context in self.contexts.values():
                context.close()
            self.contexts.clear()

    def chain(self, block: Block) -> list[Block]:
        """The blocks its session runs, in order, ending with ``block``."""
        from .doc_blocks import previous_runnable

        out = [block]
        while out[0].marker("continues"):
            prev = previous_runnable(self.blocks, self.blocks.index(out[0]))
            assert prev is not None, f"{out[0].id}: continues, but no block before it"
            out.insert(0, prev)
        return out

    def run(self, block: Block) -> None:
        context = self.context(block.file)
        if block.marker("settings"):
            from .doc_setups import check_settings

            check_settings(block, context)
            return
        if block.marker("output"):
            self.check_output(block, context)
            return
        chain = self.chain(block)
        for earlier in chain[:-1]:
            if earlier.id in self.failed:
                raise BlockFailed(f"{block.id} continues {earlier.id}, which failed")
        if (
            self.session is None
            or not self.session.ran
            or self.session.ran[-1] != (chain[-2].id if len(chain) > 1 else None)
        ):
            self.end_session()
            self.session = Session(context)
            for earlier in chain[:-1]:  # run alone (-k): replay what it continues
                self.run_in_session(earlier, self.session)
        self.run_in_session(block, self.session)

    def run_in_session(self, block: Block, session: Session) -> None:
        from .doc_setups import apply_placeholders, eventually, run_setup

        try:
            setup = block.marker("setup")
            if setup is not None:
                run_setup(setup.arg, session, block)
            text = session.context.map_databases(session.context.map_ports(block.text))
            for old, new in session.replacements:  # after the mapping: they name real ports
                text = text.replace(old, new)
            session.replacements = []
            if block.is_python:
                code = apply_placeholders(block, text, session)
                session.py(code, filename=block.file, line=block.line + 1)
            else:
                # (as written, to match the registries; mapped, to run)
                for written, command in zip(commands(block.text), commands(text), strict=True):
                    filled = apply_placeholders(block, command.text, session)
                    session.sh(
                        filled,
                        what="background" if command.background else "",
                        retry_for=eventually(block, written.text),
                    )
            session.outputs[block.id] = session.last_output
            session.ran.append(block.id)
        except BlockFailed as exc:
            self.failed.add(block.id)
            raise BlockFailed(
                f"{block.id} ({block.lang}) failed: {exc}\n\n"
                f"=== the block ===\n{block.text}\n"
                f"=== background processes ===\n{session.logs()}"
            ) from None

    def check_output(self, block: Block, context: FileContext) -> None:
        from .doc_blocks import previous_runnable

        index = self.blocks.index(block)
        prev = previous_runnable(self.blocks, index)
        assert prev is not None, f"{block.id}: output of no block"
        if self.session is None or prev.id not in self.session.outputs:
            self.run(prev)  # run alone (-k)
        assert self.session is not None
        got = self.session.outputs[prev.id]
        expected = context.map_ports(block.text)
        try:
            printed = json.loads(got)
        except ValueError:
            raise BlockFailed(
                f"{prev.id} printed no JSON, but {block.id} shows some:\n{got}"
            ) from None
        assert printed == json.loads(expected), (
            f"{prev.id} printed\n{got}\nbut {block.id} shows\n{expected}"
        )
