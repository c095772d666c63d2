"""An independent reference for the aesgcm frame formats, written from docs/formats/aesgcm.md.

HKDF (RFC 5869) is built from ``hmac``/``hashlib`` and GCM (NIST SP 800-38D) from single AES block
encryptions plus a bit-by-bit GHASH, so the golden vectors do not depend on the plugin's code nor
on the AEAD object it uses. Slow on purpose; for short test vectors only.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

INFO_PREFIX = b"lmcache-l2-aesgcm-v1"
_R = 0xE1 << 120


def hkdf_sha256(ikm: bytes, info: bytes, length: int, salt: bytes | None = None) -> bytes:
    """RFC 5869 extract-then-expand; ``salt=None`` means 32 zero bytes."""
    prk = hmac.new(salt if salt is not None else bytes(32), ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def tenant_key(master: bytes, tenant: str, key_len: int) -> bytes:
    return hkdf_sha256(master, INFO_PREFIX + tenant.encode("utf-8"), key_len)


def _aes_block(key: bytes, block: bytes) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(block) + enc.finalize()


def _gf_mult(x: int, y: int) -> int:
    z, v = 0, x
    for i in range(127, -1, -1):
        if (y >> i) & 1:
            z ^= v
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    return z


def _ghash(h: bytes, data: bytes) -> int:
    hi, y = int.from_bytes(h, "big"), 0
    for i in range(0, len(data), 16):
        y = _gf_mult(y ^ int.from_bytes(data[i : i + 16], "big"), hi)
    return y


def _pad16(data: bytes) -> bytes:
    return data + bytes(-len(data) % 16)


def gcm_encrypt(key: bytes, iv: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
    """(ciphertext, tag) of AES-GCM with a 96-bit IV."""
    assert len(iv) == 12
    h = _aes_block(key, bytes(16))
    j0 = iv + b"\x00\x00\x00\x01"
    ct = bytearray()
    for n, i in enumerate(range(0, len(plaintext), 16)):
        counter = iv + struct.pack(">I", 2 + n)
        stream = _aes_block(key, counter)
        chunk = plaintext[i : i + 16]
        ct += bytes(a ^ b for a, b in zip(chunk, stream))
    lengths = struct.pack(">QQ", len(aad) * 8, len(ct) * 8)
    s = _ghash(h, _pad16(aad) + _pad16(bytes(ct)) + lengths)
    tag = (int.from_bytes(_aes_block(key, j0), "big") ^ s).to_bytes(16, "big")
    return bytes(ct), tag


def v1_frame(master: bytes, tenant: str, key_len: int, iv: bytes, plaintext: bytes) -> bytes:
    ct, tag = gcm_encrypt(tenant_key(master, tenant, key_len), iv, plaintext, b"")
    return b"\x01" + iv + ct + tag


def v2_associated_data(header: bytes, chunk_hash: bytes, model_name: str, kv_rank: int,
                       object_group_id: int, cache_salt: str) -> bytes:
    model = model_name.encode("utf-8")
    salt = cache_salt.encode("utf-8")
    return (header + struct.pack(">I", len(model)) + model + struct.pack(">q", kv_rank)
            + struct.pack(">Q", object_group_id) + struct.pack(">I", len(chunk_hash))
            + chunk_hash + struct.pack(">I", len(salt)) + salt)


def v2_frame(root_secret: bytes, key_len: int, key_version: int, iv: bytes, plaintext: bytes, *,
             chunk_hash: bytes, model_name: str, kv_rank: int, object_group_id: int,
             cache_salt: str) -> bytes:
    suite = {16: 1, 32: 2}[key_len]
    header = bytes([2, suite]) + struct.pack(">IQ", key_version, len(plaintext)) + iv
    aad = v2_associated_data(header, chunk_hash, model_name, kv_rank, object_group_id, cache_salt)
    ct, tag = gcm_encrypt(tenant_key(root_secret, cache_salt, key_len), iv, plaintext, aad)
    return header + ct + tag


def key_id(root_secret: bytes, tenant: str, version: int) -> bytes:
    """The 8-byte key id: HMAC-SHA256 keyed by the root secret, over the label, the
    length-prefixed tenant and the version."""
    name = tenant.encode("utf-8")
    msg = b"lmserde aesgcm key id v3" + struct.pack(">I", len(name)) + name + struct.pack(
        ">I", version)
    return hmac.new(root_secret, msg, hashlib.sha256).digest()[:8]


def v3_frame(root_secret: bytes, key_len: int, key_version: int, iv: bytes, plaintext: bytes, *,
             chunk_hash: bytes, model_name: str, kv_rank: int, object_group_id: int,
             cache_salt: str) -> bytes:
    suite = {16: 1, 32: 2}[key_len]
    kid = key_id(root_secret, cache_salt, key_version)
    header = (bytes([3, suite]) + struct.pack(">I", key_version) + kid
              + struct.pack(">Q", len(plaintext)) + iv)
    aad = v2_associated_data(header, chunk_hash, model_name, kv_rank, object_group_id, cache_salt)
    ct, tag = gcm_encrypt(tenant_key(root_secret, cache_salt, key_len), iv, plaintext, aad)
    return header + ct + tag
