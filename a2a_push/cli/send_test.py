"""``a2a-push send-test``: one signed test webhook to a URL."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from yarl import URL

from ..delivery.retry import Verdict, classify
from ..delivery.ssrf import AddressPolicy
from ..delivery.transport import AddressRefused, Timeouts, Transport, TransportError
from ..delivery.webhook import webhook_headers
from ..errors import InvalidConfigError, UnsafeURLError
from ..gateway.client import printable
from ..ids import new_delivery_id
from ..protocol.constants import (
    HEADER_WEBHOOK_ID,
    VERSION_1_0,
)
from ..protocol.types import (
    StreamResponse,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    utc_timestamp,
)
from ..signing import KeySet, WebhookSigner
from ..signing import standard_webhooks as stdwh
from ..store import (
    Delivery,
    DeliveryState,
    StoredConfig,
)
from .common import (
    ENV_ISSUER,
    ENV_KEYS_DIR,
    CLIError,
    Commands,
    add_command,
    note,
    positive_seconds,
)
from .keys import load_keyset

SEND_TEST_TASK_ID = "test-task"

SEND_TEST_CONTEXT_ID = "test-context"

SEND_TEST_CONFIG_ID = "send-test"

SEND_TEST_ISSUER = "urn:a2a-push:send-test"

SEND_TEST_FLAG = "a2a-push/test"


def _cmd_send_test(args: argparse.Namespace) -> int:
    url: str = args.url
    token: str | None = args.token or None
    if token is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in token):
        raise CLIError("--token must not contain control characters (CR, LF, ...)", 2)
    try:
        policy = AddressPolicy(args.allow, allow_loopback=args.allow_loopback)
    except ValueError as exc:
        raise CLIError(f"--allow: {exc}", 2) from None
    try:
        target = policy.validate_url(url)
    except UnsafeURLError as exc:
        raise CLIError(_refused(exc.message)) from None
    except InvalidConfigError as exc:
        raise CLIError(f"URL {exc.message}", 2) from None

    throwaway = not args.keys_dir
    keyset = KeySet.generate() if throwaway else load_keyset(Path(args.keys_dir))
    signer = WebhookSigner(keyset, args.issuer)
    delivery, config = _test_webhook(url, token)
    timeouts = Timeouts(connect=min(Timeouts().connect, args.timeout), total=args.timeout)

    async def send() -> int:
        try:
            await policy.check_url(url)
        except UnsafeURLError as exc:
            raise CLIError(_refused(exc.message)) from None
        except InvalidConfigError as exc:
            raise CLIError(f"URL {exc.message}; check the host name") from None
        headers = webhook_headers(delivery, config, signer)
        async with Transport(policy, timeouts) as transport:
            try:
                result = await transport.post(url, delivery.body, headers)
            except AddressRefused as exc:
                raise CLIError(_refused(str(exc))) from None
            except TransportError as exc:
                then = "retry" if exc.retryable else "dead-letter it"
                raise CLIError(f"no response: {exc}; a notifier would {then}") from None
        verdict = classify(result)
        print(f"POST {_shown_target(target)} -> {result.status} in {result.elapsed * 1000:.1f} ms")
        print(f"{HEADER_WEBHOOK_ID}: {delivery.id}")
        print(f"signed: {keyset.active.alg}, kid {keyset.active.kid}, iss {args.issuer}")
        print(f"token: {_describe_token(token)}")
        print(f"a notifier would: {_VERDICT_TEXT[verdict]}")
        if throwaway:
            note(
                "signed with a throwaway key that no receiver knows; pass --keys-dir (or set "
                f"{ENV_KEYS_DIR}) to sign with your agent's keys"
            )
        if verdict is not Verdict.DELIVERED:
            # The endpoint's words, on one line, with no control characters (an answer
            # may carry terminal escapes that fake output).
            answer = printable(" ".join(result.body[:200].decode("utf-8", "replace").split()))
            if answer:
                print(f"response body: {answer}")
            return 1
        return 0

    return asyncio.run(send())


_VERDICT_TEXT = {
    Verdict.DELIVERED: "mark it delivered",
    Verdict.RETRY: "retry later (retryable status)",
    Verdict.DEAD: "dead-letter it (redirects and other 4xx are permanent)",
    Verdict.GONE: "disable the config (410 Gone)",
}


def _test_webhook(url: str, token: str | None) -> tuple[Delivery, StoredConfig]:
    """A synthetic delivery and config: the same shapes the notifier sends from."""
    now = time.time()
    event = TaskStatusUpdateEvent(
        task_id=SEND_TEST_TASK_ID,
        context_id=SEND_TEST_CONTEXT_ID,
        status=TaskStatus(state=TaskState.WORKING, timestamp=utc_timestamp()),
        metadata={SEND_TEST_FLAG: True},
    )
    delivery = Delivery(
        id=new_delivery_id(),
        config_key=SEND_TEST_CONFIG_ID,
        task_id=SEND_TEST_TASK_ID,
        seq=1,
        kind="statusUpdate",
        body=StreamResponse.wrap(event).to_json_bytes(),
        state=DeliveryState.PENDING,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
        updated_at=now,
    )
    config = StoredConfig(
        key=SEND_TEST_CONFIG_ID,
        id=SEND_TEST_CONFIG_ID,
        task_id=SEND_TEST_TASK_ID,
        owner=SEND_TEST_CONFIG_ID,
        url=url,
        token=token,
        protocol_version=VERSION_1_0,
        created_at=now,
    )
    return delivery, config


def _shown_target(target: URL) -> str:
    """Where send-test posted: origin and path; a query (it may hold a token) as ``?…``."""
    shown = f"{target.origin()}{target.raw_path}"
    return f"{shown}?…" if target.raw_query_string else shown


def _describe_token(token: str | None) -> str:
    if token is None:
        return "none"
    if stdwh.is_standard_webhooks_secret(token):
        return "(set; Standard Webhooks secret, sent as a webhook-signature header)"
    return "(set)"


def _refused(message: str) -> str:
    # The library's advice names its Python API; on the command line it is a flag.
    reason = message.split("; to allow it", 1)[0]
    if "loopback" in reason:
        hint = "pass --allow-loopback to send to this machine (local testing)"
    elif "cloud metadata" in reason:
        hint = "pass --allow with that exact address if you really mean it"
    else:
        hint = "pass --allow with the address, a CIDR covering it, or the host name"
    return f"refused: {reason}; {hint}"


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``send-test`` command."""
    send_test = add_command(
        commands,
        "send-test",
        "send one signed test webhook to a URL",
        description=(
            "Send one signed test webhook (a statusUpdate for task "
            f"'{SEND_TEST_TASK_ID}', state WORKING) with exactly the headers the notifier "
            "sends; print the status, latency and JWT kid. Exits 0 only on a 2xx answer."
        ),
    )
    send_test.add_argument("url", metavar="URL", help="the webhook URL (http or https)")
    send_test.add_argument(
        "--token",
        help="the config token to send (a whsec_ secret is sent as a Standard Webhooks "
        "signature instead); never printed",
    )
    send_test.add_argument(
        "--keys-dir",
        default=env.get(ENV_KEYS_DIR),
        metavar="DIR",
        help=f"sign with this key set (default: ${ENV_KEYS_DIR}; none: a throwaway key)",
    )
    send_test.add_argument(
        "--issuer",
        default=env.get(ENV_ISSUER) or SEND_TEST_ISSUER,
        metavar="URL",
        help=f"the JWT iss claim (default: ${ENV_ISSUER}, else {SEND_TEST_ISSUER})",
    )
    send_test.add_argument(
        "--allow-loopback",
        action="store_true",
        help="allow loopback addresses (127.0.0.0/8, ::1) for local testing",
    )
    send_test.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="HOST_OR_CIDR",
        help="allow this private address, CIDR or host name (*.example.com for subdomains); "
        "repeatable",
    )
    send_test.add_argument(
        "--timeout",
        type=positive_seconds,
        default=Timeouts().total,
        metavar="SECONDS",
        help=f"give up after this long (default: {Timeouts().total:g})",
    )
    send_test.set_defaults(handler=_cmd_send_test)
