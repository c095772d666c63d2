"""CRC-32 combination and chunked parallel work: chunk CRCs joined in order equal one zlib.crc32."""

from __future__ import annotations

import ctypes
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_asym_k16_v8.chunked import (
    CHUNK_BYTES,
    CRC32_BACKEND,
    MIN_CHUNK_BYTES,
    ChunkedRun,
    copy_and_crc32,
    crc32_at,
    shared_pool,
)
from lmserde_asym_k16_v8.crc32 import crc32_combine


@settings(max_examples=200, deadline=None)
@given(a=st.binary(max_size=300), b=st.binary(max_size=300), seed=st.integers(0, 2**32 - 1))
def test_combine_equals_crc_of_concatenation(a: bytes, b: bytes, seed: int) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    # with a non-zero starting state the identity still holds
    assert crc32_combine(zlib.crc32(a, seed), zlib.crc32(b), len(b)) == zlib.crc32(
        b, zlib.crc32(a, seed)
    )


@pytest.mark.parametrize("len2", [1, 4096, 1 << 20])
def test_combine_with_long_zero_runs(len2: int) -> None:
    zeros = bytes(len2)
    assert crc32_combine(zlib.crc32(b"abc"), zlib.crc32(zeros), len2) == zlib.crc32(b"abc" + zeros)


def test_combine_of_many_blocks_beyond_four_gib() -> None:
    # 2**32 + 1 MiB of zeros, built by doubling a 1 MiB block's CRC; checked against zlib's own
    # running CRC over the same stream, fed in 64 MiB pieces (the check zlib does internally).
    block = 1 << 20
    crc_block, crc, total = zlib.crc32(bytes(block)), 0, 0
    for _ in range(4):
        crc = crc32_combine(crc, crc_block, block)
        total += block
    assert crc == zlib.crc32(bytes(total))
    doubled, length = crc_block, block
    while length < (1 << 32):
        doubled = crc32_combine(doubled, doubled, length)
        length *= 2
    # crc(zeros(2**32)) then one more block equals combining in the other order
    assert crc32_combine(doubled, crc_block, block) == crc32_combine(crc_block, doubled, 1 << 32)


def test_combine_rejects_negative_length() -> None:
    with pytest.raises(ValueError, match="len2"):
        crc32_combine(0, 0, -1)


@pytest.mark.parametrize("helpers", [0, 1, 2, 7])
@pytest.mark.parametrize("nbytes", [0, 5, 2 * MIN_CHUNK_BYTES - 1, 3 * CHUNK_BYTES + 17])
def test_chunked_copy_matches_zlib(helpers: int, nbytes: int) -> None:
    src = bytearray(os.urandom(nbytes) or b"\0")
    dst = bytearray(len(src))
    s = ctypes.addressof((ctypes.c_char * len(src)).from_buffer(src))
    d = ctypes.addressof((ctypes.c_char * len(dst)).from_buffer(dst))
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def job(a: int, b: int) -> int:
        with lock:
            seen.append((a, b))
        return copy_and_crc32(d + a, s + a, b - a)

    with ThreadPoolExecutor(3) as pool:
        run = ChunkedRun(job, nbytes, CHUNK_BYTES)
        run.start_helpers(pool, helpers)
        assert run.crc32() == zlib.crc32(bytes(src[:nbytes]))
    assert dst[:nbytes] == src[:nbytes]
    covered = sorted(seen)  # every chunk done exactly once; together they tile [0, nbytes)
    assert covered == run.bounds
    assert sum(b - a for a, b in covered) == nbytes
    assert all(covered[i][1] == covered[i + 1][0] for i in range(len(covered) - 1))
    assert all(b - a <= max(CHUNK_BYTES, 2 * MIN_CHUNK_BYTES) for a, b in covered)


def test_crc32_continues_from_a_start_value() -> None:
    a, b = os.urandom(1000), os.urandom(3 * CHUNK_BYTES)
    buf = bytearray(b)
    addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    run = ChunkedRun(lambda x, y: crc32_at(addr + x, y - x), len(b), CHUNK_BYTES)
    assert run.crc32(zlib.crc32(a)) == zlib.crc32(a + b)


def test_failing_chunk_is_reported_after_all_chunks_finish() -> None:
    finished: list[int] = []

    def job(a: int, b: int) -> int:
        if a == CHUNK_BYTES:
            raise RuntimeError("boom")
        finished.append(a)
        return 0

    with ThreadPoolExecutor(2) as pool:
        run = ChunkedRun(job, 4 * CHUNK_BYTES, CHUNK_BYTES)
        run.start_helpers(pool, 2)
        with pytest.raises(RuntimeError, match="boom"):
            run.values()
        assert sorted(finished) == [0, 2 * CHUNK_BYTES, 3 * CHUNK_BYTES]


def test_cancel_skips_unclaimed_chunks_and_waits_for_running_ones() -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def job(a: int, b: int) -> int:
        ran.append(a)
        if a == 0:
            started.set()
            release.wait(5)
        return 0

    with ThreadPoolExecutor(1) as pool:
        run = ChunkedRun(job, 4 * CHUNK_BYTES, CHUNK_BYTES)
        run.start_helpers(pool, 1)
        assert started.wait(5)
        threading.Timer(0.05, release.set).start()
        run.cancel()  # returns only once chunk 0 has finished
        assert ran == [0]
        run.help()  # nothing left to do
        assert ran == [0]


def test_late_helpers_find_nothing_to_do() -> None:
    ran: list[int] = []
    run = ChunkedRun(lambda a, b: ran.append(a), 3 * CHUNK_BYTES, CHUNK_BYTES)
    run.values()  # the caller does every chunk
    with ThreadPoolExecutor(2) as pool:
        run.start_helpers(pool, 2)
    assert ran == [0, CHUNK_BYTES, 2 * CHUNK_BYTES]


def test_crc32_at() -> None:
    a = os.urandom(1000)
    buf = (ctypes.c_char * len(a)).from_buffer(bytearray(a))
    assert crc32_at(ctypes.addressof(buf), len(a)) == zlib.crc32(a)
    assert crc32_at(0, 0) == 0


def test_shared_pool_is_reused() -> None:
    pool_a, helpers = shared_pool()
    pool_b, _ = shared_pool()
    assert pool_a is pool_b
    assert 0 <= helpers <= pool_a._max_workers <= 8


@pytest.mark.parametrize("nbytes", [0, 1, 15, 4096, 3 * CHUNK_BYTES + 1])
def test_crc_backend_equals_zlib(nbytes: int) -> None:
    """Whichever backend is in use (isal when installed), the checksum is zlib's CRC-32."""
    data = bytearray(os.urandom(nbytes) or b"\0")
    buf = (ctypes.c_char * len(data)).from_buffer(data)
    assert crc32_at(ctypes.addressof(buf), nbytes) == zlib.crc32(bytes(data[:nbytes]))
    assert CRC32_BACKEND in ("isal", "zlib")
