"""The error codes the gateway and the receiver send are the ones their docs list.

Each service's code is read (not run) for every code it can put in an error body:
string literals given as the ``reason`` of its error helpers (``_error``,
``WebhookRejected``, ``ClientError``, ``error_body``, ``JWTVerificationError``...,
found by that parameter name), and the ``(status, "code", message)`` tuples of the
HTTP-parser refusals. A code computed at run time must be one the test knows how to
enumerate (listed below, and exercised against a running service). Then both ways: a
code sent but missing from the docs' error table fails, and so does a documented code
nothing sends any more.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from a2a_push.gateway import app as gateway_app
from receiver import ReceiverSettings, create_app

from ..gateway_support import gateway_settings, running_gateway

ROOT = Path(__file__).resolve().parents[2]

SOURCES = {
    "gateway": ["a2a_push/gateway/app.py", "a2a_push/httputil.py"],
    "receiver": [
        "receiver/core.py",
        "receiver/api.py",
        "receiver/verify.py",
        "a2a_push/httputil.py",
        # Its reasons reach the receiver's answers (verify passes exc.reason on).
        "a2a_push/signing/jwt.py",
    ],
}
DOCS = {"gateway": "docs/gateway.md", "receiver": "docs/receiver.md"}

# Codes computed at run time, by their source text: what each can be. Anything else
# that is not a literal fails the test, so a new computed code is noticed here.
PASS_THROUGH = {"reason", "exc.reason"}  # a helper's own parameter, or a caught error's
COMPUTED = {
    "gateway": {
        "_ROUTER_ERRORS.get(exc.status, 'http_error')": {
            *gateway_app._ROUTER_ERRORS.values(),
            "http_error",
        },
    },
    "receiver": {
        # aiohttp's router exceptions, by their reason phrase (exercised below).
        "exc.reason.lower().replace(' ', '_')": {"not_found", "method_not_allowed"},
    },
}


def _helpers(trees: list[ast.Module]) -> dict[str, tuple[int, object]]:
    """Callables with a ``reason`` parameter: name -> (its position, its default)."""
    found: dict[str, tuple[int, object]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            func: ast.FunctionDef | ast.AsyncFunctionDef | None = None
            name = ""
            if isinstance(node, ast.ClassDef):
                init = [
                    n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"
                ]
                func, name = (init[0], node.name) if init else (None, "")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                # A class's __init__ is its class's (above), not every __init__ call's.
                func, name = (node, node.name) if node.name != "__init__" else (None, "")
            if func is None:
                continue
            params = [a.arg for a in func.args.args if a.arg != "self"]
            if "reason" not in params:
                continue
            index = params.index("reason")
            defaults = func.args.defaults
            first_default = len(params) - len(defaults)
            default: object = None
            if index >= first_default:
                value = defaults[index - first_default]
                default = value.value if isinstance(value, ast.Constant) else None
            found[name] = (index, default)
    return found


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def sent_codes(service: str) -> tuple[set[str], list[str]]:
    """(the codes ``service`` can send, the computed ones the test cannot enumerate)."""
    trees = [ast.parse((ROOT / path).read_text()) for path in SOURCES[service]]
    helpers = _helpers(trees)
    codes: set[str] = set()
    unknown: list[str] = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and len(node.elts) == 3:
                status, code, _ = node.elts
                if (
                    isinstance(status, ast.Constant)
                    and isinstance(status.value, int)
                    and 400 <= status.value < 600
                    and isinstance(code, ast.Constant)
                    and isinstance(code.value, str)
                ):
                    codes.add(code.value)
            if not isinstance(node, ast.Call) or _called(node) not in helpers:
                continue
            index, default = helpers[_called(node)]
            keyword = [k.value for k in node.keywords if k.arg == "reason"]
            arg = keyword[0] if keyword else node.args[index] if index < len(node.args) else None
            if arg is None:
                if isinstance(default, str):
                    codes.add(default)
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                codes.add(arg.value)
            else:
                text = ast.unparse(arg)
                if text in PASS_THROUGH:
                    continue
                if text in COMPUTED[service]:
                    codes |= COMPUTED[service][text]
                else:
                    unknown.append(text)
    return codes, unknown


def documented_codes(service: str) -> set[str]:
    """The codes in the first column of the doc's error table (``| code | status |``)."""
    lines = (ROOT / DOCS[service]).read_text().splitlines()
    header = lines.index("| code | status | sent when |")
    codes: set[str] = set()
    for line in _rows(lines[header + 2 :]):
        first = line.split("|")[1]
        codes.update(re.findall(r"`([a-z_]+)`", first))
    return codes


def _rows(lines: list[str]) -> Iterator[str]:
    for line in lines:
        if not line.startswith("|"):
            return
        yield line


@pytest.mark.parametrize("service", ["gateway", "receiver"])
def test_every_error_code_sent_is_documented_and_every_documented_one_sent(
    service: str,
) -> None:
    sent, unknown = sent_codes(service)
    assert not unknown, f"computed error codes this test cannot enumerate: {unknown}"
    assert len(sent) > 10, sent  # the scan finds the helpers' calls
    documented = documented_codes(service)
    assert sent - documented == set(), f"sent, not in {DOCS[service]}'s error table"
    assert documented - sent == set(), f"in {DOCS[service]}'s error table, sent by nothing"


async def test_the_computed_router_codes_are_the_ones_listed(tmp_path: Path) -> None:
    """The codes the receiver derives from aiohttp's reason phrases, and the gateway's
    router table, as a running service sends them."""
    receiver_settings = ReceiverSettings(
        data_dir=tmp_path / "receiver", api_keys=[{"client_id": "c", "api_key": "k" * 20}]
    )
    seen: dict[str, set[str]] = {"gateway": set(), "receiver": set()}
    server_app = create_app(receiver_settings)
    from aiohttp.test_utils import TestServer

    receiver_server = TestServer(server_app, host="127.0.0.1")
    await receiver_server.start_server()
    try:
        async with (
            running_gateway(gateway_settings(str(tmp_path / "outbox.db"))) as (gateway, _gw),
            aiohttp.ClientSession() as session,
        ):
            receiver = str(receiver_server.make_url("")).rstrip("/")
            for service, base, method, path in (
                ("receiver", receiver, "GET", "/nowhere"),
                ("receiver", receiver, "DELETE", "/healthz"),
                ("gateway", gateway, "GET", "/nowhere"),
                ("gateway", gateway, "DELETE", "/healthz"),
            ):
                async with session.request(method, base + path) as resp:
                    assert resp.status in (404, 405)
                    seen[service].add((await resp.json())["error"])
    finally:
        await receiver_server.close()
    assert seen["receiver"] == COMPUTED["receiver"]["exc.reason.lower().replace(' ', '_')"]
    assert seen["gateway"] <= COMPUTED["gateway"]["_ROUTER_ERRORS.get(exc.status, 'http_error')"]
    for service, codes in seen.items():
        assert codes <= documented_codes(service)
