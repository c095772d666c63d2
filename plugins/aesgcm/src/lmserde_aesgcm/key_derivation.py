"""Derivation of AES keys from a provider's root secret: HKDF-SHA256, exactly as LMCache does.

``key = HKDF-SHA256(ikm=root secret, salt=None, info=b"lmcache-l2-aesgcm-v1" + tenant UTF-8,
length=16 or 32)``. With LMCache's master key file as the root secret this reproduces LMCache's
per-tenant keys, so version-1 frames interoperate.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["INFO_PREFIX", "AES_KEY_LENGTHS", "derive_key"]

INFO_PREFIX = b"lmcache-l2-aesgcm-v1"
AES_KEY_LENGTHS = (16, 32)


def derive_key(root_secret: bytes, tenant: str, key_len: int) -> bytes:
    """The ``key_len``-byte AES key of ``tenant`` (a ``cache_salt``; ``""`` is a valid tenant)."""
    if key_len not in AES_KEY_LENGTHS:
        raise ValueError(f"aesgcm serde: AES key length must be 16 or 32 bytes, got {key_len}")
    if not root_secret:
        raise ValueError("aesgcm serde: the root secret must be non-empty")
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=key_len,
        salt=None,
        # same bytes as strict UTF-8 (LMCache) for every valid string; lone surrogates, which
        # ObjectKey admits, still derive a distinct key instead of crashing
        info=INFO_PREFIX + tenant.encode("utf-8", "surrogatepass"),
    )
    return hkdf.derive(root_secret)
