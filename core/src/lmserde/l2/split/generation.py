"""Store generations of the split tier: which store wrote a K half and which wrote a V half.

Every store of a logical key takes a fresh *store generation*, :data:`GENERATION_BYTES` bytes: the
first 8 are random per :class:`GenerationSource` (drawn from ``os.urandom`` when the source is
made, i.e. per adapter and host), the last 8 a counter of that source. One source never repeats a
generation; two sources (two hosts, or two adapters sharing one L2 tier) collide only if they drew
the same 64-bit id, about 2**-64 per pair. Both halves of a store carry its generation:

- the K half's pool entry records it (:class:`~lmserde.l2.split.k_pool.KChildPool`);
- the V half is stored under a V child key that names it (:func:`derive_v_child_key`), so the
  stored-object frame, whose key fingerprint covers the whole key, binds the generation to the V
  bytes too: V bytes read under generation ``g`` were written by the store of generation ``g``.

Because every store writes its V under a key no store used before, a re-store never meets an
existing V object (an inner adapter that skips existing keys cannot keep an old V under a new
K), and two stores of one key never write the same V object.
"""

from __future__ import annotations

import itertools
import os
import threading

from lmserde.keys import ObjectKey

__all__ = [
    "GENERATION_BYTES",
    "GenerationSource",
    "check_generation",
    "derive_v_child_key",
    "parse_v_child_key",
]

#: Bytes of one store generation.
GENERATION_BYTES = 16
#: Ends a V child key's hash, after the logical chunk hash and the generation (starts with a NUL
#: byte; no other child marker is a suffix of it, nor it of them, so a suffix names the child).
V_GENERATION_MARKER = b"\x00lmserde:split:v@"


def check_generation(generation: object) -> bytes:
    """``generation`` if it is ``GENERATION_BYTES`` bytes, else ``ValueError`` saying why."""
    if not isinstance(generation, bytes) or len(generation) != GENERATION_BYTES:
        raise ValueError(f"a split-tier store generation is {GENERATION_BYTES} bytes, got "
                         f"{type(generation).__name__} {generation!r:.60}")
    return generation


class GenerationSource:
    """Thread-safe source of store generations: ``host_id`` (8 bytes, random by default) + a
    64-bit counter starting at 1. Calling it returns the next generation."""

    def __init__(self, host_id: bytes | None = None) -> None:
        if host_id is None:
            host_id = os.urandom(8)
        if not isinstance(host_id, bytes) or len(host_id) != 8:
            raise ValueError(f"host_id must be 8 bytes, got {host_id!r}")
        self._host = host_id
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def host_id(self) -> bytes:
        return self._host

    def __call__(self) -> bytes:
        with self._lock:
            n = next(self._counter)
        return self._host + n.to_bytes(8, "big")


def derive_v_child_key(logical: ObjectKey, generation: bytes) -> ObjectKey:
    """The inner adapter's key of the V half ``generation``'s store wrote for ``logical``.

    Keeps ``logical``'s model name, rank, object group and cache salt (the tenant is billed).
    """
    check_generation(generation)
    return ObjectKey(logical.chunk_hash + generation + V_GENERATION_MARKER, logical.model_name,
                     logical.kv_rank, logical.object_group_id, logical.cache_salt)


def parse_v_child_key(key: ObjectKey) -> tuple[ObjectKey, bytes] | None:
    """``(logical key, generation)`` of a key made by :func:`derive_v_child_key`, else ``None``."""
    tail = GENERATION_BYTES + len(V_GENERATION_MARKER)
    chunk = key.chunk_hash
    if len(chunk) < tail or not chunk.endswith(V_GENERATION_MARKER):
        return None
    logical = ObjectKey(chunk[:-tail], key.model_name, key.kv_rank, key.object_group_id,
                        key.cache_salt)
    return logical, chunk[-tail:-len(V_GENERATION_MARKER)]
