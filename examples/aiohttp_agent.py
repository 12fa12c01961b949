"""A plain aiohttp agent that embeds a2a-push: durable, signed push notifications.

The notifier keeps its outbox (SQLite) and signing keys in a data folder; the app
serves the A2A push-config methods (JSON-RPC on ``POST /`` and the REST binding under
``/tasks/{taskId}/pushNotificationConfigs``) and the JWKS receivers verify the
webhooks with. ``POST /tasks`` creates a task; ``POST /tasks/{id}/work`` runs it and
publishes WORKING, then COMPLETED, to every webhook registered on it::

    python -m examples.aiohttp_agent --port 8080 --data-dir agent-data

With ``--console-admin-key KEY`` it serves the delivery console at ``/console/`` too.

Loopback webhooks are allowed for trying it on one machine: not in production.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from aiohttp import web

from a2a_push import AddressPolicy, PushNotifier
from a2a_push.protocol.types import Task, TaskState, TaskStatus, TaskStatusUpdateEvent
from a2a_push.server import PushConfigService, default_owner_resolver, mount

NOTIFIER = web.AppKey("notifier", PushNotifier)
TASKS = web.AppKey("tasks", dict[str, tuple[str, Task]])  # id -> (owner, task)


def create_app(
    data_dir: str | Path, issuer: str, *, console_admin_key: str | None = None
) -> web.Application:
    """The agent; ``issuer`` is its public base URL (the webhooks' JWT ``iss``).
    With ``console_admin_key``, the delivery console is at /console/ too."""
    data = Path(data_dir)
    data.mkdir(parents=True, exist_ok=True)
    notifier = PushNotifier.open(
        data / "a2a-push.db",
        issuer=issuer,
        data_dir=data,  # signing keys in data/keys
        address_policy=AddressPolicy(allow_loopback=True),  # demo only
    )
    tasks: dict[str, tuple[str, Task]] = {}

    async def task_lookup(task_id: str, owner: str) -> Task | None:
        found = tasks.get(task_id)
        return found[1] if found is not None and found[0] == owner else None

    async def run_notifier(app: web.Application) -> AsyncIterator[None]:
        async with notifier:  # starts the dispatcher; drains it on shutdown
            yield

    app = web.Application()
    app[NOTIFIER], app[TASKS] = notifier, tasks
    app.cleanup_ctx.append(run_notifier)
    app.router.add_post("/tasks", create_task)
    app.router.add_post("/tasks/{id}/work", work)
    mount(app, PushConfigService(notifier, task_lookup=task_lookup))  # + JWKS route
    if console_admin_key:
        notifier.add_console(app, admin_keys=[console_admin_key])  # /console/
    return app


async def create_task(request: web.Request) -> web.Response:
    new_id = str(uuid.uuid4())
    task = Task(id=new_id, context_id=new_id, status=TaskStatus(state=TaskState.SUBMITTED))
    # The owner, as the push-config methods resolve it from the same header.
    request.app[TASKS][task.id] = (default_owner_resolver(request.headers), task)
    return web.json_response(task.to_json_dict(), status=201)


async def work(request: web.Request) -> web.Response:
    found = request.app[TASKS].get(task_id := request.match_info["id"])
    if found is None or found[0] != default_owner_resolver(request.headers):
        raise web.HTTPNotFound(text="no such task")
    return web.json_response((await run_task(request.app, task_id)).to_json_dict())


async def run_task(app: web.Application, task_id: str) -> Task:
    """Do the task's "work", publishing each status change (durable when it returns)."""
    owner, task = app[TASKS][task_id]
    for state in (TaskState.WORKING, TaskState.COMPLETED):
        task = task.model_copy(update={"status": TaskStatus(state=state)})
        app[TASKS][task_id] = (owner, task)
        ctx = task.context_id or task_id
        event = TaskStatusUpdateEvent(task_id=task_id, context_id=ctx, status=task.status)
        await app[NOTIFIER].publish(task_id, event, task=task)
    return task


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--data-dir", default="agent-data", help="outbox and signing keys")
    parser.add_argument("--public-url", help="base URL receivers see (default http://HOST:PORT)")
    parser.add_argument(
        "--console-admin-key", help="serve the delivery console at /console/ (16+ characters)"
    )
    args = parser.parse_args(argv)
    issuer = args.public_url or f"http://{args.host}:{args.port}"
    app = create_app(args.data_dir, issuer, console_admin_key=args.console_admin_key)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
