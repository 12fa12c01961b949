"""The Python process that runs a session's ``python`` doc blocks (started by doc_runner).

One namespace for the session, so a block marked ``continues`` sees the names the
blocks before it defined. Top-level ``await`` works (as in ``python -m asyncio``): such
a block runs on an event loop this process keeps running in a thread, which also serves
the apps the blocks start with ``web.run_app``: that call starts the app there (on
127.0.0.1, the port the doc names mapped to a free one, 8080 by default as aiohttp's)
and returns, so the next blocks can talk to it; the apps are cleaned up (their
``cleanup_ctx`` run) when the session ends.

It is started before a session needs it (its imports take a while): each request names
the session's working directory and the port web.run_app uses by default. Requests are
JSON lines on stdin, answers JSON lines on the original stdout; what the
blocks print goes to the log file named by argv[1].
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import sys
import threading
import traceback
from typing import Any

from aiohttp import web

DEFAULT_PORT = [8080]  # web.run_app's, mapped: set by each request


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    runners: list[web.AppRunner] = []
    listening: list[int] = []

    async def start(app: web.Application, host: str | None, port: int | None) -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        if host in (None, "", "0.0.0.0", "::"):
            host = "127.0.0.1"  # the tests listen on loopback only
        port = DEFAULT_PORT[0] if port is None else port
        await web.TCPSite(runner, host, port).start()
        listening.append(port)
        print(f"======== Running on http://{host}:{port} ========", flush=True)

    def run_app(app: Any, *, host: str | None = None, port: int | None = None, **_: Any) -> None:
        asyncio.run_coroutine_threadsafe(start(app, host, port), loop).result(30)

    web.run_app = run_app  # type: ignore[assignment]
    namespace: dict[str, Any] = {"__name__": "__main__"}

    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "close":
            break
        listening.clear()
        os.chdir(request["cwd"])
        DEFAULT_PORT[0] = request["default_port"]
        answer: dict[str, Any] = {"ok": True}
        try:
            source = "\n" * (request["line"] - 1) + request["code"]
            code = compile(
                source, request["filename"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            )
            if code.co_flags & inspect.CO_COROUTINE:
                coro = eval(code, namespace)
                asyncio.run_coroutine_threadsafe(coro, loop).result()
            else:
                exec(code, namespace)
        except BaseException:
            answer = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.flush()
        sys.stderr.flush()
        answer["listening"] = list(listening)
        answers.write(json.dumps(answer) + "\n")

    async def cleanup() -> None:
        for runner in reversed(runners):
            await runner.cleanup()

    try:
        asyncio.run_coroutine_threadsafe(cleanup(), loop).result(30)
    except BaseException:
        traceback.print_exc()
    answers.write(json.dumps({"ok": True, "closed": True}) + "\n")


if __name__ == "__main__":
    main()
