"""The public verification library, used without the receiver app: WebhookVerifier with
static and fetched JWK Sets, each authentication method, policy validation and parsing."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from a2a_push.protocol.constants import (
    HEADER_NOTIFICATION_TOKEN,
    HEADER_NOTIFICATION_TOKEN_ALT,
    HEADER_SIGNATURE,
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
)
from a2a_push.signing import Algorithm, KeySet, WebhookSigner, standard_webhooks
from receiver.verify import (
    AuthMethod,
    JWKSCache,
    VerifiedWebhook,
    VerifyPolicy,
    WebhookRejected,
    WebhookVerifier,
    allowed_methods,
    check_token,
    issuer_spellings,
    presented_jwt,
    presented_token,
    token_digest,
    unverified_issuer,
)

from ..receiver_support import SW_SECRET

ISSUER = "https://agent.example"
AUDIENCE = "https://me.example/webhooks/a2a"
BODY = b'{"statusUpdate": {"taskId": "task-1", "status": {"state": "TASK_STATE_WORKING"}}}'
NOW = 1_750_000_000
TOKEN = "subscription-token-0123456789"


def _sign(
    keyset: KeySet,
    body: bytes = BODY,
    *,
    webhook_id: str = "msg_1",
    now: int = NOW,
    issuer: str = ISSUER,
    audience: str = AUDIENCE,
) -> str:
    return WebhookSigner(keyset, issuer).sign(
        body=body,
        audience=audience,
        webhook_id=webhook_id,
        task_id="task-1",
        config_id="cfg-1",
        seq=7,
        now=now,
    )


def _verifier(
    keyset: KeySet | None = None, jwks: JWKSCache | None = None, **policy: Any
) -> WebhookVerifier:
    policy.setdefault("issuer", ISSUER)
    policy.setdefault("audience", AUDIENCE)
    cache = jwks or (JWKSCache.static(keyset.jwks()) if keyset is not None else None)
    return WebhookVerifier(VerifyPolicy(**policy), cache)


async def _rejected(
    verifier: WebhookVerifier, headers: dict[str, str], body: bytes = BODY, **kw: Any
) -> WebhookRejected:
    kw.setdefault("now", NOW)
    with pytest.raises(WebhookRejected) as caught:
        await verifier.verify(headers, body, **kw)
    return caught.value


@pytest.fixture(scope="module")
def keyset() -> KeySet:
    return KeySet.generate()


# ---- JWT -------------------------------------------------------------------------------


async def test_jwt_verifies_against_a_static_jwks(keyset: KeySet) -> None:
    token = _sign(keyset)
    verified = await _verifier(keyset).verify(
        {HEADER_SIGNATURE: token, HEADER_WEBHOOK_ID: "msg_1"}, BODY, now=NOW
    )
    assert verified.method is AuthMethod.JWT
    assert verified.dedup_key == "msg_1"
    assert verified.timestamp == NOW  # the JWT iat, without a webhook-timestamp
    assert (verified.task_id, verified.config_id, verified.seq) == ("task-1", "cfg-1", 7)
    assert verified.claims is not None and verified.claims["iss"] == ISSUER


@pytest.mark.parametrize(
    ("configured", "signed"),
    [
        ("https://agent.example/", "https://agent.example"),
        ("https://agent.example", "https://agent.example/"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
    ],
)
async def test_an_origin_issuer_matches_with_or_without_a_trailing_slash(
    keyset: KeySet, configured: str, signed: str
) -> None:
    # A gateway's start-up line showed its issuer with a slash its JWTs lack: copied
    # into the policy, every webhook was refused. An origin and an origin with "/" are
    # one resource, so one issuer.
    headers = {HEADER_SIGNATURE: _sign(keyset, issuer=signed), HEADER_WEBHOOK_ID: "msg_1"}
    verified = await _verifier(keyset, issuer=configured).verify(headers, BODY, now=NOW)
    assert verified.claims is not None and verified.claims["iss"] == signed


@pytest.mark.parametrize(
    ("configured", "signed"),
    [
        ("https://agent.example/a/", "https://agent.example/a"),  # paths: as written
        ("https://agent.example/a", "https://agent.example/a/"),
        ("https://agent.example", "https://agent.example//"),  # one slash, not any
        ("https://agent.example", "https://agent.example/?"),
        ("https://agent.example", "https://other.example/"),
    ],
)
async def test_other_issuer_spellings_are_still_refused(
    keyset: KeySet, configured: str, signed: str
) -> None:
    headers = {HEADER_SIGNATURE: _sign(keyset, issuer=signed), HEADER_WEBHOOK_ID: "msg_1"}
    refusal = await _rejected(_verifier(keyset, issuer=configured), headers)
    assert (refusal.status, refusal.reason) == (401, "bad_issuer")


def test_issuer_spellings() -> None:
    assert issuer_spellings("https://a.example") == ("https://a.example", "https://a.example/")
    assert issuer_spellings("https://a.example:8443/") == (
        "https://a.example:8443/",
        "https://a.example:8443",
    )
    for as_written in ("https://a.example/p", "https://a.example/p/", "urn:x", "https://a/#f"):
        assert issuer_spellings(as_written) == (as_written,)


async def test_jwt_in_authorization_bearer_verifies(keyset: KeySet) -> None:
    headers = {"Authorization": f"Bearer {_sign(keyset)}"}
    verified = await _verifier(keyset).verify(headers, BODY, now=NOW)
    assert verified.method is AuthMethod.JWT


async def test_header_names_are_case_insensitive_in_a_plain_dict(keyset: KeySet) -> None:
    headers = {
        HEADER_SIGNATURE.lower(): _sign(keyset),
        HEADER_WEBHOOK_ID.upper(): "msg_1",
        HEADER_WEBHOOK_TIMESTAMP.upper(): str(NOW),
    }
    verified = await _verifier(keyset).verify(headers, BODY, now=NOW)
    assert (verified.method, verified.dedup_key) == (AuthMethod.JWT, "msg_1")


@pytest.mark.parametrize("alg", ["ES256", "EdDSA", "RS256"])
async def test_each_signing_algorithm_verifies(alg: Algorithm) -> None:
    keys = KeySet.generate(alg)
    verified = await _verifier(keys).verify({HEADER_SIGNATURE: _sign(keys)}, BODY, now=NOW)
    assert verified.method is AuthMethod.JWT


async def test_algorithm_outside_the_policy_allowlist_is_refused() -> None:
    keys = KeySet.generate("EdDSA")
    verifier = _verifier(keys, algorithms=("ES256",))
    refusal = await _rejected(verifier, {HEADER_SIGNATURE: _sign(keys)})
    assert (refusal.status, refusal.reason) == (401, "bad_algorithm")


@pytest.mark.parametrize(
    ("claim", "reason"),
    [({"issuer": "https://other.example"}, "bad_issuer"), ({"audience": "x"}, "bad_audience")],
)
async def test_issuer_and_audience_are_checked(
    keyset: KeySet, claim: dict[str, str], reason: str
) -> None:
    refusal = await _rejected(_verifier(keyset), {HEADER_SIGNATURE: _sign(keyset, **claim)})
    assert (refusal.status, refusal.reason) == (401, reason)


async def test_issuer_and_audience_checks_can_be_skipped(keyset: KeySet) -> None:
    verifier = _verifier(keyset, issuer=None, audience=None)
    token = _sign(keyset, issuer="https://anyone", audience="https://anywhere")
    assert (
        await verifier.verify({HEADER_SIGNATURE: token}, BODY, now=NOW)
    ).method is AuthMethod.JWT


async def test_jwt_older_than_the_freshness_window_is_stale(keyset: KeySet) -> None:
    # Still inside its exp (300 s), but older than this policy's 60 s window.
    verifier = _verifier(keyset, freshness_seconds=60)
    refusal = await _rejected(verifier, {HEADER_SIGNATURE: _sign(keyset)}, now=NOW + 120)
    assert (refusal.status, refusal.reason) == (401, "stale")
    assert str(refusal) == (
        "the JWT iat is outside the freshness window: it is 120 s old (at most 60 s either "
        "way is accepted); check that the sender's and this receiver's clocks are "
        "synchronised (NTP)"
    )


async def test_a_jwt_from_another_issuer_names_it(keyset: KeySet) -> None:
    token = _sign(keyset, issuer="https://gateway.example")
    refusal = await _rejected(_verifier(keyset), {HEADER_SIGNATURE: token})
    assert refusal.reason == "bad_issuer"
    assert '(it names "https://gateway.example")' in str(refusal)
    assert "gateway's public URL" in str(refusal)


async def test_expired_jwt_is_refused(keyset: KeySet) -> None:
    refusal = await _rejected(_verifier(keyset), {HEADER_SIGNATURE: _sign(keyset)}, now=NOW + 400)
    assert (refusal.status, refusal.reason) == (401, "expired")


async def test_body_hash_is_checked(keyset: KeySet) -> None:
    refusal = await _rejected(
        _verifier(keyset), {HEADER_SIGNATURE: _sign(keyset)}, body=BODY + b" "
    )
    assert (refusal.status, refusal.reason) == (401, "body_hash_mismatch")


async def test_webhook_id_must_equal_the_jti(keyset: KeySet) -> None:
    headers = {HEADER_SIGNATURE: _sign(keyset), HEADER_WEBHOOK_ID: "msg_2"}
    refusal = await _rejected(_verifier(keyset), headers)
    assert (refusal.status, refusal.reason) == (401, "id_mismatch")


@pytest.mark.parametrize("token", ["", "a.b.c", "x" * 5000 + ".e30.", "é.é.é", "e30.e30.e30"])
async def test_garbage_jwt_is_refused_as_401(keyset: KeySet, token: str) -> None:
    refusal = await _rejected(_verifier(keyset), {HEADER_SIGNATURE: token})
    assert refusal.status == 401


async def test_unknown_kid_in_a_static_jwks_is_refused(keyset: KeySet) -> None:
    stranger = KeySet.generate()
    refusal = await _rejected(_verifier(keyset), {HEADER_SIGNATURE: _sign(stranger)})
    assert (refusal.status, refusal.reason) == (401, "unknown_kid")


# ---- tokens ------------------------------------------------------------------------------


async def test_token_method_accepts_the_expected_token() -> None:
    verifier = _verifier(methods=frozenset({AuthMethod.TOKEN}))
    for header in (HEADER_NOTIFICATION_TOKEN, HEADER_NOTIFICATION_TOKEN_ALT):
        verified = await verifier.verify(
            {header: TOKEN, HEADER_WEBHOOK_ID: "msg_1"},
            BODY,
            expected_token_digest=token_digest(TOKEN),
        )
        assert (verified.method, verified.dedup_key, verified.claims) == (
            AuthMethod.TOKEN,
            "msg_1",
            None,
        )
        assert verified.task_id is None and verified.seq is None


async def test_token_without_webhook_id_dedups_by_the_body_hash() -> None:
    verifier = _verifier(methods=frozenset({AuthMethod.TOKEN}))
    verified = await verifier.verify(
        {HEADER_NOTIFICATION_TOKEN: TOKEN}, BODY, expected_token_digest=token_digest(TOKEN)
    )
    assert verified.dedup_key == "sha256:" + hashlib.sha256(BODY).hexdigest()


async def test_token_method_needs_the_expected_digest() -> None:
    verifier = _verifier(methods=frozenset({AuthMethod.TOKEN}))
    refusal = await _rejected(verifier, {HEADER_NOTIFICATION_TOKEN: TOKEN})
    assert (refusal.status, refusal.reason) == (401, "bad_token")


async def test_wrong_token_is_refused() -> None:
    verifier = _verifier(methods=frozenset({AuthMethod.TOKEN}))
    refusal = await _rejected(
        verifier, {HEADER_NOTIFICATION_TOKEN: "guess"}, expected_token_digest=token_digest(TOKEN)
    )
    assert (refusal.status, refusal.reason) == (401, "bad_token")


async def test_a_token_sent_beside_a_jwt_must_match_too(keyset: KeySet) -> None:
    verifier = _verifier(keyset, methods=frozenset({AuthMethod.JWT, AuthMethod.TOKEN}))
    headers = {HEADER_SIGNATURE: _sign(keyset), HEADER_NOTIFICATION_TOKEN: "guess"}
    refusal = await _rejected(verifier, headers, expected_token_digest=token_digest(TOKEN))
    assert (refusal.status, refusal.reason) == (401, "bad_token")


async def test_the_strongest_allowed_method_is_used(keyset: KeySet) -> None:
    verifier = _verifier(keyset, methods=frozenset({AuthMethod.JWT, AuthMethod.TOKEN}))
    headers = {HEADER_SIGNATURE: _sign(keyset), HEADER_NOTIFICATION_TOKEN: TOKEN}
    verified = await verifier.verify(
        headers, BODY, expected_token_digest=token_digest(TOKEN), now=NOW
    )
    assert verified.method is AuthMethod.JWT


async def test_a_method_the_policy_does_not_allow_is_refused(keyset: KeySet) -> None:
    refusal = await _rejected(_verifier(keyset), {HEADER_NOTIFICATION_TOKEN: TOKEN})
    assert (refusal.status, refusal.reason) == (401, "auth_method_not_allowed")
    assert "offers a token" in str(refusal) and "jwt" in str(refusal)


async def test_a_request_without_credentials_is_refused(keyset: KeySet) -> None:
    refusal = await _rejected(_verifier(keyset), {})
    assert (refusal.status, refusal.reason) == (401, "no_credentials")


# ---- Standard Webhooks -------------------------------------------------------------------

VECTOR = {
    HEADER_WEBHOOK_ID: "msg_p5jXN8AQM9LWM0D4loKWxJek",
    HEADER_WEBHOOK_TIMESTAMP: "1614265330",
    HEADER_WEBHOOK_SIGNATURE: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
}
VECTOR_BODY = b'{"test": 2432232314}'


def _standard_verifier(*secrets: str) -> WebhookVerifier:
    return _verifier(
        methods=frozenset({AuthMethod.STANDARD_WEBHOOKS}), standard_webhooks_secrets=secrets
    )


async def test_standard_webhooks_test_vector_verifies() -> None:
    verified = await _standard_verifier(SW_SECRET).verify(VECTOR, VECTOR_BODY, now=1614265330)
    assert verified.method is AuthMethod.STANDARD_WEBHOOKS
    assert (verified.dedup_key, verified.timestamp) == ("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330)


async def test_standard_webhooks_any_configured_secret_verifies() -> None:
    other = standard_webhooks.sign(SW_SECRET, "msg_1", NOW, BODY)
    headers = {
        HEADER_WEBHOOK_ID: "msg_1",
        HEADER_WEBHOOK_TIMESTAMP: str(NOW),
        HEADER_WEBHOOK_SIGNATURE: other,
    }
    verifier = _standard_verifier("whsec_c2Vjb25kIHNlY3JldA==", SW_SECRET)
    assert (await verifier.verify(headers, BODY, now=NOW)).dedup_key == "msg_1"


async def test_standard_webhooks_wrong_signature_is_refused() -> None:
    refusal = await _rejected(
        _standard_verifier(SW_SECRET), VECTOR, body=VECTOR_BODY + b" ", now=1614265330
    )
    assert (refusal.status, refusal.reason) == (401, "bad_signature")


async def test_standard_webhooks_needs_id_and_timestamp() -> None:
    headers = {k: v for k, v in VECTOR.items() if k != HEADER_WEBHOOK_ID}
    refusal = await _rejected(
        _standard_verifier(SW_SECRET), headers, body=VECTOR_BODY, now=1614265330
    )
    assert (refusal.status, refusal.reason) == (400, "bad_header")


@pytest.mark.parametrize(
    ("skew", "status", "off"),
    [(-301, 401, "301 s old"), (301, 401, "301 s in the future"), (-299, None, "")],
)
async def test_webhook_timestamp_freshness_window(skew: int, status: int | None, off: str) -> None:
    verifier = _standard_verifier(SW_SECRET)
    call = verifier.verify(VECTOR, VECTOR_BODY, now=1614265330 - skew)
    if status is None:
        assert (await call).method is AuthMethod.STANDARD_WEBHOOKS
        return
    with pytest.raises(WebhookRejected) as caught:
        await call
    assert (caught.value.status, caught.value.reason) == (status, "stale")
    # How far off, which way, and what to check.
    assert str(caught.value) == (
        f"webhook-timestamp is outside the freshness window: it is {off} (at most 300 s "
        "either way is accepted); check that the sender's and this receiver's clocks are "
        "synchronised (NTP)"
    )


@pytest.mark.parametrize("value", ["", "-1", "1.5", "1e9", "\uff11\uff12", "9" * 13])
async def test_webhook_timestamp_must_be_unix_seconds(keyset: KeySet, value: str) -> None:
    headers = {HEADER_SIGNATURE: _sign(keyset), HEADER_WEBHOOK_TIMESTAMP: value}
    refusal = await _rejected(_verifier(keyset), headers)
    assert (refusal.status, refusal.reason) == (400, "bad_header")


@pytest.mark.parametrize("value", ["", "x" * 257, "tab\tin", "nul\x00", "\udcff"])
async def test_webhook_id_must_be_a_printable_id(keyset: KeySet, value: str) -> None:
    headers = {HEADER_SIGNATURE: _sign(keyset), HEADER_WEBHOOK_ID: value}
    refusal = await _rejected(_verifier(keyset), headers)
    assert (refusal.status, refusal.reason) == (400, "bad_header")


# ---- policy and parsing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"methods": frozenset()}, "methods: allow at least one authentication method"),
        ({"algorithms": ("HS256",)}, "algorithms: unsupported ['HS256']"),
        ({"algorithms": ("ES256", "none")}, "algorithms: unsupported ['none']"),
        ({"algorithms": ()}, "algorithms: the jwt method needs at least one algorithm"),
        ({"freshness_seconds": 0}, "freshness_seconds must be positive"),
        ({"freshness_seconds": -5}, "freshness_seconds must be positive"),
        (
            {"methods": frozenset({AuthMethod.STANDARD_WEBHOOKS})},
            "standard_webhooks_secrets: the standard-webhooks method needs a whsec_ secret",
        ),
        (
            {
                "methods": frozenset({AuthMethod.STANDARD_WEBHOOKS}),
                "standard_webhooks_secrets": ("whsec_not*base64",),
            },
            "standard_webhooks_secrets: the Standard Webhooks secret after 'whsec_' "
            "is not valid base64",
        ),
        (
            {
                "methods": frozenset({AuthMethod.STANDARD_WEBHOOKS}),
                "standard_webhooks_secrets": ("c2VjcmV0",),
            },
            "standard_webhooks_secrets: a Standard Webhooks secret must start with 'whsec_'",
        ),
    ],
)
def test_policy_validation_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        VerifyPolicy(**kwargs)
    assert str(caught.value).startswith(message)


def test_verifier_for_jwt_needs_a_jwks_cache() -> None:
    with pytest.raises(ValueError, match="jwks: the jwt method needs a JWKSCache"):
        WebhookVerifier(VerifyPolicy())


def test_verifier_for_tokens_only_needs_no_jwks() -> None:
    policy = VerifyPolicy(methods=frozenset({AuthMethod.TOKEN}))
    assert WebhookVerifier(policy).jwks is None


def test_allowed_methods_parses_names_leniently() -> None:
    parsed = allowed_methods([" JWT", "token ", "standard_webhooks", "Standard-Webhooks"])
    assert parsed == frozenset(AuthMethod)
    assert allowed_methods([]) == frozenset()


@pytest.mark.parametrize("name", ["hmac", "", "jwt,token"])
def test_allowed_methods_refuses_unknown_names(name: str) -> None:
    with pytest.raises(ValueError) as caught:
        allowed_methods(["jwt", name])
    assert str(caught.value) == (
        f"unknown authentication method {name!r}; use jwt, token, standard-webhooks"
    )


def test_token_digest_and_check_token() -> None:
    digest = token_digest(TOKEN)
    assert digest == hashlib.sha256(TOKEN.encode()).hexdigest()
    check_token(TOKEN, digest)
    with pytest.raises(WebhookRejected) as caught:
        check_token(TOKEN + "x", digest)
    assert (caught.value.status, caught.value.reason) == (401, "bad_token")
    # Header bytes that are not UTF-8 arrive as lone surrogates: no match, no crash.
    assert token_digest("tok\udcff") != digest


def test_presented_jwt_prefers_x_a2a_signature() -> None:
    assert presented_jwt({HEADER_SIGNATURE: " a.b.c ", "Authorization": "Bearer d.e.f"}) == "a.b.c"
    assert presented_jwt({"authorization": "bearer d.e.f"}) == "d.e.f"
    assert presented_jwt({"Authorization": "Bearer opaque-credential"}) is None
    assert presented_jwt({"Authorization": "Basic a.b.c"}) is None
    assert presented_jwt({}) is None


def test_presented_token_reads_either_header_name() -> None:
    assert presented_token({HEADER_NOTIFICATION_TOKEN: "one"}) == "one"
    assert presented_token({HEADER_NOTIFICATION_TOKEN_ALT.lower(): "two"}) == "two"
    both = {HEADER_NOTIFICATION_TOKEN: "one", HEADER_NOTIFICATION_TOKEN_ALT: "two"}
    assert presented_token(both) == "one"
    assert presented_token({}) is None


@pytest.mark.parametrize(
    "token", ["", "a.b", "a.b.c", "a.!!!.c", "a.W10.c", "a." + "W" * 20_000 + ".c", "a.é.c"]
)
def test_unverified_issuer_of_garbage_is_none(token: str) -> None:
    assert unverified_issuer(token) is None


def test_unverified_issuer_reads_iss_without_verifying(keyset: KeySet) -> None:
    assert unverified_issuer(_sign(keyset)) == ISSUER


@pytest.mark.parametrize(("seq", "expected"), [(3, 3), (True, None), ("3", None), (2**63, None)])
def test_verified_seq_is_an_int64(seq: object, expected: int | None) -> None:
    verified = VerifiedWebhook(AuthMethod.JWT, "msg_1", None, {"seq": seq})
    assert verified.seq == expected


# ---- JWKSCache over HTTP -----------------------------------------------------------------


@dataclass
class JWKSServer:
    url: str
    keyset: KeySet
    hits: int = 0
    status: int = 200
    body: Any = None
    cache_control: list[str | None] = field(default_factory=list)


@pytest.fixture
async def jwks_server(keyset: KeySet) -> AsyncIterator[JWKSServer]:
    state = JWKSServer("", keyset)

    async def jwks(request: web.Request) -> web.Response:
        state.hits += 1
        state.cache_control.append(request.headers.get("Cache-Control"))
        body = state.body if state.body is not None else state.keyset.jwks()
        return web.json_response(body, status=state.status)

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.url = str(server.make_url("/jwks.json"))
    try:
        yield state
    finally:
        await server.close()


async def test_jwks_is_fetched_once_and_cached(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url)
    verifier = _verifier(jwks=cache)
    for i in range(5):
        token = _sign(jwks_server.keyset, webhook_id=f"msg_{i}", now=int(time.time()))
        await verifier.verify({HEADER_SIGNATURE: token}, BODY)
    assert jwks_server.hits == cache.fetches == 1


async def test_jwks_fetches_ask_caches_on_the_way_for_a_fresh_copy(
    jwks_server: JWKSServer,
) -> None:
    # The agent answers with a max-age; an HTTP cache keeping that copy would hide a key
    # rotated in since, and refetching for an unknown kid would not find it.
    cache = JWKSCache(jwks_server.url, min_refresh=0.0)
    verifier = _verifier(jwks=cache)
    first = _sign(jwks_server.keyset, webhook_id="msg_1", now=int(time.time()))
    await verifier.verify({HEADER_SIGNATURE: first}, BODY)
    jwks_server.keyset.rotate()
    second = _sign(jwks_server.keyset, webhook_id="msg_2", now=int(time.time()))
    await verifier.verify({HEADER_SIGNATURE: second}, BODY)
    assert jwks_server.cache_control == ["no-cache", "no-cache"]


async def test_concurrent_first_requests_share_one_fetch(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url)
    sets = await asyncio.gather(*(cache.get() for _ in range(20)))
    assert all(s == jwks_server.keyset.jwks() for s in sets)
    assert jwks_server.hits == 1


async def test_jwks_is_refetched_after_its_ttl(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url, ttl=0.05, min_refresh=0.0)
    await cache.get()
    await asyncio.sleep(0.1)
    await cache.get()
    assert jwks_server.hits == 2


async def test_unknown_kid_refetch_is_rate_limited(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url, min_refresh=0.3)
    await cache.get()
    for _ in range(20):
        with pytest.raises(WebhookRejected) as caught:
            await cache.get(refresh_for_kid="forged")
        assert (caught.value.status, caught.value.reason) == (503, "jwks_refresh_pending")
    assert jwks_server.hits == 1
    await asyncio.sleep(0.35)
    await asyncio.gather(*(cache.get(refresh_for_kid="forged") for _ in range(20)))
    assert jwks_server.hits == 2  # one refetch per window, however many callers


async def test_rotated_key_verifies_after_one_refetch() -> None:
    keys = KeySet.generate()
    state: dict[str, Any] = {"hits": 0}

    async def jwks(request: web.Request) -> web.Response:
        state["hits"] += 1
        return web.json_response(keys.jwks())

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    async with TestServer(app, host="127.0.0.1") as server:
        verifier = _verifier(jwks=JWKSCache(str(server.make_url("/jwks.json")), min_refresh=0))
        now = int(time.time())
        await verifier.verify({HEADER_SIGNATURE: _sign(keys, now=now)}, BODY)
        keys.rotate()
        verified = await verifier.verify({HEADER_SIGNATURE: _sign(keys, now=now)}, BODY)
    assert verified.method is AuthMethod.JWT
    assert state["hits"] == 2


async def test_a_failing_refetch_keeps_the_cached_set(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url, ttl=0.0, min_refresh=0.0)
    first = await cache.get()
    jwks_server.status = 500
    assert await cache.get() == first
    assert jwks_server.hits == 2


@pytest.mark.parametrize(
    ("status", "body"), [(500, {"error": "down"}), (200, {"not": "a jwks"}), (200, [1, 2])]
)
async def test_no_jwks_at_all_is_503_and_rate_limited(
    jwks_server: JWKSServer, status: int, body: Any
) -> None:
    jwks_server.status, jwks_server.body = status, body
    cache = JWKSCache(jwks_server.url, min_refresh=30)
    for _ in range(5):
        with pytest.raises(WebhookRejected) as caught:
            await cache.get(refresh_for_kid="kid")
        assert (caught.value.status, caught.value.reason) == (503, "jwks_unavailable")
    assert jwks_server.hits == 1


async def test_unreachable_jwks_is_503() -> None:
    cache = JWKSCache("http://127.0.0.1:1/jwks.json", timeout=2)
    with pytest.raises(WebhookRejected) as caught:
        await cache.get()
    assert (caught.value.status, caught.value.reason) == (503, "jwks_unavailable")


async def test_a_new_url_is_fetched_at_once(jwks_server: JWKSServer) -> None:
    cache = JWKSCache("http://127.0.0.1:1/jwks.json", min_refresh=30)
    with pytest.raises(WebhookRejected):
        await cache.get()
    cache.url = jwks_server.url  # e.g. found in the agent card meanwhile
    assert await cache.get() == jwks_server.keyset.jwks()


async def test_static_jwks_never_fetches(keyset: KeySet) -> None:
    cache = JWKSCache.static(keyset.jwks())
    assert await cache.get(refresh_for_kid="unknown") == keyset.jwks()
    assert cache.fetches == 0
    with pytest.raises(WebhookRejected) as caught:
        await JWKSCache(None).get()
    assert (caught.value.status, caught.value.reason) == (401, "no_jwks")


# ---- unknown kids while a refetch is rate-limited; discovery; size caps ------------------


async def test_a_key_rotated_right_after_a_fetch_is_503_retry_not_401(
    jwks_server: JWKSServer,
) -> None:
    cache = JWKSCache(jwks_server.url, min_refresh=0.5)
    verifier = _verifier(jwks=cache)
    now = int(time.time())
    await verifier.verify({HEADER_SIGNATURE: _sign(jwks_server.keyset, now=now)}, BODY)
    jwks_server.keyset.rotate()  # the agent signs with the new key at once
    rotated = _sign(jwks_server.keyset, now=now)
    refusal = await _rejected(verifier, {HEADER_SIGNATURE: rotated}, now=now)
    # Not a permanent 401: the set was fetched before the request came; retry after the
    # window (whole seconds, at least 1).
    assert (refusal.status, refusal.reason, refusal.retry_after) == (
        503,
        "jwks_refresh_pending",
        1,
    )
    assert jwks_server.hits == 1
    await asyncio.sleep(0.55)
    verified = await verifier.verify({HEADER_SIGNATURE: rotated}, BODY, now=now)
    assert verified.method is AuthMethod.JWT and jwks_server.hits == 2


async def test_a_kid_still_unknown_after_a_fresh_fetch_is_401(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url, min_refresh=0.3)
    verifier = _verifier(jwks=cache)
    stranger = _sign(KeySet.generate(), now=int(time.time()))
    # The first request fetches the set after it arrived: the kid is really not there.
    refusal = await _rejected(verifier, {HEADER_SIGNATURE: stranger}, now=int(time.time()))
    assert (refusal.status, refusal.reason) == (401, "unknown_kid")
    # Within the window: cannot tell yet, so "retry".
    refusal = await _rejected(verifier, {HEADER_SIGNATURE: stranger}, now=int(time.time()))
    assert (refusal.status, refusal.reason) == (503, "jwks_refresh_pending")
    await asyncio.sleep(0.35)
    # Concurrent requests after the window share one refetch, and all get the 401.
    refusals = await asyncio.gather(
        *(_rejected(verifier, {HEADER_SIGNATURE: stranger}, now=int(time.time())) for _ in range(5))
    )
    assert {(r.status, r.reason) for r in refusals} == {(401, "unknown_kid")}
    assert jwks_server.hits == 2


async def test_an_unknown_kid_after_a_failed_refetch_is_503(jwks_server: JWKSServer) -> None:
    cache = JWKSCache(jwks_server.url, ttl=0.0, min_refresh=0.0)
    known = await cache.get()
    jwks_server.status = 500
    assert await cache.get() == known  # a known kid still verifies with the cached set
    with pytest.raises(WebhookRejected) as caught:
        await cache.get(refresh_for_kid="rotated")
    assert (caught.value.status, caught.value.reason) == (503, "jwks_refresh_pending")
    assert caught.value.retry_after == 1


async def test_a_kid_under_an_algorithm_the_policy_refuses_causes_no_refetch(
    jwks_server: JWKSServer,
) -> None:
    cache = JWKSCache(jwks_server.url, min_refresh=30)
    verifier = _verifier(jwks=cache, algorithms=("EdDSA",))
    token = _sign(KeySet.generate(), now=int(time.time()))  # ES256
    for _ in range(3):
        refusal = await _rejected(verifier, {HEADER_SIGNATURE: token}, now=int(time.time()))
        assert (refusal.status, refusal.reason) == (401, "bad_algorithm")
    assert jwks_server.hits == 1


async def test_an_oversized_jwks_is_refused_without_reading_it_all(
    jwks_server: JWKSServer, caplog: pytest.LogCaptureFixture
) -> None:
    from receiver.verify import MAX_JWKS_BYTES

    jwks_server.body = {"keys": [], "padding": "x" * MAX_JWKS_BYTES}
    with (
        caplog.at_level("WARNING", logger="receiver.verify"),
        pytest.raises(WebhookRejected) as caught,
    ):
        await JWKSCache(jwks_server.url).get()
    assert (caught.value.status, caught.value.reason) == (503, "jwks_unavailable")
    assert "over" in caplog.text  # why, for the operator (the sender is told to retry)


async def test_deeply_nested_jwks_json_is_a_clean_503(jwks_server: JWKSServer) -> None:
    app_body = "[" * 100_000 + "]" * 100_000

    async def nested(request: web.Request) -> web.Response:
        return web.Response(text=app_body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/jwks.json", nested)
    async with TestServer(app, host="127.0.0.1") as server:
        with pytest.raises(WebhookRejected) as caught:
            await JWKSCache(str(server.make_url("/jwks.json"))).get()
    assert (caught.value.status, caught.value.reason) == (503, "jwks_unavailable")


async def test_locate_is_asked_until_it_answers_at_most_once_per_window(
    jwks_server: JWKSServer,
) -> None:
    calls: list[float] = []
    answer: dict[str, Any] = {"fail": True}

    async def locate() -> str | None:
        calls.append(time.monotonic())
        if answer["fail"]:
            raise ValueError("the agent card is not reachable")
        return jwks_server.url

    cache = JWKSCache("http://127.0.0.1:1/jwks.json", min_refresh=0.3, locate=locate, timeout=2)
    await cache.locate()
    for _ in range(3):
        with pytest.raises(WebhookRejected):
            await cache.get()
    assert len(calls) == 1 and not cache.located  # rate-limited with the fetches
    answer["fail"] = False
    await asyncio.sleep(0.35)
    assert await cache.get() == jwks_server.keyset.jwks()
    assert len(calls) == 2 and cache.located and cache.url == jwks_server.url
    await asyncio.sleep(0.35)
    await cache.get(refresh_for_kid="other")
    assert len(calls) == 2  # answered once: never asked again


async def test_a_jwks_fetch_failure_tells_the_sender_nothing_and_the_log_no_password(
    jwks_server: JWKSServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever posts a webhook gets a fixed text: no host, address or URL (let alone a
    password in it); the operator's log names the URL without its user-info."""
    jwks_server.status, jwks_server.body = 401, {"error": "no"}
    url = jwks_server.url.replace("http://", "http://svc:S3cretPw@")
    cache = JWKSCache(url, min_refresh=30)
    with (
        caplog.at_level("WARNING", logger="receiver.verify"),
        pytest.raises(WebhookRejected) as caught,
    ):
        await cache.get()
    assert (caught.value.status, caught.value.reason) == (503, "jwks_unavailable")
    message = str(caught.value)
    assert "127.0.0.1" not in message and "S3cretPw" not in message and "401" not in message
    logged = [r.getMessage() for r in caplog.records if "could not be fetched" in r.getMessage()]
    assert len(logged) == 1 and "HTTP 401" in logged[0]
    assert jwks_server.url in logged[0] and "S3cretPw" not in caplog.text
