"""A local webhook endpoint for quickstarts and tests: ``a2a-push listen``.

:class:`Listener` is an aiohttp application that receives A2A webhooks, verifies them
with the receiver's verification library (a JWT against a JWK Set, found in an agent's
card or given directly; a notification token; a Standard Webhooks secret), prints one
line per webhook, appends it to a JSON Lines file when asked, and answers as scripted
(``--fail 503x2``: the first two get 503, so the sender's retries can be watched)::

    listener = Listener(jwks_url="http://127.0.0.1:9000/.well-known/jwks.json")
    runner = web.AppRunner(listener.app())   # start-up fetches the JWK Set once

Every webhook ends up in ``listener.received`` as a :class:`Reception`. ``done`` is set
once ``count`` webhooks got a final answer (see :attr:`Listener.done`). See
docs/listen.md for the command.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

import aiohttp
from aiohttp import web
from yarl import URL

from receiver.core import card_jwks_uri, fetch_agent_card
from receiver.verify import (
    AuthMethod,
    JWKSCache,
    VerifyPolicy,
    WebhookRejected,
    WebhookVerifier,
    presented_jwt,
    presented_token,
    unverified_claims,
)

from .gateway.client import printable
from .notifier import JWKS_PATH
from .protocol.constants import (
    HEADER_AUTHORIZATION,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_RETRY_AFTER,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)

NOT_VERIFIED: Final = "not verified (no --agent/--jwks/--token/--secret given)"
"""What a webhook's line says when the listener was given nothing to verify with."""

JWKS_MIN_REFRESH_SECONDS: Final = 0.2
"""How often the JWK Set may be refetched: a local tool may ask its agent often, and a
key rotated moments ago is then found at once rather than after a 503."""

MAX_BODY_BYTES: Final = 16 * 1024 * 1024
_REDACTED: Final = "(redacted)"
_SECRET_HEADERS: Final = frozenset(
    name.lower()
    for name in (
        HEADER_AUTHORIZATION,
        HEADER_NOTIFICATION_TOKEN,
        HEADER_NOTIFICATION_TOKEN_ALT,
        "Cookie",
        "Proxy-Authorization",
    )
)
_FAIL_SYNTAX: Final = re.compile(r"(\d{3})(?:[xX](\d+))?")
_SHOWN_CHARS: Final = 64


@dataclass(frozen=True)
class FailPlan:
    """Answer ``status`` to the first ``times`` webhooks that would get 200 (None: all)."""

    status: int
    times: int | None = None

    @classmethod
    def parse(cls, text: str) -> FailPlan:
        """``STATUS`` or ``STATUSxN`` (``503x2``); ``ValueError`` saying what is wrong."""
        match = _FAIL_SYNTAX.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not STATUS or STATUSxN (e.g. 503 or 503x2)")
        status = int(match.group(1))
        if not 300 <= status <= 599:
            raise ValueError(f"status {status} is not an error; give 300 to 599 (e.g. 503)")
        times = None if match.group(2) is None else int(match.group(2))
        if times is not None and times < 1:
            raise ValueError(f"{text!r}: the count after x must be at least 1")
        return cls(status, times)

    def __str__(self) -> str:
        return str(self.status) if self.times is None else f"{self.status}x{self.times}"


@dataclass(frozen=True)
class Reception:
    """One webhook as the listener saw and answered it."""

    received_at: float
    """``time.time()`` on arrival."""
    path: str
    webhook_id: str | None
    task_id: str | None
    what: str | None
    """The state (``WORKING``), ``artifact NAME``, ``task STATE`` or ``message``."""
    seq: int | None
    latency: float | None
    """Seconds since the body's status timestamp (to the millisecond), else since
    ``webhook-timestamp`` (whole seconds: ``latency_exact`` False)."""
    latency_exact: bool
    verified: bool | None
    """True: every check passed; False: one failed; None: nothing to check."""
    verification: str
    """What was checked (``jwt kid=...``) or, when ``verified`` is False, why it failed."""
    status: int
    """The HTTP status answered."""

    @property
    def final(self) -> bool:
        """Whether the sender takes this answer as final (it retries a 503 or a
        scripted failure, not a 2xx or a refusal)."""
        return self.status < 300 or (self.verified is False and self.status != 503)


class _Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class Listener:
    """Receives, verifies, prints and records webhooks on ``path``.

    ``agent``: an agent's URL; its JWK Set is the one its card declares (else
    ``<origin>/.well-known/jwks.json``). ``jwks_url``: a JWK Set given directly. With
    either, every webhook must carry a JWT signed with a key of that set, and its
    ``iss`` / ``aud`` must be ``issuer`` / ``audience`` when given. ``token``: the
    ``X-A2A-Notification-Token`` must be this (compared in constant time). ``secret``:
    a ``whsec_`` Standard Webhooks secret the ``webhook-signature`` must match. All
    given checks must pass; a failure is answered 401, a JWK Set that cannot be fetched
    503. ``out``: where the lines go (default: stdout), flushed line by line.
    """

    def __init__(
        self,
        *,
        path: str = "/webhook",
        agent: str | None = None,
        jwks_url: str | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        token: str | None = None,
        secret: str | None = None,
        fail: FailPlan | None = None,
        retry_after: int | None = None,
        jsonl: Path | None = None,
        count: int | None = None,
        out: TextIO | None = None,
    ) -> None:
        if not path.startswith("/"):
            raise ValueError(f"path {path!r} must start with '/'")
        if agent is not None and jwks_url is not None:
            raise ValueError("give an agent (its card names the JWK Set) or a JWK Set, not both")
        if (issuer is not None or audience is not None) and agent is None and jwks_url is None:
            raise ValueError("an issuer or audience is checked in a JWT: give an agent or a JWKS")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1")
        self.path = path
        self.agent = agent.rstrip("/") if agent is not None else None
        self.issuer = issuer
        self.audience = audience
        self.fail = fail
        self.retry_after = retry_after
        self.jsonl = jsonl
        self.count = count
        self._out = out
        self._token = token.encode("utf-8", "surrogatepass") if token is not None else None
        self.received: list[Reception] = []
        self.done = asyncio.Event()
        """Set once ``count`` webhooks got a final answer (:attr:`Reception.final`)."""
        self.notes: list[str] = []
        """What start-up found (the JWK Set's keys, or why it cannot be fetched)."""
        self._failed_so_far = 0
        self._accepted_ids: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._jsonl_file: TextIO | None = None
        self.jwks: JWKSCache | None = None
        self._jwt_verifier: WebhookVerifier | None = None
        self._secret_verifier: WebhookVerifier | None = None
        if agent is not None or jwks_url is not None:
            default = (
                jwks_url if jwks_url is not None else str(URL(agent).origin()) + JWKS_PATH  # type: ignore[arg-type]
            )
            self.jwks = JWKSCache(
                default,
                min_refresh=JWKS_MIN_REFRESH_SECONDS,
                timeout=5.0,
                locate=self._card_jwks if agent is not None else None,
            )
            self._jwt_verifier = WebhookVerifier(
                VerifyPolicy(methods=frozenset({AuthMethod.JWT}), issuer=issuer, audience=audience),
                self.jwks,
            )
        if secret is not None:
            self._secret_verifier = WebhookVerifier(
                VerifyPolicy(
                    methods=frozenset({AuthMethod.STANDARD_WEBHOOKS}),
                    standard_webhooks_secrets=(secret,),
                )
            )

    # ---- counts ----------------------------------------------------------------------

    @property
    def verified(self) -> int:
        return sum(1 for r in self.received if r.verified)

    @property
    def failed(self) -> int:
        """Webhooks refused for good (401, 400): the sender will not send them again."""
        return sum(1 for r in self.received if r.verified is False and r.final)

    @property
    def finals(self) -> int:
        return sum(1 for r in self.received if r.final)

    def exit_code(self) -> int:
        """0 when no webhook failed verification and ``count`` (if any) was reached."""
        reached = self.count is None or self.finals >= self.count
        return 0 if reached and not self.failed else 1

    def summary(self) -> str:
        if not self.verifies:
            text = f"{len(self.received)} received (not verified)"
        else:
            text = f"{len(self.received)} received, {self.verified} verified, {self.failed} failed"
            unavailable = sum(1 for r in self.received if r.verified is False and not r.final)
            if unavailable:
                text += f", {unavailable} answered 503 (JWK Set not fetched)"
        if self.fail is not None:
            text += f"; {self._failed_so_far} answered {self.fail.status} by --fail"
        return text

    # ---- what it checks --------------------------------------------------------------

    @property
    def verifies(self) -> bool:
        return self.jwks is not None or self._token is not None or self._secret_verifier is not None

    def describe(self) -> str:
        """What every webhook is checked against, in a few words."""
        if not self.verifies:
            return "verifying nothing (give --agent, --jwks, --token or --secret to verify)"
        parts = []
        if self.jwks is not None:
            where = f"the JWKS at {self.jwks.url}"
            if self.agent is not None:
                where += (
                    f" (from {self.agent}'s agent card)"
                    if self.jwks.located
                    else (f" (until {self.agent}'s agent card can be read)")
                )
            text = f"a JWT signed with a key of {where}"
            if self.issuer is not None:
                text += f", iss {self.issuer}"
            if self.audience is not None:
                text += f", aud {self.audience}"
            parts.append(text)
        if self._token is not None:
            parts.append(f"the {HEADER_NOTIFICATION_TOKEN} header (--token)")
        if self._secret_verifier is not None:
            parts.append("a Standard Webhooks signature with --secret")
        return "verifying " + " and ".join(parts)

    def start_lines(self, url: str) -> list[str]:
        """The lines to print once the port listens at ``url`` (the webhook URL)."""
        config: dict[str, str] = {"url": url}
        if self._token is not None or self._secret_verifier is not None:
            config["token"] = "<your --token or --secret>"  # noqa: S105 - a placeholder
        lines = [f"a2a-push listen: listening on {url}; {self.describe()}"]
        lines.extend(f"note: {note}" for note in self.notes)
        if self.fail is not None:
            times = {None: "every webhook", 1: "the first webhook"}.get(
                self.fail.times, f"the first {self.fail.times} webhooks"
            )
            then = "" if self.fail.times is None else ", then 200"
            after = f" with Retry-After: {self.retry_after}" if self.retry_after is not None else ""
            lines.append(f"answering {self.fail.status} to {times}{after}{then}")
        if self.count is not None:
            lines.append(f"stopping after {self.count} webhook(s) (a final answer each)")
        lines.append(
            f"point a push config at it: {json.dumps(config)} (the sender must allow "
            "webhooks to this address); Ctrl-C to stop"
        )
        return lines

    # ---- the app ---------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application: ``POST path`` (anything else is answered 404/405 and
        printed). Its start-up opens the JSON Lines file and fetches the JWK Set once."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(self.path, self._handle)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)
        app.cleanup_ctx.append(self._lifecycle)
        return app

    async def _lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        """Open the JSON Lines file and a session; find and fetch the JWK Set once (a
        failure is a note: webhooks are answered 503 until it can be fetched)."""
        if self.jsonl is not None:
            self._jsonl_file = self.jsonl.open("a", encoding="utf-8")
        self._session = aiohttp.ClientSession()
        if self.jwks is not None:
            self.jwks.bind_session(self._session)
            await self.jwks.locate()
            try:
                jwks = await self.jwks.get()
            except WebhookRejected:
                self.notes.append(
                    f"the JWKS cannot be fetched yet ({self.jwks.last_error}); it is fetched "
                    "again when a webhook arrives (answered 503 until it can be)"
                )
            else:
                kids = [k.get("kid") for k in jwks.get("keys", ()) if isinstance(k, dict)]
                shown = ", ".join(printable(str(k))[:_SHOWN_CHARS] for k in kids) or "none"
                self.notes.append(f"the JWKS holds {len(kids)} key(s): kid {shown}")

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._jsonl_file is not None:
            self._jsonl_file.close()
            self._jsonl_file = None

    async def _card_jwks(self) -> str | None:
        assert self._session is not None and self.agent is not None
        return card_jwks_uri(await fetch_agent_card(self._session, str(URL(self.agent).origin())))

    async def _elsewhere(self, request: web.Request) -> web.Response:
        status = 405 if request.path == self.path else 404
        self._print(
            f"{_clock(time.time())}  {request.method} {printable(request.path)[:_SHOWN_CHARS]}"
            f" -> {status} (webhooks go to POST {self.path}; check the config's URL)"
        )
        return web.json_response(
            {
                "error": "not_found" if status == 404 else "method_not_allowed",
                "message": f"a2a-push listen takes webhooks at POST {self.path}",
            },
            status=status,
        )

    async def _handle(self, request: web.Request) -> web.Response:
        arrived = time.time()
        body = await request.read()
        headers = request.headers
        verified: bool | None
        retry_after: int | None = None
        answer: dict[str, Any]
        try:
            verification = await self._verify(headers, body)
        except _Refused as exc:
            verified, verification, status = False, exc.message, exc.status
            reason = "jwks_unavailable" if status == 503 else "not_verified"
            answer = {"error": reason, "message": exc.message}
            retry_after = exc.retry_after
        else:
            verified = True if self.verifies else None
            status = 200
            answer = {"ok": True}
            fail = self.fail
            if fail is not None and (fail.times is None or self._failed_so_far < fail.times):
                self._failed_so_far += 1
                status, retry_after = fail.status, self.retry_after
                answer = {"error": "scripted_failure", "message": f"a2a-push listen --fail {fail}"}
        reception = self._reception(request.path, headers, body, arrived)
        reception = replace(reception, verified=verified, verification=verification, status=status)
        self._record(reception, headers, body)
        extra = {HEADER_RETRY_AFTER: str(retry_after)} if retry_after is not None else None
        return web.json_response(answer, status=status, headers=extra)

    async def _verify(self, headers: Mapping[str, str], body: bytes) -> str:
        """What passed (``jwt kid=...``), or :class:`_Refused` saying plainly why not."""
        if not self.verifies:
            return NOT_VERIFIED
        passed = []
        if self._jwt_verifier is not None:
            passed.append(await self._check_jwt(headers, body))
        if self._token is not None:
            passed.append(self._check_token(headers))
        if self._secret_verifier is not None:
            passed.append(await self._check_secret(headers, body))
        return ", ".join(passed)

    async def _check_jwt(self, headers: Mapping[str, str], body: bytes) -> str:
        assert self._jwt_verifier is not None and self.jwks is not None
        token = presented_jwt(headers)
        if token is None:
            raise _Refused(
                401,
                "no JWT: no Authorization: Bearer or X-A2A-Signature header (does the sender "
                "sign its webhooks?)",
            )
        kid = _kid(token)
        try:
            await self._jwt_verifier.verify(headers, body)
        except WebhookRejected as exc:
            raise self._jwt_refusal(exc, token, kid) from None
        return f"jwt kid={kid}"

    def _jwt_refusal(self, exc: WebhookRejected, token: str, kid: str) -> _Refused:
        assert self.jwks is not None
        where = f"the JWKS of {self.jwks.url}"
        claims = unverified_claims(token)
        reason = exc.reason
        if reason == "jwks_unavailable":
            message = (
                f"JWKS unreachable ({self.jwks.url}: {self.jwks.last_error or exc}); "
                "answered 503, the sender retries"
            )
        elif reason == "jwks_refresh_pending":
            message = f"key kid={kid} is not in {where} as last fetched; answered 503, retry"
        elif reason == "unknown_kid":
            message = f"key kid={kid} is not in {where} (signed with another key?)"
        elif reason == "bad_signature":
            message = f"signature does not match {where}"
        elif reason == "bad_issuer":
            seen, wanted = _shown(claims.get("iss")), _shown(self.issuer)
            message = f"issuer differs: the JWT names {seen}, --issuer is {wanted}"
        elif reason == "bad_audience":
            seen, wanted = _shown(claims.get("aud")), _shown(self.audience)
            message = f"audience differs: the JWT is for {seen}, --audience is {wanted}"
        elif reason == "body_hash_mismatch":
            message = "the body is not the one signed (request_body_sha256 differs)"
        else:
            message = str(exc)
        return _Refused(exc.status, message, exc.retry_after)

    def _check_token(self, headers: Mapping[str, str]) -> str:
        assert self._token is not None
        presented = presented_token(headers)
        if presented is None:
            raise _Refused(401, f"no {HEADER_NOTIFICATION_TOKEN} header (--token is set)")
        if not hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), self._token):
            raise _Refused(401, f"token differs: {HEADER_NOTIFICATION_TOKEN} is not --token")
        return "token"

    async def _check_secret(self, headers: Mapping[str, str], body: bytes) -> str:
        assert self._secret_verifier is not None
        if HEADER_WEBHOOK_SIGNATURE not in headers:
            raise _Refused(
                401,
                f"no {HEADER_WEBHOOK_SIGNATURE} header (is --secret the push config's token?)",
            )
        try:
            await self._secret_verifier.verify(headers, body)
        except WebhookRejected as exc:
            if exc.reason == "bad_signature":
                raise _Refused(401, f"{HEADER_WEBHOOK_SIGNATURE} does not match --secret") from None
            raise _Refused(exc.status, str(exc)) from None
        return "standard webhooks"

    # ---- what it prints and records --------------------------------------------------

    def _reception(
        self, path: str, headers: Mapping[str, str], body: bytes, arrived: float
    ) -> Reception:
        summary = _body_summary(body)
        token = presented_jwt(headers)
        claims = unverified_claims(token) if token is not None else {}
        task_id = summary.task_id or _str(claims.get("taskId"))
        seq = claims.get("seq")
        latency, exact = None, summary.timestamp is not None
        if summary.timestamp is not None:
            latency = arrived - summary.timestamp
        else:
            raw = headers.get(HEADER_WEBHOOK_TIMESTAMP, "")
            if raw.isascii() and raw.isdigit() and len(raw) <= 12:
                latency = float(int(arrived) - int(raw))
        return Reception(
            received_at=arrived,
            path=path,
            webhook_id=headers.get(HEADER_WEBHOOK_ID),
            task_id=task_id,
            what=summary.what,
            seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            latency=latency,
            latency_exact=exact,
            verified=None,
            verification="",
            status=0,
        )

    def _record(self, r: Reception, headers: Mapping[str, str], body: bytes) -> None:
        self.received.append(r)
        repeat = False
        if r.status < 300 and r.webhook_id is not None:
            repeat = r.webhook_id in self._accepted_ids
            self._accepted_ids.add(r.webhook_id)
        self._print(self._line(r, repeat))
        if self._jsonl_file is not None:
            self._jsonl_file.write(json.dumps(_jsonl_record(r, headers, body)) + "\n")
            self._jsonl_file.flush()
        if self.count is not None and self.finals >= self.count:
            self.done.set()

    def _line(self, r: Reception, repeat: bool) -> str:
        ok, bad = _marks(self._out or sys.stdout)
        fields = [
            _clock(r.received_at),
            f"task {_cut(r.task_id)}",
            _cut(r.what),
            f"seq {r.seq if r.seq is not None else '-'}",
            f"webhook-id {_cut(r.webhook_id)}",
            f"latency {_latency(r.latency, r.latency_exact)}",
        ]
        if r.verified is None:
            verdict = NOT_VERIFIED
        elif r.verified:
            verdict = f"{ok} verified ({r.verification})"
        else:
            verdict = f"{bad} NOT verified: {r.verification}"
        if repeat:
            verdict += " (a repeat of an earlier webhook-id)"
        answered = f"-> {r.status}"
        if r.status >= 300 and r.verified is not False:
            assert self.fail is not None
            of = f" of {self.fail.times}" if self.fail.times is not None else ""
            answered += f" (--fail {self._failed_so_far}{of})"
        return "  ".join([*fields, answered, verdict])  # the verdict last: it stands out

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)


@dataclass(frozen=True)
class _BodySummary:
    task_id: str | None = None
    what: str | None = None
    timestamp: float | None = None


_PAYLOADS: Final = {
    "statusUpdate": "status",
    "status_update": "status",
    "artifactUpdate": "artifact",
    "artifact_update": "artifact",
    "task": "task",
    "message": "message",
    # v0.3 bodies: the payload itself, with a "kind"
    "status-update": "status",
    "artifact-update": "artifact",
}


def _body_summary(body: bytes) -> _BodySummary:
    """Task id, state or artifact, and status time of a webhook body; blanks for a body
    that is not a StreamResponse (v1.0) or a v0.3 event (nothing here refuses it)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return _BodySummary(what="(body is not JSON)")
    if not isinstance(data, dict):
        return _BodySummary(what="(body is not a JSON object)")
    key = next((k for k in _PAYLOADS if k in data and isinstance(data[k], dict)), None)
    payload = data[key] if key is not None else data
    kind = _PAYLOADS.get(key or _str(data.get("kind")) or "")
    if kind is None:
        return _BodySummary(what="(not an A2A event)")
    task_id = _str(
        payload.get("id") if kind == "task" else payload.get("taskId", payload.get("task_id"))
    )
    status = payload.get("status")
    status = status if isinstance(status, dict) else {}
    state = _str(status.get("state"))
    state = state.removeprefix("TASK_STATE_").upper() if state else None
    if kind == "artifact":
        artifact = payload.get("artifact")
        artifact = artifact if isinstance(artifact, dict) else {}
        name = _str(artifact.get("name")) or _str(artifact.get("artifactId")) or "?"
        what = f"artifact {name}"
    elif kind == "task":
        what = f"task {state or '?'}"
    elif kind == "message":
        what = "message"
    else:
        what = state or "?"
    return _BodySummary(task_id, what, _timestamp(status.get("timestamp")))


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _jsonl_record(r: Reception, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(r.received_at, UTC).isoformat(timespec="milliseconds"),
        "path": r.path,
        "headers": {
            name: _REDACTED if name.lower() in _SECRET_HEADERS else value
            for name, value in headers.items()
        },
    }
    try:
        record["body"] = json.loads(body)
    except (ValueError, RecursionError):
        record["body_text"] = body.decode("utf-8", "replace")
    record.update(
        task_id=r.task_id,
        seq=r.seq,
        webhook_id=r.webhook_id,
        verified=r.verified,
        verification=r.verification if r.verified is not None else NOT_VERIFIED,
        status=r.status,
    )
    return record


def _kid(token: str) -> str:
    """The ``kid`` a JWT's header names (unverified: only to show), or ``(none)``."""
    segment = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        header = None
    kid = header.get("kid") if isinstance(header, dict) else None
    return _cut(kid) if isinstance(kid, str) else "(none)"


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _cut(text: str | None) -> str:
    if text is None:
        return "-"
    text = printable(text)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _shown(value: object) -> str:
    return json.dumps(_cut(str(value)) if value is not None else None)


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


def _latency(seconds: float | None, exact: bool) -> str:
    if seconds is None:
        return "-"
    if not exact:  # whole seconds (webhook-timestamp): less than 1 s is all it can say
        return "<1 s" if seconds < 1 else f"{seconds:.0f} s"
    if abs(seconds) < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def _marks(stream: TextIO) -> tuple[str, str]:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "✓✗".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return "OK", "X"
    return "✓", "✗"
