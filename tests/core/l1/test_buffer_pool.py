"""BufferPool: size-keyed reuse, the byte bound, least-recently-released eviction, counters."""

from __future__ import annotations

import pytest
import torch
from lmserde.l1 import BufferPool


def _buf(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8)


def test_released_buffers_are_reused_by_exact_size() -> None:
    pool: BufferPool[torch.Tensor] = BufferPool(1000)
    assert pool.take(100) is None  # a miss: the caller allocates
    a = _buf(100)
    pool.release(a, 100)
    assert pool.take(50) is None  # another size: a miss
    assert pool.take(100) is a
    stats = pool.stats()
    assert (stats.hits, stats.misses, stats.returned) == (1, 2, 1)
    assert stats.hit_rate == pytest.approx(1 / 3)


def test_bound_evicts_least_recently_released_sizes_first() -> None:
    pool: BufferPool[torch.Tensor] = BufferPool(300)
    for size in (100, 120, 150):
        pool.release(_buf(size), size)
    stats = pool.stats()
    assert stats.cached_bytes <= 300
    assert pool.take(100) is None  # the oldest size went first
    assert pool.take(150) is not None
    assert stats.dropped == 1


def test_oversized_buffers_are_never_kept_and_trim_frees() -> None:
    pool: BufferPool[torch.Tensor] = BufferPool(100)
    pool.release(_buf(500), 500)
    assert pool.stats().cached_buffers == 0
    pool.release(_buf(60), 60)
    pool.release(_buf(30), 30)
    assert pool.trim(40) == 60
    assert pool.cached_bytes == 30
    pool.clear()
    assert pool.cached_bytes == 0
    assert BufferPool(0).stats().hit_rate == 0.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        BufferPool(-1)
    with pytest.raises(ValueError, match="-3 bytes"):
        BufferPool(10).take(-3)
