"""The HTTP examples in the docs, run against a live service: they cannot drift.

docs/gateway.md, "Push configs over REST": each ``sh`` block there is one ``curl``
command and the ``json`` block after it the answer the doc shows. The commands are run
in order, as written, against a gateway on 127.0.0.1 (``http://127.0.0.1:8080`` in
them taken for its URL, ``$AGENT_KEY`` for its agent's key), and each answer must be a
2xx whose JSON equals the doc's. The ``curl`` options the test understands are listed
below; any other fails the test rather than being skipped.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from ..gateway_support import AGENT_KEY, gateway_settings, running_gateway

ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "http://127.0.0.1:8080"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass
class Curl:
    method: str = "GET"
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    data: str | None = None


def section(doc: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or higher."""
    start = doc.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    rest = doc[start + len(heading) + 2 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.MULTILINE)]
    return rest[: ends[0]] if ends else rest


def examples(text: str) -> list[tuple[str, str]]:
    """(curl command, answer) for each ``sh`` block followed by a ``json`` block."""
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    assert blocks and blocks[-1][0] != "sh", "a command without its answer at the end"
    pairs = []
    for (lang, command), (next_lang, answer) in itertools.pairwise(blocks):
        if lang == "sh":
            assert next_lang == "json", f"no json answer after: {command}"
            pairs.append((command, answer))
    return pairs


def parse_curl(command: str, base_url: str) -> Curl:
    """A ``curl`` command line as a request (continuations joined; the doc's URL and
    ``$AGENT_KEY`` replaced)."""
    line = command.replace("\\\n", " ").replace("$AGENT_KEY", AGENT_KEY)
    words = shlex.split(line.replace(DOC_URL, base_url))
    assert words[0] == "curl", command
    curl = Curl()
    args = iter(words[1:])
    for word in args:
        if word in ("-s", "-sS", "--silent"):
            continue
        if word in ("-X", "--request"):
            curl.method = next(args)
        elif word in ("-H", "--header"):
            name, _, value = next(args).partition(":")
            curl.headers[name.strip()] = value.strip()
        elif word in ("-d", "--data"):
            curl.data = next(args)
            if curl.method == "GET":
                curl.method = "POST"  # as curl does
        elif not word.startswith("-") and not curl.url:
            curl.url = word
        else:
            raise AssertionError(f"a curl option this test does not know: {word!r}")
    assert curl.url.startswith(base_url), curl.url
    return curl


def test_the_rest_section_has_the_examples_this_test_runs() -> None:
    text = section((ROOT / "docs/gateway.md").read_text(), "### Push configs over REST")
    pairs = examples(text)
    methods = [parse_curl(command, DOC_URL).method for command, _ in pairs]
    assert methods == ["POST", "GET", "GET", "DELETE"], methods


async def test_the_rest_push_config_example_runs_as_written(tmp_path: Path) -> None:
    text = section((ROOT / "docs/gateway.md").read_text(), "### Push configs over REST")
    settings = gateway_settings(str(tmp_path / "outbox.db"))
    assert "127.0.0.1" in settings.allow_webhook_hosts  # as the doc's gateway is started
    async with running_gateway(settings) as (url, _gw), aiohttp.ClientSession() as session:
        for command, answer in examples(text):
            curl = parse_curl(command, url)
            async with session.request(
                curl.method, curl.url, headers=curl.headers, data=curl.data
            ) as resp:
                got = await resp.text()
                assert 200 <= resp.status < 300, (command, resp.status, got)
            assert json.loads(got) == json.loads(answer), (command, got)
