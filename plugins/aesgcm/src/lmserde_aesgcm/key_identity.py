"""Key ids: one-way fingerprints that name the key material of a frame, never the key.

``key_id(root secret, tenant, version) = HMAC-SHA256(key = root secret,
msg = b"lmserde aesgcm key id v3" || u32 len(tenant) || UTF-8(tenant) || u32 version)[:8]``

A version-3 frame stores the key id of the (tenant, key version) that encrypted it, so a reader
whose key for that (tenant, version) has another id knows the frame is someone else's (another
master key, another keyring) before it decrypts anything. HMAC is a pseudo-random function keyed
by the root secret: without the secret its output is indistinguishable from random bytes, so a
key id reveals nothing about the secret and cannot be inverted. It lets an observer test a
guessed secret, but so does any frame's GCM tag, and root secrets are at least 16 random bytes.
It is domain-separated from the AES key derivation (HKDF uses the secret as input keying
material under an all-zero salt, not as the HMAC key, and another label).
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hashes, hmac

__all__ = ["KEY_ID_LEN", "KEY_ID_LABEL", "key_id"]

KEY_ID_LEN = 8
KEY_ID_LABEL = b"lmserde aesgcm key id v3"

_U32 = struct.Struct(">I")


def _tenant_and_version(tenant: str, version: int) -> bytes:
    name = tenant.encode("utf-8", "surrogatepass")
    return _U32.pack(len(name)) + name + _U32.pack(version)


def key_id(root_secret: bytes, tenant: str, version: int) -> bytes:
    """The 8-byte key id of ``tenant``'s root secret at key ``version``."""
    if not root_secret:
        raise ValueError("aesgcm serde: the root secret must be non-empty")
    mac = hmac.HMAC(bytes(root_secret), hashes.SHA256())
    mac.update(KEY_ID_LABEL + _tenant_and_version(tenant, version))
    return mac.finalize()[:KEY_ID_LEN]

