"""The webhook JWT: signing on the sender, verification for receivers."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import math
import re
import time
from collections.abc import Collection, Mapping
from typing import Any, Final

import jwt as pyjwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.exceptions import InvalidAlgorithmError, InvalidSignatureError, PyJWTError

from a2a_push.errors import A2APushError
from a2a_push.protocol.constants import DEFAULT_JWT_LIFETIME_SECONDS

from .keys import ALGORITHMS, KeySet, SigningKey, public_key_from_jwk

# Which JWK key type each algorithm may use: a key is only ever used by its own family.
_KTY_FOR_ALG: Final[Mapping[str, str]] = {"ES256": "EC", "EdDSA": "OKP", "RS256": "RSA"}
_PUBLIC_MEMBERS: Final[Mapping[str, tuple[str, ...]]] = {
    "EC": ("crv", "x", "y"),
    "OKP": ("crv", "x"),
    "RSA": ("n", "e"),
}
_REQUIRED_CLAIMS: Final = ("iat", "exp", "jti", "request_body_sha256")
# Longer tokens are refused before they are split or decoded: ours are under 2 KB, and
# this leaves room for a 4 KiB header, a 16 KiB payload and an RSA-8192 signature.
MAX_TOKEN_CHARS: Final = 32_768
# PyJWT checks the signature (and decodes the header and payload); every claim is checked
# here instead, against the caller's clock (``now``), which PyJWT's claim checks cannot take.
_PYJWT: Final = pyjwt.PyJWT(
    options={
        "verify_signature": True,
        "verify_exp": False,
        "verify_nbf": False,
        "verify_iat": False,
        "verify_aud": False,
        "verify_iss": False,
        "verify_sub": False,
        "verify_jti": False,
        "require": [],
        "enforce_minimum_key_length": True,
    }
)


class JWTVerificationError(A2APushError):
    """A webhook JWT was refused; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


class WebhookSigner:
    """Signs webhook requests with the key set's active key (the JWT of docs/protocol.md)."""

    def __init__(
        self, keyset: KeySet, issuer: str, lifetime: int = DEFAULT_JWT_LIFETIME_SECONDS
    ) -> None:
        if lifetime <= 0:
            raise ValueError("lifetime must be positive")
        self.keyset = keyset
        self.issuer = issuer
        self.lifetime = lifetime
        self._cached_key: SigningKey | None = None
        self._header_b64 = b""

    def _current(self) -> tuple[SigningKey, bytes]:
        key = self.keyset.active
        if key is not self._cached_key:
            header = {"alg": key.alg, "kid": key.kid, "typ": "JWT"}
            self._header_b64 = _b64(json.dumps(header, separators=(",", ":")).encode())
            self._cached_key = key
        return key, self._header_b64

    def sign(
        self,
        *,
        body: bytes,
        audience: str,
        webhook_id: str,
        task_id: str,
        config_id: str,
        seq: int,
        now: int | None = None,
    ) -> str:
        """A compact JWT binding this exact ``body`` to the webhook URL ``audience``."""
        iat = int(time.time()) if now is None else now
        claims = {
            "iss": self.issuer,
            "aud": audience,
            "iat": iat,
            "exp": iat + self.lifetime,
            "jti": webhook_id,
            "taskId": task_id,
            "configId": config_id,
            "seq": seq,
            "request_body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return self._encode(claims)

    def _encode(self, claims: Mapping[str, Any]) -> str:
        """``claims`` as a compact JWS signed with the active key.

        Built by hand (RFC 7515 compact form) rather than with PyJWT's encode(): this
        is on the sender's hot path, and B1 measures PyJWT's encode() slower (see
        docs/security.md). The output is checked by joserfc and PyJWT in the tests.
        """
        key, header_b64 = self._current()
        signing_input = header_b64 + b"." + _b64(json.dumps(claims, separators=(",", ":")).encode())
        signature = _raw_signature(key, signing_input)
        return (signing_input + b"." + _b64(signature)).decode("ascii")


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _raw_signature(key: SigningKey, data: bytes) -> bytes:
    pk: Any = key.private_key
    if key.alg == "ES256":
        r, s = decode_dss_signature(pk.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    if key.alg == "EdDSA":
        return bytes(pk.sign(data))
    if key.alg == "RS256":
        return bytes(pk.sign(data, padding.PKCS1v15(), hashes.SHA256()))
    raise ValueError(f"unsupported signing algorithm {key.alg!r}")


def verify_webhook_jwt(
    token: str,
    *,
    jwks: Mapping[str, Any],
    body: bytes,
    audience: str | None,
    issuer: str | None,
    algorithms: Collection[str] = ALGORITHMS,
    leeway: int = 60,
    now: int | None = None,
) -> dict[str, Any]:
    """Verify a webhook JWT against a JWK Set and the exact request body; return its claims.

    The algorithm is checked against ``algorithms`` and the kid's key type before any key
    is used; then PyJWT checks the signature (with that one algorithm and the kid's key,
    a ``jwt.PyJWK`` bound to it); then ``exp``, ``iat``, ``nbf``, ``aud`` and ``iss``
    (each when given), the required claims ``iat``, ``exp``, ``jti`` and
    ``request_body_sha256``, and finally the body hash. Raises
    :class:`JWTVerificationError` with a ``reason`` of ``malformed``, ``bad_algorithm``,
    ``missing_kid``, ``unknown_kid``, ``invalid_jwks``, ``bad_signature``,
    ``missing_claim``, ``expired``, ``iat_in_future``, ``not_yet_valid``,
    ``bad_audience``, ``bad_issuer`` or ``body_hash_mismatch``.
    """
    check_raw_body(body, "verify_webhook_jwt")
    given: object = jwks  # typed as a Mapping, but JSON text is a common mistake
    if isinstance(given, str | bytes):
        raise TypeError(
            "verify_webhook_jwt(): jwks must be the JWK Set as a dict (json.loads() the "
            f"response of the agent's /.well-known/jwks.json), not {type(given).__name__}"
        )
    # The header is read here first: the algorithm and kid choose the key, and neither
    # must reach a key lookup (nor PyJWT) unless the allowlists accept them.
    if isinstance(token, str) and len(token) > MAX_TOKEN_CHARS:
        raise JWTVerificationError(
            "malformed", f"the token is {len(token):,} characters (at most {MAX_TOKEN_CHARS:,})"
        )
    parts = token.split(".", 3) if isinstance(token, str) else []
    if len(parts) != 3 or not all(_B64URL.fullmatch(p) for p in parts):
        raise JWTVerificationError("malformed", "not a compact JWS (three base64url parts)")
    header = _json_part(parts[0], "header")
    # Extensions we do not implement (crit, unencoded payloads) must not be half-honoured.
    if "crit" in header or "b64" in header:
        raise JWTVerificationError("malformed", "crit/b64 header parameters are not supported")

    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms or alg not in _KTY_FOR_ALG:
        raise JWTVerificationError("bad_algorithm", f"algorithm {alg!r} is not accepted")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise JWTVerificationError("missing_kid", "the JWT header has no kid")

    key = _key_for(jwks, kid, alg)
    try:
        # One algorithm, the one the key was built for: a PyJWK is bound to it, so an
        # HMAC algorithm can never take the public key as its secret.
        claims: dict[str, Any] = _PYJWT.decode_complete(token, key, algorithms=[alg])["payload"]
    except InvalidSignatureError as exc:
        raise JWTVerificationError("bad_signature", "signature does not verify") from exc
    except InvalidAlgorithmError as exc:
        raise JWTVerificationError("bad_algorithm", f"algorithm {alg!r} is not accepted") from exc
    except PyJWTError as exc:  # DecodeError: bad base64url, a payload that is not an object
        raise JWTVerificationError("malformed", f"the JWT was not decoded: {exc}") from exc
    _check_claims(claims, audience=audience, issuer=issuer, leeway=leeway, now=now)

    expected = hashlib.sha256(body).hexdigest().encode("ascii")
    claimed = claims["request_body_sha256"]
    if not isinstance(claimed, str) or not hmac.compare_digest(
        claimed.lower().encode("utf-8", "surrogatepass"), expected
    ):
        raise JWTVerificationError("body_hash_mismatch", "request_body_sha256 does not match")
    return claims


_B64URL: Final = re.compile(r"[A-Za-z0-9_-]*")


def check_raw_body(body: object, caller: str) -> None:
    """Signatures cover the exact bytes received: text decoded (or JSON re-serialised)
    from them may not encode back to the same bytes, so only bytes are accepted."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(
            f"{caller}(): body must be the raw request body as bytes (aiohttp: "
            f"`await request.read()`), not {type(body).__name__}"
        )


def _b64decode(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (ValueError, binascii.Error) as exc:
        raise JWTVerificationError("malformed", "bad base64url") from exc


def _json_part(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64decode(part))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise JWTVerificationError("malformed", f"the JWT {what} is not JSON") from exc
    if not isinstance(value, dict):
        raise JWTVerificationError("malformed", f"the JWT {what} is not a JSON object")
    return value


def _key_for(jwks: Mapping[str, Any], kid: str, alg: str) -> pyjwt.PyJWK:
    """The public key for ``kid``, refusing a JWK whose type or alg does not match ``alg``."""
    entries = jwks.get("keys") if isinstance(jwks, Mapping) else None
    if not isinstance(entries, list):
        raise JWTVerificationError("invalid_jwks", "the JWK Set has no 'keys' list")
    matches = [e for e in entries if isinstance(e, Mapping) and e.get("kid") == kid]
    if not matches:
        raise JWTVerificationError("unknown_kid", f"no key with kid {shown(kid)} in the JWK Set")
    for jwk in matches:
        if jwk.get("kty") != _KTY_FOR_ALG[alg]:
            continue
        if jwk.get("alg", alg) != alg or jwk.get("use", "sig") != "sig":
            continue
        kty = _KTY_FOR_ALG[alg]
        members = tuple(jwk.get(name) for name in _PUBLIC_MEMBERS[kty])
        if not all(isinstance(value, str) for value in members):
            raise JWTVerificationError("invalid_jwks", f"key {shown(kid)} lacks its public members")
        try:
            return _public_key(alg, kty, members)
        except (ValueError, PyJWTError) as exc:
            raise JWTVerificationError("invalid_jwks", str(exc)) from exc
    raise JWTVerificationError("bad_algorithm", f"key {shown(kid)} is not a {alg} signing key")


@functools.lru_cache(maxsize=128)
def _public_key(alg: str, kty: str, members: tuple[str, ...]) -> pyjwt.PyJWK:
    # Building (and validating) a key from a JWK costs more than the signature check itself.
    jwk = {"kty": kty, **dict(zip(_PUBLIC_MEMBERS[kty], members, strict=True))}
    # Ours first: it accepts only what we sign with (P-256, Ed25519, RSA >= 2048 bits).
    public_key_from_jwk(jwk)
    return pyjwt.PyJWK(jwk, algorithm=alg)


def shown(value: str, limit: int = 64) -> str:
    """A value the sender chose (a kid, a header) as error messages show it: quoted, and
    cut short past ``limit`` characters."""
    if len(value) <= limit:
        return repr(value)
    return repr(value[:limit]) + f"... ({len(value):,} characters)"


def _is_number(value: object) -> bool:
    # json.loads accepts NaN and Infinity; an exp of Infinity must not mean "never expires".
    # An integer too large for a float is no time either (isfinite would raise on it).
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) < 2**53
    return isinstance(value, float) and math.isfinite(value)


def _check_claims(
    claims: Mapping[str, Any],
    *,
    audience: str | None,
    issuer: str | None,
    leeway: int,
    now: int | None,
) -> None:
    for name in _REQUIRED_CLAIMS:
        if name not in claims:
            raise JWTVerificationError("missing_claim", f"the JWT has no {name!r} claim")
    iat, exp, nbf = claims["iat"], claims["exp"], claims.get("nbf")
    if not _is_number(iat) or not _is_number(exp) or (nbf is not None and not _is_number(nbf)):
        raise JWTVerificationError("malformed", "iat, exp and nbf must be numbers")
    if not isinstance(claims["jti"], str):
        raise JWTVerificationError("malformed", "jti must be a string")

    current = time.time() if now is None else now
    if current >= exp + leeway:
        raise JWTVerificationError("expired", "the JWT has expired")
    if iat > current + leeway:
        raise JWTVerificationError("iat_in_future", "the JWT was issued in the future")
    if nbf is not None and nbf > current + leeway:
        raise JWTVerificationError("not_yet_valid", "the JWT is not valid yet (nbf)")

    if audience is not None:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud
        if not isinstance(audiences, list) or audience not in audiences:
            raise JWTVerificationError("bad_audience", f"the JWT is not for {audience!r}")
    if issuer is not None and claims.get("iss") != issuer:
        raise JWTVerificationError("bad_issuer", f"the JWT was not issued by {issuer!r}")
