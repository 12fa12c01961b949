"""What the doc blocks need that the docs do not show running: named setups, placeholders.

``<!-- doc-test: setup: NAME k=v ... -->`` before a block runs ``SETUPS[NAME](session,
k=v, ...)`` first, in the block's session. A setup may start background processes,
define names in the session's Python namespace, ask that a text of the block stand for
something local (``session.replacements``: e.g. ``https://push.example.com`` for the
gateway it started) and add checks run when the session ends (``session.after``).

``PLACEHOLDERS`` say how the placeholders of a file are filled, the way its text says
(a value from the previous command's output, a file the command before wrote, ...). An
entry whose text is in no tested block of its file fails a test: no stale entries.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .doc_blocks import Block
from .doc_runner import BlockFailed, FileContext, Session

AGENT_KEY = "doc-test-agent-key-0123456789"

# ---- setups -------------------------------------------------------------------------


def notifier(session: Session) -> None:
    """``notifier``: a PushNotifier (not started), as the README's first example opens it."""
    session.py(
        "from a2a_push import PushNotifier\n"
        'notifier = PushNotifier.open("a2a-push.db", issuer="https://agent.example.com",'
        ' data_dir="a2a-push-data")\n'
    )


def a2a_sdk(session: Session) -> None:
    """``notifier``, ``MyExecutor`` and ``card``: the a2a-sdk example agent's."""
    notifier(session)
    session.py(
        "from examples.a2a_sdk_agent import DiceExecutor as MyExecutor, agent_card\n"
        'card = agent_card("http://127.0.0.1:9999/")\n'
    )


def gateway(session: Session, url: str = "") -> None:
    """A gateway with one agent (``AGENT_KEY`` / ``api_key`` in Python and the shell), and
    ``task_id`` and ``event`` to publish; ``url`` in the block stands for it."""
    port = session.context.port(18080)  # a port of its own: the doc's 8080 may be in use
    session.sh(
        f"a2a-push gateway --port {port} --data-dir gateway-data "
        f"--agent-key agent:{AGENT_KEY} --allow-webhook-host 127.0.0.1"
    )
    session.py(
        f'AGENT_KEY = api_key = "{AGENT_KEY}"\n'
        'task_id = "task-1"\n'
        "from a2a_push.protocol import TaskState, TaskStatus, TaskStatusUpdateEvent\n"
        "event = TaskStatusUpdateEvent(\n"
        '    task_id=task_id, context_id="c-1", status=TaskStatus(state=TaskState.WORKING)\n'
        ")\n"
    )
    if url:
        session.replacements.append((url, f"http://127.0.0.1:{port}"))


def mock_agent(session: Session, port: str = "9000") -> None:
    """The mock agent on the doc's ``port`` (mapped), webhooks to 127.0.0.1 allowed."""
    session.sh(f"a2a-push mock-agent --port {port} --allow-webhook-host 127.0.0.1")


def signed_webhook(
    session: Session, issuer: str, audience: str, jwks: str = "", check: str = ""
) -> None:
    """A webhook as an agent at ``issuer`` signs it for ``audience``: ``request`` (its
    ``.headers``), ``raw_body``, ``agent_jwks`` and ``secret`` (a ``whsec_`` secret it is
    signed with too). With ``jwks``, that URL in the block stands for a local server of
    the agent's JWK Set; with ``check``, the block must have defined that name (its
    ``except`` did not swallow a rejection)."""
    jwks_port = session.context.port(19999)
    session.py(
        f"""
import base64, json, os, time, types
from aiohttp import web
from multidict import CIMultiDict
from a2a_push.signing import KeySet, WebhookSigner, standard_webhooks

_keys = KeySet.generate()
agent_jwks = _keys.jwks()
secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
raw_body = json.dumps({{"statusUpdate": {{
    "taskId": "t-1", "contextId": "c-1", "status": {{"state": "TASK_STATE_WORKING"}}}}}}).encode()
_now = int(time.time())
request = types.SimpleNamespace(headers=CIMultiDict({{
    "X-A2A-Signature": WebhookSigner(_keys, {issuer!r}).sign(
        body=raw_body, audience={audience!r}, webhook_id="msg_1", task_id="t-1",
        config_id="cfg-1", seq=1, now=_now),
    "webhook-id": "msg_1",
    "webhook-timestamp": str(_now),
    "webhook-signature": standard_webhooks.sign(secret, "msg_1", _now, raw_body),
    "Content-Type": "application/a2a+json",
}}))
if {bool(jwks)!r}:
    async def _jwks(_request):
        return web.json_response(agent_jwks)
    _jwks_app = web.Application()
    _jwks_app.router.add_get("/.well-known/jwks.json", _jwks)
    web.run_app(_jwks_app, port={jwks_port})
"""
    )
    if check:
        session.after.append(
            lambda: session.py(f"assert {check!r} in globals(), 'the block did not set {check}'")
        )
    if jwks:
        session.replacements.append((jwks, f"http://127.0.0.1:{jwks_port}/.well-known/jwks.json"))


def dead_letter(session: Session) -> None:
    """``push.db`` with one dead-lettered delivery of task ``t-1`` (its webhook got 400)."""
    session.py(
        """
import asyncio
from a2a_push import AddressPolicy, PushNotifier
from a2a_push.protocol import (
    TaskPushNotificationConfig, TaskState, TaskStatus, TaskStatusUpdateEvent)
from a2a_push.testing import WebhookSink

async with WebhookSink() as _sink:
    _sink.set_default("/hook", 400)
    _n = PushNotifier.open("push.db", issuer="https://agent.example.com",
                           address_policy=AddressPolicy(allow_loopback=True))
    async with _n:
        await _n.register_config(TaskPushNotificationConfig(url=_sink.url("/hook")),
                                 owner="o", task_id="t-1")
        await _n.publish("t-1", TaskStatusUpdateEvent(
            task_id="t-1", context_id="c", status=TaskStatus(state=TaskState.WORKING)))
        for _ in range(400):
            if await _n.dead_letters(task_id="t-1"):
                break
            await asyncio.sleep(0.025)
        assert await _n.dead_letters(task_id="t-1"), "no dead letter"
"""
    )


def fernet_keys(session: Session) -> None:
    """``new_key`` and ``old_key``, and ``push.db`` with a config sealed with ``old_key``."""
    session.py(
        """
from a2a_push.store import SQLiteStore, StoreOptions, StoredConfig, generate_key

new_key, old_key = generate_key(), generate_key()
async with SQLiteStore("push.db", StoreOptions(encryption_keys=[old_key])) as _store:
    await _store.put_config(StoredConfig(
        key="k1", id="cfg-1", task_id="t-1", owner="o", url="https://example.com/hook",
        token="a-token"))
"""
    )


SETUPS: dict[str, Callable[..., None]] = {
    "notifier": notifier,
    "a2a_sdk": a2a_sdk,
    "gateway": gateway,
    "mock_agent": mock_agent,
    "signed_webhook": signed_webhook,
    "dead_letter": dead_letter,
    "fernet_keys": fernet_keys,
}


def run_setup(line: str, session: Session, block: Block) -> None:
    name, *args = shlex.split(line)
    if name not in SETUPS:
        raise BlockFailed(f"unknown setup {name!r} (known: {sorted(SETUPS)})")
    kwargs = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise BlockFailed(f"setup arguments are k=v, not {arg!r}")
        kwargs[key] = value
    SETUPS[name](session, **kwargs)


# ---- placeholders -------------------------------------------------------------------


@dataclass(frozen=True)
class Placeholder:
    file: str
    text: str  # as the doc writes it
    fill: Callable[[Session], str]
    in_block: str = ""  # only in blocks containing this text (empty: every block)

    def applies(self, block: Block) -> bool:
        return block.file == self.file and self.in_block in block.text and self.text in block.text


def literal(value: str) -> Callable[[Session], str]:
    return lambda _session: value


def from_output(pattern: str) -> Callable[[Session], str]:
    """The first match of ``pattern`` (its group 1, if any) in the previous command's output."""

    def fill(session: Session) -> str:
        m = re.search(pattern, session.last_output)
        if m is None:
            raise BlockFailed(
                f"no {pattern!r} in the previous command's output:\n{session.last_output}"
            )
        return m.group(1) if m.groups() else m.group(0)

    return fill


def from_json_output(*path: str) -> Callable[[Session], str]:
    """A value of the JSON the previous command printed (``path``: keys)."""

    def fill(session: Session) -> str:
        for line in reversed(session.last_output.splitlines()):  # curl's meter comes first
            try:
                value = json.loads(line)
                for key in path:
                    value = value[key]
            except (ValueError, KeyError, TypeError):
                continue
            return str(value)
        raise BlockFailed(
            f"no {'.'.join(path)} in the previous command's output:\n{session.last_output}"
        )

    return fill


def from_command(command: str, pattern: str) -> Callable[[Session], str]:
    """What ``command`` (run in the session) prints, the first match of ``pattern``."""

    def fill(session: Session) -> str:
        saved = session.last_output
        out = session.sh(command)
        session.last_output = saved
        m = re.search(pattern, out)
        if m is None:
            raise BlockFailed(f"no {pattern!r} in the output of {command}:\n{out}")
        return m.group(1) if m.groups() else m.group(0)

    return fill


def fernet_key(_session: Session) -> str:
    from a2a_push.store import generate_key

    return generate_key()


PLACEHOLDERS = [
    # "TASK_ID is result.task.id in the answer" (of SendMessage, the command before).
    Placeholder(
        "README.md",
        "TASK_ID",
        from_json_output("result", "task", "id"),
        in_block="8090/subscriptions",
    ),
    Placeholder("docs/configuration.md", "<fernet key>", fernet_key),
    Placeholder("docs/gateway.md", "<a2a-push store generate-key>", fernet_key),
    # "a2a-push deliveries show msg_…": an id the list before printed.
    Placeholder(
        "docs/operations.md", "msg_01m8nq42577rq6md0458nysd21", from_output(r"\bmsg_[0-9a-z]{20,}")
    ),
    Placeholder("docs/operations.md", "msg_01m8…", from_output(r"\bmsg_[0-9a-z]{20,}")),
    # "the key is the config_key that a2a-push deliveries list --json shows"
    Placeholder(
        "docs/operations.md",
        "--config KEY",
        from_command("a2a-push deliveries list --json", r'"config_key":\s*"([^"]+)"'),
    ),
    # an agent key (at least 16 characters), as the README's quickstart has one
    Placeholder("docs/listen.md", "my-agent:KEY", literal("my-agent:my-agent-key-0123456789")),
    Placeholder("docs/operations.md", "[--alg EdDSA]", literal("--alg EdDSA")),
    Placeholder("docs/operations.md", "[--grace-period 86400]", literal("--grace-period 86400")),
]


# Commands the text says may need a moment: tried again (for up to the seconds given)
# until they exit 0. (file, text of the command, seconds)
EVENTUALLY = [
    # "GET /tasks/… answers 404 not_fetched until the first GetTask lands (a moment)"
    ("docs/receiver.md", "localhost:8090/tasks/$TASK_ID", 10.0),
    ("README.md", "8090/tasks/TASK_ID", 10.0),
]


def eventually(block: Block, command: str) -> float:
    return max((s for f, t, s in EVENTUALLY if f == block.file and t in command), default=0.0)


def apply_placeholders(block: Block, text: str, session: Session | None) -> str:
    """``text`` (of ``block``) with its placeholders filled; a value is filled once per
    session (the TASK_ID of one answer in every command after it)."""
    for entry in PLACEHOLDERS:
        if entry.applies(block) and entry.text in text:
            if session is None:
                value = entry.fill(session)  # type: ignore[arg-type]
            else:
                if entry not in session.filled:
                    session.filled[entry] = entry.fill(session)
                value = session.filled[entry]
            if entry.text == "--config KEY":
                value = "--config " + value
            text = _replace(text, entry.text, value)
    return text


def _replace(text: str, old: str, new: str) -> str:
    """``old`` replaced as a word: not inside a longer name, not a ``$VARIABLE``."""
    before = r"(?<![\w$])" if re.match(r"\w", old) else ""
    after = r"(?!\w)" if re.search(r"\w$", old) else ""
    return re.sub(before + re.escape(old) + after, lambda _: new, text)


# ---- settings blocks ----------------------------------------------------------------


def check_settings(block: Block, context: FileContext) -> None:
    """The block loads as the gateway's or the receiver's settings file, no errors."""
    marker = block.marker("settings")
    assert marker is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("settings." + block.lang)
        path.write_text(apply_placeholders(block, block.text, None))
        if marker.arg == "gateway":
            from a2a_push.gateway.settings import load_gateway_settings

            load_gateway_settings(config_file=path, environ={})
        else:
            from receiver.settings import load_settings

            load_settings(config_file=path, environ={})
