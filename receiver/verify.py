"""Webhook verification for A2A push notifications: a library any Python receiver can use.

A :class:`WebhookVerifier` holds one agent's policy (which authentication methods it may
use, the accepted JWT algorithms, issuer, audience, freshness window, Standard Webhooks
secrets) and a :class:`JWKSCache` for its keys. ``await verifier.verify(headers, body)``
checks a request as docs/protocol.md's "What a receiver must accept" says, on the raw
body bytes and before anything is parsed, and returns a :class:`VerifiedWebhook` or
raises :class:`WebhookRejected` carrying the HTTP status to answer with::

    verifier = WebhookVerifier(
        VerifyPolicy(issuer="https://agent.example", audience="https://me.example/hook"),
        JWKSCache("https://agent.example/.well-known/jwks.json"),
    )
    try:
        verified = await verifier.verify(request.headers, await request.read())
    except WebhookRejected as exc:
        return json_response({"error": exc.reason, "message": str(exc)}, status=exc.status)

Replay protection needs storage, so it is the caller's: remember ``verified.dedup_key``
for longer than the freshness window and answer 2xx without acting on a repeat.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from a2a_push.errors import InvalidConfigError
from a2a_push.httputil import read_at_most
from a2a_push.protocol.constants import (
    HEADER_AUTHORIZATION,
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.signing import standard_webhooks
from a2a_push.signing.jwt import JWTVerificationError, verify_webhook_jwt
from a2a_push.signing.keys import ALGORITHMS

DEFAULT_FRESHNESS_SECONDS: Final = 300
DEFAULT_JWKS_TTL_SECONDS: Final = 300.0
DEFAULT_JWKS_MIN_REFRESH_SECONDS: Final = 2.0
MAX_JWKS_BYTES: Final = 1024 * 1024
"""A JWK Set (or agent card) larger than this is refused: a few keys are a few KiB."""
MAX_ID_LENGTH: Final = 256
_MAX_JWT_HEADER_CHARS: Final = 4096
_MAX_JWT_PAYLOAD_CHARS: Final = 16_384
_INT64: Final = range(-(2**63), 2**63)

log = logging.getLogger(__name__)

JWKSLocator = Callable[[], Awaitable[str | None]]
"""Finds an agent's JWK Set URL (e.g. in its agent card): the URL, None when the agent
declares none, or raises ``aiohttp.ClientError`` / ``TimeoutError`` / ``ValueError`` when
it cannot tell now (asked again later)."""


class AuthMethod(enum.StrEnum):
    """How a webhook may prove where it came from."""

    JWT = "jwt"
    """A JWT signed with the agent's key (``X-A2A-Signature`` or ``Authorization: Bearer``)."""
    TOKEN = "token"  # noqa: S105 - a method name
    """The subscription's token in ``X-A2A-Notification-Token``: what the official SDKs send."""
    STANDARD_WEBHOOKS = "standard-webhooks"
    """A Standard Webhooks ``v1`` HMAC over id, timestamp and body."""


class WebhookRejected(Exception):
    """A webhook request was refused; ``status`` is the HTTP status to answer with."""

    def __init__(
        self, status: int, reason: str, message: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


def _unauthorized(reason: str, message: str) -> WebhookRejected:
    return WebhookRejected(401, reason, message)


def _stale(what: str, stamped: float, current: float, window: int) -> WebhookRejected:
    """A time outside the freshness window: by how much, which way, and what to check."""
    off = current - stamped
    way = "old" if off > 0 else "in the future"
    return _unauthorized(
        "stale",
        f"{what} is outside the freshness window: it is {math.ceil(abs(off))} s {way} "
        f"(at most {window} s either way is accepted); check that the sender's and this "
        "receiver's clocks are synchronised (NTP)",
    )


ISSUER_HINT: Final = (
    " (for an agent whose webhooks a gateway sends, set the agent's issuer to the "
    "gateway's public URL)"
)
_MAX_SHOWN_ISSUER: Final = 200


def issuer_fix(seen: object) -> str:
    """What to set when a JWT's ``iss`` is not the agent's configured issuer: the exact
    ``issuer = "..."`` line for the agent's config entry, and the gateway hint.

    Only for a JWT that verified with the agent's own keys (it is the agent's); quoted
    as a TOML (and JSON) string, so an odd issuer cannot break the message's line.
    """
    if not isinstance(seen, str) or not seen or len(seen) > _MAX_SHOWN_ISSUER:
        return ISSUER_HINT
    return f"; set issuer = {json.dumps(seen)} in this agent's [[agents]] entry{ISSUER_HINT}"


def issuer_spellings(issuer: str) -> tuple[str, ...]:
    """The JWT ``iss`` values that name ``issuer``: itself and, for an origin-only URL
    (``https://host[:port]``, nothing after it but one optional ``/``), the same with
    or without that trailing slash. An empty path and ``/`` are the same resource
    (RFC 3986, 6.2.3), so an issuer copied with or without it still matches. A URL with
    a path is compared as written: ``https://host/a`` and ``https://host/a/`` may be
    different resources, and so different issuers."""
    try:
        parts = urlsplit(issuer)
    except ValueError:
        return (issuer,)
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.netloc
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in issuer
        or "#" in issuer
    ):
        return (issuer,)
    bare = issuer.removesuffix("/")
    return (issuer, bare + "/" if issuer == bare else bare)


def is_valid_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` may name a task, context or webhook: 1 to 256 printable
    characters (no NUL or other control characters, no lone surrogates)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()


@dataclass(frozen=True)
class VerifyPolicy:
    """What one agent's webhooks must satisfy.

    ``methods`` lists the authentication an agent may use: keep ``token`` off for agents
    that sign, since a token alone proves less (it travels with every request).
    ``audience`` is this receiver's webhook URL as the agent knows it; ``issuer`` is the
    agent's base URL, the JWT ``iss`` (an origin-only one matches with or without a
    trailing slash: :func:`issuer_spellings`). Either may be None to skip that check.
    """

    methods: frozenset[AuthMethod] = frozenset({AuthMethod.JWT})
    issuer: str | None = None
    audience: str | None = None
    algorithms: tuple[str, ...] = ALGORITHMS
    freshness_seconds: int = DEFAULT_FRESHNESS_SECONDS
    standard_webhooks_secrets: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not self.methods:
            raise ValueError("methods: allow at least one authentication method")
        unknown = set(self.algorithms) - set(ALGORITHMS)
        if unknown:
            raise ValueError(f"algorithms: unsupported {sorted(unknown)}; use {ALGORITHMS}")
        if self.freshness_seconds <= 0:
            raise ValueError("freshness_seconds must be positive")
        if AuthMethod.JWT in self.methods and not self.algorithms:
            raise ValueError("algorithms: the jwt method needs at least one algorithm")
        if AuthMethod.STANDARD_WEBHOOKS in self.methods and not self.standard_webhooks_secrets:
            raise ValueError(
                "standard_webhooks_secrets: the standard-webhooks method needs a whsec_ secret"
            )
        for secret in self.standard_webhooks_secrets:
            # A bad secret must fail here, at start-up, not as an error on every webhook.
            try:
                standard_webhooks.sign(secret, "check", 0, b"")
            except InvalidConfigError as exc:
                raise ValueError(f"standard_webhooks_secrets: {exc.message}") from None


@dataclass(frozen=True)
class VerifiedWebhook:
    """A webhook that passed authentication and the freshness window."""

    method: AuthMethod
    dedup_key: str
    """``jti`` / ``webhook-id``; for token-only senders without an id, the body's SHA-256."""
    timestamp: float | None
    claims: Mapping[str, Any] | None = None
    """The verified JWT claims (``taskId``, ``configId``, ``seq``, ...) for the JWT method."""

    @property
    def task_id(self) -> str | None:
        value = self.claims.get("taskId") if self.claims else None
        return value if isinstance(value, str) else None

    @property
    def config_id(self) -> str | None:
        value = self.claims.get("configId") if self.claims else None
        return value if isinstance(value, str) else None

    @property
    def seq(self) -> int | None:
        value = self.claims.get("seq") if self.claims else None
        if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
            return None
        return value


def token_digest(token: str) -> str:
    """The hex SHA-256 a receiver stores instead of a subscription token."""
    # surrogatepass: a header with bytes that are not UTF-8 reaches us with lone surrogates
    # (aiohttp decodes with surrogateescape); such a token must fail to match, not crash.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _ci(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` with case-insensitive lookups (a plain dict may have any case)."""
    if isinstance(headers, CIMultiDict | CIMultiDictProxy):
        return headers
    return CIMultiDict(headers)


def presented_jwt(headers: Mapping[str, str]) -> str | None:
    """The JWT a request carries: ``X-A2A-Signature``, else a bearer token shaped as a JWS."""
    headers = _ci(headers)
    value = headers.get(HEADER_SIGNATURE)
    if value:
        return value.strip()
    auth = headers.get(HEADER_AUTHORIZATION, "")
    scheme, _, credentials = auth.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer" and credentials.count(".") == 2:
        return credentials
    return None


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The notification token a request carries, under either header name."""
    headers = _ci(headers)
    return headers.get(HEADER_NOTIFICATION_TOKEN) or headers.get(HEADER_NOTIFICATION_TOKEN_ALT)


def _json_segment(segment: str, max_chars: int) -> dict[str, Any] | None:
    """A base64url JWT segment decoded as a JSON object, or None when it is not one."""
    if len(segment) > max_chars or not segment.isascii():
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def unverified_claims(token: str) -> dict[str, Any]:
    """A JWT's claims *without verifying them* (empty when unreadable): only to pick
    which agent's keys to check it with."""
    parts = token.split(".")
    payload = _json_segment(parts[1], _MAX_JWT_PAYLOAD_CHARS) if len(parts) == 3 else None
    return payload if payload is not None else {}


def unverified_issuer(token: str) -> str | None:
    """The ``iss`` claim of a JWT *without verifying it*: only to pick which agent to ask."""
    iss = unverified_claims(token).get("iss")
    return iss if isinstance(iss, str) else None


class JWKSCache:
    """An agent's JWK Set, fetched over HTTP and cached.

    The set is refetched after ``ttl`` seconds, and at once when a JWT names a ``kid`` it
    does not hold (a key rotation), but at most every ``min_refresh`` seconds, so forged
    kids cannot make the receiver hammer the agent. Concurrent callers share one fetch.
    A ``kid`` that a refetch could not check yet (one ran moments ago, or it failed) is
    answered 503 with a ``retry_after``, so a sender retries; only a ``kid`` still missing
    from a set fetched after the request arrived is left to fail verification (401).

    ``locate``, when given, finds the set's URL (e.g. from the agent card): it is asked
    before the first fetch and, until it has answered once, again before each fetch
    (so at most every ``min_refresh`` seconds). A static set can be given instead of a
    URL (``JWKSCache.static(jwks)``).
    """

    def __init__(
        self,
        url: str | None,
        *,
        session: aiohttp.ClientSession | None = None,
        ttl: float = DEFAULT_JWKS_TTL_SECONDS,
        min_refresh: float = DEFAULT_JWKS_MIN_REFRESH_SECONDS,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        locate: JWKSLocator | None = None,
    ) -> None:
        self._url = url
        self._session = session
        self._ttl = ttl
        self._min_refresh = min_refresh
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._jwks: dict[str, Any] | None = None
        self._fetched_at = float("-inf")
        self._fetch_ok = False
        self._error = "the agent's JWK Set has not been fetched yet"
        self._lock = asyncio.Lock()
        self._locate = locate
        self._located_at = float("-inf")
        self.located = locate is None
        """Whether ``locate`` has answered (or there is none)."""
        self.fetches = 0
        self.last_error: str | None = None
        """Why the last fetch failed (the URL and the error, user-info taken out); None
        before any fetch and after one that worked. For the operator (a console, a log),
        never for senders: their 503 says only that the set could not be fetched."""

    @property
    def url(self) -> str | None:
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        # A new location (e.g. found in the agent card) is worth asking at once.
        self._url = value
        self._fetched_at = float("-inf")

    @classmethod
    def static(cls, jwks: Mapping[str, Any]) -> JWKSCache:
        cache = cls(None)
        cache._jwks = dict(jwks)
        cache._fetched_at = float("inf")
        cache._fetch_ok = True
        return cache

    def bind_session(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def get(self, *, refresh_for_kid: str | None = None) -> dict[str, Any]:
        """The current set; refreshed when stale, or when it lacks ``refresh_for_kid``.

        Fetches (successful or not) are at least ``min_refresh`` seconds apart: while
        the agent's JWKS endpoint is down, requests are answered 503 without asking it,
        and so is a ``refresh_for_kid`` that arrives while the refetch is rate-limited.
        """
        now = time.monotonic()
        jwks = self._jwks
        age = now - self._fetched_at
        if (
            jwks is not None
            and age < self._ttl
            and (refresh_for_kid is None or _has_kid(jwks, refresh_for_kid))
        ):
            return jwks
        if self.url is None and self.located:
            return self._cached()
        if age < self._min_refresh:
            # Rate-limited: the set was fetched before this request arrived, so a kid it
            # lacks may be a key rotated since. 503: the sender retries after the window.
            return self._cached(refresh_for_kid, fresh=False)
        async with self._lock:
            if self._fetched_at > now:
                # Another caller fetched while we waited: after this request arrived.
                return self._cached(refresh_for_kid)
            await self._locate_locked()
            if self.url is None:
                return self._cached()
            try:
                self._jwks = await self._fetch()
                self._fetch_ok = True
                self.last_error = None
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self._fetch_ok = False
                self.last_error = _shown(str(exc) or type(exc).__name__)
                # The sender (anyone) gets no detail: a host, an address or a URL is the
                # operator's to see, in the log (at most one line per min_refresh).
                self._error = (
                    "the agent's JWK Set could not be fetched; retry shortly (the "
                    "receiver's log says why)"
                )
                log.warning(
                    "the JWK Set at %s could not be fetched (%s); webhooks signed with "
                    "keys not seen before get 503 until it can be",
                    _shown(self.url),
                    self.last_error,
                )
            finally:
                self._fetched_at = time.monotonic()
            return self._cached(refresh_for_kid)  # on failure, keep verifying with what we have

    async def locate(self) -> None:
        """Ask ``locate`` for the set's URL now, unless it has answered (or was asked less
        than ``min_refresh`` seconds ago); e.g. at start-up, before the first webhook."""
        async with self._lock:
            await self._locate_locked()

    async def _locate_locked(self) -> None:
        if self.located or self._locate is None:
            return
        now = time.monotonic()
        if now - self._located_at < self._min_refresh:
            return
        self._located_at = now
        try:
            url = await self._locate()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.info("could not find the JWK Set URL (will ask again): %s", _shown(str(exc)))
            return
        self.located = True
        if url is not None and url != self._url:
            self.url = url

    def _cached(self, kid: str | None = None, *, fresh: bool = True) -> dict[str, Any]:
        """The cached set. ``kid``: a key the caller needs; when the set lacks it and no
        fetch that started after the request arrived succeeded (``fresh``), 503."""
        if self._jwks is None:
            if self.url is None and self.located:
                raise _unauthorized("no_jwks", "no JWK Set is configured for this agent")
            raise WebhookRejected(
                503, "jwks_unavailable", self._error, retry_after=self._retry_after()
            )
        if kid is not None and not _has_kid(self._jwks, kid) and not (fresh and self._fetch_ok):
            raise WebhookRejected(
                503,
                "jwks_refresh_pending",
                f"the JWT's key {kid!r} is not in the agent's JWK Set as last fetched, and it "
                "cannot be fetched again yet (a key rotated moments ago?): retry shortly",
                retry_after=self._retry_after(),
            )
        return self._jwks

    def _retry_after(self) -> int:
        """Whole seconds until the next fetch may run (at least 1)."""
        wait = self._fetched_at + self._min_refresh - time.monotonic()
        return max(1, math.ceil(wait)) if math.isfinite(wait) else 1

    async def _fetch(self) -> dict[str, Any]:
        assert self.url is not None
        self.fetches += 1
        own = self._session is None
        session = self._session or aiohttp.ClientSession()
        try:
            async with session.get(
                self.url,
                # The cache is ours: a copy an HTTP cache on the way kept (the agent's
                # max-age) could lack a key rotated in since, the very reason to fetch.
                headers={"Cache-Control": "no-cache", **self._headers},
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                allow_redirects=False,
            ) as resp:
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status} from {self.url}")
                raw = await read_at_most(resp.content, MAX_JWKS_BYTES)
        finally:
            if own:
                await session.close()
        data = parse_json(raw, f"{self.url}: the JWK Set")
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ValueError(f"{self.url} did not return a JWK Set")
        return data


def _shown(text: str | None) -> str:
    """A URL, or an error message that repeats one, for the log: any user-info
    (``user:password@``) taken out."""
    return "(none)" if text is None else _USERINFO.sub("://", text)


_USERINFO: Final = re.compile(r"://[^/@\s]*@")


def parse_json(raw: bytes | None, what: str) -> Any:
    """A small JSON document read with :func:`read_at_most` (None: over the cap); a
    ``ValueError`` for anything that is not one."""
    if raw is None:
        raise ValueError(f"{what} is over {MAX_JWKS_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError(f"{what} is not valid JSON") from None


def _has_kid(jwks: Mapping[str, Any], kid: str) -> bool:
    return any(isinstance(k, Mapping) and k.get("kid") == kid for k in jwks.get("keys", ()))


def _jwt_header(token: str) -> dict[str, Any]:
    """The JOSE header, checked to be parseable before the JWT library sees the token."""
    # A compact JWS is ASCII; the header is parsed here first so that nothing a sender
    # controls can make the parsing raise anything but a clean refusal.
    header = _json_segment(token.split(".", 1)[0], _MAX_JWT_HEADER_CHARS)
    if not token.isascii() or header is None:
        raise _unauthorized("malformed", "the JWT is not a compact JWS with a JSON header")
    return header


def _check_id(value: str | None, name: str, reason: str = "bad_header") -> str | None:
    if value is None:
        return None
    if not is_valid_id(value):
        raise WebhookRejected(
            400, reason, f"{name} is not a valid id (1 to {MAX_ID_LENGTH} printable characters)"
        )
    return value


class WebhookVerifier:
    """Verifies webhooks from one agent under its :class:`VerifyPolicy`."""

    def __init__(self, policy: VerifyPolicy, jwks: JWKSCache | None = None) -> None:
        if AuthMethod.JWT in policy.methods and jwks is None:
            raise ValueError("jwks: the jwt method needs a JWKSCache")
        self.policy = policy
        self.jwks = jwks

    async def verify(
        self,
        headers: Mapping[str, str],
        body: bytes,
        *,
        expected_token_digest: str | None = None,
        now: float | None = None,
    ) -> VerifiedWebhook:
        """Authenticate a request and check its freshness; raise :class:`WebhookRejected`.

        The strongest method the request offers and the policy allows is used: a JWT,
        then a Standard Webhooks signature, then a token. ``expected_token_digest`` (see
        :func:`token_digest`) is the subscription's token: it is required for the token
        method, and when given, a token the request also carries must match it.
        """
        current = time.time() if now is None else now
        policy = self.policy
        headers = _ci(headers)
        webhook_id = _check_id(headers.get(HEADER_WEBHOOK_ID), f"the {HEADER_WEBHOOK_ID} header")
        timestamp = self._timestamp(headers, current)
        token = presented_token(headers)
        if token is not None and expected_token_digest is not None:
            check_token(token, expected_token_digest)

        jwt_value = presented_jwt(headers)
        if jwt_value is not None and AuthMethod.JWT in policy.methods:
            return await self._verify_jwt(jwt_value, body, webhook_id, timestamp, current)
        signature = headers.get(HEADER_WEBHOOK_SIGNATURE)
        if signature is not None and AuthMethod.STANDARD_WEBHOOKS in policy.methods:
            return self._verify_standard(signature, body, webhook_id, headers, current)
        if token is not None and AuthMethod.TOKEN in policy.methods:
            if expected_token_digest is None:
                raise _unauthorized("bad_token", "the notification token is not known")
            return VerifiedWebhook(
                AuthMethod.TOKEN,
                dedup_key=webhook_id or "sha256:" + hashlib.sha256(body).hexdigest(),
                timestamp=timestamp,
            )
        offered = [
            name
            for name, present in (
                ("a JWT", jwt_value is not None),
                ("a Standard Webhooks signature", signature is not None),
                ("a token", token is not None),
            )
            if present
        ]
        allowed = ", ".join(sorted(m.value for m in policy.methods))
        if offered:
            raise _unauthorized(
                "auth_method_not_allowed",
                f"the request offers {' and '.join(offered)}; this agent may use: {allowed}",
            )
        raise _unauthorized("no_credentials", f"the request is not authenticated ({allowed})")

    def _timestamp(self, headers: Mapping[str, str], current: float) -> float | None:
        raw = headers.get(HEADER_WEBHOOK_TIMESTAMP)
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
            raise WebhookRejected(400, "bad_header", "webhook-timestamp is not unix seconds")
        value = float(int(raw))
        if abs(current - value) > self.policy.freshness_seconds:
            raise _stale("webhook-timestamp", value, current, self.policy.freshness_seconds)
        return value

    async def _verify_jwt(
        self,
        token: str,
        body: bytes,
        webhook_id: str | None,
        timestamp: float | None,
        current: float,
    ) -> VerifiedWebhook:
        assert self.jwks is not None
        policy = self.policy
        header = _jwt_header(token)
        kid = header.get("kid")
        # Only a kid a valid JWT could name is worth a refetch (or a "retry" answer).
        wanted = isinstance(kid, str) and kid and header.get("alg") in policy.algorithms
        jwks = await self.jwks.get(refresh_for_kid=kid if wanted else None)
        issuer = policy.issuer
        if issuer is not None:
            # Another spelling of the same issuer (a trailing slash after an origin)
            # is the issuer: the signature, checked against it, still decides.
            seen = unverified_issuer(token)
            if seen is not None and seen in issuer_spellings(issuer):
                issuer = seen
        try:
            claims = verify_webhook_jwt(
                token,
                jwks=jwks,
                body=body,
                audience=policy.audience,
                issuer=issuer,
                algorithms=policy.algorithms,
                leeway=60,
                now=int(current),
            )
        except JWTVerificationError as exc:
            hint = ""
            if exc.reason == "bad_issuer":
                # Checked after the signature: the JWT is this key holder's, with another
                # iss. Say which (the policy's issuer is the caller's to change).
                seen = str(unverified_claims(token).get("iss"))[:_MAX_SHOWN_ISSUER]
                hint = f" (it names {json.dumps(seen)}){ISSUER_HINT}"
            raise _unauthorized(exc.reason, f"the JWT was refused: {exc}{hint}") from exc
        iat = float(claims["iat"])
        if abs(current - iat) > policy.freshness_seconds:
            raise _stale("the JWT iat", iat, current, policy.freshness_seconds)
        jti = _check_id(claims["jti"], "the JWT jti", "bad_claim")
        assert jti is not None
        for name in ("taskId", "configId"):
            if isinstance(claims.get(name), str):
                _check_id(claims[name], f"the JWT {name}", "bad_claim")
        # As bytes: compare_digest refuses str with non-ASCII characters.
        if webhook_id is not None and not hmac.compare_digest(webhook_id.encode(), jti.encode()):
            raise _unauthorized("id_mismatch", "webhook-id does not match the JWT jti")
        return VerifiedWebhook(AuthMethod.JWT, jti, timestamp or iat, claims)

    def _verify_standard(
        self,
        signature: str,
        body: bytes,
        webhook_id: str | None,
        headers: Mapping[str, str],
        current: float,
    ) -> VerifiedWebhook:
        raw_ts = headers.get(HEADER_WEBHOOK_TIMESTAMP)
        if webhook_id is None or raw_ts is None:
            raise WebhookRejected(
                400, "bad_header", "Standard Webhooks needs webhook-id and webhook-timestamp"
            )
        for secret in self.policy.standard_webhooks_secrets:
            try:
                standard_webhooks.verify(
                    secret,
                    msg_id=webhook_id,
                    timestamp=raw_ts,
                    signature_header=signature,
                    body=body,
                    tolerance=self.policy.freshness_seconds,
                    now=int(current),
                )
            except standard_webhooks.StandardWebhooksVerificationError:
                continue
            return VerifiedWebhook(AuthMethod.STANDARD_WEBHOOKS, webhook_id, float(raw_ts))
        raise _unauthorized("bad_signature", "no Standard Webhooks signature matches")


def check_token(token: str, expected_digest: str) -> None:
    """Compare a presented token with a stored :func:`token_digest` in constant time."""
    if not hmac.compare_digest(token_digest(token).encode(), expected_digest.encode()):
        raise _unauthorized("bad_token", "the notification token does not match")


def allowed_methods(names: Collection[str]) -> frozenset[AuthMethod]:
    """Parse method names (``jwt``, ``token``, ``standard-webhooks``) with a clear error."""
    out = set()
    for name in names:
        try:
            out.add(AuthMethod(name.strip().lower().replace("_", "-")))
        except ValueError:
            choices = ", ".join(m.value for m in AuthMethod)
            raise ValueError(f"unknown authentication method {name!r}; use {choices}") from None
    return frozenset(out)
