"""The byte-plane split/merge: native (SSE2 and portable C) and the torch fallback write identical
bytes, and every length is checked before a byte moves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_zstd import planes

native = pytest.mark.skipif(not planes.native_available(),
                            reason="lmserde_zstd._planes is not built (no C compiler) or is disabled")


@contextmanager
def _path(name: str) -> Iterator[None]:
    """Run the block with one implementation: ``numpy`` (the torch fallback), ``portable``
    (scalar C) or ``simd``."""
    was_enabled = planes.native_available()
    planes.set_native_enabled(name != "numpy")
    if name == "numpy":
        try:
            yield
        finally:
            planes.set_native_enabled(was_enabled)
        return
    from lmserde_zstd import _planes  # type: ignore[attr-defined]

    _planes.set_portable(name == "portable")
    try:
        yield
    finally:
        _planes.set_portable(False)
        planes.set_native_enabled(was_enabled)


def _split(data: bytes, element_size: int, path: str) -> list[bytes]:
    src = np.frombuffer(data, dtype=np.uint8)
    count = len(data) // element_size
    out = [np.full(count + 3, 0xEE, dtype=np.uint8) for _ in range(element_size)]
    with _path(path):
        assert planes.split(src, element_size, out) == count
    assert all((p[count:] == 0xEE).all() for p in out), "split wrote past the element count"
    return [p[:count].tobytes() for p in out]


def _merge(parts: list[bytes], element_size: int, size: int, path: str) -> bytes:
    dst = np.full(size, 0xEE, dtype=np.uint8)
    with _path(path):
        planes.merge([np.frombuffer(p, dtype=np.uint8) for p in parts], element_size, dst)
    return dst.tobytes()


def test_the_reference_layout() -> None:
    data = bytes(range(16))
    assert _split(data, 4, "numpy") == [bytes([0, 4, 8, 12]), bytes([1, 5, 9, 13]),
                                        bytes([2, 6, 10, 14]), bytes([3, 7, 11, 15])]


@native
@settings(max_examples=120, deadline=None)
@given(data=st.binary(max_size=700), element_size=st.sampled_from([1, 2, 4, 8]))
def test_native_and_numpy_write_identical_bytes(data: bytes, element_size: int) -> None:
    count = len(data) // element_size
    reference = _split(data, element_size, "numpy")
    for path in ("simd", "portable"):
        assert _split(data, element_size, path) == reference
    for path in ("numpy", "simd", "portable"):
        merged = _merge(reference, element_size, len(data), path)
        # whole elements come back; a trailing partial element is not written
        assert merged[:count * element_size] == data[:count * element_size]
        assert set(merged[count * element_size:]) <= {0xEE}


@native
@pytest.mark.parametrize("element_size", [2, 4, 8])
def test_large_buffers_take_the_vector_loop_and_agree(element_size: int) -> None:
    rng = np.random.default_rng(element_size)
    data = rng.integers(0, 256, 64 * 1024 + 3 * element_size + 1, dtype=np.uint8).tobytes()
    assert _split(data, element_size, "simd") == _split(data, element_size, "numpy")
    parts = _split(data, element_size, "simd")
    whole = len(data) // element_size * element_size
    assert _merge(parts, element_size, len(data), "simd")[:whole] == data[:whole]


@native
@pytest.mark.parametrize("element_size", [2, 4, 8])
@pytest.mark.parametrize("offset", [0, 1, 2, 4, 8, 16, 40, 62, 63])
def test_large_merges_stream_at_any_destination_alignment(element_size: int, offset: int) -> None:
    """A destination of ``STREAM_MIN_BYTES`` or more is written with non-temporal stores from its
    first 64-byte line on (the elements before it by the scalar loop; a destination that cannot be
    line-aligned on an element boundary through the cache): the same bytes at every alignment,
    and nothing outside the destination's whole elements is written."""
    from lmserde_zstd import _planes  # type: ignore[attr-defined]

    size = _planes.STREAM_MIN_BYTES + 5 * element_size + 3
    count = size // element_size
    rng = np.random.default_rng(offset * 10 + element_size)
    parts = [rng.integers(0, 256, count, dtype=np.uint8) for _ in range(element_size)]
    backing = np.full(offset + size + 64, 0xEE, dtype=np.uint8)
    dst = backing[offset:offset + size]
    with _path("simd"):
        streamed = _planes.streamed_merges()
        assert planes.merge(parts, element_size, dst) == count
        # the streaming path ran, unless no element of dst starts a cache line
        assert _planes.streamed_merges() == streamed + (dst.ctypes.data % element_size == 0)
        small = np.empty(_planes.STREAM_MIN_BYTES - element_size, dtype=np.uint8)
        after = _planes.streamed_merges()
        planes.merge(parts, element_size, small)
        assert _planes.streamed_merges() == after  # a smaller one goes through the cache
    expected = np.stack(parts, axis=1).reshape(-1)
    assert np.array_equal(dst[:count * element_size], expected)
    assert (backing[:offset] == 0xEE).all()
    assert (backing[offset + count * element_size:] == 0xEE).all()


@pytest.mark.parametrize("path", ["numpy", pytest.param("simd", marks=native)])
def test_short_or_missing_planes_and_bad_element_sizes_raise(path: str) -> None:
    src = np.zeros(64, dtype=np.uint8)
    with _path(path):
        with pytest.raises(ValueError, match="element size"):
            planes.split(src, 3, [np.zeros(32, np.uint8)] * 3)
        with pytest.raises(ValueError, match="planes"):
            planes.split(src, 2, [np.zeros(32, np.uint8)])
        with pytest.raises(ValueError, match="at least 32"):
            planes.split(src, 2, [np.zeros(32, np.uint8), np.zeros(31, np.uint8)])
        with pytest.raises(ValueError, match="at least 16"):
            planes.merge([np.zeros(16, np.uint8)] * 3 + [np.zeros(15, np.uint8)], 4, src)
        with pytest.raises(ValueError, match="element size"):
            planes.merge([np.zeros(8, np.uint8)] * 16, 16, np.zeros(128, np.uint8))


@native
def test_the_native_kernel_checks_lengths_itself() -> None:
    """Called directly (not through the checked wrapper), it still refuses short planes."""
    from lmserde_zstd import _planes  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match="plane 1 holds 7 bytes"):
        _planes.split(bytes(16), 2, [bytearray(8), bytearray(7)])
    with pytest.raises(ValueError, match="expected 4 planes"):
        _planes.merge([b"\0" * 8] * 2, 4, bytearray(32))
    with pytest.raises(BufferError):
        _planes.split(bytes(16), 2, [bytearray(8), b"\0" * 8])  # read-only plane
    with pytest.raises(ValueError, match="element size"):
        _planes.split(bytes(16), 5, [bytearray(8)] * 5)



def test_native_status_says_what_runs() -> None:
    from lmserde import get_serde_spec

    status = get_serde_spec("zstd").describe_native()
    assert status is not None and status == planes.native_status()
    was = planes.native_available()
    try:
        planes.set_native_enabled(False)
        off = planes.native_status()
        assert off["backend"] == "torch" and off["reason"]
    finally:
        planes.set_native_enabled(was)
    if was:
        on = planes.native_status()
        assert on["backend"] == "native" and on["built"] and on["simd"] in ("sse2", "scalar")
