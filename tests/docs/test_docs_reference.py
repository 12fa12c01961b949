"""docs/configuration.md against the code: its tables must not drift.

Checked mechanically, from the objects themselves (never from a copy of their defaults):

- the options dataclasses (``Retention``, ``DispatcherOptions``, ``RetryPolicy``,
  ``Timeouts``, ``StoreOptions``): every field has a row, every row is a field, and the
  documented default equals the real one;
- the argument tables of ``PushNotifier.open()``, ``PushNotifier``, ``Transport``,
  ``AddressPolicy``, ``EndpointHealth``, ``SQLiteStore``, ``PushConfigService``,
  ``mount`` and ``A2APushConfigStore``: the same, against ``inspect.signature``;
- the signatures the doc writes out (``KeySet.load_or_create(directory, alg="ES256", …)``
  in headings, at the start of a line, and in the first column of call tables):
  every named parameter exists, every ``name=value`` is the real default, and a
  signature without ``…`` names every parameter;
- the ``a2a-push`` command: every flag (and positional) of every command of the parser
  from ``a2a_push.cli.build_parser()`` is in the docs' tables for that command, and
  every documented flag exists there; literal defaults equal the parser's;
- environment variables: every ``A2A_PUSH_*`` / ``A2A_GATEWAY_*`` / ``A2A_RECEIVER_*``
  variable the code reads (string literals in the packages, and one per field of the
  gateway and receiver settings models) is documented, every documented one is read,
  and the commands whose parser defaults come from a variable are listed as using it;
- the gateway and receiver settings tables: every field of ``GatewaySettings`` /
  ``ReceiverSettings`` has a row (with its variable), every row is a field, defaults
  equal the models', and the flags column equals the command's flags.

Defaults are compared as values: ``120`` equals ``120.0``, ``604800`` s "(7 days)" has
its parenthesis checked too, ``Timeouts()`` is an instance equal to ``Timeouts()``
(or ``None`` that the code replaces with one). Cells that are prose are skipped only
where listed below (``PROSE_DEFAULTS``); any other cell the test cannot read fails.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import fnmatch
import inspect
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tenacity import wait_exponential, wait_random

from a2a_push import AddressPolicy, DispatcherOptions, PushNotifier, RetryPolicy, Timeouts
from a2a_push.delivery.health import EndpointHealth
from a2a_push.delivery.transport import Transport
from a2a_push.gateway.settings import ENV_PREFIX as GATEWAY_ENV_PREFIX
from a2a_push.gateway.settings import GatewaySettings
from a2a_push.metrics import Metrics
from a2a_push.notifier import Retention
from a2a_push.protocol.constants import DEFAULT_KEY_GRACE_PERIOD_SECONDS
from a2a_push.server import PushConfigService, agent_card_push_fields, mount
from a2a_push.signing import KeySet, WebhookSigner, standard_webhooks, verify_webhook_jwt
from a2a_push.signing.keys import DEFAULT_ALGORITHM
from a2a_push.store import SQLiteStore, StoreOptions
from receiver.settings import CONFIG_ENV as RECEIVER_CONFIG_ENV
from receiver.settings import ENV_PREFIX as RECEIVER_ENV_PREFIX
from receiver.settings import ReceiverSettings

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "configuration.md"
DOC_NAME = "docs/configuration.md"
PACKAGES = (ROOT / "a2a_push", ROOT / "receiver")
ENV_NAME = re.compile(r"A2A_(?:PUSH|GATEWAY|RECEIVER)_[A-Z0-9_]*[A-Z0-9]")


# ---- what may be prose ---------------------------------------------------------------

# (table, name) -> the documented default that says what the code does with its real
# default (usually None) rather than a value. Only these cells are not compared.
PROSE_DEFAULTS: dict[tuple[str, str], str] = {
    ("Method arguments worth knowing", "task_id"): "`config.task_id`",
    ("receiver", "public_url"): "`http://HOST:PORT`",
    ("receiver", "database"): "`DATA_DIR/receiver.db`",
    ("receiver", "api_keys"): "generated",
    ("gateway", "public_url"): "`http://HOST:PORT`",
    ("gateway", "database"): "`DATA_DIR/outbox.db`",
    ("mock-agent", "--data-dir"): "a temporary folder",
    ("mock-agent", "--public-url"): "`http://HOST:PORT`",
    ("mock-agent", "--retry-schedule"): "the notifier's schedule",
    ("keys rotate", "--alg"): "the current key's algorithm",
}

# Parser defaults of None that the command replaces (the doc gives the real value).
CLI_COMPUTED_DEFAULTS: dict[tuple[str, str], object] = {
    ("keys generate", "--alg"): DEFAULT_ALGORITHM,
    ("keys rotate", "--grace-period"): DEFAULT_KEY_GRACE_PERIOD_SECONDS,
    ("keys jwks", "--grace-period"): DEFAULT_KEY_GRACE_PERIOD_SECONDS,
    ("keys prune", "--grace-period"): DEFAULT_KEY_GRACE_PERIOD_SECONDS,
}

# Test-clock parameters a written-out signature may leave out.
UNDOCUMENTED_PARAMETERS = frozenset({"now"})


# ---- reading the doc -------------------------------------------------------------------


@dataclass
class Row:
    cells: list[str]
    line: int

    def __getitem__(self, index: int) -> str:
        return self.cells[index] if index < len(self.cells) else ""

    def where(self) -> str:
        return f"{DOC_NAME}:{self.line} (row {self.cells[0]!r})"


@dataclass
class Table:
    heading: str
    line: int
    header: list[str]
    rows: list[Row]


@dataclass
class Doc:
    text: str
    headings: list[tuple[int, str]]
    tables: list[Table]
    line_starts: list[tuple[int, str]]  # (line number, a code span a prose line starts with)

    def table(self, heading: str, *, index: int = 0) -> Table:
        found = [t for t in self.tables if heading in t.heading]
        assert len(found) > index, (
            f"{DOC_NAME}: no table under a heading containing {heading!r} (the test looks "
            "for it there; was the section renamed?)"
        )
        return found[index]


def split_cells(line: str) -> list[str]:
    body = line.strip()
    body = body.removeprefix("|").removesuffix("|")
    cells = re.split(r"(?<!\\)\|", body)
    return [c.strip().replace("\\|", "|") for c in cells]


def read_doc() -> Doc:
    text = DOC_PATH.read_text("utf-8")
    headings: list[tuple[int, str]] = []
    tables: list[Table] = []
    starts: list[tuple[int, str]] = []
    heading = ""
    fenced = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        number = i + 1
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            pass
        elif line.startswith("#"):
            heading = line.lstrip("#").strip()
            headings.append((number, heading))
        elif (
            line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-| :]+\|$", lines[i + 1])
        ):
            header = split_cells(line)
            rows: list[Row] = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append(Row(split_cells(lines[j]), j + 1))
                j += 1
            tables.append(Table(heading, number, header, rows))
            i = j
            continue
        elif line.startswith("`"):
            span = re.match(r"`([^`]+)`", line)
            if span:
                starts.append((number, span.group(1)))
        i += 1
    return Doc(text, headings, tables, starts)


def spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def names(cell: str) -> list[str]:
    """The names a first column documents: its code spans, outside parentheses
    (``api_keys` (`client_id`, `api_key`)`` documents ``api_keys``)."""
    return [s.strip() for s in spans(re.sub(r"\([^)]*\)", "", cell))]


def top_level_split(cell: str) -> list[str]:
    """``cell`` split at commas outside code spans and parentheses."""
    out, depth, code, current = [], 0, False, ""
    for char in cell:
        if char == "`":
            code = not code
        elif not code and char in "([":
            depth += 1
        elif not code and char in ")]":
            depth -= 1
        if char == "," and not code and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += char
    out.append(current.strip())
    return out


# ---- comparing defaults ----------------------------------------------------------------

REQUIRED = object()
_UNITS = {
    "s": 1,
    "m": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
    "KiB": 1024,
    "MiB": 1024 * 1024,
}
_WAITS: dict[str, object] = {"wait_exponential": wait_exponential, "wait_random": wait_random}


class Unreadable(Exception):
    """A default cell that is neither a value nor listed as prose."""


def same_structure(a: object, b: object) -> bool:
    """Equality for values, and attribute-wise equality for objects without ``__eq__``
    (tenacity's wait strategies)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if a == b:
        return True
    if hasattr(a, "__dict__") and type(a).__eq__ is object.__eq__:
        return same_structure(sorted(vars(a).items()), sorted(vars(b).items()))
    return False


def matches(code: str, actual: object) -> bool:
    """Whether the code span ``code`` documents the default ``actual``."""
    if actual is REQUIRED:
        return False
    try:
        literal = ast.literal_eval(code)
    except (ValueError, SyntaxError):
        pass
    else:
        if isinstance(actual, enum.Enum):
            actual = actual.value
        if isinstance(actual, Path):
            actual = str(actual)
        return same_structure(literal, actual)
    if isinstance(actual, str | Path | enum.Enum):  # unquoted: `INFO`, `./receiver-data`
        value = actual.value if isinstance(actual, enum.Enum) else str(actual)
        return code.removeprefix("./") == value.removeprefix("./")
    constructed = re.fullmatch(r"([A-Za-z_]\w*)\(\)", code)
    if constructed:  # `Timeouts()`: that instance, or None that the code replaces with one
        if actual is None:
            return True
        kind = type(actual)
        return kind.__name__ == constructed.group(1) and same_structure(actual, kind())
    if re.fullmatch(r"[A-Za-z_]\w*", code) and callable(actual):
        return getattr(actual, "__name__", None) == code
    if re.fullmatch(r"[\w\s().,=+]+", code):  # `wait_exponential(...) + wait_random(...)`
        try:
            built = eval(code, {"__builtins__": {}}, dict(_WAITS))
        except Exception:
            return False
        return same_structure(built, actual)
    return False


def read_default(cell: str) -> tuple[str, str] | object:
    """A default cell as ``(code, rest)`` (the leading code span and what follows), or
    REQUIRED, None (``none``), False (``off``); Unreadable for anything else."""
    cell = cell.strip()
    if cell in ("required", "—"):
        return REQUIRED
    if cell == "none":
        return None
    if cell == "off":
        return False
    match = re.match(r"`([^`]+)`(.*)", cell)
    if not match:
        raise Unreadable(cell)
    return match.group(1), match.group(2)


def check_units(code: str, rest: str) -> str | None:
    """``604800` s (7 days)``: the parenthesis must say the same (None when it does)."""
    paren = re.match(r"\s*(?:s\s*)?\((\d[\d,.]*)\s+(s|m|h|hours?|days?|KiB|MiB)\)", rest)
    if not paren:
        return None
    try:
        value = float(ast.literal_eval(code))
    except (ValueError, SyntaxError, TypeError):
        return None
    said = float(paren.group(1).replace(",", "")) * _UNITS[paren.group(2)]
    if math.isclose(value, said):
        return None
    return f"{code} is not ({paren.group(1)} {paren.group(2)})"


def compare_default(
    problems: list[str], row: Row, name: str, cell: str, actual: object, *, table: str
) -> None:
    """Add a problem naming the row and both values when ``cell`` does not document
    ``actual``."""
    if PROSE_DEFAULTS.get((table, name)) == cell.strip():
        return
    try:
        documented = read_default(cell)
    except Unreadable:
        problems.append(
            f"{row.where()}: cannot read the default {cell!r} of {name!r} (code: "
            f"{actual_text(actual)}); write the value in backticks, or list the cell in "
            "PROSE_DEFAULTS"
        )
        return
    if documented is REQUIRED:
        ok = actual is REQUIRED
    elif documented is None:
        ok = actual is None or actual == () or actual == [] or actual == ""
    elif documented is False:
        ok = actual is False or actual == 0
    else:
        assert isinstance(documented, tuple)
        code, rest = documented
        ok = matches(code, actual)
        units = check_units(code, rest) if ok else None
        if units:
            problems.append(f"{row.where()}: default of {name!r}: {units}")
    if not ok:
        problems.append(
            f"{row.where()}: default of {name!r}: docs say {cell.strip()!r}, code has "
            f"{actual_text(actual)}"
        )


def actual_text(actual: object) -> str:
    if actual is REQUIRED:
        return "no default (required)"
    text = repr(actual)
    if " object at 0x" in text and hasattr(actual, "__dict__"):  # tenacity's waits
        fields = ", ".join(f"{k}={actual_text(v)}" for k, v in vars(actual).items())
        return f"{type(actual).__name__}({fields})"
    if isinstance(actual, tuple | list) and " object at 0x" in text:
        return "(" + ", ".join(actual_text(v) for v in actual) + ")"
    return text


def report(problems: list[str]) -> None:
    if problems:
        pytest.fail(
            f"{len(problems)} difference(s) between {DOC_NAME} and the code:\n  "
            + "\n  ".join(problems),
            pytrace=False,
        )


@pytest.fixture(scope="module")
def doc() -> Doc:
    return read_doc()


# ---- options dataclasses and argument tables -------------------------------------------


def dataclass_defaults(kind: type) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(kind):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = REQUIRED
    return out


def signature_defaults(func: Callable[..., Any], skip: tuple[str, ...] = ()) -> dict[str, object]:
    out: dict[str, object] = {}
    for p in inspect.signature(func).parameters.values():
        if p.name in ("self", *skip):
            continue
        if p.kind is p.VAR_KEYWORD:
            out[f"**{p.name}"] = ""
        elif p.kind is p.VAR_POSITIONAL:
            out[f"*{p.name}"] = ""
        else:
            out[p.name] = REQUIRED if p.default is p.empty else p.default
    return out


def _sdk_store() -> Callable[..., Any]:
    sdk = pytest.importorskip("a2a_push.integrations.a2a_sdk")
    return sdk.A2APushConfigStore  # type: ignore[no-any-return]


# heading text -> (the defaults in the code, columns: name, default)
OPTION_TABLES: dict[str, Callable[[], dict[str, object]]] = {
    "`Retention`": lambda: dataclass_defaults(Retention),
    "`DispatcherOptions`": lambda: dataclass_defaults(DispatcherOptions),
    "`RetryPolicy`": lambda: dataclass_defaults(RetryPolicy),
    "`Timeouts`": lambda: dataclass_defaults(Timeouts),
    "`StoreOptions`": lambda: dataclass_defaults(StoreOptions),
    "`PushNotifier.open()`": lambda: signature_defaults(PushNotifier.open),
    "`PushNotifier(store": lambda: signature_defaults(PushNotifier),
    "`Transport`": lambda: signature_defaults(Transport),
    "`AddressPolicy`": lambda: signature_defaults(AddressPolicy),
    "`EndpointHealth`": lambda: signature_defaults(EndpointHealth),
    "`SQLiteStore(": lambda: signature_defaults(SQLiteStore),
    "`PushConfigService`": lambda: signature_defaults(PushConfigService),
    # app and service are named in the heading, `mount(app, service, …)`
    "`mount(": lambda: signature_defaults(mount, skip=("app", "service")),
}


@pytest.mark.parametrize("heading", list(OPTION_TABLES))
def test_option_table_matches_code(doc: Doc, heading: str) -> None:
    table = doc.table(heading)
    actual = OPTION_TABLES[heading]()
    problems: list[str] = []
    seen: set[str] = set()
    for row in table.rows:
        for name in names(row[0]):
            seen.add(name)
            if name not in actual:
                problems.append(
                    f"{row.where()}: {name!r} is documented under {heading} but the code has "
                    f"no such field/argument (it has: {', '.join(actual)})"
                )
            elif name.startswith("*"):
                continue
            else:
                compare_default(problems, row, name, row[1], actual[name], table=heading)
    for name, default in actual.items():
        if name not in seen:
            problems.append(
                f"{DOC_NAME}:{table.line}: the table under {heading} has no row for {name!r} "
                f"(code default: {actual_text(default)})"
            )
    report(problems)


def test_a2a_sdk_table_matches_code(doc: Doc) -> None:
    store = _sdk_store()
    table = doc.table("a2a-sdk integration")
    actual = signature_defaults(store, skip=("notifier",))
    problems: list[str] = []
    seen: set[str] = set()
    call = ""
    for row in table.rows:
        call = row[0] or call
        if not call.startswith("`A2APushConfigStore("):
            continue
        for name in names(row[1]):
            seen.add(name)
            if name not in actual:
                problems.append(f"{row.where()}: A2APushConfigStore has no argument {name!r}")
            else:
                compare_default(problems, row, name, row[2], actual[name], table="a2a-sdk")
    problems += [
        f"{DOC_NAME}:{table.line}: no row for A2APushConfigStore's {name!r} "
        f"(code default: {actual_text(default)})"
        for name, default in actual.items()
        if name not in seen
    ]
    report(problems)


def test_retry_summary_matches_the_default_policy(doc: Doc) -> None:
    """ "At most 10 HTTP attempts (3 quick, then 7 durable) over ... (99,305 s before
    jitter)": the sentence under the RetryPolicy table."""
    policy = RetryPolicy()
    attempts = re.search(
        r"at most (\d+) HTTP attempts \((\d+) quick, then (\d+)\s+durable\)", doc.text
    )
    total = re.search(r"\(([\d,]+) s before jitter\)", doc.text)
    assert attempts and total, f"{DOC_NAME}: the retry summary sentence is gone (or reworded)"
    documented = tuple(int(n) for n in attempts.groups())
    quick, durable = policy.quick_attempts, len(policy.schedule)
    assert documented == (quick + durable, quick, durable), (
        f"{DOC_NAME}: docs say at most {documented[0]} attempts ({documented[1]} quick, "
        f"{documented[2]} durable); the default RetryPolicy makes {quick + durable} "
        f"({quick} quick, {durable} durable)"
    )
    seconds = int(total.group(1).replace(",", ""))
    assert math.isclose(seconds, sum(policy.schedule)), (
        f"{DOC_NAME}: docs say {total.group(1)} s before jitter; the default schedule "
        f"sums to {sum(policy.schedule):g} s"
    )


# ---- written-out signatures ------------------------------------------------------------


def _sdk(name: str) -> Callable[[], Callable[..., Any] | None]:
    """A callable of the a2a-sdk integration; None without the a2a-sdk extra."""

    def get() -> Callable[..., Any] | None:
        try:
            from a2a_push.integrations import a2a_sdk
        except ImportError:
            return None
        return getattr(a2a_sdk, name)  # type: ignore[no-any-return]

    return get


# How the doc names a callable -> the callable.
SIGNATURES: dict[str, Callable[[], Callable[..., Any] | None]] = {
    "PushNotifier.open": lambda: PushNotifier.open,
    "PushNotifier": lambda: PushNotifier,
    "register_config": lambda: PushNotifier.register_config,
    "check_config": lambda: PushNotifier.check_config,
    "catch_up": lambda: PushNotifier.catch_up,
    "send_snapshot": lambda: PushNotifier.send_snapshot,
    "publish": lambda: PushNotifier.publish,
    "list_configs": lambda: PushNotifier.list_configs,
    "dead_letters": lambda: PushNotifier.dead_letters,
    "add_routes": lambda: PushNotifier.add_routes,
    "SQLiteStore": lambda: SQLiteStore,
    "reencrypt_secrets": lambda: SQLiteStore.reencrypt_secrets,
    "KeySet.load_or_create": lambda: KeySet.load_or_create,
    "KeySet.generate": lambda: KeySet.generate,
    "keyset.rotate": lambda: KeySet.rotate,
    "keyset.prune": lambda: KeySet.prune,
    "keyset.reload": lambda: KeySet.reload,
    "keyset.jwks": lambda: KeySet.jwks,
    "WebhookSigner": lambda: WebhookSigner,
    "verify_webhook_jwt": lambda: verify_webhook_jwt,
    "standard_webhooks.verify": lambda: standard_webhooks.verify,
    "Metrics": lambda: Metrics,
    "mount": lambda: mount,
    "agent_card_push_fields": lambda: agent_card_push_fields,
    "A2APushConfigStore": _sdk("A2APushConfigStore"),
    "A2APushSender": _sdk("A2APushSender"),
}
_CALL = re.compile(r"([A-Za-z_][\w.]*)\((.*)\)")


def written_signatures(doc: Doc) -> Iterator[tuple[str, str, bool]]:
    """(where, name, arguments, strict) for each signature the doc writes out: in
    headings, at the start of a line, and in the first column of call tables (strict:
    the name must be known)."""
    for number, heading in doc.headings:
        for span in spans(heading):
            yield f"{DOC_NAME}:{number}", span, False
    for number, span in doc.line_starts:
        yield f"{DOC_NAME}:{number}", span, False
    for table in doc.tables:
        if table.header[0] in ("call", "function"):
            for row in table.rows:
                for span in spans(row[0]):
                    yield row.where(), span, True


def check_signature(where: str, name: str, arguments: str, func: Callable[..., Any]) -> list[str]:
    params = {p.name: p for p in inspect.signature(func).parameters.values() if p.name != "self"}
    problems: list[str] = []
    listed: set[str] = set()
    partial = False
    for item in top_level_split(arguments) if arguments.strip() else []:
        if item in ("*", "/"):
            continue
        if item in ("…", "..."):
            partial = True
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        bare = key.lstrip("*")
        listed.add(bare)
        param = params.get(bare)
        if param is None:
            problems.append(
                f"{where}: {name}() has no parameter {key!r} (it has: {', '.join(params)})"
            )
            continue
        actual = REQUIRED if param.default is param.empty else param.default
        if eq and not matches(value.strip(), actual):
            problems.append(
                f"{where}: {name}({key}=...): docs say {value.strip()!r}, code has "
                f"{actual_text(actual)}"
            )
    if not partial:
        missing = [n for n in params if n not in listed and n not in UNDOCUMENTED_PARAMETERS]
        if missing:
            problems.append(
                f"{where}: {name}({arguments}) leaves out {', '.join(missing)} (add them, or "
                "write … where the list is not complete)"
            )
    return problems


def test_written_signatures_match_code(doc: Doc) -> None:
    problems: list[str] = []
    checked: set[str] = set()
    for where, span, strict in written_signatures(doc):
        call = _CALL.fullmatch(span)
        if not call:
            if strict:
                problems.append(f"{where}: {span!r} is not a call, name(arguments)")
            continue
        name, arguments = call.groups()
        if name not in SIGNATURES:
            if strict:
                problems.append(f"{where}: {name!r} is not a known callable; add it to SIGNATURES")
            continue
        checked.add(name)
        func = SIGNATURES[name]()
        if func is None:
            continue  # the a2a-sdk extra is not installed
        if arguments.strip() == "" and any(
            p.name != "self" for p in inspect.signature(func).parameters.values()
        ):
            continue  # `PushNotifier.open()`: a name, not a signature
        problems += check_signature(where, name, arguments, func)
    problems += [
        f"{DOC_NAME}: SIGNATURES names {name!r} but the doc never writes its signature "
        "(renamed? drop it from SIGNATURES)"
        for name in SIGNATURES
        if name not in checked
    ]
    report(problems)


def test_method_arguments_match_code(doc: Doc) -> None:
    table = doc.table("Method arguments worth knowing")
    problems: list[str] = []
    call = ""
    for row in table.rows:
        call = row[0] or call
        match = _CALL.fullmatch(spans(call)[0]) if spans(call) else None
        assert match, f"{row.where()}: the call column is not name(arguments)"
        func = SIGNATURES[match.group(1)]()
        assert func is not None
        actual = signature_defaults(func)
        for name in names(row[1]):
            if name not in actual:
                problems.append(f"{row.where()}: {match.group(1)}() has no argument {name!r}")
            else:
                compare_default(problems, row, name, row[2], actual[name], table=table.heading)
    report(problems)


# ---- the a2a-push command --------------------------------------------------------------


@dataclass
class Command:
    name: str  # "keys rotate"; "" is a2a-push itself
    parser: argparse.ArgumentParser

    def flags(self) -> dict[str, argparse.Action]:
        return {
            option: action
            for action in self.parser._actions
            if action.option_strings
            and action.help != argparse.SUPPRESS
            and not isinstance(action, argparse._HelpAction)
            for option in action.option_strings
            if option.startswith("--")
        }

    def positionals(self) -> list[argparse.Action]:
        return [
            a
            for a in self.parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        ]


def walk(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[Command]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs or prefix == "":
        yield Command(prefix, parser)
    for sub in subs:
        for name, child in sub.choices.items():
            yield from walk(child, f"{prefix} {name}".strip())


def build_commands(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None
) -> dict[str, Command]:
    import os

    from a2a_push import cli

    for name in list(os.environ):
        if ENV_NAME.fullmatch(name):
            monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return {c.name: c for c in walk(cli.build_parser())}


def cmd(name: str) -> str:
    return f"a2a-push {name}".strip()


# Commands with a table of their own elsewhere in the doc (checked below).
SERVICE_COMMANDS = ("gateway", "receiver")


def expand_commands(cell: str, commands: dict[str, Command]) -> list[str]:
    """`keys rotate|jwks|prune`, `deliveries …`, `send-test URL`, `keys rotate --database`
    as command names."""
    out: list[str] = []
    for span in spans(cell):
        words = [w for w in span.split() if not w.startswith("-") and not w.isupper()]
        if not words:
            continue
        *group, last = words
        head = " ".join(group)
        if last in ("…", "..."):
            out += [n for n in commands if n.startswith(head + " ")]
            continue
        out += [f"{head} {alt}".strip() for alt in last.split("|")]
    return out


def documented_flags(cell: str) -> list[str]:
    """The flags in the code spans of ``cell`` that start with one (`--limit N`,
    `--all-dead --config KEY`); `deliveries list --json` names another command's."""
    return [
        flag
        for span in spans(cell)
        if span.startswith("--")
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", span)
    ]


def test_cli_tables_match_parser(doc: Doc, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = build_commands(monkeypatch)
    env_table = doc.table("The `a2a-push` command", index=0)
    flag_table = doc.table("The `a2a-push` command", index=1)
    problems: list[str] = []
    documented: dict[str, set[str]] = {name: set() for name in commands}
    words: dict[str, str] = {name: "" for name in commands}  # command and flag cells
    mentioned: set[str] = set()

    for row in env_table.rows:
        used_by = expand_commands(row[1], commands)
        for name in used_by:
            if name not in commands:
                problems.append(f"{row.where()}: used by {name!r}: there is no such command")
        flags = documented_flags(row[2])
        for flag in flags:
            if not any(flag in commands[n].flags() for n in used_by if n in commands):
                problems.append(f"{row.where()}: {flag} is a flag of none of {', '.join(used_by)}")
        for name in used_by:
            if name in commands:
                mentioned.add(name)
                documented[name] |= {f for f in flags if f in commands[name].flags()}

    for row in flag_table.rows:
        cell = row[0]
        used_by = [""] if cell == "`a2a-push`" else expand_commands(cell, commands)
        flags = documented_flags(row[1])
        for name in used_by:
            if name not in commands:
                problems.append(f"{row.where()}: there is no command {name!r}")
                continue
            mentioned.add(name)
            words[name] += f" {cell} {row[1]}"
            for flag in flags:
                if flag not in commands[name].flags():
                    problems.append(
                        f"{row.where()}: {flag} is documented for `{name}`, which has no such "
                        f"flag (it has: {', '.join(sorted(commands[name].flags())) or 'none'})"
                    )
                else:
                    documented[name].add(flag)
            check_cli_defaults(problems, row, name, flags, commands[name])

    for name, command in commands.items():
        if name in SERVICE_COMMANDS:
            continue
        if name not in mentioned:
            problems.append(f"{DOC_NAME}:{flag_table.line}: the command `{cmd(name)}` has no row")
        for flag in sorted(set(command.flags()) - documented[name]):
            problems.append(
                f"{DOC_NAME}:{flag_table.line}: `{cmd(name)} {flag}` is not documented "
                "(in the flags table, or in the environment table's 'same as')"
            )
        for action in command.positionals():
            metavar = str(action.metavar or action.dest).upper()
            if not re.search(rf"(?<![A-Z_]){re.escape(metavar)}(?![A-Z_])", words[name]):
                problems.append(
                    f"{DOC_NAME}:{flag_table.line}: the argument {metavar} of `{name}` is not "
                    "in its row"
                )
    report(problems)


def check_cli_defaults(
    problems: list[str], row: Row, name: str, flags: list[str], command: Command
) -> None:
    """Literal defaults in the 'default, notes' cell: one per flag in the same order,
    ``name `value``` for one flag, or a single default for a row with one flag."""
    cell = row[2]
    known = command.flags()

    def actual(flag: str) -> object:
        computed = CLI_COMPUTED_DEFAULTS.get((name, flag))
        if computed is not None:
            return computed
        action = known[flag]
        if action.default is None and isinstance(action, argparse._AppendAction):
            return []
        return action.default

    def compare(flag: str, documented: str) -> None:
        if flag not in known:
            return
        value = actual(flag)
        if value is None and PROSE_DEFAULTS.get((name, flag)) is None:
            if re.match(r"`", documented) and documented.strip() != "none":
                problems.append(
                    f"{row.where()}: `{name} {flag}` is documented with default "
                    f"{documented!r} but its parser default is None; if the command fills "
                    "it in, add it to CLI_COMPUTED_DEFAULTS"
                )
            return
        compare_default(problems, row, flag, documented, value, table=name)

    items = top_level_split(cell)

    def is_default(item: str, flag: str) -> bool:
        return item.startswith("`") or item in ("none", "off") or (name, flag) in PROSE_DEFAULTS

    if (
        len(flags) > 1
        and len(items) == len(flags)
        and all(is_default(item, flag) for flag, item in zip(flags, items))
    ):
        for flag, item in zip(flags, items):
            compare(flag, item)
        return
    if len(flags) == 1 and cell.startswith("`"):
        compare(flags[0], items[0].split(";")[0].strip())
        return
    if len(flags) == 1 and PROSE_DEFAULTS.get((name, flags[0])) == cell:
        return
    for word, value in re.findall(r"(?<![\w`-])([a-z][a-z-]*) `([^`]+)`", cell):
        flag = f"--{word}"
        if flag in flags:
            compare(flag, f"`{value}`")


# ---- environment variables -------------------------------------------------------------


def literal_variables() -> set[str]:
    """Every variable name the packages spell out as a string literal."""
    found: set[str] = set()
    literal = re.compile(r"""["'](A2A_(?:PUSH|GATEWAY|RECEIVER)_[A-Z0-9_]*[A-Z0-9])["']""")
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            found |= set(literal.findall(path.read_text("utf-8")))
    return found


def variables_in_code() -> set[str]:
    """The literal names, and one per field of the gateway and receiver settings models
    (their loaders build the names from the fields)."""
    found = literal_variables()
    found |= {GATEWAY_ENV_PREFIX + f.upper() for f in GatewaySettings.model_fields}
    found |= {RECEIVER_ENV_PREFIX + f.upper() for f in ReceiverSettings.model_fields}
    found.add(RECEIVER_CONFIG_ENV)
    return found


def test_environment_variables_are_documented(doc: Doc) -> None:
    in_code = variables_in_code()
    in_doc = set(ENV_NAME.findall(doc.text))
    # The settings tables may document a model's variables as A2A_RECEIVER_<KEY>; the
    # settings tests below check those per field.
    generic = {RECEIVER_ENV_PREFIX + f.upper() for f in ReceiverSettings.model_fields} | {
        GATEWAY_ENV_PREFIX + f.upper() for f in GatewaySettings.model_fields
    }
    problems = [
        f"{DOC_NAME}: the code reads ${name}, the doc never names it"
        for name in sorted(in_code - in_doc - generic)
    ]
    problems += [
        f"{DOC_NAME}: ${name} is documented, but no code reads it"
        for name in sorted(in_doc - in_code)
    ]
    report(problems)


def test_environment_table_lists_every_command_using_a_variable(
    doc: Doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command whose parser takes a default from a variable is listed in that
    variable's row, which names the flag it stands for."""
    table = doc.table("The `a2a-push` command", index=0)
    rows = {spans(row[0])[0]: row for row in table.rows}
    sentinel = "env-probe-0123456789abcdef"
    problems: list[str] = []
    for variable in sorted(literal_variables()):  # one at a time: some are fallbacks
        commands = build_commands(monkeypatch, {variable: sentinel})
        for name, command in commands.items():
            if name in SERVICE_COMMANDS:
                continue  # their variables are in their settings tables
            for flag, action in command.flags().items():
                if sentinel not in repr(action.default):
                    continue
                row = rows.get(variable)
                if row is None:
                    problems.append(
                        f"{DOC_NAME}:{table.line}: `{name} {flag}` defaults to ${variable}, "
                        "which has no row in the environment table"
                    )
                    continue
                if name not in expand_commands(row[1], commands):
                    problems.append(
                        f"{row.where()}: `{name} {flag}` defaults to ${variable}, but the "
                        "'used by' column does not list it"
                    )
                if flag not in documented_flags(row[2]):
                    problems.append(
                        f"{row.where()}: ${variable} stands for `{name} {flag}`, which the "
                        "'same as' column does not name"
                    )
    report(problems)


# ---- gateway and receiver settings -----------------------------------------------------


def model_defaults(model: type[Any]) -> dict[str, object]:
    return {
        name: REQUIRED if f.is_required() else f.get_default(call_default_factory=True)
        for name, f in model.model_fields.items()
    }


SERVICES = {
    "gateway": (GatewaySettings, GATEWAY_ENV_PREFIX, "The gateway (`a2a-push gateway`)"),
    "receiver": (ReceiverSettings, RECEIVER_ENV_PREFIX, "The receiver (`a2a-push receiver`)"),
}


@pytest.mark.parametrize("service", list(SERVICES))
def test_service_settings_match_code(
    doc: Doc, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, prefix, heading = SERVICES[service]
    table = doc.table(heading)
    assert table.header[:4] == ["config key", "variable", "flag", "default"], table.header
    defaults = model_defaults(model)
    problems: list[str] = []
    seen: set[str] = set()
    flags_in_doc: set[str] = set()
    for row in table.rows:
        flags_in_doc |= set(documented_flags(row[2]))
        keys = names(row[0])
        if not keys:  # (the file), (logging): flags only
            continue
        fields: list[str] = []
        for key in keys:
            hits = [f for f in defaults if fnmatch.fnmatchcase(f, key)]
            if not hits:
                problems.append(f"{row.where()}: {service} settings have no field {key!r}")
            fields += hits
        seen |= set(fields)
        for name in fields:
            variable = prefix + name.upper()
            if variable not in row[1] and f"{prefix}<KEY>" not in row[1]:
                problems.append(f"{row.where()}: the variable ${variable} is not in its row")
        items = top_level_split(row[3]) if len(keys) > 1 else [row[3]]
        if len(items) != len(fields):
            problems.append(
                f"{row.where()}: {len(fields)} settings but {len(items)} defaults in "
                f"{row[3]!r}; give one default per setting"
            )
            continue
        for name, item in zip(fields, items):
            compare_default(problems, row, name, item, defaults[name], table=service)
    problems += [
        f"{DOC_NAME}:{table.line}: the {service} setting {name!r} has no row (default "
        f"{actual_text(default)})"
        for name, default in defaults.items()
        if name not in seen
    ]
    flags = set(build_commands(monkeypatch)[service].flags())
    problems += [
        f"{DOC_NAME}:{table.line}: `a2a-push {service} {flag}` is not in the table"
        for flag in sorted(flags - flags_in_doc)
    ]
    problems += [
        f"{DOC_NAME}:{table.line}: `a2a-push {service}` has no flag {flag}"
        for flag in sorted(flags_in_doc - flags)
    ]
    report(problems)
