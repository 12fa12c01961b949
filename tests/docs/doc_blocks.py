"""The fenced code blocks of README.md and docs/*.md, with the doc-test marker before each.

A marker is an HTML comment (invisible to readers) on the line right before the fence
(blank lines between are allowed; several marker comments may be stacked):

- ``<!-- doc-test: skip: REASON -->``: not run (the reason is required);
- ``<!-- doc-test: continues -->``: runs in the session of the file's previous runnable
  block (same Python namespace, same shell, its background processes still running);
- ``<!-- doc-test: setup: NAME k=v ... -->``: a setup of ``doc_setups.SETUPS`` runs first;
- ``<!-- doc-test: output -->``: sample output, not run; ``<!-- doc-test: output: json -->``
  also checks that the previous runnable block printed this JSON (equal as JSON);
- ``<!-- doc-test: settings: gateway|receiver -->``: a TOML or JSON block that must load
  as the gateway's or the receiver's settings.

Blocks in ``python`` and the shell languages are run unless a marker says otherwise;
blocks in the other known languages (text, json, http, toml, none) are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHELL_LANGS = frozenset({"sh", "shell", "bash", "console"})
PYTHON_LANGS = frozenset({"python", "py"})
PASSIVE_LANGS = frozenset({"", "text", "json", "http", "toml", "yaml", "sql", "jsonc"})
KNOWN_LANGS = SHELL_LANGS | PYTHON_LANGS | PASSIVE_LANGS

MARKER_KINDS = frozenset({"skip", "continues", "setup", "output", "settings"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")


class MarkerError(ValueError):
    """A doc-test marker that cannot be used (unknown kind, a skip without a reason...)."""


@dataclass(frozen=True)
class Marker:
    kind: str
    arg: str = ""  # the text after "kind:" (skip reason, setup line, settings kind)
    line: int = 0


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository root, e.g. "docs/gateway.md"
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: tuple[Marker, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    def marker(self, kind: str) -> Marker | None:
        return next((m for m in self.markers if m.kind == kind), None)

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON_LANGS

    @property
    def runnable(self) -> bool:
        """Run by the harness: python or shell, not skipped and not sample output."""
        if self.marker("skip") or self.marker("output") or self.marker("settings"):
            return False
        return self.is_shell or self.is_python

    @property
    def tested(self) -> bool:
        """Gets a test of its own: run, loaded as settings, or compared as output."""
        out = self.marker("output")
        return self.runnable or bool(self.marker("settings")) or bool(out and out.arg)


def parse_marker(body: str, line: int) -> Marker:
    kind, _sep, arg = body.partition(":")
    kind, arg = kind.strip(), arg.strip()
    if kind not in MARKER_KINDS:
        raise MarkerError(f"unknown doc-test marker {kind!r} (known: {sorted(MARKER_KINDS)})")
    if kind == "skip" and not arg:
        raise MarkerError("a doc-test skip needs a reason: <!-- doc-test: skip: REASON -->")
    if kind in ("setup", "settings") and not arg:
        raise MarkerError(f"doc-test {kind} needs a name: <!-- doc-test: {kind}: NAME -->")
    if kind == "settings" and arg not in ("gateway", "receiver"):
        raise MarkerError(f"doc-test settings are 'gateway' or 'receiver', not {arg!r}")
    if kind == "continues" and arg:
        raise MarkerError("doc-test continues takes no argument")
    if kind == "output" and arg not in ("", "json"):
        raise MarkerError(f"doc-test output is checked as 'json' or not at all, not {arg!r}")
    return Marker(kind, arg, line)


def parse(text: str, file: str) -> tuple[list[Block], list[str]]:
    """The blocks of one markdown text, and the problems found (as ``file:line: ...``)."""
    lines = text.split("\n")
    blocks: list[Block] = []
    problems: list[str] = []
    pending: list[Marker] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.match(line)
        if marker:
            try:
                pending.append(parse_marker(marker.group("body"), i + 1))
            except MarkerError as exc:
                problems.append(f"{file}:{i + 1}: {exc}")
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip():
                for m in pending:
                    problems.append(f"{file}:{m.line}: doc-test marker not right before a block")
                pending = []
            i += 1
            continue
        indent, opener = fence.group("indent"), fence.group("fence")
        lang = fence.group("info").strip().split(" ")[0].lower() if fence.group("info") else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^[ \t]*{re.escape(opener)}[ \t]*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            problems.append(f"{file}:{i + 1}: code block never closed")
        block = Block(file, i + 1, lang, "\n".join(body) + "\n", tuple(pending))
        if lang not in KNOWN_LANGS:
            problems.append(f"{block.id}: unknown block language {lang!r}")
        if block.marker("settings") and lang not in ("toml", "json"):
            problems.append(f"{block.id}: settings blocks are toml or json, not {lang!r}")
        if block.marker("continues") and not block.runnable:
            problems.append(f"{block.id}: 'continues' on a block that is not run")
        if block.marker("setup") and not block.runnable:
            problems.append(f"{block.id}: 'setup' on a block that is not run")
        blocks.append(block)
        pending = []
        i = j + 1
    for m in pending:
        problems.append(f"{file}:{m.line}: doc-test marker not right before a block")
    return blocks, problems


def doc_files() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def all_blocks() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for name in doc_files():
        found, wrong = parse((ROOT / name).read_text(encoding="utf-8"), name)
        blocks += found
        problems += wrong
    for i, block in enumerate(blocks):
        if block.marker("continues") and previous_runnable(blocks, i) is None:
            problems.append(f"{block.id}: 'continues' but no runnable block before it")
    return blocks, problems


def previous_runnable(blocks: list[Block], index: int) -> Block | None:
    """The runnable block before ``blocks[index]`` in the same file."""
    for block in reversed(blocks[:index]):
        if block.file != blocks[index].file:
            return None
        if block.runnable:
            return block
    return None
