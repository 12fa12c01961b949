"""The built wheel and sdist work on their own: every command runs from a fresh virtual
environment, in a folder far from the checkout (one holding decoy ``examples/`` modules,
which must not be picked up).

The wheel and the sdist are built (``python -m build``: the wheel from the sdist) from a
copy of the checkout's tracked files. The wheel is installed with ``--no-deps --no-index``
into a new venv; its dependencies come from this project's venv through a ``.pth`` line,
which is appended to ``sys.path`` after the new venv's own site-packages (and, being a
plain path, runs none of the ``.pth`` files there: the editable install's finder stays
off). Nothing is downloaded: the build runs without isolation, on the setuptools the
dev extra installs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DECOY = "raise SystemExit('a decoy from the current folder ran')\n"
# What a test run or a local run leaves behind; none of it belongs in an sdist.
JUNK = re.compile(
    r"(__pycache__|\.pyc$|\.pytest_cache|\.mypy_cache|\.ruff_cache|\.venv/|\.db$|\.db-wal$"
    r"|\.db-shm$|\.sqlite|-data/|\.log$|/keys/)"
)


@dataclass
class Installed:
    venv: Path
    cwd: Path  # a folder outside the checkout, with decoy examples/ modules
    env: dict[str, str]
    sdist: Path

    def command(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "a2a-push"), *args]

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout,
        )


def read_until(proc: subprocess.Popen[str], text: str, timeout: float = 40) -> str:
    """What ``proc`` printed until a line holding ``text`` (all of it if none did, after
    ``timeout`` seconds at most: it is killed then)."""
    assert proc.stdout is not None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if text in line:
                break
    finally:
        timer.cancel()
    return "".join(seen)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files to build from are unknown")
    source = root / "src"
    for name in listed.stdout.decode().split("\0"):
        if name and (REPO_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    dist = root / "dist"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--sdist",
            "--wheel",
            "--outdir",
            str(dist),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("a2a_push-*.whl")
    (sdist,) = dist.glob("a2a_push-*.tar.gz")

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    subprocess.run(
        [*pip, "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=120,
    )
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "project-dependencies.pth").write_text("".join(f"{p}\n" for p in deps))

    cwd = root / "elsewhere"
    (cwd / "examples").mkdir(parents=True)
    for name in ("__init__.py", "demo.py", "mock_agent.py"):
        (cwd / "examples" / name).write_text(DECOY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "A2A_"))}
    env.update(PYTHONIOENCODING="utf-8", PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    return Installed(venv=venv, cwd=cwd, env=env, sdist=sdist)


def test_the_package_imported_is_the_installed_wheel(installed: Installed) -> None:
    done = subprocess.run(
        [
            str(installed.venv / "bin" / "python"),
            "-c",
            "import a2a_push, receiver; print(a2a_push.__file__); print(receiver.__file__)",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        check=True,
    )
    for path in done.stdout.split():
        assert Path(path).is_relative_to(installed.venv), done.stdout
        assert not Path(path).is_relative_to(REPO_ROOT)


def test_every_command_answers_help_from_the_wheel(installed: Installed) -> None:
    top = installed.run("--help")
    assert top.returncode == 0, top.stderr
    listed = top.stdout.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^ {4}([a-z][a-z-]*)", listed, re.MULTILINE)
    assert {"demo", "mock-agent", "receiver", "gateway", "keys", "version"} <= set(commands)
    # Started two at a time: each is mostly its interpreter's start and imports.
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda command: installed.run(command, "--help"), commands))
    for command, answer in zip(commands, answers, strict=True):
        assert answer.returncode == 0, (command, answer.stderr)
        assert answer.stdout.startswith(f"usage: a2a-push {command}"), (command, answer.stdout)
        assert answer.stderr == ""


def test_the_demo_runs_from_the_wheel(installed: Installed, tmp_path: Path) -> None:
    # Until its first verified webhooks, then stopped as `kill` would: it cleans up.
    env = {**installed.env, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        installed.command("demo"),
        cwd=installed.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
    )
    try:
        seen = read_until(proc, "signature verified ✓")
        assert "signature verified ✓" in seen, "the demo ended before a verified webhook:\n" + seen
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = seen + rest
    assert "decoy" not in output
    assert "a2a-push mock-agent at http://127.0.0.1:" in output  # the packaged agent
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert list(tmp_path.iterdir()) == []  # its temporary folder (keys) removed


def test_the_mock_agent_runs_from_the_wheel(installed: Installed) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        installed.command("mock-agent", "--port", str(port)),
        cwd=installed.cwd,
        env=installed.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
    )
    try:
        output = read_until(proc, f"listening on 127.0.0.1:{port}")
        assert f"listening on 127.0.0.1:{port}" in output, output
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it really listens
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0


def test_the_sdist_holds_the_packages_and_no_junk(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as sdist:
        names = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    for needed in (
        "pyproject.toml",
        "README.md",
        "a2a_push/py.typed",
        "a2a_push/cli/__init__.py",
        "a2a_push/mock_agent/__main__.py",
        "a2a_push/demo/run.py",
        "receiver/__main__.py",
    ):
        assert needed in names, needed
    assert any(n.startswith("a2a_push/store/sql/") and n.endswith(".sql") for n in names)
    assert [n for n in names if JUNK.search(n)] == []
    assert not any(n.startswith(("examples/", "benchmarks/", "docs/")) for n in names)
