"""The console's HTML builder escapes what came from outside, everywhere it can go."""

from __future__ import annotations

from a2a_push.console.html import Markup, h, href, join, pretty_json, table

PAYLOAD = "<script>alert(1)</script>\"'&"


def test_text_and_attributes_are_escaped() -> None:
    out = h("a", {"href": PAYLOAD, "title": PAYLOAD}, PAYLOAD)
    assert "<script>" not in out
    assert out.count("&lt;script&gt;") == 3
    assert "&quot;" in out and "&#x27;" in out and "&amp;" in out


def test_markup_is_kept_and_str_is_not() -> None:
    assert join(Markup("<b>x</b>"), "<b>y</b>") == "<b>x</b>&lt;b&gt;y&lt;/b&gt;"


def test_nested_children_and_lists_are_escaped() -> None:
    out = table(["<th>"], [[PAYLOAD, [PAYLOAD, None]]], empty="none")
    assert "<script>" not in out and "&lt;th&gt;" in out


def test_links_encode_their_query() -> None:
    link = href("/console/deliveries", {"task": 'javascript:alert(1)"><x', "state": ""})
    assert link.startswith("/console/deliveries?task=javascript%3Aalert%281%29")
    assert '"' not in link and "<" not in link
    assert href("/console/x", {"a": ""}) == "/console/x"


def test_a_body_is_indented_json_or_text() -> None:
    assert pretty_json(b'{"a": [1]}') == '{\n  "a": [\n    1\n  ]\n}'
    assert pretty_json(b"\xff<not json>") == "\ufffd<not json>"


def test_boolean_attributes() -> None:
    assert h("input", {"required": True, "checked": False, "value": None}) == "<input required>"
