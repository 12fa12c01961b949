"""Signing keys for webhook JWTs: generation, JWK export, rotation and on-disk persistence."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, get_args

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from a2a_push.errors import A2APushError
from a2a_push.protocol.constants import DEFAULT_KEY_GRACE_PERIOD_SECONDS

if sys.platform != "win32":
    import fcntl

Algorithm: TypeAlias = Literal["ES256", "EdDSA", "RS256"]
DEFAULT_ALGORITHM: Final[Algorithm] = "ES256"
ALGORITHMS: Final[tuple[Algorithm, ...]] = get_args(Algorithm)

PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | rsa.RSAPublicKey

RSA_KEY_BITS: Final = 2048
_RSA_PUBLIC_EXPONENT: Final = 65537

METADATA_FILE: Final = "keys.json"
_LOCK_FILE: Final = ".lock"
# Present only while a first start writes its key set (see KeySet.load_or_create).
_CREATING_FILE: Final = ".creating"
_METADATA_VERSION: Final = 1


class KeyStoreError(A2APushError):
    """Signing keys could not be created, loaded or saved; ``path`` names the file when known."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.path = path


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def _int_to_b64url(value: int, length: int | None = None) -> str:
    size = length if length is not None else max(1, (value.bit_length() + 7) // 8)
    return _b64url(value.to_bytes(size, "big"))


def _require_key_for_alg(private_key: object, alg: str) -> PrivateKey:
    """Return ``private_key`` if ``alg`` may sign with it, else raise KeyStoreError."""
    if alg == "ES256":
        if isinstance(private_key, ec.EllipticCurvePrivateKey) and isinstance(
            private_key.curve, ec.SECP256R1
        ):
            return private_key
        expected = "an EC P-256 private key"
    elif alg == "EdDSA":
        if isinstance(private_key, ed25519.Ed25519PrivateKey):
            return private_key
        expected = "an Ed25519 private key"
    elif alg == "RS256":
        if isinstance(private_key, rsa.RSAPrivateKey) and private_key.key_size >= RSA_KEY_BITS:
            return private_key
        expected = f"an RSA private key of at least {RSA_KEY_BITS} bits"
    else:
        raise KeyStoreError(f"unsupported algorithm {alg!r}; use one of {', '.join(ALGORITHMS)}")
    raise KeyStoreError(f"algorithm {alg} needs {expected}, got {type(private_key).__name__}")


def _thumbprint_members(public_key: PublicKey) -> dict[str, str]:
    """The RFC 7638 required members of a public key's JWK."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        numbers = public_key.public_numbers()
        return {
            "crv": "P-256",
            "kty": "EC",
            "x": _int_to_b64url(numbers.x, 32),
            "y": _int_to_b64url(numbers.y, 32),
        }
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"crv": "Ed25519", "kty": "OKP", "x": _b64url(raw)}
    rsa_numbers = public_key.public_numbers()
    return {"e": _int_to_b64url(rsa_numbers.e), "kty": "RSA", "n": _int_to_b64url(rsa_numbers.n)}


def jwk_thumbprint(public_key: PublicKey) -> str:
    """RFC 7638 SHA-256 JWK thumbprint of a public key, base64url without padding."""
    members = _thumbprint_members(public_key)
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return _b64url(hashlib.sha256(canonical).digest())


def public_key_from_jwk(jwk: Mapping[str, Any]) -> PublicKey:
    """Build a public key from the public members of a JWK (private members are ignored).

    Only the key types this package signs with are accepted: EC P-256, OKP Ed25519 and
    RSA of at least 2048 bits. Raises ``ValueError`` on anything else or on bad values.
    """
    kty = jwk.get("kty")
    try:
        if kty == "EC":
            if jwk.get("crv") != "P-256":
                raise ValueError(f"unsupported EC curve {jwk.get('crv')!r}")
            x = _b64url_decode(str(jwk["x"]))
            y = _b64url_decode(str(jwk["y"]))
            if len(x) != 32 or len(y) != 32:
                raise ValueError("EC P-256 coordinates must be 32 bytes")
            return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + x + y)
        if kty == "OKP":
            if jwk.get("crv") != "Ed25519":
                raise ValueError(f"unsupported OKP curve {jwk.get('crv')!r}")
            return ed25519.Ed25519PublicKey.from_public_bytes(_b64url_decode(str(jwk["x"])))
        if kty == "RSA":
            n = int.from_bytes(_b64url_decode(str(jwk["n"])), "big")
            e = int.from_bytes(_b64url_decode(str(jwk["e"])), "big")
            public_key = rsa.RSAPublicNumbers(e, n).public_key()
            if public_key.key_size < RSA_KEY_BITS:
                raise ValueError(f"RSA key of {public_key.key_size} bits is too small")
            return public_key
    except (KeyError, TypeError, ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"invalid {kty} JWK: {exc!r}") from exc
    raise ValueError(f"unsupported JWK key type {kty!r}")


@dataclass
class SigningKey:
    """One private signing key, identified by its RFC 7638 thumbprint ``kid``."""

    kid: str
    alg: Algorithm
    private_key: PrivateKey
    created_at: float
    retired_at: float | None = None
    _public_jwk: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_key_for_alg(self.private_key, self.alg)

    def public_jwk(self) -> dict[str, Any]:
        """The RFC 7517 public JWK of this key (no private members), with kid, alg and use."""
        if self._public_jwk is None:
            members = _thumbprint_members(self.private_key.public_key())
            self._public_jwk = {**members, "kid": self.kid, "alg": self.alg, "use": "sig"}
        return dict(self._public_jwk)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS8 PEM."""
        return self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def generate(cls, alg: Algorithm = DEFAULT_ALGORITHM) -> SigningKey:
        """A fresh key for ``alg`` (ES256: P-256, EdDSA: Ed25519, RS256: 2048-bit RSA)."""
        private_key: PrivateKey
        if alg == "ES256":
            private_key = ec.generate_private_key(ec.SECP256R1())
        elif alg == "EdDSA":
            private_key = ed25519.Ed25519PrivateKey.generate()
        elif alg == "RS256":
            private_key = rsa.generate_private_key(_RSA_PUBLIC_EXPONENT, RSA_KEY_BITS)
        else:
            raise KeyStoreError(
                f"unsupported algorithm {alg!r}; use one of {', '.join(ALGORITHMS)}"
            )
        return cls(
            kid=jwk_thumbprint(private_key.public_key()),
            alg=alg,
            private_key=private_key,
            created_at=time.time(),
        )


class KeySet:
    """One active signing key plus retired keys that stay published for a grace period.

    With a ``directory``, :meth:`rotate` and :meth:`prune` persist the set there; use
    :meth:`load_or_create` to open (or start) a persisted set.
    """

    def __init__(
        self,
        keys: list[SigningKey],
        grace_period: float = DEFAULT_KEY_GRACE_PERIOD_SECONDS,
        directory: Path | None = None,
    ) -> None:
        if not keys:
            raise KeyStoreError("a key set needs at least one key")
        kids = [key.kid for key in keys]
        if len(set(kids)) != len(kids):
            raise KeyStoreError(f"duplicate kids in key set: {kids}")
        active = [key for key in keys if key.retired_at is None]
        if len(active) != 1:
            raise KeyStoreError(
                f"a key set needs exactly one active (not retired) key, got {len(active)}"
            )
        if grace_period < 0:
            raise KeyStoreError("grace_period must not be negative")
        self._keys = list(keys)
        self._active = active[0]
        self.grace_period = grace_period
        self.directory = directory
        self._seen_version: int | None = None  # metadata mtime as last read or written

    @property
    def active(self) -> SigningKey:
        """The key that signs new notifications."""
        return self._active

    @property
    def keys(self) -> list[SigningKey]:
        """Every key held, active and retired (including ones past their grace period)."""
        return list(self._keys)

    def _in_grace(self, key: SigningKey, now: float) -> bool:
        return key.retired_at is None or now < key.retired_at + self.grace_period

    def get(self, kid: str, now: float | None = None) -> SigningKey | None:
        """The key with this kid, unless it is unknown or retired past its grace period."""
        at = time.time() if now is None else now
        for key in self._keys:
            if key.kid == kid:
                return key if self._in_grace(key, at) else None
        return None

    def reload(self, *, wait: bool = True) -> bool:
        """Pick up changes another process made to the persisted set (``a2a-push keys
        rotate``): True if the set changed. Cheap when nothing changed (one stat).

        ``wait=False``: when another process holds the key folder's lock (rotating,
        say), return False at once (try again later) instead of waiting for it."""
        if self.directory is None:
            return False
        if _metadata_version(self.directory) == self._seen_version:
            return False
        try:
            with _locked(self.directory, wait=wait):
                self._adopt(_load(self.directory, self.grace_period))
        except BlockingIOError:
            return False
        return True

    def _adopt(self, other: KeySet) -> None:
        self._keys, self._active = other._keys, other._active
        self._seen_version = other._seen_version

    def _refresh_locked(self) -> None:
        # Under the directory lock: start from what is on disk, so a stale in-memory view
        # never overwrites another process's rotation.
        assert self.directory is not None
        if _metadata_version(self.directory) != self._seen_version:
            self._adopt(_load(self.directory, self.grace_period))

    def rotate(self, alg: Algorithm | None = None, now: float | None = None) -> SigningKey:
        """Make a new key active at once and retire the previous one (published for the grace).

        ``alg`` defaults to the current active key's algorithm. Returns the new key.
        """
        at = time.time() if now is None else now
        if self.directory is not None:
            with _locked(self.directory):
                self._refresh_locked()
                new_key = self._rotate_in_memory(alg, at)
                try:
                    _write_key_file(self.directory, new_key)
                    _write_metadata(self.directory, self)
                except BaseException:
                    self._undo_rotation(new_key)
                    raise
            return new_key
        return self._rotate_in_memory(alg, at)

    def _rotate_in_memory(self, alg: Algorithm | None, at: float) -> SigningKey:
        new_key = SigningKey.generate(alg or self._active.alg)
        new_key.created_at = at
        self._active.retired_at = at
        self._keys.append(new_key)
        self._active = new_key
        return new_key

    def _undo_rotation(self, new_key: SigningKey) -> None:
        self._keys.remove(new_key)
        previous = max(self._keys, key=lambda k: k.retired_at or 0.0)
        previous.retired_at = None
        self._active = previous

    def jwks(self, now: float | None = None) -> dict[str, Any]:
        """The public JWK Set: the active key first, then retired keys still inside their grace."""
        at = time.time() if now is None else now
        published = [self._active.public_jwk()]
        retired = [k for k in self._keys if k is not self._active and self._in_grace(k, at)]
        retired.sort(key=lambda k: k.retired_at or 0.0, reverse=True)
        published.extend(key.public_jwk() for key in retired)
        return {"keys": published}

    def prune(self, now: float | None = None) -> list[str]:
        """Drop retired keys past their grace period (and their files); return their kids."""
        at = time.time() if now is None else now
        if self.directory is None:
            expired = [key for key in self._keys if not self._in_grace(key, at)]
            self._keys = [key for key in self._keys if key not in expired]
            return [key.kid for key in expired]
        with _locked(self.directory):
            self._refresh_locked()
            expired = [key for key in self._keys if not self._in_grace(key, at)]
            if not expired:
                return []
            self._keys = [key for key in self._keys if key not in expired]
            # Metadata first: a crash then leaves an orphan PEM, never a dangling entry.
            _write_metadata(self.directory, self)
            for key in expired:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / _key_file_name(key)).unlink()
        return [key.kid for key in expired]

    @classmethod
    def generate(
        cls,
        alg: Algorithm = DEFAULT_ALGORITHM,
        grace_period: float = DEFAULT_KEY_GRACE_PERIOD_SECONDS,
    ) -> KeySet:
        """An in-memory key set with one fresh key."""
        return cls([SigningKey.generate(alg)], grace_period=grace_period)

    @classmethod
    def load_or_create(
        cls,
        directory: Path | str,
        alg: Algorithm = DEFAULT_ALGORITHM,
        grace_period: float = DEFAULT_KEY_GRACE_PERIOD_SECONDS,
    ) -> KeySet:
        """Open the key set persisted in ``directory``, creating it with one ``alg`` key if new.

        ``alg`` only applies when the first key is created; an existing set keeps its
        keys (call :meth:`rotate` with another ``alg`` to switch).
        """
        path = Path(directory)
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            # Another process starting at the same time may have just made it.
            if not path.is_dir():
                raise KeyStoreError(
                    "the key directory exists but is not a directory", path
                ) from None
        else:
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
        with _locked(path):
            metadata_path = path / METADATA_FILE
            creating = path / _CREATING_FILE
            if metadata_path.exists():
                if creating.exists():  # a first start ended after its keys.json was written
                    creating.unlink()
                return _load(path, grace_period)
            if creating.exists():
                # A first start was cut off before its keys.json was written: the key it
                # wrote was never published nor used. Start over.
                name = creating.read_text("utf-8").strip()
                if name and "/" not in name and name.endswith(".pem"):
                    with contextlib.suppress(FileNotFoundError):
                        (path / name).unlink()
                creating.unlink()
            orphans = sorted(p.name for p in path.glob("*.pem"))
            if orphans:
                raise KeyStoreError(
                    f"{METADATA_FILE} is missing but key files are present ({', '.join(orphans)});"
                    f" restore {METADATA_FILE} from a backup, or move the .pem files away to"
                    " start a new key set",
                    metadata_path,
                )
            keyset = cls([SigningKey.generate(alg)], grace_period=grace_period, directory=path)
            # The marker names the new key file until keys.json exists, so that a start cut
            # off in between is told apart from a lost keys.json (see above).
            _write_atomic(creating, _key_file_name(keyset.active).encode("utf-8"))
            _write_key_file(path, keyset.active)
            _write_metadata(path, keyset)
            creating.unlink()
            return keyset


def _key_file_name(key: SigningKey) -> str:
    return f"{key.kid}.pem"


@contextlib.contextmanager
def _locked(directory: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on the directory so processes starting together share one key
    (``wait=False``: BlockingIOError if another process holds it)."""
    if sys.platform == "win32":  # pragma: no cover - no flock; single-process use only
        yield
        return
    fd = os.open(directory / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 via a temp file and os.replace."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, 0o600)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:  # pragma: no cover - platforms that cannot open directories
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_key_file(directory: Path, key: SigningKey) -> None:
    _write_atomic(directory / _key_file_name(key), key.private_pem())


def _write_metadata(directory: Path, keyset: KeySet) -> None:
    document = {
        "version": _METADATA_VERSION,
        "active": keyset.active.kid,
        "keys": [
            {
                "kid": key.kid,
                "alg": key.alg,
                "file": _key_file_name(key),
                "created_at": key.created_at,
                "retired_at": key.retired_at,
            }
            for key in keyset.keys
        ],
    }
    data = json.dumps(document, indent=2).encode("utf-8") + b"\n"
    _write_atomic(directory / METADATA_FILE, data)
    keyset._seen_version = _metadata_version(directory)


def _metadata_version(directory: Path) -> int | None:
    try:
        st = (directory / METADATA_FILE).stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns ^ st.st_ino ^ st.st_size


def _load(directory: Path, grace_period: float) -> KeySet:
    metadata_path = directory / METADATA_FILE
    advice = f"restore {METADATA_FILE} from a backup, or move the directory away to start anew"
    try:
        document = json.loads(metadata_path.read_bytes())
    except RecursionError as exc:  # nested past the parser's depth: not ours
        raise KeyStoreError(
            f"cannot read key metadata (nested too deep); {advice}", metadata_path
        ) from exc
    except (OSError, ValueError) as exc:
        raise KeyStoreError(f"cannot read key metadata ({exc}); {advice}", metadata_path) from exc
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeyStoreError(f"key metadata has no 'keys' list; {advice}", metadata_path)
    version = document.get("version", _METADATA_VERSION)
    if type(version) is not int or version > _METADATA_VERSION:
        raise KeyStoreError(
            f"key metadata is version {version!r}, and this a2a-push reads version "
            f"{_METADATA_VERSION} and older: upgrade a2a-push (a newer one wrote it)",
            metadata_path,
        )
    active_kid = document.get("active")
    keys = [_load_entry(directory, entry) for entry in document["keys"]]
    try:
        keyset = KeySet(keys, grace_period=grace_period, directory=directory)
    except KeyStoreError as exc:
        raise KeyStoreError(f"{exc}; {advice}", metadata_path) from exc
    if keyset.active.kid != active_kid:
        raise KeyStoreError(
            f"'active' is {active_kid!r} but the unretired key is {keyset.active.kid}; {advice}",
            metadata_path,
        )
    keyset._seen_version = _metadata_version(directory)
    return keyset


def _load_entry(directory: Path, entry: Any) -> SigningKey:
    metadata_path = directory / METADATA_FILE
    if not isinstance(entry, dict):
        raise KeyStoreError(f"key entry {entry!r} is not an object", metadata_path)
    kid, alg, file_name = entry.get("kid"), entry.get("alg"), entry.get("file")
    created_at, retired_at = entry.get("created_at"), entry.get("retired_at")
    if (
        not isinstance(kid, str)
        or alg not in ALGORITHMS
        or not isinstance(file_name, str)
        or Path(file_name).name != file_name
        or file_name.startswith(".")
        or not isinstance(created_at, int | float)
        or not (retired_at is None or isinstance(retired_at, int | float))
    ):
        raise KeyStoreError(
            f"key entry {entry!r} needs kid, alg (one of {', '.join(ALGORITHMS)}),"
            " a plain file name, created_at and retired_at",
            metadata_path,
        )

    key_path = directory / file_name
    fix = (
        f"restore {file_name} from a backup, or remove the entry for kid {kid} from"
        f" {METADATA_FILE} (receivers will then reject notifications signed with it)"
    )
    try:
        pem = key_path.read_bytes()
    except OSError as exc:
        raise KeyStoreError(f"cannot read key file ({exc.strerror}); {fix}", key_path) from exc
    try:
        private_key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyStoreError(
            f"key file is corrupt or not an unencrypted PEM key; {fix}", key_path
        ) from exc
    try:
        signing_key = _require_key_for_alg(private_key, alg)
    except KeyStoreError as exc:
        raise KeyStoreError(f"{exc}; {fix}", key_path) from exc
    if jwk_thumbprint(signing_key.public_key()) != kid:
        raise KeyStoreError(f"key file does not hold the key with kid {kid}; {fix}", key_path)
    return SigningKey(
        kid=kid,
        alg=alg,
        private_key=signing_key,
        created_at=float(created_at),
        retired_at=None if retired_at is None else float(retired_at),
    )
