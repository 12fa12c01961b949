"""The webhook JWT: signed by WebhookSigner, checked by joserfc and by verify_webhook_jwt."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any, cast, get_args

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from joserfc import jwk as jose_jwk
from joserfc import jwt as jose_jwt
from joserfc.errors import BadSignatureError, JoseError

from a2a_push.errors import A2APushError
from a2a_push.protocol.constants import DEFAULT_JWT_LIFETIME_SECONDS
from a2a_push.signing import (
    Algorithm,
    JWTVerificationError,
    KeySet,
    WebhookSigner,
    verify_webhook_jwt,
)

ALGS = get_args(Algorithm)
ISSUER = "https://agent.example.com"
AUDIENCE = "https://client.example.com/webhooks/a2a"
BODY = b'{"statusUpdate":{"taskId":"task-1","status":{"state":"TASK_STATE_WORKING"}}}'
T0 = 1_700_000_000


@pytest.fixture(scope="module")
def keysets() -> dict[str, KeySet]:
    return {alg: KeySet.generate(alg) for alg in ALGS}


@pytest.fixture
def keyset(keysets: dict[str, KeySet]) -> KeySet:
    return keysets["ES256"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_default(keyset: KeySet, *, now: int = T0, body: bytes = BODY, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "body": body,
        "audience": AUDIENCE,
        "webhook_id": "wh-1",
        "task_id": "task-1",
        "config_id": "cfg-1",
        "seq": 7,
        "now": now,
    }
    fields.update(overrides)
    return WebhookSigner(keyset, ISSUER).sign(**fields)


def verify(token: str, keyset: KeySet, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "jwks": keyset.jwks(),
        "body": BODY,
        "audience": AUDIENCE,
        "issuer": ISSUER,
        "now": T0,
    }
    arguments.update(overrides)
    return verify_webhook_jwt(token, **arguments)


def reason_for(token: str, keyset: KeySet, **overrides: Any) -> str:
    with pytest.raises(JWTVerificationError) as caught:
        verify(token, keyset, **overrides)
    return caught.value.reason


def valid_claims(**overrides: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": T0,
        "exp": T0 + 300,
        "jti": "wh-1",
        "taskId": "task-1",
        "configId": "cfg-1",
        "seq": 1,
        "request_body_sha256": hashlib.sha256(BODY).hexdigest(),
    }
    claims.update(overrides)
    return {name: value for name, value in claims.items() if value is not None}


def sign_claims(keyset: KeySet, claims: dict[str, Any], **header: Any) -> str:
    """A token with arbitrary claims, validly signed by the keyset's active key."""
    key = keyset.active
    headers = {"kid": key.kid, **header}
    return pyjwt.encode(claims, key.private_key, algorithm=key.alg, headers=headers)


def hand_made(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64url(signature)}"


def hs256(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


# --- signing, checked by an independent JOSE library -------------------------------------


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated")
@pytest.mark.parametrize("alg", ALGS)
def test_joserfc_verifies_the_signed_jwt(keysets: dict[str, KeySet], alg: str) -> None:
    keyset = keysets[alg]
    now = int(time.time())
    token = sign_default(keyset, now=now)

    published: Any = keyset.jwks()
    decoded = jose_jwt.decode(token, jose_jwk.KeySet.import_key_set(published), [alg])

    assert decoded.header == {"alg": alg, "kid": keyset.active.kid, "typ": "JWT"}
    assert decoded.claims == {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + DEFAULT_JWT_LIFETIME_SECONDS,
        "jti": "wh-1",
        "taskId": "task-1",
        "configId": "cfg-1",
        "seq": 7,
        "request_body_sha256": hashlib.sha256(BODY).hexdigest(),
    }
    jose_jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": ISSUER},
        aud={"essential": True, "value": AUDIENCE},
        jti={"essential": True, "value": "wh-1"},
    ).validate(decoded.claims)


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated")
@pytest.mark.parametrize("alg", ALGS)
def test_joserfc_rejects_the_jwt_against_another_keyset(alg: Algorithm) -> None:
    token = sign_default(KeySet.generate(alg))
    other = KeySet.generate(alg)
    other_jwk = {name: value for name, value in other.jwks()["keys"][0].items() if name != "kid"}
    with pytest.raises(BadSignatureError):
        jose_jwt.decode(token, jose_jwk.import_key(other_jwk), [alg])


def _forgeries(keyset: KeySet, token: str) -> dict[str, str]:
    """``token`` and tokens made from it that only a signature check can refuse."""
    header, payload, signature = token.split(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    flipped = b64url(raw[:-1] + bytes([raw[-1] ^ 1]))
    swapped = b64url(json.dumps(valid_claims(seq=999)).encode())
    key = keyset.active
    impostor = pyjwt.encode(
        valid_claims(),
        KeySet.generate(key.alg).active.private_key,
        algorithm=key.alg,
        headers={"kid": key.kid},
    )
    return {
        "as signed": token,
        "one signature bit flipped": f"{header}.{payload}.{flipped}",
        "payload swapped": f"{header}.{swapped}.{signature}",
        "signed by another key naming ours": impostor,
    }


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated")
@pytest.mark.parametrize("alg", ALGS)
def test_the_verifier_and_joserfc_agree_on_signatures(keysets: dict[str, KeySet], alg: str) -> None:
    # PyJWT checks the signature inside verify_webhook_jwt; joserfc decides on its own,
    # so a mistake in how PyJWT is called cannot pass unseen.
    keyset = keysets[alg]
    jose_keys = jose_jwk.KeySet.import_key_set(cast(Any, keyset.jwks()))
    decisions = {}
    for name, token in _forgeries(keyset, sign_default(keyset, now=T0)).items():
        try:
            jose_jwt.decode(token, jose_keys, [alg])
            jose_ok = True
        except JoseError:
            jose_ok = False
        try:
            verify(token, keyset)
            ours_ok = True
        except JWTVerificationError as exc:
            assert exc.reason == "bad_signature", (name, exc)
            ours_ok = False
        decisions[name] = (ours_ok, jose_ok)
    assert decisions == {
        "as signed": (True, True),
        "one signature bit flipped": (False, False),
        "payload swapped": (False, False),
        "signed by another key naming ours": (False, False),
    }


def test_a_non_canonical_base64url_signature_is_refused(keyset: KeySet) -> None:
    # An ES256 signature is 64 bytes: 86 base64url characters, the last one carrying 4
    # unused bits. Setting one leaves the bytes as they were; the token is still refused.
    header, payload, signature = sign_default(keyset).split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    index = alphabet.index(signature[-1])
    assert len(signature) == 86 and index % 16 == 0
    forged = f"{header}.{payload}.{signature[:-1]}{alphabet[index + 1]}"
    assert base64.urlsafe_b64decode(forged.split(".")[2] + "==") == base64.urlsafe_b64decode(
        signature + "=="
    )
    assert reason_for(forged, keyset) == "malformed"


def test_body_hash_is_lowercase_hex_sha256_of_the_exact_bytes(keyset: KeySet) -> None:
    body = b'{"a": 1}\n'
    claims = pyjwt.decode(sign_default(keyset, body=body), options={"verify_signature": False})
    assert claims["request_body_sha256"] == hashlib.sha256(body).hexdigest()
    assert claims["request_body_sha256"] == claims["request_body_sha256"].lower()


def test_lifetime_sets_exp(keyset: KeySet) -> None:
    signer = WebhookSigner(keyset, ISSUER, lifetime=60)
    token = signer.sign(
        body=BODY, audience=AUDIENCE, webhook_id="w", task_id="t", config_id="c", seq=1, now=T0
    )
    claims = pyjwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 60


def test_signer_follows_rotation_and_old_tokens_verify_within_grace() -> None:
    keyset = KeySet.generate(grace_period=3600)
    signer = WebhookSigner(keyset, ISSUER)
    kwargs: dict[str, Any] = {
        "body": BODY,
        "audience": AUDIENCE,
        "webhook_id": "w",
        "task_id": "t",
        "config_id": "c",
        "seq": 1,
        "now": T0,
    }
    before = signer.sign(**kwargs)
    new_key = keyset.rotate(now=T0)
    after = signer.sign(**kwargs)

    assert pyjwt.get_unverified_header(after)["kid"] == new_key.kid
    assert pyjwt.get_unverified_header(before)["kid"] != new_key.kid
    jwks = keyset.jwks(now=T0 + 10)
    verify(before, keyset, jwks=jwks)
    verify(after, keyset, jwks=jwks)
    assert reason_for(before, keyset, jwks=keyset.jwks(now=T0 + 3600)) == "unknown_kid"


# --- verify_webhook_jwt: the happy path ---------------------------------------------------


@pytest.mark.parametrize("alg", ALGS)
def test_verify_returns_the_claims(keysets: dict[str, KeySet], alg: str) -> None:
    keyset = keysets[alg]
    claims = verify(sign_default(keyset), keyset)
    assert claims["jti"] == "wh-1"
    assert claims["seq"] == 7


def test_verify_without_audience_or_issuer_skips_those_checks(keyset: KeySet) -> None:
    token = sign_default(keyset)
    verify(token, keyset, audience=None, issuer=None)


def test_verify_accepts_an_audience_list_containing_ours(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(aud=["https://other.example", AUDIENCE]))
    verify(token, keyset)


def test_verify_accepts_expiry_within_leeway(keyset: KeySet) -> None:
    token = sign_default(keyset)
    verify(token, keyset, now=T0 + 300 + 59)


def test_verification_error_is_a_package_error() -> None:
    assert issubclass(JWTVerificationError, A2APushError)


# --- verify_webhook_jwt: attacks and failures ---------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none_is_refused(keyset: KeySet, alg: str) -> None:
    token = hand_made({"alg": alg, "kid": keyset.active.kid, "typ": "JWT"}, valid_claims())
    assert reason_for(token, keyset) == "bad_algorithm"


def test_hs256_keyed_with_the_public_pem_is_refused(keyset: KeySet) -> None:
    public_pem = keyset.active.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "kid": keyset.active.kid, "typ": "JWT"}
    token = hs256(header, valid_claims(), public_pem)
    assert reason_for(token, keyset) == "bad_algorithm"


def test_hs256_keyed_with_the_public_jwk_is_refused(keyset: KeySet) -> None:
    jwk_bytes = json.dumps(keyset.active.public_jwk()).encode()
    header = {"alg": "HS256", "kid": keyset.active.kid, "typ": "JWT"}
    token = hs256(header, valid_claims(), jwk_bytes)
    assert reason_for(token, keyset) == "bad_algorithm"


def test_hs256_is_refused_even_when_the_caller_allows_it(keyset: KeySet) -> None:
    jwk_bytes = json.dumps(keyset.active.public_jwk()).encode()
    header = {"alg": "HS256", "kid": keyset.active.kid, "typ": "JWT"}
    token = hs256(header, valid_claims(), jwk_bytes)
    assert reason_for(token, keyset, algorithms=("HS256", "ES256")) == "bad_algorithm"


def test_algorithm_outside_the_callers_allowlist_is_refused(keyset: KeySet) -> None:
    assert reason_for(sign_default(keyset), keyset, algorithms=("EdDSA",)) == "bad_algorithm"


def test_a_key_is_never_used_with_another_algorithm_family(
    keysets: dict[str, KeySet],
) -> None:
    ec_keyset, rsa_keyset = keysets["ES256"], keysets["RS256"]
    # Signed by an RSA key but naming the EC key's kid: the EC JWK must not serve RS256.
    token = pyjwt.encode(
        valid_claims(),
        rsa_keyset.active.private_key,
        algorithm="RS256",
        headers={"kid": ec_keyset.active.kid},
    )
    assert reason_for(token, ec_keyset) == "bad_algorithm"


def test_jwk_declaring_another_alg_is_not_used(keyset: KeySet) -> None:
    jwk = {**keyset.active.public_jwk(), "alg": "ES384"}
    assert reason_for(sign_default(keyset), keyset, jwks={"keys": [jwk]}) == "bad_algorithm"


def test_expired_token_is_refused(keyset: KeySet) -> None:
    token = sign_default(keyset)
    assert reason_for(token, keyset, now=T0 + 300 + 60) == "expired"


def test_iat_in_the_future_is_refused(keyset: KeySet) -> None:
    token = sign_default(keyset, now=T0 + 61)
    assert reason_for(token, keyset, now=T0) == "iat_in_future"


def test_iat_slightly_in_the_future_is_within_leeway(keyset: KeySet) -> None:
    verify(sign_default(keyset, now=T0 + 60), keyset, now=T0)


def test_nbf_in_the_future_is_refused(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(nbf=T0 + 120))
    assert reason_for(token, keyset) == "not_yet_valid"


def test_unknown_kid_is_refused(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(), kid="some-other-kid")
    assert reason_for(token, keyset) == "unknown_kid"


def test_missing_kid_is_refused(keyset: KeySet) -> None:
    key = keyset.active
    token = pyjwt.encode(valid_claims(), key.private_key, algorithm=key.alg)
    assert reason_for(token, keyset) == "missing_kid"


def test_wrong_audience_is_refused(keyset: KeySet) -> None:
    token = sign_default(keyset, audience="https://attacker.example/hook")
    assert reason_for(token, keyset) == "bad_audience"


def test_missing_audience_is_refused_when_one_is_expected(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(aud=None))
    assert reason_for(token, keyset) == "bad_audience"


def test_wrong_issuer_is_refused(keyset: KeySet) -> None:
    token = WebhookSigner(keyset, "https://impostor.example").sign(
        body=BODY, audience=AUDIENCE, webhook_id="w", task_id="t", config_id="c", seq=1, now=T0
    )
    assert reason_for(token, keyset) == "bad_issuer"


def test_body_with_one_byte_changed_is_refused(keyset: KeySet) -> None:
    token = sign_default(keyset)
    tampered = BODY.replace(b"WORKING", b"WORKINH")
    assert reason_for(token, keyset, body=tampered) == "body_hash_mismatch"


def test_token_from_another_keyset_is_refused_as_unknown_kid(keyset: KeySet) -> None:
    token = sign_default(KeySet.generate())
    assert reason_for(token, keyset) == "unknown_kid"


def test_token_from_another_key_claiming_our_kid_is_refused(keyset: KeySet) -> None:
    other = KeySet.generate()
    token = pyjwt.encode(
        valid_claims(),
        other.active.private_key,
        algorithm="ES256",
        headers={"kid": keyset.active.kid},
    )
    assert reason_for(token, keyset) == "bad_signature"


def test_token_with_swapped_payload_is_refused(keyset: KeySet) -> None:
    header, _, signature = sign_default(keyset).split(".")
    forged_payload = b64url(json.dumps(valid_claims(seq=999)).encode())
    assert reason_for(f"{header}.{forged_payload}.{signature}", keyset) == "bad_signature"


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b", "a.b.c", "!!.??.**", f"{b64url(b'not json')}.{b64url(b'{}')}.AAAA"],
)
def test_malformed_token_is_refused(keyset: KeySet, token: str) -> None:
    assert reason_for(token, keyset) == "malformed"


def test_payload_that_is_not_an_object_is_refused(keyset: KeySet) -> None:
    key = keyset.active
    token = pyjwt.api_jws.encode(
        b"[1, 2, 3]", key.private_key, algorithm=key.alg, headers={"kid": key.kid}
    )
    assert reason_for(token, keyset) == "malformed"


def test_crit_header_is_refused(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(), crit=["exp"])
    assert reason_for(token, keyset) == "malformed"


@pytest.mark.parametrize("missing", ["iat", "exp", "jti", "request_body_sha256"])
def test_required_claim_missing_is_refused(keyset: KeySet, missing: str) -> None:
    claims = valid_claims()
    del claims[missing]
    assert reason_for(sign_claims(keyset, claims), keyset) == "missing_claim"


def test_non_numeric_exp_is_refused(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(exp="tomorrow"))
    assert reason_for(token, keyset) == "malformed"


def test_infinite_exp_is_refused(keyset: KeySet) -> None:
    key = keyset.active
    payload = json.dumps(valid_claims(exp=float("inf"))).encode()
    assert b"Infinity" in payload
    token = pyjwt.api_jws.encode(
        payload, key.private_key, algorithm=key.alg, headers={"kid": key.kid}
    )
    assert reason_for(token, keyset, now=T0 + 10_000) == "malformed"


def test_jwks_without_a_keys_list_is_refused(keyset: KeySet) -> None:
    assert reason_for(sign_default(keyset), keyset, jwks={"keys": "nope"}) == "invalid_jwks"


def test_jwk_with_broken_key_material_is_refused(keyset: KeySet) -> None:
    jwk = {**keyset.active.public_jwk(), "x": b64url(b"short")}
    assert reason_for(sign_default(keyset), keyset, jwks={"keys": [jwk]}) == "invalid_jwks"


def test_an_integer_claim_too_large_for_a_time_is_malformed(keyset: KeySet) -> None:
    # isfinite() raises on it: the verifier must refuse it, not crash (a sender holding
    # the key could send it).
    for claim in ("exp", "iat", "nbf"):
        token = sign_claims(keyset, valid_claims(**{claim: 10**400}))
        assert reason_for(token, keyset) == "malformed", claim


def test_an_oversized_token_is_refused_before_it_is_parsed(keyset: KeySet) -> None:
    with pytest.raises(JWTVerificationError) as caught:
        verify("." * 10_000_000, keyset)
    assert caught.value.reason == "malformed" and "at most 32,768" in str(caught.value)


def test_a_long_unknown_kid_is_cut_short_in_the_message(keyset: KeySet) -> None:
    token = sign_claims(keyset, valid_claims(), kid="k" * 5_000)
    with pytest.raises(JWTVerificationError) as caught:
        verify(token, keyset)
    assert caught.value.reason == "unknown_kid"
    assert len(str(caught.value)) < 300 and "5,000 characters" in str(caught.value)
