"""The authenticated frame's MAC: AES-256-GMAC over a stored object, in segments.

The MAC is defined in :mod:`lmserde.l2.serde.authenticated_frame` (with the object key it runs
under): one GMAC per 64 MiB segment of the object, each under its own nonce, and a final GMAC
over the segment tags under a nonce naming the segment count. The GMACs come from
``cryptography`` (OpenSSL's GHASH, VPCLMULQDQ where the CPU has it); they read the object in
place and release the GIL.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import torch
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lmserde.l2.serde.payload_checksum import CHECKSUM_SEGMENT_BYTES, tensor_bytes
from lmserde.l2.serde.payload_checksum import _pool as _hash_pool

__all__ = ["MAC_SEGMENT_BYTES", "start_mac"]

#: The MAC's segment: each is one GMAC, on the checksum threads in parallel. Large, so that a
#: KV chunk (tens of MiB) is one GMAC call (measured: handing 4 MiB pieces to the threads cost
#: more than it saved on 2 cores), yet no object is too large for ``cryptography``'s 2 GiB limit
#: on associated data.
MAC_SEGMENT_BYTES = 64 << 20
_SEGMENT_NONCE = struct.Struct("<4xQ")  # 4 zero bytes, the segment index
_FINAL_NONCE_PREFIX = b"\xff" * 4
_U64 = struct.Struct("<Q")


def _segment_tag(cipher: AESGCM, raw: torch.Tensor, index: int, total: int) -> bytes:
    """The GMAC of segment ``index`` of the stored object's first ``total`` bytes (in place)."""
    start = index * MAC_SEGMENT_BYTES
    segment = tensor_bytes(raw[start:min(start + MAC_SEGMENT_BYTES, total)]).cast("B")
    return cipher.encrypt(_SEGMENT_NONCE.pack(index), b"", segment)


def start_mac(object_key: bytes, raw: torch.Tensor, total: int) -> Callable[[], bytes]:
    """Start the MAC of the stored object's first ``total`` bytes of ``raw`` (a contiguous CPU
    byte tensor; its tag bytes zero) under ``object_key``, read in place: inline up to one
    checksum segment (4 MiB, just written or read: in the cache), else on the checksum threads,
    segments in parallel. The returned call waits for the 16-byte tag; ``raw`` must stay
    unchanged until then."""
    cipher = AESGCM(object_key)
    count = max(1, -(-total // MAC_SEGMENT_BYTES))
    final_nonce = _FINAL_NONCE_PREFIX + _U64.pack(count)
    if total <= CHECKSUM_SEGMENT_BYTES:
        tag = cipher.encrypt(final_nonce, b"", _segment_tag(cipher, raw, 0, total))
        return lambda: tag
    futures = [_hash_pool().submit(_segment_tag, cipher, raw, i, total) for i in range(count)]
    return lambda: cipher.encrypt(final_nonce, b"", b"".join(f.result() for f in futures))
