"""lmserde.frame_checksum: the payload checksum computed in a copy (the C kernel) or incrementally,
equal to the frame's definition (XXH3-64 through the ``xxhash`` package, segmented at 4 MiB), with
and without the kernel; and the report a serde makes on a framed payload."""

from __future__ import annotations

import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import TensorMemoryObj, frame_checksum
from lmserde.frame_checksum import (
    CHECKSUM_SEGMENT_BYTES,
    FramedPayload,
    PayloadHasher,
    checksum_bytes,
    copy_with_checksum,
    report_payload_checksum,
    wants_payload_checksum,
)

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


def _payload(n: int) -> FramedPayload:
    return FramedPayload.from_tensor(torch.zeros(n, dtype=torch.uint8))  # type: ignore[return-value]


def test_a_report_is_kept_for_the_bytes_it_covers() -> None:
    payload = _payload(100)
    assert payload.reported_checksum(100) is None
    report_payload_checksum(payload, 100, -1)  # kept as an unsigned 64-bit value
    assert payload.reported_checksum(100) == (1 << 64) - 1
    assert payload.reported_checksum(99) is None
    report_payload_checksum(payload, 60, 5)  # a later report replaces it
    assert payload.reported_checksum(100) is None and payload.reported_checksum(60) == 5


def test_only_framed_payloads_want_a_checksum(kernel: str) -> None:
    plain = TensorMemoryObj.from_tensor(torch.zeros(8, dtype=torch.uint8))
    report_payload_checksum(plain, 8, 1)  # a no-op
    assert not hasattr(plain, "reported_checksum")
    assert not wants_payload_checksum(plain)
    # without the kernel a fused pass has no advantage: serdes copy and the wrapper hashes
    assert wants_payload_checksum(_payload(8)) == (kernel == "kernel")
