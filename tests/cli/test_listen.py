"""``a2a-push listen``: the listener on real local servers, fed real signed webhooks by a
real ``PushNotifier`` and by the mock agent; and the command in its own process."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tenacity import wait_fixed

import a2a_push.listener as listener_module
from a2a_push.cli import main
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.listener import NOT_VERIFIED, FailPlan, Listener
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from a2a_push.server.app import LEGACY_PUSH_SIGNING_EXTENSION_URI
from a2a_push.signing import KeySet, WebhookSigner
from a2a_push.store import Delivery, DeliveryState, SQLiteStore

from ..gateway_support import free_port, gateway_settings, running_gateway
from ..mock_agent_support import (
    ALICE,
    REPO_ROOT,
    message,
    mock_agent_process,
    result,
    running_agent,
)
from ..receiver_support import Agent, agent_server

FAST = RetryPolicy(quick_attempts=3, quick_wait=wait_fixed(0.05), schedule=(0.3, 0.3))
ISSUER = "http://agent.test"
WHSEC = "whsec_" + base64.b64encode(b"s" * 32).decode()
OTHER_WHSEC = "whsec_" + base64.b64encode(b"o" * 32).decode()


# ---- a notifier that signs, and the JWK Set it serves ---------------------------------


@dataclass
class Sender:
    notifier: PushNotifier
    jwks_url: str

    @property
    def kid(self) -> str:
        return self.notifier.keyset.active.kid

    async def push(
        self, url: str, *states: TaskState, token: str | None = None, task_id: str = "t1"
    ) -> list[Delivery]:
        """Register a config for ``url`` and publish a status update per state; the
        deliveries once settled (delivered or dead-lettered)."""
        config = TaskPushNotificationConfig(url=url, id="c1", token=token)
        await self.notifier.register_config(config, owner="o", task_id=task_id)
        ids: list[str] = []
        for state in states or (TaskState.WORKING,):
            event = TaskStatusUpdateEvent(
                task_id=task_id,
                context_id="ctx",
                status=TaskStatus(state=state, timestamp=utc_timestamp()),
            )
            ids += (await self.notifier.publish(task_id, event)).delivery_ids
        return await self.notifier.wait_settled(ids, timeout=30)


MakeSender = Callable[[], Awaitable[Sender]]


@pytest.fixture
async def make_sender(tmp_path: Path) -> AsyncIterator[MakeSender]:
    """``await make_sender()``: a started notifier with its own key, its JWK Set served
    on 127.0.0.1."""
    made: list[tuple[PushNotifier, TestServer]] = []

    async def make() -> Sender:
        notifier = PushNotifier(
            SQLiteStore(tmp_path / f"push-{len(made)}.db"),
            issuer=ISSUER,
            keyset=KeySet.generate(),
            address_policy=AddressPolicy(allow_loopback=True),
            retry=FAST,
        )
        app = web.Application()
        notifier.add_routes(app, metrics_path=None)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        await notifier.start()
        made.append((notifier, server))
        return Sender(notifier, str(server.make_url("/.well-known/jwks.json")))

    yield make
    for notifier, server in made:
        await notifier.stop()
        await server.close()


@pytest.fixture
async def sender(make_sender: MakeSender) -> Sender:
    return await make_sender()


# ---- the listener in this process -------------------------------------------------------


@dataclass
class Running:
    listener: Listener
    url: str
    out: io.StringIO

    @property
    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()

    def line(self, index: int = -1) -> str:
        return self.lines[index]


@asynccontextmanager
async def listening(**options: Any) -> AsyncIterator[Running]:
    out = io.StringIO()
    listener = Listener(out=out, **options)
    server = TestServer(listener.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield Running(listener, str(server.make_url(listener.path)), out)
    finally:
        await server.close()


async def post(
    url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status, await response.json(), dict(response.headers)


def signed(
    keyset: KeySet, url: str, body: bytes, *, issuer: str = ISSUER, now: int | None = None
) -> dict[str, str]:
    """Headers of a webhook signed as the notifier signs it."""
    webhook_id = str(uuid.uuid4())
    stamp = int(time.time()) if now is None else now
    jwt = WebhookSigner(keyset, issuer).sign(
        body=body,
        audience=url,
        webhook_id=webhook_id,
        task_id="t9",
        config_id="c9",
        seq=7,
        now=stamp,
    )
    return {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(stamp),
        "X-A2A-Signature": jwt,
    }


BODY = json.dumps(
    {"statusUpdate": {"taskId": "t9", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}
).encode()


# ---- JWT against a JWK Set --------------------------------------------------------------


async def test_a_notifiers_webhooks_are_verified_with_its_jwks(sender: Sender) -> None:
    async with listening(jwks_url=sender.jwks_url) as run:
        delivered = await sender.push(run.url, TaskState.WORKING, TaskState.COMPLETED)

        assert [d.state for d in delivered] == [DeliveryState.DELIVERED] * 2
        assert f"the JWKS at {sender.jwks_url}" in run.listener.describe()
        working, completed = run.lines
        for line, seq, state, d in zip(
            (working, completed), (1, 2), ("WORKING", "COMPLETED"), delivered, strict=True
        ):
            assert "task t1" in line and f"  {state}  " in line and f"seq {seq}" in line
            assert f"webhook-id {d.id}" in line
            assert line.endswith(f"-> 200  ✓ verified (jwt kid={sender.kid})")
            assert re.search(r"latency -?\d+ ms", line), line  # from the body's timestamp
        assert run.listener.verified == 2 and run.listener.exit_code() == 0


async def test_another_key_is_not_verified_and_answered_401(make_sender: MakeSender) -> None:
    trusted, impostor = await make_sender(), await make_sender()
    async with listening(jwks_url=trusted.jwks_url) as run:
        [delivery] = await impostor.push(run.url)

        assert delivery.state is DeliveryState.DEAD and delivery.last_status == 401
        line = run.line()
        assert (
            f"✗ NOT verified: key kid={impostor.kid} is not in the JWKS of "
            f"{trusted.jwks_url} (signed with another key?)" in line
        )
        assert "-> 401  ✗ NOT verified: key kid=" in line
        assert run.listener.failed == 1 and run.listener.exit_code() == 1


async def test_a_signature_by_another_key_under_the_right_kid_does_not_match(
    sender: Sender,
) -> None:
    other = KeySet.generate()
    async with listening(jwks_url=sender.jwks_url) as run:
        now = int(time.time())
        right = signed(sender.notifier.keyset, run.url, BODY, now=now)
        wrong = signed(other, run.url, BODY, now=now)
        head = right["X-A2A-Signature"].split(".")[0]
        forged_payload = wrong["X-A2A-Signature"].split(".")[1]
        signature = wrong["X-A2A-Signature"].split(".")[2]
        wrong["X-A2A-Signature"] = f"{head}.{forged_payload}.{signature}"

        status, answer, _ = await post(run.url, BODY, wrong)

        assert status == 401 and answer["error"] == "not_verified"
        assert f"signature does not match the JWKS of {sender.jwks_url}" in answer["message"]
        assert f"✗ NOT verified: signature does not match the JWKS of {sender.jwks_url}" in (
            run.line()
        )


async def test_a_webhook_without_a_jwt_is_refused(sender: Sender) -> None:
    async with listening(jwks_url=sender.jwks_url) as run:
        status, _, _ = await post(run.url, BODY, {"Content-Type": "application/json"})

        assert status == 401
        assert "no JWT: no Authorization: Bearer or X-A2A-Signature header" in run.line()
        assert "task t9" in run.line() and "  WORKING  " in run.line()


async def test_a_body_changed_after_signing_is_refused(sender: Sender) -> None:
    async with listening(jwks_url=sender.jwks_url) as run:
        headers = signed(sender.notifier.keyset, run.url, BODY)
        status, _, _ = await post(run.url, BODY.replace(b"WORKING", b"FAILED"), headers)

        assert status == 401
        assert "the body is not the one signed (request_body_sha256 differs)" in run.line()


async def test_issuer_and_audience_are_checked_when_given(sender: Sender) -> None:
    async with listening(jwks_url=sender.jwks_url, issuer="http://other.test") as run:
        status, _, _ = await post(run.url, BODY, signed(sender.notifier.keyset, run.url, BODY))
        assert status == 401
        assert (
            'issuer differs: the JWT names "http://agent.test", --issuer is "http://other.test"'
            in run.line()
        )
    async with listening(jwks_url=sender.jwks_url, audience="http://me.test/hook") as run:
        status, _, _ = await post(run.url, BODY, signed(sender.notifier.keyset, run.url, BODY))
        assert status == 401
        assert f'audience differs: the JWT is for "{run.url}", --audience is' in run.line()
    async with listening(jwks_url=sender.jwks_url, issuer=ISSUER) as run:
        [delivery] = await sender.push(run.url)
        assert delivery.state is DeliveryState.DELIVERED and "✓ verified" in run.line()


async def test_an_unreachable_jwks_is_answered_503_and_said_so() -> None:
    jwks_url = f"http://127.0.0.1:{free_port()}/.well-known/jwks.json"
    async with listening(jwks_url=jwks_url) as run:
        assert any("the JWKS cannot be fetched yet" in note for note in run.listener.notes)
        status, answer, headers = await post(
            run.url, BODY, signed(KeySet.generate(), run.url, BODY)
        )

        assert status == 503 and answer["error"] == "jwks_unavailable"
        assert int(headers["Retry-After"]) >= 1
        line = run.line()
        assert f"✗ NOT verified: JWKS unreachable ({jwks_url}: Cannot connect" in line
        assert line.endswith("answered 503, the sender retries") and "-> 503  ✗" in line
        # Not final: the sender retries; it is neither counted as failed nor as final.
        assert run.listener.failed == 0 and run.listener.finals == 0
        assert "1 answered 503 (JWK Set not fetched)" in run.listener.summary()


async def test_a_kid_missing_from_a_set_just_fetched_is_answered_503(
    sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener_module, "JWKS_MIN_REFRESH_SECONDS", 60.0)
    async with listening(jwks_url=sender.jwks_url) as run:
        other = KeySet.generate()
        status, _, _ = await post(run.url, BODY, signed(other, run.url, BODY))

        assert status == 503
        assert (
            f"key kid={other.active.kid} is not in the JWKS of {sender.jwks_url} as last "
            "fetched; answered 503, retry" in run.line()
        )


async def test_the_mock_agent_is_verified_through_its_agent_card(tmp_path: Path) -> None:
    async with (
        running_agent(tmp_path, own_url=True) as agent,
        listening(agent=agent, count=4) as run,
        aiohttp.ClientSession() as session,
    ):
        assert f"(from {agent}'s agent card)" in run.listener.describe()
        assert f"the JWKS at {agent}/.well-known/jwks.json" in run.listener.describe()
        config = {"url": run.url, "token": "tok-1"}
        params = {
            "message": message("roll 2d6"),
            "configuration": {"taskPushNotificationConfig": config},
        }
        await result(session, agent, "SendMessage", params, ALICE)
        await asyncio.wait_for(run.listener.done.wait(), 20)

        kinds = [line.split("  ")[2] for line in run.lines]
        assert kinds == ["task SUBMITTED", "WORKING", "artifact dice-result", "COMPLETED"], (
            run.lines
        )
        assert all("✓ verified (jwt kid=" in line for line in run.lines), run.lines


async def test_an_agent_card_naming_the_extensions_legacy_uri_still_names_the_jwks() -> None:
    # An agent on an earlier release declares the push-signing extension's old URI.
    agent = Agent(extension_uri=LEGACY_PUSH_SIGNING_EXTENSION_URI)
    async with agent_server(agent), listening(agent=agent.base, count=1) as run:
        assert f"the JWKS at {agent.base}/keys (from {agent.base}'s agent card)" in (
            run.listener.describe()
        )
        status, _, _ = await post(
            run.url, BODY, signed(agent.keyset, run.url, BODY, issuer=agent.base)
        )
        assert status == 200
        assert "✓ verified (jwt kid=" in run.line(), run.lines


async def test_a_gateway_is_verified_through_the_card_of_its_agent(tmp_path: Path) -> None:
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    async with (
        running_gateway(settings) as (gateway_url, _gateway),
        running_agent(tmp_path, gateway_url) as agent,
        listening(agent=agent, issuer=gateway_url, count=4) as run,
        aiohttp.ClientSession() as session,
    ):
        # The agent's card names the gateway's JWK Set: the gateway signs its webhooks.
        assert f"the JWKS at {gateway_url}/.well-known/jwks.json" in run.listener.describe()
        params = {
            "message": message("roll 1d6"),
            "configuration": {"taskPushNotificationConfig": {"url": run.url}},
        }
        await result(session, agent, "SendMessage", params, ALICE)
        await asyncio.wait_for(run.listener.done.wait(), 20)

        assert all("✓ verified (jwt kid=" in line for line in run.lines), run.lines
        assert run.listener.exit_code() == 0


# ---- tokens and Standard Webhooks secrets ----------------------------------------------


async def test_the_notification_token_is_compared(sender: Sender) -> None:
    async with listening(token="tok-right") as run:
        [ok] = await sender.push(run.url, token="tok-right")
        assert ok.state is DeliveryState.DELIVERED and "✓ verified (token)" in run.line()

        [wrong] = await sender.push(run.url, token="tok-wrong", task_id="t2")
        assert wrong.state is DeliveryState.DEAD
        assert "✗ NOT verified: token differs: X-A2A-Notification-Token is not --token" in (
            run.line()
        )
        assert "tok-wrong" not in run.out.getvalue() and "tok-right" not in run.out.getvalue()

        [none] = await sender.push(run.url, task_id="t3")
        assert none.state is DeliveryState.DEAD
        assert "no X-A2A-Notification-Token header (--token is set)" in run.line()


async def test_jwt_and_token_are_both_required_when_both_given(sender: Sender) -> None:
    async with listening(jwks_url=sender.jwks_url, token="tok") as run:
        [ok] = await sender.push(run.url, token="tok")
        assert ok.state is DeliveryState.DELIVERED
        assert f"✓ verified (jwt kid={sender.kid}, token)" in run.line()


async def test_a_standard_webhooks_secret_is_checked(sender: Sender) -> None:
    async with listening(secret=WHSEC) as run:
        [ok] = await sender.push(run.url, token=WHSEC)
        assert ok.state is DeliveryState.DELIVERED
        assert "✓ verified (standard webhooks)" in run.line()

        [bad] = await sender.push(run.url, token=OTHER_WHSEC, task_id="t2")
        assert bad.state is DeliveryState.DEAD
        assert "✗ NOT verified: webhook-signature does not match --secret" in run.line()

        [none] = await sender.push(run.url, task_id="t3")
        assert none.state is DeliveryState.DEAD
        assert "no webhook-signature header (is --secret the push config's token?)" in run.line()
        assert WHSEC not in run.out.getvalue()


async def test_without_any_check_every_webhook_is_accepted_unverified(sender: Sender) -> None:
    async with listening() as run:
        assert run.listener.describe().startswith("verifying nothing")
        [ok] = await sender.push(run.url)
        assert ok.state is DeliveryState.DELIVERED
        assert NOT_VERIFIED == "not verified (no --agent/--jwks/--token/--secret given)"
        assert run.line().endswith(f"-> 200  {NOT_VERIFIED}")
        assert run.listener.summary() == "1 received (not verified)"


# ---- scripted failures, records, counts --------------------------------------------------


async def test_fail_503x2_makes_the_notifier_retry_and_the_third_attempt_is_verified(
    sender: Sender,
) -> None:
    async with listening(jwks_url=sender.jwks_url, fail=FailPlan.parse("503x2")) as run:
        [delivery] = await sender.push(run.url)

        assert delivery.state is DeliveryState.DELIVERED and delivery.attempts == 3
        first, second, third = run.lines
        assert "-> 503 (--fail 1 of 2)  ✓ verified" in first
        assert "-> 503 (--fail 2 of 2)  ✓ verified" in second
        assert "-> 200  ✓ verified" in third
        assert all(f"webhook-id {delivery.id}" in line for line in run.lines)
        assert all("✓ verified" in line for line in run.lines)
        assert run.listener.finals == 1
        assert run.listener.summary().endswith("; 2 answered 503 by --fail")


async def test_fail_without_a_count_fails_every_time_with_retry_after() -> None:
    async with listening(fail=FailPlan.parse("500"), retry_after=7) as run:
        for _ in range(3):
            status, answer, headers = await post(run.url, BODY, {})
            assert status == 500 and headers["Retry-After"] == "7"
            assert answer == {"error": "scripted_failure", "message": "a2a-push listen --fail 500"}
        assert run.line().endswith(f"-> 500 (--fail 3)  {NOT_VERIFIED}")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("200", "not an error"), ("503x0", "at least 1"), ("x2", "not STATUS or STATUSxN")],
)
def test_fail_plans_are_checked(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        FailPlan.parse(text)


async def test_jsonl_records_each_webhook_with_tokens_redacted(
    sender: Sender, tmp_path: Path
) -> None:
    path = tmp_path / "hooks.jsonl"
    async with listening(jsonl=path, token="tok-secret", fail=FailPlan(503, 1)) as run:
        [delivery] = await sender.push(run.url, token="tok-secret")
        await post(run.url, b"not json", {"X-A2A-Notification-Token": "tok-bad"})

    text = path.read_text(encoding="utf-8")
    assert "tok-secret" not in text and "tok-bad" not in text
    failed, accepted, refused = (json.loads(line) for line in text.splitlines())
    for record in (failed, accepted):
        assert record["webhook_id"] == delivery.id and record["task_id"] == "t1"
        assert record["verified"] is True and record["verification"] == "token"
        assert record["headers"]["X-A2A-Notification-Token"] == "(redacted)"
        assert record["headers"]["webhook-id"] == delivery.id
        assert record["body"]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
        assert record["time"].endswith("+00:00")
    assert (failed["status"], accepted["status"]) == (503, 200)
    assert refused["verified"] is False and refused["status"] == 401
    assert refused["body_text"] == "not json"
    assert refused["verification"].startswith("token differs")


async def test_count_is_reached_by_final_answers_only(sender: Sender) -> None:
    async with listening(count=2, token="tok", fail=FailPlan(503, 1)) as run:
        await sender.push(run.url, TaskState.WORKING, token="tok")
        assert not run.listener.done.is_set()  # the 503 and the 200 of one webhook: 1
        await sender.push(run.url, TaskState.COMPLETED, token="tok")
        assert run.listener.done.is_set() and run.listener.exit_code() == 0

    async with listening(count=1, token="tok") as run:
        await post(run.url, BODY, {"X-A2A-Notification-Token": "nope"})
        assert run.listener.done.is_set() and run.listener.exit_code() == 1


async def test_a_post_elsewhere_is_answered_404_and_printed() -> None:
    async with listening(path="/hook") as run:
        status, answer, _ = await post(run.url.replace("/hook", "/webhook"), BODY, {})
        assert status == 404 and answer["message"] == "a2a-push listen takes webhooks at POST /hook"
        assert "POST /webhook -> 404 (webhooks go to POST /hook; check the config's URL)" in (
            run.line()
        )
        async with aiohttp.ClientSession() as session, session.get(run.url) as response:
            assert response.status == 405
        assert "GET /hook -> 405 (webhooks go to POST /hook" in run.line()
        assert run.listener.received == []


# ---- the command: usage errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--issuer", "x"], "--issuer needs --agent or --jwks"),
        (["--audience", "x"], "--audience needs --agent or --jwks"),
        (["--agent", "http://a", "--jwks", "http://b"], "--agent and --jwks: give one"),
        (["--agent", "ftp://a"], "--agent 'ftp://a' is not an http(s) URL"),
        (["--jwks", "http://u:p@h/j"], "--jwks: put no credentials in the URL"),
        (["--token", WHSEC], "pass it as --secret"),
        (["--token", "t", "--secret", WHSEC], "--token and --secret: a push config holds one"),
        (["--secret", "plain"], "--secret must be a Standard Webhooks secret"),
        (["--secret", "whsec_@@@"], "--secret: the Standard Webhooks secret after 'whsec_'"),
        (["--retry-after", "3"], "--retry-after needs --fail"),
        (["--timeout", "3"], "--timeout needs --count"),
        (["--fail", "abc"], "argument --fail: 'abc' is not STATUS or STATUSxN"),
        (["--count", "0"], "argument --count: must be at least 1"),
        (["--port", "70000"], "argument --port: 70000 is out of range"),
        (["--path", "hook"], "--path 'hook' must start with '/'"),
    ],
)
def test_bad_options_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["listen", *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("a2a-push: error: ") and message in captured.err
    assert captured.out == "" and WHSEC not in captured.err


def test_a_port_in_use_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["listen", "--port", str(port)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"a2a-push: error: cannot listen on 127.0.0.1:{port}")
    assert captured.out == ""


# ---- the command in its own process --------------------------------------------------------


@dataclass
class Process:
    process: asyncio.subprocess.Process
    url: str
    out: list[str] = field(default_factory=list)

    async def finish(self, timeout: float = 30.0) -> tuple[int, str, str]:
        """Wait for the exit; (exit code, all of stdout, stderr)."""
        assert self.process.stdout is not None and self.process.stderr is not None
        rest, err = await asyncio.wait_for(self.process.communicate(), timeout)
        code = self.process.returncode
        assert code is not None
        return code, "".join(self.out) + rest.decode(), err.decode()

    async def next_line(self, timeout: float = 30.0) -> str:
        assert self.process.stdout is not None
        line = (await asyncio.wait_for(self.process.stdout.readline(), timeout)).decode()
        self.out.append(line)
        return line


@asynccontextmanager
async def listen_process(*args: str) -> AsyncIterator[Process]:
    """``python -m a2a_push listen --port 0 ARGS`` once its start line is printed."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "a2a_push",
        "listen",
        "--port",
        "0",
        *args,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        found = re.match(r"a2a-push listen: listening on (\S+); ", first)
        assert found is not None, first
        yield Process(process, found[1], [first])
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_command_counts_verified_webhooks_and_exits_0(
    sender: Sender, tmp_path: Path
) -> None:
    jsonl = tmp_path / "hooks.jsonl"
    args = ("--jwks", sender.jwks_url, "--count", "2", "--timeout", "60", "--jsonl", str(jsonl))
    async with listen_process(*args) as run:
        # The start line is printed once the port listens: the webhooks get through at once.
        delivered = await sender.push(run.url, TaskState.WORKING, TaskState.COMPLETED)
        code, out, err = await run.finish()

    assert code == 0, err
    assert [d.state for d in delivered] == [DeliveryState.DELIVERED] * 2
    assert f"verifying a JWT signed with a key of the JWKS at {sender.jwks_url}" in out
    assert f"note: the JWKS holds 1 key(s): kid {sender.kid}" in out
    assert f'point a push config at it: {{"url": "{run.url}"}}' in out
    assert out.count(f"✓ verified (jwt kid={sender.kid})") == 2
    assert out.rstrip().endswith("a2a-push listen: stopped: 2 received, 2 verified, 0 failed")
    assert len(jsonl.read_text().splitlines()) == 2
    assert err == ""


async def test_the_command_gives_up_after_the_timeout() -> None:
    async with listen_process("--count", "1", "--timeout", "0.5") as run:
        code, out, err = await run.finish()
    assert code == 1
    assert err == (
        "a2a-push: error: --timeout: 0 of 1 webhooks in 0.5 s; is the sender's push config "
        "pointed at this URL?\n"
    )
    assert "stopped: 0 received (not verified)" in out


async def test_a_refused_webhook_makes_the_count_exit_1(sender: Sender) -> None:
    async with listen_process("--token", "tok", "--count", "1", "--timeout", "60") as run:
        [delivery] = await sender.push(run.url, token="other")
        code, out, _ = await run.finish()
    assert delivery.state is DeliveryState.DEAD
    assert code == 1 and "✗ NOT verified: token differs" in out
    assert "stopped: 1 received, 0 verified, 1 failed" in out


async def test_ctrl_c_stops_with_a_summary() -> None:
    async with listen_process() as run:
        while "Ctrl-C to stop" not in run.out[-1]:
            await run.next_line()
        status, _, _ = await post(run.url, BODY, {})
        assert status == 200
        line = await run.next_line()
        assert "task t9  WORKING" in line and NOT_VERIFIED in line
        run.process.send_signal(signal.SIGINT)
        code, out, err = await run.finish()
    assert code == 0 and err == ""
    assert out.rstrip().endswith("a2a-push listen: stopped: 1 received (not verified)")


async def test_the_mock_agent_and_the_listener_each_in_its_own_process(tmp_path: Path) -> None:
    async with mock_agent_process(tmp_path) as agent:
        args = ("--agent", agent.url, "--token", "tok-1", "--count", "4", "--timeout", "60")
        async with listen_process(*args) as run, aiohttp.ClientSession() as session:
            config = {"url": run.url, "token": "tok-1"}
            params = {
                "message": message("roll 1d20"),
                "configuration": {"taskPushNotificationConfig": config},
            }
            await result(session, agent.url, "SendMessage", params, ALICE)
            code, out, err = await run.finish(60)

    assert code == 0, (out, err)
    assert f"the JWKS at {agent.url}/.well-known/jwks.json (from {agent.url}'s agent card)" in out
    assert out.count(", token)") == 4 and "artifact dice-result" in out
    assert "stopped: 4 received, 4 verified, 0 failed" in out
