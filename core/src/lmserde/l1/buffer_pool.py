"""A bounded pool of reusable byte buffers keyed by size: steady traffic stops allocating."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["BufferPool", "BufferPoolStats"]

T = TypeVar("T")


@dataclass(frozen=True)
class BufferPoolStats:
    """Counters of a :class:`BufferPool` (a snapshot).

    ``hits``/``misses`` count :meth:`BufferPool.acquire` calls served from the pool or by a fresh
    allocation; ``returned`` buffers were kept for reuse, ``dropped`` ones were freed (over the bound);
    ``cached_bytes``/``cached_buffers`` is what the pool holds now.
    """

    hits: int
    misses: int
    returned: int
    dropped: int
    cached_bytes: int
    cached_buffers: int
    max_bytes: int

    @property
    def hit_rate(self) -> float:
        """Fraction of acquisitions served from the pool (0.0 before any acquisition)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class BufferPool(Generic[T]):
    """Free buffers (any object owning ``nbytes`` bytes), grouped by exact size, at most ``max_bytes``.

    :meth:`take` returns a released buffer of exactly ``nbytes`` bytes (a hit; contents
    undefined) or ``None`` (a miss: the caller allocates). :meth:`release` keeps a buffer while the
    bound allows, evicting the least recently released sizes first. Thread-safe.
    """

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"buffer pool max_bytes must be an int >= 0, got {max_bytes!r}")
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._free: OrderedDict[int, list[T]] = OrderedDict()
        self._cached_bytes = 0
        self._cached_buffers = 0
        self._hits = 0
        self._misses = 0
        self._returned = 0
        self._dropped = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def cached_bytes(self) -> int:
        """Bytes held by free buffers right now."""
        return self._cached_bytes

    def take(self, nbytes: int) -> T | None:
        """A pooled buffer of exactly ``nbytes`` bytes (a hit), or ``None`` (a miss)."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate a buffer of {nbytes} bytes")
        with self._lock:
            bucket = self._free.get(nbytes)
            if not bucket:
                self._misses += 1
                return None
            buf = bucket.pop()
            if not bucket:
                del self._free[nbytes]
            self._cached_bytes -= nbytes
            self._cached_buffers -= 1
            self._hits += 1
            return buf

    def release(self, buf: T, nbytes: int) -> None:
        """Give back ``buf`` of ``nbytes`` bytes; it is kept for reuse or freed when the pool is full."""
        with self._lock:
            if nbytes > self._max_bytes:
                self._dropped += 1
                return
            self._evict_locked(self._max_bytes - nbytes)
            self._free.setdefault(nbytes, []).append(buf)
            self._free.move_to_end(nbytes)
            self._cached_bytes += nbytes
            self._cached_buffers += 1
            self._returned += 1

    def trim(self, keep_bytes: int) -> int:
        """Free buffers until at most ``keep_bytes`` are cached; returns the bytes freed."""
        with self._lock:
            before = self._cached_bytes
            self._evict_locked(max(keep_bytes, 0))
            return before - self._cached_bytes

    def clear(self) -> None:
        """Free every cached buffer."""
        self.trim(0)

    def _evict_locked(self, keep_bytes: int) -> None:
        while self._cached_bytes > keep_bytes and self._free:
            size, bucket = next(iter(self._free.items()))
            bucket.pop()
            if not bucket:
                del self._free[size]
            self._cached_bytes -= size
            self._cached_buffers -= 1
            self._dropped += 1

    def stats(self) -> BufferPoolStats:
        with self._lock:
            return BufferPoolStats(self._hits, self._misses, self._returned, self._dropped,
                                   self._cached_bytes, self._cached_buffers, self._max_bytes)
