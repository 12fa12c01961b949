"""A notifier process for the crash tests: publishes, printing each durable delivery id."""

from __future__ import annotations

import argparse
import asyncio
import sys

from a2a_push.delivery.dispatcher import DispatcherOptions
from a2a_push.delivery.retry import RetryPolicy
from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import Timeouts
from a2a_push.notifier import PushNotifier
from a2a_push.protocol.types import (
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.store import SQLiteStore


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--tasks", type=int, default=5)
    p.add_argument("--events", type=int, default=50)
    args = p.parse_args()
    notifier = PushNotifier(
        SQLiteStore(args.db),
        issuer="http://worker.test",
        address_policy=AddressPolicy(allow_loopback=True),
        # A short lease so the test's restart takes over quickly; claims must still end
        # before their lease does, hence the short timeout and a single quick attempt.
        dispatcher=DispatcherOptions(lease_seconds=1.0),
        timeouts=Timeouts(connect=0.2, total=0.3),
        retry=RetryPolicy(quick_attempts=1, quick_retry_after_max=0),
    )
    async with notifier:
        tasks = [f"task-{i}" for i in range(args.tasks)]
        for t in tasks:
            await notifier.register_config(
                TaskPushNotificationConfig(url=f"{args.url}/{t}"), owner="o", task_id=t
            )
        print("READY", flush=True)
        for i in range(args.events):
            for t in tasks:
                event = TaskStatusUpdateEvent(
                    task_id=t,
                    context_id="ctx",
                    status=TaskStatus(state=TaskState.WORKING),
                    metadata={"i": i},
                )
                result = await notifier.publish(t, event)
                for delivery_id in result.delivery_ids:
                    sys.stdout.write(f"P {delivery_id} {t} {result.seq}\n")
                sys.stdout.flush()
        print("DONE", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main())
