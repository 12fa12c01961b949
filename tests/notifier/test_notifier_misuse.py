"""Mistakes an agent developer makes when embedding PushNotifier, and what they are told.

Real aiohttp sinks on 127.0.0.1, real SQLite files, real event loops (threads included).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from a2a_push import NotifierNotStartedError, PushNotifier
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.signing import KeySet, verify_webhook_jwt
from a2a_push.testing import WebhookSink

ISSUER = "http://agent.test"
LOOPBACK = AddressPolicy(allow_loopback=True)


def working(task_id: str = "t1") -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task_id, context_id="ctx", status=TaskStatus(state=TaskState.WORKING)
    )


@pytest.fixture
def other_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in another thread (as in a threaded web framework)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def database(kind: str, tmp_path: Path) -> str:
    return "memory://" if kind == "memory" else str(tmp_path / "push.db")


# ---- construction -----------------------------------------------------------------------


async def test_open_takes_a_keyset_and_signs_with_it(sink: WebhookSink) -> None:
    keyset = KeySet.generate(alg="EdDSA")
    n = PushNotifier.open("memory://", issuer=ISSUER, keyset=keyset, address_policy=LOOPBACK)
    assert n.keyset is keyset
    async with n:
        await n.register_config(TaskPushNotificationConfig(url=sink.url()), owner="o", task_id="t1")
        await n.publish("t1", working())
        await sink.wait_for(1)
    received = sink.received[0]
    token = received.header("X-A2A-Signature")
    assert token is not None
    claims = verify_webhook_jwt(
        token, jwks=keyset.jwks(), body=received.body, audience=sink.url(), issuer=ISSUER
    )
    assert claims["taskId"] == "t1"


def test_open_refuses_data_dir_with_keyset_before_writing_keys(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data_dir= .* or keyset=, not both"):
        PushNotifier.open(
            "memory://", issuer=ISSUER, data_dir=tmp_path / "data", keyset=KeySet.generate()
        )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"address_policy": ["127.0.0.1"]}, r"address_policy must be an AddressPolicy"),
        ({"address_policy": "127.0.0.1"}, r"AddressPolicy\(allow=\[\.\.\.\]\)"),
        ({"timeouts": 10}, r"timeouts must be a Timeouts, e\.g\. Timeouts\(connect=5"),
        ({"retry": 3}, r"retry must be a RetryPolicy"),
        ({"dispatcher": {"concurrency": 4}}, r"dispatcher must be a DispatcherOptions"),
        ({"retention": 3600}, r"retention must be a Retention"),
        ({"max_payload_bytes": "1MB"}, r"max_payload_bytes must be an int"),
        ({"key_reload_interval": None}, r"key_reload_interval must be a number"),
        ({"issuer": None}, r"issuer must be a non-empty str"),
        ({"issuer": ""}, r"issuer must be a non-empty str"),
    ],
)
def test_a_wrong_argument_type_is_named_when_the_notifier_is_built(
    kwargs: dict[str, Any], says: str
) -> None:
    kwargs = {"issuer": ISSUER, **kwargs}
    with pytest.raises(TypeError, match=says):
        PushNotifier.open("memory://", **kwargs)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_register_config_refuses_a_task_id_that_is_not_a_str(
    kind: str, tmp_path: Path, sink: WebhookSink
) -> None:
    # An int task id used to be stored as given: the memory store then never matched the
    # task's str id again, and its webhooks were silently never sent.
    async with PushNotifier.open(
        database(kind, tmp_path), issuer=ISSUER, address_policy=LOOPBACK
    ) as n:
        with pytest.raises(TypeError, match="task_id must be a str, not 123"):
            await n.register_config(
                TaskPushNotificationConfig(url=sink.url()),
                owner="o",
                task_id=123,  # type: ignore[arg-type]
            )
        assert await n.list_configs("123", "o") == ([], None)


# ---- lifecycle ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_stopped_notifier_says_it_cannot_start_again(
    kind: str, tmp_path: Path, sink: WebhookSink
) -> None:
    # Before, a SQLite notifier started again looked started but every write failed with
    # "the SQLite store is not open (call open() first)".
    n = PushNotifier.open(database(kind, tmp_path), issuer=ISSUER, address_policy=LOOPBACK)
    async with n:
        await n.register_config(TaskPushNotificationConfig(url=sink.url()), owner="o", task_id="t1")
    await n.stop()  # stopping twice is fine
    with pytest.raises(NotifierNotStartedError, match="stopped and cannot be started again"):
        await n.start()
    # Not "call start() first": start() would refuse.
    with pytest.raises(NotifierNotStartedError, match=r"is stopped .* make a new one"):
        await n.publish("t1", working())
    # A new notifier on the same database carries on.
    if kind == "sqlite":
        async with PushNotifier.open(
            database(kind, tmp_path), issuer=ISSUER, address_policy=LOOPBACK
        ) as again:
            await again.publish("t1", working())
            await sink.wait_for(1)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_notifier_used_from_another_running_loop_says_so(
    kind: str,
    tmp_path: Path,
    sink: WebhookSink,
    other_loop: asyncio.AbstractEventLoop,
) -> None:
    n = PushNotifier.open(database(kind, tmp_path), issuer=ISSUER, address_policy=LOOPBACK)
    asyncio.run_coroutine_threadsafe(n.start(), other_loop).result(10)
    try:
        config = TaskPushNotificationConfig(url=sink.url())
        says = "started in another event loop.*run_coroutine_threadsafe"
        with pytest.raises(NotifierNotStartedError, match=says):
            await n.register_config(config, owner="o", task_id="t1")
        with pytest.raises(NotifierNotStartedError, match=says):
            await n.publish("t1", working())
        with pytest.raises(NotifierNotStartedError, match=says):
            await n.stop()
        # What the message says to do works.
        registered = asyncio.run_coroutine_threadsafe(
            n.register_config(config, owner="o", task_id="t1"), other_loop
        )
        await asyncio.wrap_future(registered)
        published = asyncio.run_coroutine_threadsafe(n.publish("t1", working()), other_loop)
        await asyncio.wrap_future(published)
        await sink.wait_for(1)
    finally:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(n.stop(), other_loop))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_notifier_left_running_by_an_ended_loop_says_so(kind: str, tmp_path: Path) -> None:
    # Two asyncio.run() calls, the first one without stop(): the second loop is told why,
    # instead of a store error ("the SQLite writer stopped (CancelledError)") or, in
    # memory, webhooks that are queued and never sent (the dispatcher died with the loop).
    n = PushNotifier.open(database(kind, tmp_path), issuer=ISSUER, address_policy=LOOPBACK)
    asyncio.run(n.start())

    async def publish() -> None:
        await n.publish("t1", working())

    with pytest.raises(NotifierNotStartedError, match="event loop that has ended"):
        asyncio.run(publish())
    asyncio.run(n.stop())  # still closes what it can
    asyncio.run(n.stop())
