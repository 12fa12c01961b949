"""The repository stands alone: nothing in it points outside it, and what points inside
it leads somewhere.

Over every file of the repository (tracked, or new and not ignored):

- no file names the design notes that live outside the repository (the upper-case
  ``*.md`` names the checks below spell out) or a path into a sibling folder of the
  checkout (two dots, a slash and the sibling's name);
- every relative link of a Markdown file (``[text](path)``, ``[text](path#anchor)``,
  ``[text](#anchor)``, reference definitions) leads to a file of the repository, and its
  anchor to a heading of that file, as GitHub makes anchors from headings;
- every ``docs/NAME.md`` any file mentions (in prose, comments or docstrings) exists; a
  ``#anchor`` after it, or a quoted section name (``docs/protocol.md "The JWT"``), must be
  one of its headings;
- every repository path a Markdown code span names (```a2a_push/delivery/ssrf.py```)
  exists.

The checks run against the repository, and against a small made-up one whose mistakes
they must each report.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
# This file writes each mistake into a made-up repository on purpose: left out of the
# repository-wide checks (the made-up one checks the checks).
SELF = Path(__file__).resolve().relative_to(ROOT)

# Names of files outside the repository that it must never cite. Spelled as patterns
# (not as the names themselves), so that this file does not cite them either.
OUTSIDE = re.compile(r"\b(?:DESIGN|PROTOCOL|STYLE)\.md\b|\bshared[/\\]design\b|\.\./shared\b")

# Folders never part of the repository's own files (used when git is not available).
_SKIPPED_DIRS = frozenset(
    {".git", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis"}
)

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"  # [text], one level of brackets inside
    r"\(\s*<?([^()\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"  # (target "title")
)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
_DOC_MENTION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)(?:#([\w-]+)|(?:'s)?\s+\"([^\"\n]+)\")?")
_REPO_PATH = re.compile(r"^(?:a2a_push|receiver|docs|tests|examples|benchmarks)/[\w./-]*$")


def repository_files(root: Path) -> list[Path]:
    """The repository's files, relative to ``root``: what git tracks, and new files it
    does not ignore; without git, every file outside the usual tool folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "surrogateescape")
    except (OSError, subprocess.CalledProcessError):
        return sorted(
            p.relative_to(root)
            for p in root.rglob("*")
            if p.is_file()
            and not _SKIPPED_DIRS.intersection(p.relative_to(root).parts)
            and not any(part.endswith(".egg-info") for part in p.parts)
        )
    return sorted({Path(name) for name in listed.split("\0") if name and (root / name).is_file()})


def own_files() -> list[Path]:
    """The repository's files the checks cover: all but this one."""
    return [f for f in repository_files(ROOT) if f != SELF]


def read_text(path: Path) -> str | None:
    """The file as text; None for a file that is not UTF-8 (a binary)."""
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError:
        return None


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a Markdown text outside fenced code blocks."""
    fenced: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fence.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (code spans, links and emphasis
    markers dropped), lower case, punctuation dropped, each space a hyphen."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.lower()
    kept = "".join(
        c
        for c in text
        if c.isalnum()
        or c in "_- "
        or unicodedata.category(c).startswith("M")
        or unicodedata.category(c) == "Pc"
    )
    return kept.replace(" ", "-")


def headings(text: str) -> list[str]:
    """The ATX headings of a Markdown text, as written (outside code blocks)."""
    return [m.group(2) for _, line in prose_lines(text) if (m := _HEADING.match(line))]


def anchors(text: str) -> set[str]:
    """Every anchor GitHub gives the headings of ``text`` (repeats get ``-1``, ``-2``)."""
    seen: Counter[str] = Counter()
    out: set[str] = set()
    for heading in headings(text):
        base = slug(heading)
        out.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def heading_texts(text: str) -> set[str]:
    """The headings of ``text`` as they read (code-span backticks dropped)."""
    return {_CODE_SPAN.sub(lambda m: m.group(2), h).strip() for h in headings(text)}


def markdown_links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and reference definition outside code."""
    for number, line in prose_lines(text):
        reference = _REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)
            continue
        outside_code = _CODE_SPAN.sub("", line)
        for match in _INLINE_LINK.finditer(outside_code):
            yield number, match.group(1)


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    for number, line in prose_lines(text):
        for match in _CODE_SPAN.finditer(line):
            yield number, match.group(2).strip()


class Checker:
    """Finds references that leave the repository, or lead nowhere inside it."""

    def __init__(self, root: Path, files: Iterable[Path]) -> None:
        self.root = root.resolve()
        self.files = list(files)
        self._texts: dict[Path, str | None] = {}

    def text(self, relative: Path) -> str | None:
        if relative not in self._texts:
            self._texts[relative] = read_text(self.root / relative)
        return self._texts[relative]

    def inside(self, path: Path) -> Path | None:
        """``path`` relative to the root when it is an existing file or folder of the
        repository; None otherwise."""
        try:
            resolved = path.resolve()
            relative = resolved.relative_to(self.root)
        except (OSError, ValueError):
            return None
        return relative if resolved.exists() else None

    def problems(self) -> list[str]:
        found: list[str] = []
        for relative in self.files:
            text = self.text(relative)
            if text is None:
                continue
            found += self.outside_names(relative, text)
            found += self.doc_mentions(relative, text)
            if relative.suffix == ".md":
                found += self.links(relative, text)
                found += self.paths_in_code(relative, text)
        return found

    def outside_names(self, relative: Path, text: str) -> list[str]:
        return [
            f"{relative}:{number}: names {match.group(0)!r}, which is not in the repository "
            "(point at the docs in docs/ instead)"
            for number, line in enumerate(text.splitlines(), 1)
            for match in OUTSIDE.finditer(line)
        ]

    def links(self, relative: Path, text: str) -> list[str]:
        found: list[str] = []
        for number, target in markdown_links(text):
            where = f"{relative}:{number}"
            if not target or _SCHEME.match(target):
                continue  # a URL: not a file of the repository
            path_part, _, anchor = target.partition("#")
            if path_part:
                linked = self.inside(self.root / relative.parent / unquote(path_part))
                if linked is None:
                    found.append(f"{where}: the link {target!r} leads to no file of the repository")
                    continue
            else:
                linked = relative
            if anchor:
                found += self.anchor_problem(where, target, linked, anchor)
        return found

    def anchor_problem(self, where: str, target: str, linked: Path, anchor: str) -> list[str]:
        linked_text = self.text(linked) if (self.root / linked).is_file() else None
        if linked.suffix != ".md" or linked_text is None:
            return [f"{where}: the link {target!r} has an anchor, but {linked} is no Markdown"]
        if unquote(anchor).lower() not in anchors(linked_text):
            return [
                f"{where}: the link {target!r}: {linked} has no heading with the anchor "
                f"#{anchor} (it has: {', '.join(sorted(anchors(linked_text)))})"
            ]
        return []

    def doc_mentions(self, relative: Path, text: str) -> list[str]:
        found: list[str] = []
        markdown = relative.suffix == ".md"
        for number, line in enumerate(text.splitlines(), 1):
            if markdown:  # link targets are the links check's
                if _REFERENCE.match(line):
                    continue
                line = re.sub(r"\]\([^)\s]*", "](", line)
            for match in _DOC_MENTION.finditer(line):
                name, anchor, section = match.groups()
                where = f"{relative}:{number}"
                doc = Path("docs") / name
                doc_text = self.text(doc) if (self.root / doc).is_file() else None
                if doc_text is None:
                    found.append(f"{where}: names {doc}, which does not exist")
                elif anchor and anchor not in anchors(doc_text):
                    found.append(f"{where}: {doc} has no heading with the anchor #{anchor}")
                elif section and section not in heading_texts(doc_text):
                    found.append(f"{where}: {doc} has no section {section!r}")
        return found

    def paths_in_code(self, relative: Path, text: str) -> list[str]:
        return [
            f"{relative}:{number}: `{span}` names a path the repository does not have"
            for number, span in code_spans(text)
            if _REPO_PATH.match(span) and self.inside(self.root / span) is None
        ]


def report(problems: list[str]) -> None:
    if problems:
        pytest.fail(
            f"{len(problems)} reference(s) that leave the repository or lead nowhere:\n  "
            + "\n  ".join(problems),
            pytrace=False,
        )


# ---- the repository ----------------------------------------------------------------------


def test_no_file_refers_outside_the_repository() -> None:
    files = own_files()
    assert Path("README.md") in files and Path("docs/protocol.md") in files, files[:20]
    checker = Checker(ROOT, files)
    report([p for f in files if (t := checker.text(f)) for p in checker.outside_names(f, t)])


def test_markdown_links_resolve() -> None:
    files = own_files()
    markdown = [f for f in files if f.suffix == ".md"]
    assert Path("README.md") in markdown and len(markdown) >= 7, markdown
    checker = Checker(ROOT, markdown)
    report([p for f in markdown if (t := checker.text(f)) for p in checker.links(f, t)])


def test_mentions_of_docs_and_paths_resolve() -> None:
    files = own_files()
    checker = Checker(ROOT, files)
    problems: list[str] = []
    for relative in files:
        text = checker.text(relative)
        if text is None:
            continue
        problems += checker.doc_mentions(relative, text)
        if relative.suffix == ".md":
            problems += checker.paths_in_code(relative, text)
    report(problems)


def test_docs_link_the_protocol_and_architecture() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    for doc in ("docs/protocol.md", "docs/architecture.md"):
        assert f"]({doc}" in readme, f"README.md does not link {doc}"


# ---- the checks themselves -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("1. Outbound requests: the SSRF guard", "1-outbound-requests-the-ssrf-guard"),
        ("`PushNotifier(store, *, …)`", "pushnotifierstore--"),
        ("Standard Webhooks (`whsec_` tokens)", "standard-webhooks-whsec_-tokens"),
        ("Order: per-(config, task) FIFO lanes", "order-per-config-task-fifo-lanes"),
        ("Replies and what the **sender** does", "replies-and-what-the-sender-does"),
        ("See [the guide](guide.md) now", "see-the-guide-now"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_repeated_headings_get_numbered_anchors() -> None:
    assert anchors("# A\n## Notes\n```\n## Not a heading\n```\n## Notes\n") == {
        "a",
        "notes",
        "notes-1",
    }


def make_repository(root: Path, files: dict[str, str]) -> list[Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return [Path(name) for name in files]


def test_the_checks_report_every_kind_of_mistake(tmp_path: Path) -> None:
    design, protocol = "DESIGN" + ".md", "PROTOCOL" + ".md"
    sibling = ".." + "/" + "shared"  # spelled in parts: this file must not cite it
    (tmp_path / "outside.md").write_text("# Out\n", "utf-8")  # beside the repository
    root = tmp_path / "repo"
    files = make_repository(
        root,
        {
            "README.md": (
                "# Read me\n\n## Getting started\n\n"
                "[ok](docs/guide.md) [ok](docs/guide.md#the-jwt) [ok](#getting-started)\n"
                "[ok](https://example.com/x.md) [ok](docs/)\n"
                "[missing](docs/gone.md) [bad anchor](docs/guide.md#no-such-part)\n"
                "[here, bad](#nowhere) [escapes](../outside.md)\n"
                f"See {design} for why.\n"
                "`[not a link](nowhere.md)` and `a2a_push/real.py`, `a2a_push/gone.py`\n"
                f"```\n[not a link either](nowhere.md) {sibling}/notes\n```\n"
                "[ref]: docs/absent.md\n"
            ),
            "docs/guide.md": "# Guide\n\n## The JWT\n\nText.\n",
            "a2a_push/real.py": (
                '"""Signs webhooks (docs/guide.md "The JWT"; docs/guide.md#the-jwt).\n\n'
                f'See {protocol}, docs/missing.md and docs/guide.md "No such section".\n'
                f'Also {sibling}/notes."""\n'
            ),
        },
    )
    problems = Checker(root, files).problems()
    text = "\n".join(problems)
    expected = [
        f"README.md:9: names {design!r}",
        "README.md:7: the link 'docs/gone.md' leads to no file",
        "README.md:7: the link 'docs/guide.md#no-such-part': docs/guide.md has no heading",
        "README.md:8: the link '#nowhere': README.md has no heading",
        "README.md:8: the link '../outside.md' leads to no file",
        "README.md:10: `a2a_push/gone.py` names a path the repository does not have",
        f"README.md:12: names {sibling!r}",
        "README.md:14: the link 'docs/absent.md' leads to no file",
        f"a2a_push/real.py:3: names {protocol!r}",
        "a2a_push/real.py:3: names docs/missing.md, which does not exist",
        "a2a_push/real.py:3: docs/guide.md has no section 'No such section'",
        f"a2a_push/real.py:4: names {sibling!r}",
    ]
    for problem in expected:
        assert problem in text, f"not reported: {problem}\nreported:\n{text}"
    assert len(problems) == len(expected), text


def test_a_repository_without_mistakes_passes(tmp_path: Path) -> None:
    files = make_repository(
        tmp_path,
        {
            "README.md": "# Read me\n\n[Guide](docs/guide.md#the-jwt), `docs/guide.md`\n",
            "docs/guide.md": "# Guide\n\n## The JWT\n\n[Back](../README.md#read-me)\n",
            "tool.py": '"""See docs/guide.md "The JWT"."""\n',
        },
    )
    assert Checker(tmp_path, files).problems() == []
