"""Requests the HTTP parser refuses before any handler runs (a header field or request
line over the limit, too many headers, invalid HTTP) get the services' JSON error shape,
quote nothing of the request, and leave one log line without its bytes: an
``Authorization: Bearer <admin key>`` padded past the limit used to come back in a
text/plain 400 and in an ERROR traceback. A JWT up to the verifier's 32 KiB limit still
reaches the receiver's verifier."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from a2a_push.signing.jwt import MAX_TOKEN_CHARS

from ..gateway_support import ADMIN_KEY, AGENT_KEY, free_port


def _raw_request(port: int, path: str, headers: list[tuple[str, str]]) -> tuple[int, str, bytes]:
    """(status, content type, body) of one raw HTTP/1.1 GET: the client libraries refuse
    to send what these tests must send."""
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    content_type = next(
        (
            line.split(":", 1)[1].strip()
            for line in header_lines
            if line.lower().startswith("content-type:")
        ),
        "",
    )
    return int(status_line.split()[1]), content_type, body


@contextmanager
def _service(argv: list[str], ready: str, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A service process whose output goes to ``log_path``; yielded once it printed
    ``ready``; stopped with SIGTERM (and checked to exit 0) afterwards."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while ready not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log_path.read_text(errors="replace")


def _assert_refused(
    answer: tuple[int, str, bytes], status: int, error: str, secret: str | None = None
) -> None:
    code, content_type, body = answer
    assert code == status, body
    assert content_type.startswith("application/json"), content_type
    document = json.loads(body)
    assert set(document) == {"error", "message"}
    assert document["error"] == error
    if secret is not None:
        assert secret not in body.decode("latin-1")


def test_gateway_refuses_oversized_headers_without_quoting_the_admin_key(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "a2a_push", "gateway", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path / "d"), "--admin-key", ADMIN_KEY]
    argv += ["--agent-key", f"a:{AGENT_KEY}"]
    log = tmp_path / "gateway.log"
    with _service(argv, "listening on", log):
        padded = f"Bearer {ADMIN_KEY} " + "p" * 9000
        _assert_refused(
            _raw_request(port, "/admin/deliveries", [("Authorization", padded)]),
            431,
            "header_too_large",
            ADMIN_KEY,
        )
        for name in ("X-A2A-Owner", "Idempotency-Key"):
            value = "owner-secret-" + "o" * 9000
            _assert_refused(
                _raw_request(port, "/v1/tasks/t/events", [(name, value)]),
                431,
                "header_too_large",
                "owner-secret",
            )
        long_path = "/v1/tasks/" + "task-secret-" + "t" * 10_000 + "/events"
        _assert_refused(_raw_request(port, long_path, []), 414, "uri_too_long", "task-secret")
        many = [(f"X-Extra-{i}", "v") for i in range(200)]
        _assert_refused(_raw_request(port, "/healthz", many), 431, "header_too_large")
        _assert_refused(
            _raw_request(port, "/healthz", [("Bad Name", "v")]), 400, "malformed_request"
        )
        # The same connection handling serves ordinary requests as before.
        ok = _raw_request(port, "/admin/deliveries", [("Authorization", f"Bearer {ADMIN_KEY}")])
        assert ok[0] == 200, ok
    text = log.read_text(errors="replace")
    assert ADMIN_KEY not in text and "owner-secret" not in text and "task-secret" not in text
    assert "Traceback" not in text and "ERROR" not in text
    refusals = [line for line in text.splitlines() if "refused a request" in line]
    assert len(refusals) == 6, refusals  # one line each, no traceback
    assert any("over 8,190 bytes" in line and "431" in line for line in refusals)


def test_receiver_lets_a_32_kib_jwt_through_and_refuses_a_larger_header(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "receiver", "--port", str(port)]
    argv += ["--agent", "http://127.0.0.1:9/", "--data-dir", str(tmp_path / "d")]
    log = tmp_path / "receiver.log"
    with _service(argv, "receiver: webhooks at", log):
        # A token of the verifier's limit reaches the verifier (which answers, as JSON,
        # that it does not verify), also after "Bearer ".
        token = "eyJhbGciOiJFUzI1NiJ9." + "a" * (MAX_TOKEN_CHARS - 40) + ".sig"
        assert len(token) <= MAX_TOKEN_CHARS
        for header in (("X-A2A-Signature", token), ("Authorization", f"Bearer {token}")):
            code, content_type, body = _raw_request(port, "/webhooks/a2a", [header])
            assert code not in (400, 414, 431), body
            assert content_type.startswith("application/json")
        # Past the parser's limit: JSON, nothing of the token quoted, one line logged.
        huge = "eyJzZWNyZXQtand0LXByZWZpeCJ9." + "b" * 40_000
        _assert_refused(
            _raw_request(port, "/webhooks/a2a", [("X-A2A-Signature", huge)]),
            431,
            "header_too_large",
            "eyJzZWNyZXQtand0",
        )
    text = log.read_text(errors="replace")
    assert "eyJzZWNyZXQtand0" not in text and "Traceback" not in text
    assert sum("refused a request" in line for line in text.splitlines()) == 1
