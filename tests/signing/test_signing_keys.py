"""Signing keys: generation, JWK export, rotation with a grace period, persistence."""

from __future__ import annotations

import base64
import errno
import json
import multiprocessing
import stat
from pathlib import Path
from typing import Any, get_args

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from joserfc import jwk as jose_jwk

from a2a_push.errors import A2APushError
from a2a_push.protocol.constants import DEFAULT_KEY_GRACE_PERIOD_SECONDS
from a2a_push.signing import (
    DEFAULT_ALGORITHM,
    Algorithm,
    KeySet,
    KeyStoreError,
    SigningKey,
    public_key_from_jwk,
)
from a2a_push.signing import keys as keys_module

ALGS = get_args(Algorithm)
KTY = {"ES256": "EC", "EdDSA": "OKP", "RS256": "RSA"}
PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi", "oth", "k"}
GRACE = 3600.0
T0 = 1_700_000_000.0


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def keys() -> dict[str, SigningKey]:
    return {alg: SigningKey.generate(alg) for alg in ALGS}


def test_default_algorithm_is_es256() -> None:
    assert DEFAULT_ALGORITHM == "ES256"
    assert SigningKey.generate().alg == "ES256"


@pytest.mark.parametrize("alg", ALGS)
def test_public_jwk_has_the_rfc7517_public_members(keys: dict[str, SigningKey], alg: str) -> None:
    key = keys[alg]
    jwk = key.public_jwk()
    assert jwk["kty"] == KTY[alg]
    assert jwk["kid"] == key.kid
    assert jwk["alg"] == alg
    assert jwk["use"] == "sig"
    expected = {
        "ES256": {"crv", "x", "y"},
        "EdDSA": {"crv", "x"},
        "RS256": {"n", "e"},
    }[alg]
    assert set(jwk) == expected | {"kty", "kid", "alg", "use"}
    assert not PRIVATE_MEMBERS & set(jwk)


@pytest.mark.parametrize("alg", ALGS)
def test_kid_is_the_rfc7638_thumbprint(keys: dict[str, SigningKey], alg: str) -> None:
    key = keys[alg]
    independent = jose_jwk.import_key(key.private_pem(), KTY[alg])  # type: ignore[call-overload]
    assert key.kid == independent.thumbprint()


@pytest.mark.parametrize("alg", ALGS)
def test_public_jwk_matches_an_independent_export(keys: dict[str, SigningKey], alg: str) -> None:
    key = keys[alg]
    independent = jose_jwk.import_key(key.private_pem(), KTY[alg])  # type: ignore[call-overload]
    exported = independent.as_dict(private=False)
    for member, value in exported.items():
        assert key.public_jwk()[member] == value


@pytest.mark.parametrize("alg", ALGS)
def test_public_key_from_jwk_round_trips(keys: dict[str, SigningKey], alg: str) -> None:
    key = keys[alg]
    public = public_key_from_jwk(key.public_jwk())
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    assert public.public_bytes(*raw) == key.private_key.public_key().public_bytes(*raw)


def test_public_key_from_jwk_refuses_small_rsa_keys() -> None:
    small = rsa.generate_private_key(65537, 1024)
    numbers = small.public_key().public_numbers()
    jwk = {
        "kty": "RSA",
        "n": b64url(numbers.n.to_bytes(128, "big")),
        "e": b64url(numbers.e.to_bytes(3, "big")),
    }
    with pytest.raises(ValueError, match="too small"):
        public_key_from_jwk(jwk)


def test_public_key_from_jwk_refuses_an_off_curve_point(keys: dict[str, SigningKey]) -> None:
    jwk = keys["ES256"].public_jwk()
    jwk["y"] = jwk["x"]
    with pytest.raises(ValueError):
        public_key_from_jwk(jwk)


def test_private_pem_is_unencrypted_pkcs8(keys: dict[str, SigningKey]) -> None:
    pem = keys["ES256"].private_pem()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)


def test_rs256_keys_are_2048_bits(keys: dict[str, SigningKey]) -> None:
    private_key = keys["RS256"].private_key
    assert isinstance(private_key, rsa.RSAPrivateKey)
    assert private_key.key_size == 2048


def test_generated_kids_are_unique() -> None:
    assert len({SigningKey.generate().kid for _ in range(10)}) == 10


def test_signing_key_refuses_a_key_of_another_algorithm(keys: dict[str, SigningKey]) -> None:
    with pytest.raises(KeyStoreError):
        SigningKey(kid="x", alg="RS256", private_key=keys["ES256"].private_key, created_at=T0)
    assert issubclass(KeyStoreError, A2APushError)


def test_keyset_generate_has_one_active_key_in_its_jwks() -> None:
    keyset = KeySet.generate()
    assert keyset.grace_period == DEFAULT_KEY_GRACE_PERIOD_SECONDS
    assert keyset.jwks() == {"keys": [keyset.active.public_jwk()]}
    assert keyset.get(keyset.active.kid) is keyset.active
    assert keyset.get("no-such-kid") is None


def test_keyset_needs_exactly_one_active_key(keys: dict[str, SigningKey]) -> None:
    with pytest.raises(KeyStoreError):
        KeySet([])
    with pytest.raises(KeyStoreError):
        KeySet([keys["ES256"], keys["EdDSA"]])


def test_keyset_refuses_duplicate_kids() -> None:
    key = SigningKey.generate()
    twin = SigningKey(key.kid, key.alg, key.private_key, T0, retired_at=T0)
    with pytest.raises(KeyStoreError, match="duplicate"):
        KeySet([key, twin])


def test_rotate_makes_a_new_key_active_at_once() -> None:
    keyset = KeySet.generate(grace_period=GRACE)
    old = keyset.active
    new = keyset.rotate(now=T0)
    assert keyset.active is new
    assert new.kid != old.kid
    assert new.alg == old.alg
    assert new.retired_at is None
    assert old.retired_at == T0


def test_rotate_can_switch_algorithm() -> None:
    keyset = KeySet.generate("ES256")
    assert keyset.rotate("EdDSA", now=T0).alg == "EdDSA"
    assert keyset.active.public_jwk()["kty"] == "OKP"


def test_retired_key_stays_in_jwks_within_grace_and_leaves_after() -> None:
    keyset = KeySet.generate(grace_period=GRACE)
    old = keyset.active
    new = keyset.rotate(now=T0)

    within = [jwk["kid"] for jwk in keyset.jwks(now=T0 + GRACE - 1)["keys"]]
    assert within == [new.kid, old.kid]
    assert keyset.get(old.kid, now=T0 + GRACE - 1) is old

    after = [jwk["kid"] for jwk in keyset.jwks(now=T0 + GRACE)["keys"]]
    assert after == [new.kid]
    assert keyset.get(old.kid, now=T0 + GRACE) is None


def test_jwks_lists_retired_keys_newest_first() -> None:
    keyset = KeySet.generate(grace_period=GRACE)
    first = keyset.active
    second = keyset.rotate(now=T0)
    third = keyset.rotate(now=T0 + 10)
    kids = [jwk["kid"] for jwk in keyset.jwks(now=T0 + 20)["keys"]]
    assert kids == [third.kid, second.kid, first.kid]


def test_prune_drops_keys_past_grace_only() -> None:
    keyset = KeySet.generate(grace_period=GRACE)
    first = keyset.active
    second = keyset.rotate(now=T0)
    keyset.rotate(now=T0 + GRACE)
    assert keyset.prune(now=T0 + GRACE + 1) == [first.kid]
    assert [key.kid for key in keyset.keys] == [second.kid, keyset.active.kid]


def test_load_or_create_creates_a_private_directory_and_key(tmp_path: Path) -> None:
    directory = tmp_path / "nested" / "keys"
    keyset = KeySet.load_or_create(directory)
    assert mode(directory) == 0o700
    assert keyset.active.alg == "ES256"
    key_file = directory / f"{keyset.active.kid}.pem"
    metadata = directory / "keys.json"
    assert mode(key_file) == 0o600
    assert mode(metadata) == 0o600
    assert key_file.read_bytes() == keyset.active.private_pem()


def test_metadata_lists_every_key_and_the_active_one(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path, grace_period=GRACE)
    old = keyset.active
    keyset.rotate(now=T0)
    document = json.loads((tmp_path / "keys.json").read_text())
    assert document["active"] == keyset.active.kid
    entries = {entry["kid"]: entry for entry in document["keys"]}
    assert entries[old.kid] == {
        "kid": old.kid,
        "alg": "ES256",
        "file": f"{old.kid}.pem",
        "created_at": old.created_at,
        "retired_at": T0,
    }
    assert entries[keyset.active.kid]["retired_at"] is None


def test_no_temporary_files_are_left_behind(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path)
    keyset.rotate()
    names = {path.name for path in tmp_path.iterdir()}
    assert not [name for name in names if name.endswith(".tmp")]


@pytest.mark.parametrize("alg", ALGS)
def test_load_or_create_reloads_the_same_keys(tmp_path: Path, alg: Algorithm) -> None:
    first = KeySet.load_or_create(tmp_path, alg=alg)
    again = KeySet.load_or_create(tmp_path, alg=alg)
    assert again.active.kid == first.active.kid
    assert again.active.alg == alg
    assert again.jwks() == first.jwks()


def test_load_or_create_keeps_existing_keys_when_asked_for_another_alg(tmp_path: Path) -> None:
    first = KeySet.load_or_create(tmp_path, alg="ES256")
    again = KeySet.load_or_create(tmp_path, alg="EdDSA")
    assert again.active.kid == first.active.kid


def test_rotation_persists_across_reload(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path, grace_period=GRACE)
    old = keyset.active
    new = keyset.rotate(now=T0)
    reloaded = KeySet.load_or_create(tmp_path, grace_period=GRACE)
    assert reloaded.active.kid == new.kid
    retired = reloaded.get(old.kid, now=T0 + 1)
    assert retired is not None
    assert retired.retired_at == T0
    assert reloaded.jwks(now=T0 + 1) == keyset.jwks(now=T0 + 1)
    assert mode(tmp_path / f"{new.kid}.pem") == 0o600


def test_prune_deletes_key_files_and_persists(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path, grace_period=GRACE)
    old = keyset.active
    keyset.rotate(now=T0)
    assert keyset.prune(now=T0 + GRACE) == [old.kid]
    assert not (tmp_path / f"{old.kid}.pem").exists()
    reloaded = KeySet.load_or_create(tmp_path, grace_period=GRACE)
    assert [key.kid for key in reloaded.keys] == [keyset.active.kid]


def test_corrupt_key_file_raises_key_store_error_naming_the_file(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path)
    key_file = tmp_path / f"{keyset.active.kid}.pem"
    key_file.write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
    with pytest.raises(KeyStoreError) as caught:
        KeySet.load_or_create(tmp_path)
    assert caught.value.path == key_file
    assert key_file.name in str(caught.value)
    assert "restore" in str(caught.value)


def test_missing_key_file_raises_key_store_error_naming_the_file(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path)
    key_file = tmp_path / f"{keyset.active.kid}.pem"
    key_file.unlink()
    with pytest.raises(KeyStoreError, match=key_file.name):
        KeySet.load_or_create(tmp_path)


def test_key_file_holding_another_key_is_refused(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path)
    key_file = tmp_path / f"{keyset.active.kid}.pem"
    key_file.write_bytes(SigningKey.generate().private_pem())
    with pytest.raises(KeyStoreError, match="does not hold"):
        KeySet.load_or_create(tmp_path)


def test_corrupt_metadata_raises_key_store_error(tmp_path: Path) -> None:
    KeySet.load_or_create(tmp_path)
    (tmp_path / "keys.json").write_text("{not json")
    with pytest.raises(KeyStoreError, match=r"keys\.json"):
        KeySet.load_or_create(tmp_path)


def test_metadata_nested_too_deep_raises_key_store_error(tmp_path: Path) -> None:
    KeySet.load_or_create(tmp_path)
    (tmp_path / "keys.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(KeyStoreError, match=r"keys\.json"):
        KeySet.load_or_create(tmp_path)


def test_metadata_of_a_newer_version_is_refused_not_misread(tmp_path: Path) -> None:
    KeySet.load_or_create(tmp_path)
    document = json.loads((tmp_path / "keys.json").read_text())
    document["version"] = 99
    (tmp_path / "keys.json").write_text(json.dumps(document))
    with pytest.raises(KeyStoreError, match=r"version 99.*upgrade a2a-push"):
        KeySet.load_or_create(tmp_path)


def test_metadata_cannot_point_outside_the_directory(tmp_path: Path) -> None:
    KeySet.load_or_create(tmp_path)
    metadata = tmp_path / "keys.json"
    document = json.loads(metadata.read_text())
    document["keys"][0]["file"] = "../elsewhere.pem"
    metadata.write_text(json.dumps(document))
    with pytest.raises(KeyStoreError, match="plain file name"):
        KeySet.load_or_create(tmp_path)


def test_missing_metadata_with_key_files_present_is_not_silently_replaced(tmp_path: Path) -> None:
    keyset = KeySet.load_or_create(tmp_path)
    (tmp_path / "keys.json").unlink()
    with pytest.raises(KeyStoreError, match=f"{keyset.active.kid}.pem"):
        KeySet.load_or_create(tmp_path)


def test_reload_picks_up_another_processs_rotation(tmp_path: Path) -> None:
    here = KeySet.load_or_create(tmp_path / "keys")
    there = KeySet.load_or_create(tmp_path / "keys")
    assert here.reload() is False  # nothing changed: one stat
    new = there.rotate()
    assert here.reload() is True
    assert here.active.kid == new.kid


def test_a_stale_view_never_overwrites_a_rotation(tmp_path: Path) -> None:
    a = KeySet.load_or_create(tmp_path / "keys")
    b = KeySet.load_or_create(tmp_path / "keys")
    first = a.rotate()
    second = b.rotate()  # b had not seen a's rotation; it must build on it
    fresh = KeySet.load_or_create(tmp_path / "keys")
    assert fresh.active.kid == second.kid
    assert first.kid in {k["kid"] for k in fresh.jwks()["keys"]}


def _load_or_create_in_a_process(directory: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        results.put(("ok", KeySet.load_or_create(directory).active.kid))
    except Exception as exc:  # reported to the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_processes_starting_together_share_one_new_key_set(tmp_path: Path) -> None:
    # Each round: 4 processes open a key directory that does not exist yet, at once.
    # They used to race on creating the directory (FileExistsError in the losers).
    ctx = multiprocessing.get_context("fork")
    for round_ in range(6):
        directory = tmp_path / f"round-{round_}" / "keys"
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [
            ctx.Process(
                target=_load_or_create_in_a_process, args=(str(directory), barrier, results)
            )
            for _ in range(4)
        ]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
        assert [o for o in outcomes if o[0] == "error"] == []
        assert len({kid for _, kid in outcomes}) == 1
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_a_first_start_cut_off_before_its_metadata_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "keys"

    def disk_full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(keys_module, "_write_metadata", disk_full)
        with pytest.raises(OSError, match="No space"):
            KeySet.load_or_create(directory)
    # The key written is left behind, with the marker naming it.
    assert len(list(directory.glob("*.pem"))) == 1
    keyset = KeySet.load_or_create(directory)
    assert [p.name for p in directory.glob("*.pem")] == [f"{keyset.active.kid}.pem"]
    assert not (directory / ".creating").exists()
    assert KeySet.load_or_create(directory).active.kid == keyset.active.kid


def test_a_lost_metadata_file_is_still_refused_after_a_completed_first_start(
    tmp_path: Path,
) -> None:
    # The marker is gone once keys.json exists: a later loss of keys.json is not taken
    # for a cut-off first start (which would throw the keys away).
    keyset = KeySet.load_or_create(tmp_path)
    assert not (tmp_path / ".creating").exists()
    (tmp_path / "keys.json").unlink()
    with pytest.raises(KeyStoreError, match=f"{keyset.active.kid}.pem"):
        KeySet.load_or_create(tmp_path)
    assert (tmp_path / f"{keyset.active.kid}.pem").exists()
