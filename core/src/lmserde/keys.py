"""Object keys: the identity of one KV chunk in L1 and L2, and temporary keys derived from it."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ObjectKey", "make_temp_key", "TEMP_KEY_SUFFIX_BYTES"]

#: Random bytes appended to a chunk hash by :func:`make_temp_key` (128 bits of entropy).
TEMP_KEY_SUFFIX_BYTES = 16

_MAX_SALT_CHARS = 128
_FORBIDDEN_SALT_CHARS = ("@", "/", "\\", "\x00")


@dataclass(frozen=True)
class ObjectKey:
    """Identity of one KV object; hashable, compared by value.

    ``kv_rank`` packs ``world_size<<24 | rank<<16 | local_world_size<<8 | local_rank``.
    ``model_name`` must not contain ``@``; ``cache_salt`` (the tenant) must not contain ``@``, ``/``,
    ``\\`` or NUL and has at most 128 characters; ``object_group_id`` is non-negative.
    """

    chunk_hash: bytes
    model_name: str
    kv_rank: int
    object_group_id: int = 0
    cache_salt: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.chunk_hash, bytes):
            raise TypeError(f"ObjectKey.chunk_hash must be bytes, got {type(self.chunk_hash).__name__}")
        if not isinstance(self.model_name, str) or "@" in self.model_name:
            raise ValueError(f"ObjectKey.model_name must be a str without '@', got {self.model_name!r}")
        if not isinstance(self.kv_rank, int) or isinstance(self.kv_rank, bool):
            raise TypeError(f"ObjectKey.kv_rank must be an int, got {self.kv_rank!r}")
        if (
            not isinstance(self.object_group_id, int)
            or isinstance(self.object_group_id, bool)
            or self.object_group_id < 0
        ):
            raise ValueError(
                f"ObjectKey.object_group_id must be an int >= 0, got {self.object_group_id!r}"
            )
        if not isinstance(self.cache_salt, str):
            raise TypeError(f"ObjectKey.cache_salt must be a str, got {type(self.cache_salt).__name__}")
        if len(self.cache_salt) > _MAX_SALT_CHARS:
            raise ValueError(
                f"ObjectKey.cache_salt has {len(self.cache_salt)} characters; at most "
                f"{_MAX_SALT_CHARS} are allowed"
            )
        bad = [c for c in _FORBIDDEN_SALT_CHARS if c in self.cache_salt]
        if bad:
            raise ValueError(
                f"ObjectKey.cache_salt must not contain {bad!r} (forbidden: '@', '/', '\\\\', NUL)"
            )
        # keys are hashed many times per task (dict lookups everywhere): hash once
        object.__setattr__(self, "_hash", hash((self.chunk_hash, self.model_name, self.kv_rank,
                                                self.object_group_id, self.cache_salt)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __reduce__(self) -> tuple[type[ObjectKey], tuple[bytes, str, int, int, str]]:
        # rebuild through __init__ so the cached hash is recomputed in the receiving process
        return (ObjectKey, (self.chunk_hash, self.model_name, self.kv_rank, self.object_group_id,
                            self.cache_salt))

    @staticmethod
    def IntHash2Bytes(value: int) -> bytes:
        """Encode a non-negative integer as an 8-byte big-endian chunk hash (for tests and tools)."""
        return int(value).to_bytes(8, "big", signed=False)


def make_temp_key(original: ObjectKey) -> ObjectKey:
    """Return a fresh key for a temporary buffer of ``original``.

    The chunk hash is the original followed by 16 random bytes (fresh on every call); model name,
    rank, object group and cache salt are kept so temporary buffers are billed to the same tenant.
    """
    return ObjectKey(
        chunk_hash=original.chunk_hash + os.urandom(TEMP_KEY_SUFFIX_BYTES),
        model_name=original.model_name,
        kv_rank=original.kv_rank,
        object_group_id=original.object_group_id,
        cache_salt=original.cache_salt,
    )
