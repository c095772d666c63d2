"""The stored-object frame's payload checksum: segmented XXH3-64, hashed in parallel.

Definition: up to :data:`CHECKSUM_SEGMENT_BYTES` the checksum is the XXH3-64 of the payload. A
longer payload is cut into segments of that size (the last one shorter); the checksum is the
XXH3-64 of their XXH3-64 digests as little-endian u64s, in order. Any change to any byte changes
its segment's digest, and so the checksum, as surely as one XXH3-64 over the whole payload would
(same 64-bit collision odds).

:func:`payload_checksum` hashes a payload's segments in parallel on a small process-wide pool
(the authenticated frame's MAC runs its segments there too); :func:`start_payload_checksum`
starts that and returns a wait, so that the caller can overlap the hashing with other work on the
same bytes (a serde's decode; an adapter's write). A forked child starts a pool of its own: the
parent's threads do not exist in the child, and work handed to their pool would never run.

XXH3-64 (the reference C implementation: lmserde's checksum kernel, which vendors it and picks its
AVX-512/AVX2/SSE2 variant at run time, or the ``xxhash`` package where the kernel is not built)
was chosen by measurement over CRC32C and CRC32: see ``docs/formats/stored-object.md``. A serde
can also compute the checksum in its own pass over the payload: :mod:`lmserde.frame_checksum`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
import xxhash

from lmserde.frame_checksum import CHECKSUM_SEGMENT_BYTES, _combine, tensor_bytes, xxh3_of_bytes

__all__ = [
    "CHECKSUM_SEGMENT_BYTES",
    "payload_checksum",
    "start_payload_checksum",
    "tensor_bytes",
    "xxh3_64",
    "xxh3_of_tensor",
]


def xxh3_64(data: bytes | memoryview) -> int:
    """XXH3-64 (seed 0) of ``data``."""
    return xxhash.xxh3_64_intdigest(data)


#: XXH3-64 of a 1-D uint8 tensor's bytes (the checksum kernel when built, else the ``xxhash``
#: package); releases the GIL.
xxh3_of_tensor = xxh3_of_bytes


_hash_pool: ThreadPoolExecutor | None = None
_hash_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _hash_pool
    with _hash_pool_lock:
        if _hash_pool is None:
            _hash_pool = ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 8)),
                                            thread_name_prefix="lmserde-checksum")
        return _hash_pool


def _new_pool_in_child() -> None:
    """After a fork, in the child: forget the parent's pool (its threads are not in the child;
    ``ThreadPoolExecutor`` would queue work for them forever) and its lock, which a parent
    thread may have held at the fork."""
    global _hash_pool, _hash_pool_lock
    _hash_pool = None
    _hash_pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_pool_in_child)


def payload_checksum(payload: torch.Tensor) -> int:
    """The frame's checksum of a contiguous 1-D uint8 CPU tensor's bytes (no copy); segments of
    a long payload are hashed in parallel."""
    if payload.numel() <= CHECKSUM_SEGMENT_BYTES:
        return xxh3_of_tensor(payload)
    return start_payload_checksum(payload)()


def start_payload_checksum(payload: torch.Tensor) -> Callable[[], int]:
    """Start :func:`payload_checksum` on the checksum threads; the returned call waits for it.

    Lets a caller hash while other work on the same bytes runs (a serde's decode, an adapter's
    write). Every segment is its own job, so all checksum threads share the work: measured on 2
    cores, that finishes sooner behind a decode or a write than leaving one core to them. The
    payload must stay unchanged until the call returns.
    """
    n = payload.numel()
    if n <= CHECKSUM_SEGMENT_BYTES:
        return _pool().submit(xxh3_of_tensor, payload).result
    futures = [_pool().submit(xxh3_of_tensor, payload[i:i + CHECKSUM_SEGMENT_BYTES])
               for i in range(0, n, CHECKSUM_SEGMENT_BYTES)]
    return lambda: _combine([f.result() for f in futures])
