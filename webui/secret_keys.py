"""The server's keys from one secret (`STEAMHARNESS_SECRET_KEY`), so every replica of a
server signs cookies, seals request state and configuration secrets, and fingerprints API
keys the same way.

Each key is HKDF-SHA256 of the secret with its own label: knowing one derived key tells
nothing about another, and a key never appears in two roles.
"""

from __future__ import annotations

import itertools

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# Bytes of the secret (as UTF-8) and distinct characters it must have at least: a short or
# repetitive value cannot carry 32 bytes of entropy.
MIN_SECRET_BYTES = 32
MIN_DISTINCT_CHARS = 16
KEY_BYTES = 32
SALT = b"steamharness secret key v1"
HOW_TO_MAKE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class WeakSecret(ValueError):
    """The secret cannot be the root of the server's keys."""


def weakness(raw: str) -> str | None:
    """Why `raw` cannot be a secret (a key's root, a token), or None when it may: too short,
    too few distinct characters, or mostly a run of consecutive ones (`abcd…`, `0123…`)."""
    if len(raw.encode()) < MIN_SECRET_BYTES:
        return f"too short ({len(raw.encode())} bytes)"
    if len(set(raw)) < MIN_DISTINCT_CHARS:
        return f"not random enough (only {len(set(raw))} distinct characters)"
    if sum(1 for a, b in itertools.pairwise(raw) if abs(ord(b) - ord(a)) == 1) >= len(raw) // 2:
        return "not random enough (a run of consecutive characters)"
    return None


def check_secret(raw: str) -> str:
    """`raw` if it may serve as the secret key; `WeakSecret` saying why not otherwise."""
    reason = weakness(raw)
    if reason is not None:
        raise WeakSecret(
            f"STEAMHARNESS_SECRET_KEY is {reason}: use at least {MIN_SECRET_BYTES} random bytes,"
            f" e.g. {HOW_TO_MAKE}"
        )
    return raw


def derive_key(secret: str, label: str) -> bytes:
    """The 32-byte key for `label` (e.g. "ui-session.key") under `secret`."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=SALT, info=f"steamharness {label}".encode())
    return hkdf.derive(check_secret(secret).encode())
