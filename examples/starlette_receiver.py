"""A Starlette webhook endpoint that verifies a2a-push webhooks with ``receiver.verify``.

``POST /webhooks/a2a`` reads the raw body (refusing more than ``MAX_BODY_BYTES`` with
413), verifies it *before parsing anything* with a :class:`receiver.verify.WebhookVerifier`
(a JWT in ``X-A2A-Signature`` against the agent's JWK Set URL, and/or a Standard Webhooks
``webhook-signature`` with a ``whsec_`` secret; the ``webhook-timestamp`` freshness
window), then drops repeats of the same ``webhook-id`` (a2a-push delivers at least once
and keeps the id across retries). It answers::

    200 {"status": "accepted"}             verified, first time seen
    200 {"status": "duplicate"}            verified, already seen: do not act twice
    401 {"error": "<reason>", "message": "..."}   not authentic (400 / 503 likewise)

The seen ids live in an in-memory set: fine for an example, but a real receiver must
keep them durably (and at least as long as the sender retries, about 28 h by default),
or a restart lets a retried webhook act twice. Likewise ``received`` stands in for the
work a real receiver does (persist, then answer quickly).

Run it with any ASGI server, configured from the environment::

    A2A_ISSUER=https://agent.example.com \\
    A2A_JWKS_URL=https://agent.example.com/.well-known/jwks.json \\
    A2A_AUDIENCE=https://me.example.com/webhooks/a2a \\
        uvicorn --factory examples.starlette_receiver:from_env

``A2A_WHSEC`` (a ``whsec_`` secret) accepts Standard Webhooks signatures too, or alone
when ``A2A_JWKS_URL`` is unset. Register ``A2A_AUDIENCE`` as the push config's ``url``
(and the ``whsec_`` secret as its ``token``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from receiver.verify import (
    AuthMethod,
    JWKSCache,
    VerifiedWebhook,
    VerifyPolicy,
    WebhookRejected,
    WebhookVerifier,
)

WEBHOOK_PATH = "/webhooks/a2a"
MAX_BODY_BYTES = 1024 * 1024


@dataclass
class Received:
    """A webhook that verified: what was checked, and the parsed body."""

    verified: VerifiedWebhook
    body: dict[str, Any]


@dataclass
class ReceiverState:
    verifier: WebhookVerifier
    seen: set[str] = field(default_factory=set)
    """Ids already acted on. In memory: an example only (see the module docstring)."""
    received: list[Received] = field(default_factory=list)


def make_verifier(
    *,
    issuer: str | None,
    audience: str | None,
    jwks_url: str | None = None,
    whsec: str | None = None,
) -> WebhookVerifier:
    """A verifier accepting a JWT against ``jwks_url`` and/or a Standard Webhooks
    signature with the ``whsec`` secret (at least one of the two)."""
    methods: set[AuthMethod] = set()
    if jwks_url:
        methods.add(AuthMethod.JWT)
    if whsec:
        methods.add(AuthMethod.STANDARD_WEBHOOKS)
    if not methods:
        raise ValueError("give the agent's JWK Set URL, a whsec_ secret, or both")
    policy = VerifyPolicy(
        methods=frozenset(methods),
        issuer=issuer,
        audience=audience,
        standard_webhooks_secrets=(whsec,) if whsec else (),
    )
    return WebhookVerifier(policy, JWKSCache(jwks_url) if jwks_url else None)


def _rejected(exc: WebhookRejected) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return JSONResponse(
        {"error": exc.reason, "message": str(exc)}, status_code=exc.status, headers=headers
    )


def build_app(verifier: WebhookVerifier) -> Starlette:
    """The receiver app; its :class:`ReceiverState` is ``app.state.receiver``."""
    state = ReceiverState(verifier)

    async def webhook(request: Request) -> JSONResponse:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return JSONResponse({"error": "too_large"}, status_code=413)
        raw = b""
        async for chunk in request.stream():  # the raw bytes, exactly as signed
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                return JSONResponse({"error": "too_large"}, status_code=413)
        headers: Mapping[str, str] = request.headers
        try:
            verified = await state.verifier.verify(headers, raw)
        except WebhookRejected as exc:
            return _rejected(exc)
        if verified.dedup_key in state.seen:
            return JSONResponse({"status": "duplicate"})
        # Only now parse: the bytes are authentic (and, for a JWT, match its body hash).
        try:
            body = json.loads(raw)
        except ValueError:
            return JSONResponse({"error": "bad_body", "message": "not JSON"}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse(
                {"error": "bad_body", "message": "not a JSON object"}, status_code=400
            )
        state.seen.add(verified.dedup_key)
        state.received.append(Received(verified, body))
        return JSONResponse({"status": "accepted"})

    app = Starlette(routes=[Route(WEBHOOK_PATH, webhook, methods=["POST"])])
    app.state.receiver = state
    return app


def from_env() -> Starlette:
    """The app configured from ``A2A_ISSUER``, ``A2A_AUDIENCE``, ``A2A_JWKS_URL`` and
    ``A2A_WHSEC`` (for ``uvicorn --factory``)."""
    return build_app(
        make_verifier(
            issuer=os.environ.get("A2A_ISSUER") or None,
            audience=os.environ.get("A2A_AUDIENCE") or None,
            jwks_url=os.environ.get("A2A_JWKS_URL") or None,
            whsec=os.environ.get("A2A_WHSEC") or None,
        )
    )
