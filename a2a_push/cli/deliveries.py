"""``a2a-push deliveries``: inspect the delivery outbox and replay dead letters;
``a2a-push store generate-key``."""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..endpoints import parse_endpoint
from ..store import (
    Attempt,
    Delivery,
    DeliveryFilter,
    DeliveryState,
    Store,
    generate_key,
    matching_ids,
)
from .common import (
    ENV_ENCRYPTION_KEYS,
    PROG,
    CLIError,
    Commands,
    Parser,
    add_command,
    ago,
    duration,
    iso_time,
    note,
    positive_int,
    shorten,
    utc,
    utc_iso,
)
from .outbox import DATABASE_FORMS, add_database_option, run_with_store

STATES: tuple[str, ...] = tuple(state.value for state in DeliveryState)

# How much of a failure reason a table cell shows.
_LAST_WIDTH = 48


def _cmd_deliveries_list(args: argparse.Namespace) -> int:
    flt = DeliveryFilter(
        state=DeliveryState(args.state) if args.state else None,
        task_id=args.task,
        config_key=args.config,
        endpoint=args.endpoint,
        created_after=args.since,
        created_before=args.until,
        limit=args.limit,
        after_id=args.after,
    )

    async def work(store: Store) -> int:
        found = await store.list_deliveries(flt)
        if args.json:
            print(json.dumps([_delivery_json(d) for d in found], indent=2))
        elif not found:
            print("no deliveries match")
        else:
            _print_table(found, time.time())
        if len(found) == args.limit:
            note(
                f"showing the first {args.limit}; for more, pass --after {found[-1].id} "
                "or a larger --limit"
            )
        return 0

    return run_with_store(args, work)


def _print_table(deliveries: Sequence[Delivery], now: float) -> None:
    header = ("ID", "TASK", "SEQ", "KIND", "STATE", "ATTEMPTS", "LAST", "NEXT")
    rows = [
        (
            d.id,
            d.task_id,
            str(d.seq),
            d.kind,
            d.state.value,
            str(d.attempts),
            shorten(_last_result(d), _LAST_WIDTH),
            _next_attempt(d, now),
        )
        for d in deliveries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _last_result(d: Delivery) -> str:
    error = " ".join((d.last_error or "").split())
    if d.last_status is None:
        return error or "-"
    status = f"HTTP {d.last_status}"
    # The notifier's errors name the status already ("HTTP 404", "retries exhausted;
    # last: HTTP 503"): print it once.
    if status in error:
        return error
    return f"{status}: {error}" if error else status


def _next_attempt(d: Delivery, now: float) -> str:
    if d.state is not DeliveryState.PENDING:
        return "-"
    if d.leased_until is not None:
        if d.leased_until > now:
            return f"in flight (claimed; lease ends in {duration(d.leased_until - now)})"
        return "due now (its worker's lease ran out)"
    if d.next_attempt_at <= now:
        return "due now"
    return f"in {duration(d.next_attempt_at - now)}"


def _cmd_deliveries_show(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        delivery = await store.get_delivery(args.id)
        if delivery is None:
            raise CLIError(
                f"no delivery with id {args.id!r} in {store.location}; find ids with "
                f"`{PROG} deliveries list`"
            )
        attempts = await store.list_attempts(delivery.id)
        if args.json:
            data = _delivery_json(delivery, with_body=True)
            data["attempts"] = [_attempt_json(a) for a in attempts]
            print(json.dumps(data, indent=2))
        else:
            now = time.time()
            _print_delivery(delivery, now)
            _print_attempts(attempts, now)
        return 0

    return run_with_store(args, work)


def _print_delivery(d: Delivery, now: float) -> None:
    fields = [
        ("id", d.id),
        ("task", d.task_id),
        ("config key", d.config_key),
        ("seq", str(d.seq)),
        ("kind", d.kind),
        ("state", d.state.value),
        ("attempts", str(d.attempts)),
        ("retry rounds", str(d.rounds)),
        ("last status", "-" if d.last_status is None else str(d.last_status)),
        ("last error", d.last_error or "-"),
        (
            "next attempt",
            f"{utc(d.next_attempt_at)} ({_next_attempt(d, now)})"
            if d.state is DeliveryState.PENDING
            else "-",
        ),
        ("created", f"{utc(d.created_at)} ({ago(d.created_at, now)})"),
        ("updated", f"{utc(d.updated_at)} ({ago(d.updated_at, now)})"),
    ]
    parsed = _parse_body(d.body)
    described = "JSON" if parsed is not _NOT_JSON else "not JSON"
    fields.append(("body", f"{len(d.body)} bytes, {described}"))
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        print(f"{name + ':':<{width}} {value}")
    if parsed is not _NOT_JSON:
        print(json.dumps(parsed, indent=2, ensure_ascii=False))


def _print_attempts(attempts: Sequence[Attempt], now: float) -> None:
    print()
    if not attempts:
        print("attempts: none recorded")
        return
    print("attempts (oldest first):")
    header = ("#", "STARTED", "TOOK", "ENDPOINT", "RESULT", "VERDICT", "RESPONSE")
    rows = [
        (
            str(a.number),
            utc(a.started_at),
            _took(a.duration),
            a.endpoint,
            f"HTTP {a.status}" if a.status is not None else (a.error_class or "-"),
            _verdict(a, now),
            _excerpt(a.response),
        )
        for a in attempts
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    errors = [(a.number, a.error) for a in attempts if a.error]
    for number, error in errors:
        printable = "".join(c if c.isprintable() else "?" for c in error)
        print(f"  #{number}: {printable}")


def _took(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _verdict(a: Attempt, now: float) -> str:
    if a.verdict == "retry" and a.retry_at is not None:
        return f"retry at {utc(a.retry_at)} ({ago(a.retry_at, now)})"
    if a.verdict == "gone":
        return "gone (410: config disabled)"
    return a.verdict


# How much of a response a table cell shows.
_RESPONSE_WIDTH = 40


def _excerpt(response: bytes) -> str:
    if not response:
        return "-"
    """A response for a table cell: text as one line, else its size (never a control
    character: the endpoint chose these bytes, and a terminal would obey them)."""
    try:
        text = response.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The first KiB may end inside a character: that is still text.
        if exc.start < len(response) - 3:
            return f"({len(response)} bytes, not text)"
        text = response[: exc.start].decode("utf-8")
    if not all(c.isprintable() or c in "\r\n\t" for c in text):
        return f"({len(response)} bytes, not text)"
    return shorten(" ".join(text.split()), _RESPONSE_WIDTH)


def _attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_at": utc_iso(a.started_at),
        "duration": a.duration,
        "endpoint": a.endpoint,
        "verdict": a.verdict,
        "status": a.status,
        "error_class": a.error_class,
        "error": a.error,
        "retry_at": None if a.retry_at is None else utc_iso(a.retry_at),
        "response": base64.b64encode(a.response).decode("ascii"),
        "response_bytes": len(a.response),
    }


_NOT_JSON = object()


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return _NOT_JSON


def _delivery_json(d: Delivery, *, with_body: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": d.id,
        "task_id": d.task_id,
        "config_key": d.config_key,
        "seq": d.seq,
        "kind": d.kind,
        "state": d.state.value,
        "attempts": d.attempts,
        "rounds": d.rounds,
        "last_status": d.last_status,
        "last_error": d.last_error,
        "next_attempt_at": utc_iso(d.next_attempt_at) if d.state is DeliveryState.PENDING else None,
        "leased_until": None if d.leased_until is None else utc_iso(d.leased_until),
        "created_at": utc_iso(d.created_at),
        "updated_at": utc_iso(d.updated_at),
        "body_bytes": len(d.body),
        "endpoint": d.endpoint,
    }
    if with_body:
        parsed = _parse_body(d.body)
        data["body"] = None if parsed is _NOT_JSON else parsed
    return data


def _cmd_deliveries_replay(args: argparse.Namespace) -> int:
    by_filter = args.all_dead or args.since is not None or args.until is not None
    if args.ids and by_filter:
        raise CLIError("give either delivery IDs or --all-dead/--since/--until, not both", 2)
    if not args.ids and not by_filter:
        raise CLIError("nothing chosen: give delivery IDs, --all-dead, or --since/--until", 2)
    for flag, given in (
        ("--task", args.task),
        ("--config", args.config),
        ("--endpoint", args.endpoint),
    ):
        if given and not by_filter:
            raise CLIError(f"{flag} applies only with --all-dead or --since/--until", 2)
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise CLIError("--since must be earlier than --until", 2)

    async def work(store: Store) -> int:
        if args.ids:
            chosen = await _dead_by_id(store, args.ids)
        else:
            chosen = await matching_ids(
                store,
                DeliveryFilter(
                    state=DeliveryState.DEAD,
                    task_id=args.task,
                    config_key=args.config,
                    endpoint=args.endpoint,
                    created_after=args.since,
                    created_before=args.until,
                ),
            )
        if not chosen:
            if args.config and await store.get_config_by_key(args.config) is None:
                # A mistyped key is not "nothing to do".
                raise CLIError(
                    f"--config {args.config!r}: no config with that key in {store.location}; "
                    f"find keys with `{PROG} deliveries list --json` (config_key)"
                )
            print("nothing to replay: no dead-lettered deliveries match")
            return 0
        count = await store.replay(chosen)
        skipped = len(chosen) - count
        if count == 0:
            raise CLIError(
                f"none of the {len(chosen)} dead-lettered deliveries could be replayed: "
                "their push configs are disabled or deleted (a2a-push configs enable KEY "
                "for a disabled one, or register the config again; then replay)"
            )
        noun = "delivery" if count == 1 else "deliveries"
        print(f"replayed {count} dead-lettered {noun}; pending again")
        if skipped:
            note(
                f"{skipped} not replayed: their push config is disabled or deleted, or they "
                "are no longer dead"
            )
        note(
            "replay only requeues: a notifier or gateway running on this database sends "
            "them (start one if none is running)"
        )
        return 0

    return run_with_store(args, work)


async def _dead_by_id(store: Store, ids: Sequence[str]) -> list[str]:
    chosen: list[str] = []
    for delivery_id in dict.fromkeys(ids):
        delivery = await store.get_delivery(delivery_id)
        if delivery is None:
            raise CLIError(
                f"no delivery with id {delivery_id!r} in {store.location}; nothing was replayed "
                f"(find ids with `{PROG} deliveries list --state dead`)"
            )
        if delivery.state is DeliveryState.DEAD:
            chosen.append(delivery_id)
        else:
            note(f"{delivery_id} is {delivery.state.value}, not dead; skipped")
    if not chosen:
        raise CLIError("none of the given deliveries is dead-lettered; only those can be replayed")
    return chosen


def _endpoint(text: str) -> str:
    try:
        return parse_endpoint(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_store_generate_key(args: argparse.Namespace) -> int:
    print(generate_key())
    return 0


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``deliveries`` and ``store`` commands and their subcommands."""
    deliveries = add_command(
        commands,
        "deliveries",
        "inspect the delivery outbox and replay dead-lettered deliveries",
        description="Inspect the delivery outbox of a notifier or gateway database, given "
        f"with --database DB: {DATABASE_FORMS}. These commands never read config secrets.",
    )
    deliveries_commands = deliveries.add_subparsers(title="commands", metavar="COMMAND")

    def database_options(sub: Parser) -> None:
        add_database_option(sub, env)
        sub.add_argument(
            "--encryption-key",
            action="append",
            metavar="KEY",
            dest="encryption_keys",
            help="a Fernet key the database's secrets are encrypted with; repeat for "
            f"several (default: ${ENV_ENCRYPTION_KEYS}, comma-separated)",
        )

    listing = add_command(
        deliveries_commands,
        "list",
        "list deliveries, oldest first",
        epilog="Times: 'next' is when a pending delivery is tried next.",
    )
    database_options(listing)
    listing.add_argument("--state", choices=STATES, help="only deliveries in this state")
    listing.add_argument("--task", metavar="ID", help="only deliveries of this task")
    listing.add_argument("--config", metavar="KEY", help="only deliveries to this config")
    listing.add_argument(
        "--endpoint",
        type=_endpoint,
        metavar="ORIGIN",
        help="only deliveries queued for this endpoint: scheme://host[:port] (a URL counts "
        "by its origin)",
    )
    listing.add_argument(
        "--since", type=iso_time, metavar="ISO", help="only deliveries created at or after"
    )
    listing.add_argument(
        "--until", type=iso_time, metavar="ISO", help="only deliveries created before"
    )
    listing.add_argument(
        "--after", metavar="ID", help="start after this delivery id (to page through)"
    )
    listing.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="at most N (default: 100)"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(handler=_cmd_deliveries_list)

    show = add_command(
        deliveries_commands, "show", "show one delivery with its body and its attempts"
    )
    show.add_argument("id", metavar="ID", help="the delivery id (the webhook-id header)")
    database_options(show)
    show.add_argument("--json", action="store_true", help="print a JSON object")
    show.set_defaults(handler=_cmd_deliveries_show)

    replay = add_command(
        deliveries_commands,
        "replay",
        "send dead-lettered deliveries again",
        description="Put dead-lettered deliveries back in their queues as new. Replay only "
        "requeues them: a notifier or gateway running on the same database sends them.",
        epilog="Choose what to replay: delivery IDs, or --all-dead, or a creation window "
        "(--since/--until); --task, --config and --endpoint narrow the last two. A delivery "
        "whose config is disabled or deleted is not replayed. Times are ISO 8601; without an "
        "offset they are UTC.",
    )
    replay.add_argument("ids", nargs="*", metavar="ID", help="dead-lettered delivery ids")
    database_options(replay)
    replay.add_argument(
        "--all-dead", action="store_true", help="replay every dead-lettered delivery"
    )
    replay.add_argument("--task", metavar="ID", help="only dead-lettered deliveries of this task")
    replay.add_argument(
        "--config", metavar="KEY", help="only dead-lettered deliveries to this config"
    )
    replay.add_argument(
        "--endpoint",
        type=_endpoint,
        metavar="ORIGIN",
        help="only dead-lettered deliveries queued for this endpoint (scheme://host[:port])",
    )
    replay.add_argument(
        "--since", type=iso_time, metavar="ISO", help="only ones created at or after this time"
    )
    replay.add_argument(
        "--until", type=iso_time, metavar="ISO", help="only ones created before this time"
    )
    replay.set_defaults(handler=_cmd_deliveries_replay)

    store = add_command(commands, "store", "store utilities (generate-key)")
    store_commands = store.add_subparsers(title="commands", metavar="COMMAND")
    gen_key = add_command(
        store_commands,
        "generate-key",
        "print a new Fernet key for encrypting config secrets (encryption_keys)",
        epilog="Keep it secret: put it in your secret manager, not in a repository.",
    )
    gen_key.set_defaults(handler=_cmd_store_generate_key)
