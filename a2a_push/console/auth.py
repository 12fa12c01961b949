"""Sign-in, sessions and CSRF tokens for the delivery console.

A session is a signed cookie: ``base64url(payload).base64url(HMAC-SHA256)``, where the
payload names the admin key it was opened with (a short digest, never the key), when it
ends and a random nonce. The signing secret is derived from the configured admin keys,
so every replica configured with the same keys accepts the same sessions, and removing
an admin key ends the sessions opened with it. The CSRF token of a form is an HMAC of the
session's nonce: a page of one session cannot post for another.

Nothing here is stored server-side; signing out clears the cookie in the browser (a copy
of the cookie taken before stays valid until it expires: keep ``session_seconds`` short).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

COOKIE: Final = "a2a_push_console"
LOGIN_COOKIE: Final = "a2a_push_console_login"
DEFAULT_SESSION_SECONDS: Final = 8 * 3600.0
MIN_KEY_LENGTH: Final = 16


def key_digest(key: str) -> str:
    """The SHA-256 of an admin key, hex (how keys are compared and named)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Session:
    key_id: str  # the first 16 hex digits of the admin key's digest
    expires_at: float
    nonce: str


class Sessions:
    """Opens and checks console sessions for a set of admin keys."""

    def __init__(
        self, admin_keys: Iterable[str], *, session_seconds: float = DEFAULT_SESSION_SECONDS
    ):
        self._digests = sorted({key_digest(k) for k in admin_keys})
        if session_seconds <= 0:
            raise ValueError("session_seconds must be positive")
        self.session_seconds = session_seconds
        material = "\n".join(["a2a-push console session v1", *self._digests]).encode()
        self._secret = hashlib.sha256(material).digest()

    @property
    def enabled(self) -> bool:
        """False without admin keys: the console is off."""
        return bool(self._digests)

    def check_key(self, key: str) -> str | None:
        """The key's id when ``key`` is one of the admin keys (compared in constant
        time, against every key), else None."""
        digest = key_digest(key)
        found = None
        for known in self._digests:
            if hmac.compare_digest(known, digest):
                found = known
        return found[:16] if found is not None else None

    def open(self, key_id: str, now: float | None = None) -> tuple[str, Session]:
        """A new session for ``key_id``: (cookie value, session)."""
        at = time.time() if now is None else now
        session = Session(key_id, at + self.session_seconds, secrets.token_hex(16))
        payload = json.dumps(
            {"k": session.key_id, "e": int(session.expires_at), "n": session.nonce},
            separators=(",", ":"),
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(b'session', payload))}", session

    def check(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie holds: None when missing, forged, expired, or opened
        with an admin key that is no longer configured."""
        if not cookie or cookie.count(".") != 1:
            return None
        body, mac = cookie.split(".")
        try:
            payload = _unb64(body)
            given = _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(given, self._mac(b"session", payload)):
            return None
        try:
            fields = json.loads(payload)
            session = Session(str(fields["k"]), float(fields["e"]), str(fields["n"]))
        except (ValueError, KeyError, TypeError):
            return None
        at = time.time() if now is None else now
        if session.expires_at <= at:
            return None
        if not any(d.startswith(session.key_id) for d in self._digests):
            return None
        return session

    def csrf_token(self, session: Session) -> str:
        """The token every state-changing form of this session carries."""
        return self._mac(b"csrf", session.nonce.encode()).hex()

    def check_csrf(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf_token(session), token or "")

    # The sign-in form is posted before a session exists: it carries a token bound to a
    # short-lived cookie set with the form (double submit), so another site cannot sign
    # a browser in with the attacker's key.
    def login_token(self) -> tuple[str, str]:
        """(cookie value, form token) for one sign-in form."""
        nonce = secrets.token_hex(16)
        return nonce, self._mac(b"login", nonce.encode()).hex()

    def check_login_token(self, cookie: str | None, token: str | None) -> bool:
        if not cookie or not token:
            return False
        return hmac.compare_digest(self._mac(b"login", cookie.encode()).hex(), token)

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        return hmac.new(self._secret, purpose + b"\0" + data, hashlib.sha256).digest()
