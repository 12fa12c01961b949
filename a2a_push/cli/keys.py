"""``a2a-push keys``: the JWT signing keys (generate, rotate, jwks, prune)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import get_args

from ..protocol.constants import (
    DEFAULT_KEY_GRACE_PERIOD_SECONDS,
)
from ..signing import DEFAULT_ALGORITHM, Algorithm, KeySet
from ..signing.keys import METADATA_FILE
from .common import (
    ENV_ENCRYPTION_KEYS,
    ENV_KEYS_DIR,
    PROG,
    CLIError,
    Commands,
    add_command,
    duration,
    non_negative_seconds,
    note,
    utc,
)
from .outbox import given_encryption_keys

ALGORITHMS: tuple[str, ...] = get_args(Algorithm)


def _keys_dir(args: argparse.Namespace) -> Path:
    if not args.dir:
        raise CLIError(f"no key directory given: pass --dir DIR or set {ENV_KEYS_DIR}", 2)
    directory = Path(args.dir)
    outbox = _gateway_outbox_in(directory)
    if outbox is not None:
        # Keys made or changed here would sign nothing: the gateway's are in its database.
        raise CLIError(
            f"{directory} is a gateway's data folder, and a gateway keeps its signing keys "
            "in its database, not in a key directory: rotate them with "
            f"`{PROG} keys rotate --database {shlex.quote(str(outbox))}`; the gateway "
            "publishes them at /.well-known/jwks.json and prunes retired ones itself",
            2,
        )
    return directory


def _gateway_outbox_in(directory: Path) -> Path | None:
    """The SQLite outbox of a gateway whose data folder ``directory`` is (its state file
    ``<outbox>-gateway.db`` beside it); None for any other folder."""
    try:
        states = sorted(directory.glob("*-gateway.db"))
    except OSError:
        return None
    for state in states:
        outbox = state.with_name(state.name.removesuffix("-gateway.db") + ".db")
        if outbox.is_file():
            return outbox
    return None


def _grace(args: argparse.Namespace) -> float:
    value: float | None = getattr(args, "grace_period", None)
    return DEFAULT_KEY_GRACE_PERIOD_SECONDS if value is None else value


def load_keyset(directory: Path, grace_period: float = DEFAULT_KEY_GRACE_PERIOD_SECONDS) -> KeySet:
    """An existing key set; never creates one (a typo must not mint a new signing key)."""
    if not (directory / METADATA_FILE).is_file():
        if (directory / "keys" / METADATA_FILE).is_file():
            # A notifier's data_dir, whose keys are in its keys/ folder.
            raise CLIError(
                f"no key set in {directory} (no {METADATA_FILE}), but there is one in "
                f"{directory / 'keys'}: pass --dir {shlex.quote(str(directory / 'keys'))}"
            )
        raise CLIError(
            f"no key set in {directory} (no {METADATA_FILE}); a notifier's keys are in the "
            f"keys folder of its data_dir: pass that, or create a new set with `{PROG} keys "
            f"generate --dir {shlex.quote(str(directory))}`. A gateway keeps its keys in its "
            f"database: use `{PROG} keys rotate --database DB` (the gateway's --database)"
        )
    return KeySet.load_or_create(directory, grace_period=grace_period)


def _cmd_keys_generate(args: argparse.Namespace) -> int:
    directory = _keys_dir(args)
    existed = (directory / METADATA_FILE).is_file()
    keyset = KeySet.load_or_create(directory, alg=args.alg or DEFAULT_ALGORITHM)
    active = keyset.active
    if existed:
        print(f"key set already exists in {directory}; unchanged")
        if args.alg and args.alg != active.alg:
            note(
                f"the active key is {active.alg}, not {args.alg}; switch with "
                f"`{PROG} keys rotate --dir {directory} --alg {args.alg}`"
            )
    else:
        print(f"created key set in {directory}")
    print(f"active kid: {active.kid}")
    print(f"alg: {active.alg}")
    return 0


def _cmd_keys_rotate(args: argparse.Namespace) -> int:
    if getattr(args, "database", None):
        from ..gateway.cli import rotate_in_database

        keys = given_encryption_keys(args)
        if not keys:
            keys = [
                k.strip()
                for k in os.environ.get("A2A_GATEWAY_ENCRYPTION_KEYS", "").split(",")
                if k.strip()
            ]
        from ..gateway.state import sqlite_state_path

        database = str(args.database)
        state = sqlite_state_path(database)
        if state is not None and not state.is_file():
            # A typo must not mint a signing key in a new, unused database.
            raise CLIError(
                f"no gateway database at {database.removeprefix('sqlite:///')} (no "
                f"{state.name} beside it); give the --database the gateway runs with, or "
                "start the gateway once"
            )
        kid, alg = rotate_in_database(database, args.alg, keys or None)
        print(f"new active kid: {kid} ({alg})")
        note("running gateways switch to the new key within their key_reload_interval (10 s)")
        return 0
    directory = _keys_dir(args)
    grace = _grace(args)
    keyset = load_keyset(directory, grace)
    previous = keyset.active
    new = keyset.rotate(alg=args.alg)
    until = (previous.retired_at or time.time()) + grace
    print(f"new active kid: {new.kid} ({new.alg})")
    print(f"retired kid: {previous.kid} ({previous.alg}), published until {utc(until)}")
    note(
        "running notifiers with their keys in this directory switch to the new key within "
        "their key_reload_interval (30 s by default)"
    )
    return 0


def _cmd_keys_jwks(args: argparse.Namespace) -> int:
    keyset = load_keyset(_keys_dir(args), _grace(args))
    print(json.dumps(keyset.jwks(), indent=2))
    return 0


def _cmd_keys_prune(args: argparse.Namespace) -> int:
    grace = _grace(args)
    keyset = load_keyset(_keys_dir(args), grace)
    pruned = keyset.prune()
    if not pruned:
        print(f"nothing to prune: no retired key is past its grace period ({duration(grace)})")
        return 0
    for kid in pruned:
        print(f"pruned kid: {kid}")
    return 0


def add_commands(commands: Commands, env: Mapping[str, str]) -> None:
    """The ``keys`` command and its subcommands."""
    keys = add_command(
        commands,
        "keys",
        "manage the JWT signing keys (generate, rotate, jwks, prune)",
        description="Manage the key set that signs webhook JWTs, kept in a directory.",
    )
    keys_commands = keys.add_subparsers(title="commands", metavar="COMMAND")
    dir_help = f"the key set directory (default: ${ENV_KEYS_DIR})"
    grace_help = (
        "how long a retired key stays published in the JWKS, in seconds (default: "
        f"{DEFAULT_KEY_GRACE_PERIOD_SECONDS:g}); use the value your notifier runs with"
    )

    generate = add_command(
        keys_commands,
        "generate",
        "create the key set if it does not exist; print the active kid and algorithm",
    )
    generate.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    generate.add_argument(
        "--alg",
        choices=ALGORITHMS,
        help=f"algorithm of the first key (default: {DEFAULT_ALGORITHM}); an existing set "
        "keeps its keys (use `keys rotate --alg` to switch)",
    )
    generate.set_defaults(handler=_cmd_keys_generate)

    rotate = add_command(
        keys_commands,
        "rotate",
        "make a new key active and retire the current one (still published for the grace period)",
    )
    where = rotate.add_mutually_exclusive_group()  # a key directory or a gateway's keys
    where.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    rotate.add_argument(
        "--alg", choices=ALGORITHMS, help="algorithm of the new key (default: the current one)"
    )
    rotate.add_argument("--grace-period", type=non_negative_seconds, default=None, help=grace_help)
    where.add_argument(
        "--database",
        metavar="DB",
        help="rotate the key set a gateway keeps in this database (postgresql://… or the "
        "gateway's SQLite outbox file) instead of a directory",
    )
    rotate.add_argument(
        "--encryption-key",
        action="append",
        metavar="KEY",
        dest="encryption_keys",
        help="with --database: a Fernet key the gateway seals its keys with; repeat for "
        f"several (default: ${ENV_ENCRYPTION_KEYS} or $A2A_GATEWAY_ENCRYPTION_KEYS)",
    )
    rotate.set_defaults(handler=_cmd_keys_rotate)

    jwks = add_command(
        keys_commands, "jwks", "print the public JWK Set receivers verify webhooks with"
    )
    jwks.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    jwks.add_argument("--grace-period", type=non_negative_seconds, default=None, help=grace_help)
    jwks.set_defaults(handler=_cmd_keys_jwks)

    prune = add_command(keys_commands, "prune", "delete retired keys whose grace period is over")
    prune.add_argument("--dir", default=env.get(ENV_KEYS_DIR), help=dir_help)
    prune.add_argument("--grace-period", type=non_negative_seconds, default=None, help=grace_help)
    prune.set_defaults(handler=_cmd_keys_prune)
