"""lmserde.frame_checksum: the payload checksum computed in a copy (the C kernel) or incrementally,
equal to the frame's definition (XXH3-64 through the ``xxhash`` package, segmented at 4 MiB), with
and without the kernel; and the hasher bound to a framed payload, which hashes only that
payload's own bytes."""

from __future__ import annotations

import itertools

import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, frame_checksum
from lmserde.frame_checksum import (
    CHECKSUM_SEGMENT_BYTES,
    FramedPayload,
    PayloadHasher,
    checksum_bytes,
    copy_with_checksum,
    payload_hasher,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer

SEG = CHECKSUM_SEGMENT_BYTES
MIB = 1 << 20
SOURCE = torch.randint(0, 256, (10 * MIB + 256,), dtype=torch.uint8,
                       generator=torch.Generator().manual_seed(1))


def definition(data: torch.Tensor) -> int:
    """The frame's payload checksum, written out with the xxhash package."""
    raw = data.numpy().tobytes()
    if len(raw) <= SEG:
        return xxhash.xxh3_64_intdigest(raw)
    digests = [xxhash.xxh3_64_intdigest(raw[i:i + SEG]) for i in range(0, len(raw), SEG)]
    return xxhash.xxh3_64_intdigest(b"".join(d.to_bytes(8, "little") for d in digests))


@pytest.fixture(params=["kernel", "xxhash"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the C kernel and with the xxhash fallback."""
    if request.param == "xxhash":
        monkeypatch.setattr(frame_checksum, "_kernel", None)
    elif frame_checksum.checksum_kernel() is None:
        pytest.skip("lmserde was built without its checksum kernel")
    return str(request.param)


def _copy_and_check(n: int, src_offset: int, dst_offset: int) -> None:
    src = SOURCE[src_offset:src_offset + n]
    area = torch.full((n + 256,), 0xA5, dtype=torch.uint8)
    dst = area[64 + dst_offset:64 + dst_offset + n]
    assert copy_with_checksum(dst, src) == definition(src)
    assert torch.equal(dst, src)
    assert area[:64 + dst_offset].eq(0xA5).all() and area[64 + dst_offset + n:].eq(0xA5).all()
    assert checksum_bytes(src) == definition(src)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 20000), src_offset=st.integers(0, 63), dst_offset=st.integers(0, 63))
def test_small_copies_match_the_definition(n: int, src_offset: int, dst_offset: int) -> None:
    for use_kernel in (True, False):
        saved = frame_checksum._kernel
        if not use_kernel:
            frame_checksum._kernel = None
        try:
            _copy_and_check(n, src_offset, dst_offset)
        finally:
            frame_checksum._kernel = saved


@pytest.mark.parametrize("n", [2 * MIB - 1, 2 * MIB, 2 * MIB + 13, SEG - 1, SEG, SEG + 1,
                               SEG + 241, 2 * SEG + 7, 10 * MIB])
@pytest.mark.parametrize("offsets", [(0, 0), (16, 0), (0, 48), (3, 61)])
def test_large_copies_match_the_definition(kernel: str, n: int,
                                           offsets: tuple[int, int]) -> None:
    """Across the streaming threshold (2 MiB) and the checksum's segments (4 MiB), with
    destinations that do not start on a cache line."""
    _copy_and_check(n, *offsets)


def _copy_at_page_distance(n: int, ahead: int) -> None:
    """Copy ``n`` bytes to a destination ``ahead`` bytes past the source's offset in its 4 KiB
    page (whatever the two allocations' own offsets), then check bytes, checksum and guards."""
    src = SOURCE[:n]
    area = torch.full((n + 3 * 4096,), 0xA5, dtype=torch.uint8)
    start = 4096 + (src.data_ptr() - area.data_ptr() - 4096 + ahead) % 4096
    dst = area[start:start + n]
    assert (dst.data_ptr() - src.data_ptr()) % 4096 == ahead % 4096
    assert copy_with_checksum(dst, src) == definition(src)
    assert torch.equal(dst, src)
    assert area[:start].eq(0xA5).all() and area[start + n:].eq(0xA5).all()


@pytest.mark.parametrize("n", [2 * MIB, 2 * MIB + 1024 + 77, SEG + 4096 + 5])
@pytest.mark.parametrize("ahead", [0, 1, 63, 64, 65, 128, 511, 512, 513, 4032, 4095])
def test_large_copies_whatever_the_page_distance(kernel: str, n: int, ahead: int) -> None:
    """A destination a little ahead of its source modulo 4 KiB (up to 512 bytes) is copied by
    another path (each block hashed first, the copy one block behind, last line first) that
    must give the same bytes and checksum as the others, at the window's edges too."""
    _copy_at_page_distance(n, ahead)


def test_large_copies_stream(kernel: str) -> None:
    if kernel != "kernel":
        pytest.skip("the fallback has no streaming copy")
    before = frame_checksum._kernel.streamed_copies()
    _copy_and_check(3 * MIB, 0, 0)
    _copy_and_check(MIB, 0, 0)
    assert frame_checksum._kernel.streamed_copies() == before + 1


@settings(max_examples=40, deadline=None)
@given(pieces=st.lists(st.integers(0, 3 * MIB), min_size=1, max_size=6))
def test_the_hasher_matches_the_definition_whatever_the_pieces(pieces: list[int]) -> None:
    for use_kernel in (True, False):
        saved = frame_checksum._kernel
        if not use_kernel:
            frame_checksum._kernel = None
        try:
            hasher, pos = PayloadHasher(), 0
            for size in pieces:
                size = min(size, SOURCE.numel() - pos)
                hasher.update(SOURCE[pos:pos + size])
                pos += size
            assert hasher.nbytes == pos
            assert hasher.digest() == definition(SOURCE[:pos])
        finally:
            frame_checksum._kernel = saved


def test_the_hasher_on_exact_segments(kernel: str) -> None:
    hasher = PayloadHasher()
    hasher.update(SOURCE[:SEG])
    hasher.update(SOURCE[SEG:2 * SEG])
    assert hasher.digest() == definition(SOURCE[:2 * SEG])
    single = PayloadHasher()
    single.update(SOURCE[:SEG])
    assert single.digest() == definition(SOURCE[:SEG])


@pytest.mark.parametrize("bad", [
    torch.zeros(16, dtype=torch.int16),
    torch.zeros(32, dtype=torch.uint8)[::2],
    torch.zeros(4, 4, dtype=torch.uint8),
], ids=["dtype", "strided", "2-d"])
def test_bad_tensors_are_refused(bad: torch.Tensor) -> None:
    ok = torch.zeros(16, dtype=torch.uint8)
    with pytest.raises(ValueError):
        copy_with_checksum(ok, bad)
    with pytest.raises(ValueError):
        copy_with_checksum(bad, ok)
    with pytest.raises(ValueError):
        PayloadHasher().update(bad)
    with pytest.raises(ValueError, match="dst has"):
        copy_with_checksum(torch.zeros(15, dtype=torch.uint8), ok)


def _payload(data: torch.Tensor) -> FramedPayload:
    return FramedPayload.from_tensor(data)  # type: ignore[return-value]


needs_kernel = pytest.mark.skipif(frame_checksum.checksum_kernel() is None,
                                  reason="lmserde was built without its checksum kernel")


@needs_kernel
def test_a_bound_hasher_fed_its_payload_in_order_is_verified() -> None:
    data = SOURCE[:3 * MIB + 5].clone()
    payload = _payload(data)
    hasher = payload_hasher(payload)
    assert hasher is not None and payload_hasher(payload) is hasher  # one per payload
    for start in range(0, data.numel(), 100_000):
        hasher.update(data[start:start + 100_000])
    assert payload.verified_checksum(data.numel()) == definition(data)
    assert payload.verified_checksum(data.numel() - 1) is None  # not what it covered


@needs_kernel
@pytest.mark.parametrize("how", ["another buffer", "out of order", "past the end", "twice",
                                 "after a fused copy"])
def test_a_bound_hasher_hashes_nothing_but_its_own_bytes(how: str) -> None:
    """A serde cannot make the wrapper accept a checksum of other bytes: any piece that is not
    the next part of the payload's own memory breaks the hasher, and a broken hasher is never
    used."""
    backing = SOURCE[:8193].clone()
    data = backing[:8192]
    payload = _payload(data)
    hasher = payload_hasher(payload)
    assert hasher is not None
    if how == "another buffer":
        hasher.update(data.clone())  # the same bytes, elsewhere
    elif how == "out of order":
        hasher.update(data[4096:])
        hasher.update(data[:4096])
    elif how == "past the end":
        hasher.update(backing)  # the payload's bytes and the one after them
    elif how == "twice":
        hasher.update(data)
        hasher.update(data)
    else:
        hasher.copy_out(torch.empty(8192, dtype=torch.uint8))
        hasher.update(data)
    assert not hasher.valid
    assert payload.verified_checksum(8192) is None
    assert payload.verified_checksum(16384) is None


@needs_kernel
@pytest.mark.parametrize("n", [0, 100, 5000, 3 * MIB + 7, 9 * MIB])
def test_fused_copies_in_and_out_of_a_bound_payload(n: int) -> None:
    src = SOURCE[:n]
    payload = _payload(torch.zeros(n + 64, dtype=torch.uint8))
    hasher = payload_hasher(payload)
    assert hasher is not None
    hasher.copy_in(src)
    assert torch.equal(payload.raw_data[:n], src) and not payload.raw_data[n:].any()
    assert payload.verified_checksum(n) == definition(src)
    readback = _payload(payload.raw_data[:n].clone())
    out = torch.empty(n, dtype=torch.uint8)
    back = payload_hasher(readback)
    assert back is not None
    back.copy_out(out)
    assert torch.equal(out, src) and readback.verified_checksum(n) == definition(src)


@needs_kernel
def test_a_copy_larger_than_the_payload_is_refused() -> None:
    payload = _payload(torch.zeros(100, dtype=torch.uint8))
    hasher = payload_hasher(payload)
    assert hasher is not None
    with pytest.raises(ValueError, match="do not fit"):
        hasher.copy_in(SOURCE[:101])
    assert not payload.raw_data.any()  # nothing written


@needs_kernel
@pytest.mark.parametrize("n", [100, 3 * MIB + 7])
def test_a_second_copy_still_copies_and_vouches_for_nothing(n: int) -> None:
    """A fused copy takes the checksum only as the hasher's first use, but it always copies: a
    serde that writes a payload twice leaves the second bytes there, and the wrapper, finding the
    hasher broken, hashes them itself."""
    payload = _payload(torch.zeros(n, dtype=torch.uint8))
    hasher = payload_hasher(payload)
    assert hasher is not None
    hasher.copy_in(SOURCE[:n])
    second = torch.flip(SOURCE[:n], [0])
    hasher.copy_in(second)
    assert torch.equal(payload.raw_data, second)
    assert not hasher.valid and payload.verified_checksum(n) is None
    out = torch.zeros(n, dtype=torch.uint8)
    hasher.copy_out(out)
    assert torch.equal(out, second)


@needs_kernel
def test_identity_writes_and_reads_a_reused_framed_payload_every_time() -> None:
    layout = MemoryLayoutDesc([[4 * MIB]], [torch.uint8])
    payload = _payload(torch.zeros(4 * MIB, dtype=torch.uint8))
    key = ObjectKey(b"\x01" * 32, "m", 0)
    for seed in (1, 2):
        src = TensorMemoryObj.from_tensor(
            torch.randint(0, 256, (4 * MIB,), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(seed)))
        assert IdentitySerializer().serialize(src, payload, key) == 4 * MIB
        assert torch.equal(payload.raw_data, src.raw_data)
        for _ in range(2):
            dst = TensorMemoryObj.allocate(layout, zero=True)
            IdentityDeserializer().deserialize(payload, dst, key)
            assert torch.equal(dst.raw_data, src.raw_data)


def test_only_framed_payloads_get_a_hasher(kernel: str) -> None:
    plain = TensorMemoryObj.from_tensor(torch.zeros(8, dtype=torch.uint8))
    assert payload_hasher(plain) is None
    # without the kernel a fused pass has no advantage: serdes copy and the wrapper hashes
    assert (payload_hasher(_payload(torch.zeros(8, dtype=torch.uint8))) is not None) == (
        kernel == "kernel")
    with pytest.raises(ValueError, match="bound"):
        PayloadHasher().copy_in(torch.zeros(8, dtype=torch.uint8))


def _levels() -> list[str]:
    """The SIMD levels the kernel can run on this CPU (its best and every one below)."""
    if frame_checksum._kernel is None:
        return []
    order = ["sse2", "avx2", "avx512"]
    best = frame_checksum._kernel.simd_level()
    return order[:order.index(best) + 1] if best in order else []


@pytest.mark.parametrize("level", ["sse2", "avx2", "avx512"])
@pytest.mark.parametrize("ahead", [0, 64, 4032])
def test_every_simd_level_gives_the_same_copy_and_checksum(level: str, ahead: int) -> None:
    """The kernel's lower levels run on this CPU too (``set_simd_level``): each must copy and
    hash exactly like the definition, hashers included."""
    if level not in _levels():
        pytest.skip(f"this CPU (or build) does not run the {level} kernel")
    previous = frame_checksum._kernel.set_simd_level(level)
    try:
        assert frame_checksum._kernel.simd_level() == level
        _copy_at_page_distance(SEG + 4096 + 5, ahead)
        hasher = PayloadHasher()
        for piece in (SOURCE[:1000], SOURCE[1000:SEG + 77]):
            hasher.update(piece)
        assert hasher.digest() == definition(SOURCE[:SEG + 77])
    finally:
        frame_checksum._kernel.set_simd_level(previous)


@pytest.mark.skipif(frame_checksum._kernel is None, reason="no checksum kernel")
def test_an_unknown_or_unsupported_simd_level_is_refused() -> None:
    best = frame_checksum._kernel.simd_level()
    with pytest.raises(ValueError, match="unknown"):
        frame_checksum._kernel.set_simd_level("avx9000")
    if best != "avx512":
        with pytest.raises(ValueError, match="does not run"):
            frame_checksum._kernel.set_simd_level("avx512")
    assert frame_checksum._kernel.simd_level() == best


#: Payload lengths around what decides how a bound hasher hashes in place: XXH3's short-input
#: limit (240 bytes) and its 1 KiB blocks, in one segment or just past a segment boundary.
_BOUND_LENGTHS = st.one_of(
    st.integers(0, 3000),
    st.integers(SEG - 300, SEG + 1100),
    st.sampled_from([2 * SEG, 2 * SEG + 240, 2 * SEG + 241, SEG + 1024, SEG + 1025]),
)


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(n=_BOUND_LENGTHS, cuts=st.lists(st.integers(0, 2 * SEG + 2000), max_size=8),
       level=st.sampled_from(["sse2", "avx2", "avx512"]), peek=st.booleans())
def test_a_bound_hasher_hashes_in_place_whatever_the_pieces(
        n: int, cuts: list[int], level: str, peek: bool) -> None:
    """A bound hasher accumulates its range's whole stripes in place as they arrive and reads the
    rest back when a segment ends or its digest is taken: whatever the pieces (1 byte, stripe or
    block boundaries, segment boundaries), at every SIMD level, and with digests taken midway,
    the result is the definition's."""
    if level not in _levels():
        level = _levels()[-1]
    data = SOURCE[:n].clone()
    payload = _payload(data)
    previous = frame_checksum._kernel.set_simd_level(level)
    try:
        hasher = payload_hasher(payload)
        assert hasher is not None
        bounds = sorted({0, n, *(c for c in cuts if c < n)})
        for start, end in itertools.pairwise(bounds):
            hasher.update(data[start:end])
            if peek:  # a digest midway changes nothing
                assert hasher.digest() == definition(data[:end])
        assert payload.verified_checksum(n) == definition(data)
    finally:
        frame_checksum._kernel.set_simd_level(previous)


@needs_kernel
def test_a_bound_hasher_fed_a_kilobyte_at_a_time() -> None:
    """lmserde-fp8's encode feeds 1 KiB pieces: over several segments, ending mid-block."""
    n = 2 * SEG + 5000
    data = SOURCE[:n].clone()
    payload = _payload(data)
    hasher = payload_hasher(payload)
    assert hasher is not None
    for start in range(0, n, 1024):
        hasher.update(data[start:start + 1024])
    assert payload.verified_checksum(n) == definition(data)
