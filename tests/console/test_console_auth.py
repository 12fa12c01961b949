"""Console sessions and CSRF tokens: what a cookie or a form may and may not do."""

from __future__ import annotations

import pytest

from a2a_push.console.auth import Sessions

KEY = "console-admin-key-0123456789"
OTHER = "another-admin-key-0123456789"


def test_a_key_opens_a_session_its_cookie_reads_back() -> None:
    sessions = Sessions([KEY])
    key_id = sessions.check_key(KEY)
    assert key_id is not None and KEY not in key_id
    cookie, session = sessions.open(key_id, now=1000.0)
    assert KEY not in cookie
    assert sessions.check(cookie, now=1001.0) == session


def test_a_wrong_key_opens_nothing() -> None:
    sessions = Sessions([KEY])
    assert sessions.check_key(OTHER) is None
    assert sessions.check_key("") is None


def test_no_keys_means_off() -> None:
    assert not Sessions([]).enabled
    assert Sessions([KEY]).enabled


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: c[:-2] + ("AA" if not c.endswith("AA") else "BB"),  # the MAC
        lambda c: "x" + c,  # the payload
        lambda c: c.replace(".", ""),
        lambda c: "",
        lambda c: "not.base64!",
    ],
)
def test_a_forged_cookie_is_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    sessions = Sessions([KEY])
    cookie, _ = sessions.open(sessions.check_key(KEY) or "", now=1000.0)
    assert sessions.check(tamper(cookie), now=1001.0) is None


def test_a_session_expires() -> None:
    sessions = Sessions([KEY], session_seconds=60)
    cookie, _ = sessions.open(sessions.check_key(KEY) or "", now=1000.0)
    assert sessions.check(cookie, now=1059.0) is not None
    assert sessions.check(cookie, now=1060.0) is None


def test_replicas_with_the_same_keys_share_sessions_and_removing_a_key_ends_them() -> None:
    one, two = Sessions([KEY, OTHER]), Sessions([OTHER, KEY])
    cookie, _ = one.open(one.check_key(KEY) or "", now=1000.0)
    assert two.check(cookie, now=1001.0) is not None
    assert Sessions([OTHER]).check(cookie, now=1001.0) is None  # KEY was removed


def test_csrf_tokens_are_bound_to_their_session() -> None:
    sessions = Sessions([KEY])
    key_id = sessions.check_key(KEY) or ""
    _, first = sessions.open(key_id, now=1000.0)
    _, second = sessions.open(key_id, now=1000.0)
    token = sessions.csrf_token(first)
    assert sessions.check_csrf(first, token)
    assert not sessions.check_csrf(second, token)
    assert not sessions.check_csrf(first, None)
    assert not sessions.check_csrf(first, "")


def test_login_tokens_are_bound_to_their_cookie() -> None:
    sessions = Sessions([KEY])
    cookie, token = sessions.login_token()
    other_cookie, _ = sessions.login_token()
    assert sessions.check_login_token(cookie, token)
    assert not sessions.check_login_token(other_cookie, token)
    assert not sessions.check_login_token(None, token)
    assert not sessions.check_login_token(cookie, None)


def test_session_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="session_seconds"):
        Sessions([KEY], session_seconds=0)
