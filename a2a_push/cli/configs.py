"""``a2a-push configs``: disable or enable a push config."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping

from ..store import (
    DeliveryFilter,
    DeliveryState,
    Store,
    matching_ids,
    shown_database,
)
from .common import ENV_DATABASE, PROG, CLIError, Commands, add_command, note
from .outbox import add_database_option, run_with_store


def _cmd_configs_toggle(args: argparse.Namespace) -> int:
    key: str = args.key

    async def work(store: Store) -> int:
        reason = None if args.enable else "disabled by an operator (a2a-push configs disable)"
        # The store answers only whether the config exists: count what disabling moves
        # to dead letters first (a notifier running meanwhile may change it a little).
        pending = (
            []
            if args.enable
            else await matching_ids(
                store, DeliveryFilter(state=DeliveryState.PENDING, config_key=key)
            )
        )
        if not await store.set_config_enabled(key, args.enable, reason):
            raise CLIError(
                f"no config with key {key!r}; find keys with `{PROG} deliveries list --json` "
                "(config_key)"
            )
        if not args.enable:
            print(
                f"config {key} disabled; {_count(len(pending), 'pending delivery')} moved to "
                "dead letters"
            )
            return 0
        print(f"config {key} enabled")
        dead = await matching_ids(store, DeliveryFilter(state=DeliveryState.DEAD, config_key=key))
        if dead:
            command = f"{PROG} deliveries replay --all-dead --config {shlex.quote(key)}"
            note(
                f"{_count(len(dead), 'dead-lettered delivery')} of this config "
                f"{'is' if len(dead) == 1 else 'are'} not re-sent by enabling it; re-send "
                f"{'it' if len(dead) == 1 else 'them'} with `{command}{_database_flag(args)}`"
            )
        return 0

    return run_with_store(args, work)


def _count(n: int, noun: str) -> str:
    """``1 pending delivery``, ``3 pending deliveries``."""
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {plural}"


def _database_flag(args: argparse.Namespace) -> str:
    """`` --database DB`` for a command to suggest; nothing when the environment has it.
    Credentials in a URL show as ``***``."""
    database: str | None = args.database
    if not database or database == os.environ.get(ENV_DATABASE):
        return ""
    return f" --database {shlex.quote(shown_database(database))}"


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``configs`` command and its subcommands."""
    configs = add_command(
        commands,
        "configs",
        "disable or enable a push config (disabling dead-letters its pending deliveries)",
        description="Disable or enable a push config in a notifier or gateway database, by "
        "its key (the config_key that `deliveries list --json` shows; configKey in the "
        "gateway's admin API).",
    )
    configs_commands = configs.add_subparsers(title="commands", metavar="COMMAND")
    toggles = {
        "disable": (
            "stop a config's deliveries; its pending deliveries are moved to dead letters",
            "Disable a push config: no new deliveries are queued for it, and its pending "
            "deliveries are moved to dead letters at once (the command says how many). To "
            f"send them later: `{PROG} configs enable KEY`, then `{PROG} deliveries replay "
            "--all-dead --config KEY`.",
        ),
        "enable": (
            "let a disabled config get deliveries again",
            "Enable a push config: new events are delivered to it again. Deliveries "
            "dead-lettered meanwhile are not re-sent by themselves; the command says how "
            f"many there are and how to replay them (`{PROG} deliveries replay`).",
        ),
    }
    for action, (help_text, description) in toggles.items():
        sub = add_command(configs_commands, action, help_text, description=description)
        sub.add_argument(
            "key", metavar="KEY", help="the config's key (config_key in `deliveries list --json`)"
        )
        add_database_option(sub, env)
        sub.set_defaults(handler=_cmd_configs_toggle, enable=action == "enable")
