"""Every code block of README.md and docs/*.md that the docs present as runnable runs.

One test per tested block (id ``file:line``): python and shell blocks run (doc_runner),
settings blocks load, checked sample output matches; the markers that say otherwise are
in doc_blocks. A snippet that stops working fails here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from .doc_blocks import ROOT, Block, all_blocks, parse
from .doc_runner import _SERVING, FileContext, Harness, Session, commands, port_open
from .doc_setups import EVENTUALLY, PLACEHOLDERS, SETUPS, _replace

BLOCKS, PROBLEMS = all_blocks()
TESTED = [b for b in BLOCKS if b.tested]


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness(BLOCKS)
    try:
        yield h
    finally:
        h.close()


@pytest.mark.parametrize("block", TESTED, ids=[b.id for b in TESTED])
def test_doc_block(block: Block, harness: Harness) -> None:
    harness.run(block)
    if not block.marker("settings") and not keeps_session(block):
        harness.end_session()  # the session's end checks fail this block, not the next


def keeps_session(block: Block) -> bool:
    """The next block of the file that uses a session goes on with this one."""
    for later in BLOCKS[BLOCKS.index(block) + 1 :]:
        if later.file != block.file:
            return False
        output = later.marker("output")
        if output is not None and output.arg:
            return True
        if later.runnable:
            return later.marker("continues") is not None
    return False


def test_the_markers_are_valid() -> None:
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_a_skip_without_a_reason_is_refused() -> None:
    _, problems = parse("<!-- doc-test: skip -->\n```sh\ntrue\n```\n", "x.md")
    assert problems and "needs a reason" in problems[0]
    blocks, problems = parse(
        "<!-- doc-test: skip: needs a public host -->\n```sh\ntrue\n```\n", "x.md"
    )
    assert not problems and not blocks[0].runnable


def test_every_placeholder_entry_fills_something() -> None:
    stale = [
        f"{p.file}: {p.text!r}" + (f" (in a block with {p.in_block!r})" if p.in_block else "")
        for p in PLACEHOLDERS
        if not any(p.applies(b) for b in TESTED)
    ]
    assert not stale, f"placeholder entries that match no tested block: {stale}"
    stale = [
        (file, text)
        for file, text, _ in EVENTUALLY
        if not any(b.file == file and b.runnable and text in b.text for b in BLOCKS)
    ]
    assert not stale, f"EVENTUALLY entries that match no run block: {stale}"


def test_every_setup_is_used() -> None:
    used = {m.arg.split()[0] for b in BLOCKS for m in b.markers if m.kind == "setup"}
    assert not set(SETUPS) - used, f"setups no block uses: {sorted(set(SETUPS) - used)}"


def test_every_runnable_language_block_is_run_or_says_why_not() -> None:
    """A python or shell block is run, unless a marker says why not."""
    for b in BLOCKS:
        if b.is_python or b.is_shell:
            assert b.runnable or b.marker("skip") or b.marker("output"), b.id


def test_the_rest_section_has_the_examples_that_run() -> None:
    """docs/gateway.md, "Push configs over REST": a curl for each method, each followed
    by the JSON it must print (checked by test_doc_block)."""
    text = (ROOT / "docs/gateway.md").read_text()
    start = text.index("\n### Push configs over REST\n")
    end = text.index("\n## ", start)
    first_line = text[:start].count("\n") + 2
    last_line = text[:end].count("\n") + 1
    section = [
        b for b in BLOCKS if b.file == "docs/gateway.md" and first_line <= b.line <= last_line
    ]
    pairs = [(a, b) for a, b in itertools.pairwise(section) if a.is_shell]
    methods = [
        re.search(r"-X (\w+)", a.text).group(1) if "-X " in a.text else "GET" for a, _ in pairs
    ]
    assert methods == ["POST", "GET", "GET", "DELETE"], methods
    for command, answer in pairs:
        assert command.runnable and command.marker("continues"), command.id
        output = answer.marker("output")
        assert answer.lang == "json" and output is not None and output.arg == "json", answer.id


# ---- the harness itself -------------------------------------------------------------


def test_shell_blocks_split_into_commands() -> None:
    text = (
        "# terminal 1 (keeps running): start the gateway\n"
        "a2a-push gateway --port 8080 \\\n    --agent-key a:b\n"
        "# terminal 2: post an event\n"
        "X=$(curl -s http://127.0.0.1:8080/ \\\n     | python -c 'import sys\nprint(1)')\n"
        "$ echo done\n"
    )
    got = commands(text)
    assert [c.background for c in got] == [True, False, False]
    assert got[0].text.startswith("a2a-push gateway") and "--agent-key" in got[0].text
    assert got[1].text.endswith("print(1)')") and got[2].text == "echo done"


def test_serving_commands_are_recognised() -> None:
    for command in (
        "a2a-push gateway --port 8080",
        "A2A_GATEWAY_X=1 a2a-push receiver",
        "a2a-push mock-agent --port 9000",
        "a2a-push listen --port 8000 --count 2",
        "python -m receiver --port 8090",
        "curl -sN localhost:8090/events",
    ):
        assert _SERVING.match(command), command
    for command in (
        "a2a-push deliveries list",
        "curl -s localhost:8090/tasks",
        "a2a-push keys jwks",
    ):
        assert not _SERVING.match(command), command


def test_a_serving_command_without_a_port_gets_its_default_mapped() -> None:
    session = Session(FileContext("x.md"))
    try:
        job = session.start_background("a2a-push mock-agent --allow-webhook-host 127.0.0.1")
        assert job.port == session.context.ports[9000] and port_open(job.port)
        assert f"mock-agent --port {job.port} --allow" in job.command
        session.sh("sleep 0.1 &")  # a job the doc puts in the background itself
        assert len(session.background) == 2
    finally:
        assert session.close() == []


def test_ports_and_databases_are_mapped_per_file(monkeypatch: pytest.MonkeyPatch) -> None:
    context = FileContext("x.md")
    monkeypatch.setattr("tests.docs.doc_runner.create_database", lambda file: "postgresql://db/x")
    text = (
        "a2a-push gateway --port 8080 --database postgresql://postgres@127.0.0.1:5432/a2a_push\n"
        "curl localhost:8080/x http://127.0.0.1:9000/ port = 8090 http://push.example.com:8443/\n"
    )
    mapped = context.map_databases(context.map_ports(text))
    p8080, p9000, p8090 = context.ports[8080], context.ports[9000], context.ports[8090]
    assert mapped == (
        f"a2a-push gateway --port {p8080} --database postgresql://db/x\n"
        f"curl localhost:{p8080}/x http://127.0.0.1:{p9000}/ port = {p8090}"
        " http://push.example.com:8443/\n"
    )
    assert context.map_ports(mapped) == mapped  # mapped ports stay


def test_placeholders_are_replaced_as_words() -> None:
    assert _replace("a TASK_ID b $TASK_ID MY_TASK_ID TASK_IDS", "TASK_ID", "t") == (
        "a t b $TASK_ID MY_TASK_ID TASK_IDS"
    )
    assert _replace("replay msg_01m8… x", "msg_01m8…", "msg_9") == "replay msg_9 x"
