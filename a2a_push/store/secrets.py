"""Encryption at rest for config secrets (token, credentials) with Fernet / MultiFernet.

Stored form is a small JSON object, either in clear (``p:`` prefix) or as a Fernet token
(``f:`` prefix). A value that fails to decrypt is an error: never read as plaintext.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from ..errors import SecretDecryptionError

_PLAIN = "p:"
_CACHE_SIZE = 4096
_FERNET = "f:"


def generate_key() -> str:
    """A new Fernet key (urlsafe base64, 32 bytes) for ``encryption_keys``.

    Never one that starts with "-": given as ``--encryption-key KEY``, a command line
    would take it for an option (one key in 64 otherwise)."""
    while True:
        key = Fernet.generate_key().decode("ascii")
        if not key.startswith("-"):
            return key


class SecretBox:
    """Seals and opens the secret fields of a config row."""

    def __init__(self, keys: Sequence[str] | None) -> None:
        self._fernet: MultiFernet | None = None
        # Every claim reads its config's secrets: remember what was opened (by sealed
        # value, so a changed or re-encrypted row is opened afresh).
        self._opened: dict[str, tuple[str | None, str | None]] = {}
        if isinstance(keys, str | bytes):
            raise ValueError(
                "encryption_keys takes a list of keys, not a single key: write "
                "encryption_keys=[key] (several keys: the first encrypts, all decrypt)"
            )
        if keys:
            try:
                self._fernet = MultiFernet([Fernet(k.encode("ascii")) for k in keys])
            except (ValueError, TypeError) as exc:
                raise ValueError(
                    "encryption_keys: each key must be a Fernet key "
                    "(32 url-safe base64-encoded bytes); make one with "
                    "a2a_push.store.generate_key()"
                ) from exc

    @property
    def encrypting(self) -> bool:
        return self._fernet is not None

    def seal(self, token: str | None, credentials: str | None) -> str | None:
        if token is None and credentials is None:
            return None
        raw = json.dumps({"t": token, "c": credentials}, separators=(",", ":"))
        if self._fernet is None:
            return _PLAIN + raw
        return _FERNET + self._fernet.encrypt(raw.encode("utf-8")).decode("ascii")

    def open(self, sealed: str | None) -> tuple[str | None, str | None]:
        if sealed is None:
            return None, None
        cached = self._opened.get(sealed)
        if cached is not None:
            return cached
        opened = self._open(sealed)
        if len(self._opened) >= _CACHE_SIZE:
            self._opened.clear()
        self._opened[sealed] = opened
        return opened

    def _open(self, sealed: str) -> tuple[str | None, str | None]:
        if not isinstance(sealed, str):  # a row another tool wrote: never a crash
            raise SecretDecryptionError("config secrets are corrupt (not text)")
        if sealed.startswith(_FERNET):
            if self._fernet is None:
                raise SecretDecryptionError(
                    "config secrets are encrypted but no encryption key is configured"
                )
            try:
                raw = self._fernet.decrypt(sealed[len(_FERNET) :].encode("ascii")).decode("utf-8")
            except (InvalidToken, UnicodeError, ValueError) as exc:
                raise SecretDecryptionError(
                    "config secrets could not be decrypted with the configured keys"
                ) from exc
        elif sealed.startswith(_PLAIN):
            if self._fernet is not None:
                raise SecretDecryptionError(
                    "config secrets are stored in clear but encryption is configured; "
                    "call reencrypt_secrets() on the store to encrypt them"
                )
            raw = sealed[len(_PLAIN) :]
        else:
            raise SecretDecryptionError("config secrets are in an unknown format")
        try:
            data = json.loads(raw)
            return data.get("t"), data.get("c")
        except (ValueError, AttributeError) as exc:
            raise SecretDecryptionError("config secrets are corrupt") from exc

    def reseal(self, sealed: str | None, old: SecretBox) -> str | None:
        """Re-encrypt a value sealed by ``old`` with this box's primary key."""
        token, credentials = old.open(sealed)
        return self.seal(token, credentials)
