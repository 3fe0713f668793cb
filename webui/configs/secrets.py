"""Secret configuration values at rest: AES-GCM under a key kept in the data dir's keys
folder (created on first use, owner-only) or derived from the server's secret key, so a
copied database alone reveals nothing. Older keys may be given as fallbacks: values they
sealed still open, and new values are sealed with the current key.

A stored secret is the string `enc:v1:<base64url(nonce | ciphertext)>`; the project id,
scope and field name are bound as associated data, so a value pasted into another field or
project does not decrypt.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "enc:v1:"
NONCE_BYTES = 12


class SecretBox:
    def __init__(self, key: bytes, *, fallbacks: Sequence[bytes] = ()) -> None:
        self._aead = AESGCM(key)
        self._openers = [self._aead, *(AESGCM(k) for k in fallbacks if k != key)]

    def seal(self, plaintext: str, *, binding: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), binding.encode())
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, stored: str, *, binding: str) -> str:
        """The plaintext; ValueError if `stored` is not a secret sealed here for `binding`."""
        if not stored.startswith(PREFIX):
            raise ValueError("not a sealed secret")
        try:
            raw = base64.urlsafe_b64decode(stored[len(PREFIX) :].encode())
        except ValueError as exc:
            raise ValueError("the secret cannot be decrypted with this server's key") from exc
        for aead in self._openers:
            try:
                return aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], binding.encode()).decode()
            except (InvalidTag, ValueError):
                continue
        raise ValueError("the secret cannot be decrypted with this server's key")
