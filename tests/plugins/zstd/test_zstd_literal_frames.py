"""Literal-only zstd frames (``csrc/literal_frames.c``): at level 1 a plane whose redundancy is
its byte distribution (bf16/fp32 exponents) is coded by zstd's Huffman coder alone, fused with the
split, and written as a standard zstd frame; the reader decodes frames of that shape block by
block into the cache and merges from there, and hands every other zstd frame to libzstd."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import pyzstd
import torch
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import TensorMemoryObj
from lmserde_zstd import HEADER_SIZE, FrameError, ZstdSerializer, plane_codec, planes
from zstd_support import decode, encode, gaussian, same_bytes

ENTRY = struct.Struct("<B7sQ")
BLOCK = 128 << 10

pytestmark = pytest.mark.skipif(not planes.literal_frames_available(),
                                reason="needs the native kernel lmserde_zstd._planes")


def _skewed(n: int, seed: int = 0) -> np.ndarray:
    """Bytes with about 2 bits of entropy and no long repeats, like a bf16 exponent plane."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(0.5, n), 255).astype(np.uint8)


def _literal_frame(plane: np.ndarray) -> bytes:
    out = np.empty(plane.size, dtype=np.uint8)
    size = planes.encode_planes(plane, 1, [out], [True])[0]
    assert 0 < size < plane.size
    return out[:size].tobytes()


def _blocks(frame: bytes) -> list[tuple[int, int, int]]:
    """(block type, block size, literals type or -1) of every block after the 14-byte header."""
    pos, found = 14, []
    while pos < len(frame):
        h = int.from_bytes(frame[pos:pos + 3], "little")
        btype, size = (h >> 1) & 3, h >> 3
        literals = frame[pos + 3] & 3 if btype == 2 else -1
        found.append((btype, size, literals))
        pos += 3 + (size if btype in (0, 2) else 1)
    return found


def _table(frame: bytes) -> list[tuple[int, int]]:
    es = frame[7]
    return [ENTRY.unpack_from(frame, HEADER_SIZE + p * ENTRY.size)[::2] for p in range(es)]


@pytest.mark.parametrize("n", [1, 1000, 1024, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5000])
def test_a_literal_frame_is_a_zstd_frame_every_decoder_reads(n: int) -> None:
    plane = _skewed(n, seed=n)
    out = np.empty(n + 64, dtype=np.uint8)
    size = planes.encode_planes(plane, 1, [out], [True])[0]
    frame = out[:size].tobytes()
    params = zstandard.get_frame_parameters(frame)
    assert (params.content_size, params.dict_id, params.has_checksum) == (n, 0, False)
    assert params.window_size <= 1 << 21 and pyzstd.get_frame_size(frame) == size
    assert pyzstd.decompress(frame) == plane.tobytes()
    assert zstandard.ZstdDecompressor().decompress(frame) == plane.tobytes()
    assert planes.is_literal_frame(frame, n)
    back = np.zeros(n, dtype=np.uint8)
    planes.decode_planes([frame], 1, [True], back)
    assert np.array_equal(back, plane)


def test_blocks_reuse_the_previous_huffman_table_when_it_serves() -> None:
    """Blocks with one histogram: the first block carries a table, the others reuse it."""
    plane = np.tile(_skewed(BLOCK), 8)
    frame = _literal_frame(plane)
    assert [literals for _, _, literals in _blocks(frame)] == [2] + [3] * 7
    assert pyzstd.decompress(frame) == plane.tobytes()
    back = np.zeros(plane.size, dtype=np.uint8)
    planes.decode_planes([frame], 1, [True], back)
    assert np.array_equal(back, plane)


def test_runs_and_incompressible_blocks_become_rle_and_raw_blocks() -> None:
    rng = np.random.default_rng(1)
    plane = np.concatenate([_skewed(BLOCK), np.full(BLOCK, 7, np.uint8),
                            rng.integers(0, 256, BLOCK, dtype=np.uint8), _skewed(BLOCK, 2)])
    frame = _literal_frame(plane)
    assert [btype for btype, _, _ in _blocks(frame)] == [2, 1, 0, 2]
    # after a raw block the coder starts a new table: never "the previous table" the reader lacks
    assert _blocks(frame)[3][2] == 2
    assert pyzstd.decompress(frame) == plane.tobytes()
    back = np.zeros(plane.size, dtype=np.uint8)
    planes.decode_planes([frame], 1, [True], back)
    assert np.array_equal(back, plane)


def test_a_frame_that_does_not_fit_reports_minus_one() -> None:
    plane = _skewed(4 * BLOCK)
    out = np.empty(1000, dtype=np.uint8)
    assert planes.encode_planes(plane, 1, [out], [True]) == [-1]


@pytest.mark.parametrize("es", [2, 4, 8])
def test_fused_split_and_merge_match_the_plain_kernels(es: int) -> None:
    rng = np.random.default_rng(es)
    n = 2 * BLOCK + 333
    data = rng.integers(0, 256, n * es + es - 1, dtype=np.uint8)  # and a partial element
    data[es - 1:n * es:es] = _skewed(n, seed=es)  # a compressible top plane
    coded = [p == es - 1 for p in range(es)]
    dests = [np.empty(n, dtype=np.uint8) for _ in range(es)]
    written = planes.encode_planes(data, es, dests, coded)
    expected = [np.empty(n, dtype=np.uint8) for _ in range(es)]
    planes.split(data, es, expected)
    for p in range(es - 1):
        assert written[p] == n and np.array_equal(dests[p], expected[p])
    frame = dests[-1][:written[-1]].tobytes()
    assert pyzstd.decompress(frame) == expected[-1].tobytes()
    sources = [*dests[:-1], frame]
    out = np.zeros(n * es, dtype=np.uint8)
    assert planes.decode_planes(sources, es, coded, out) == n
    assert np.array_equal(out, data[:n * es])


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=1, max_size=3 * 4096), st.sampled_from([1, 2, 4, 8]),
       st.integers(0, 255))
def test_any_bytes_round_trip_through_a_literal_frame(data: bytes, es: int, mask: int) -> None:
    src = np.frombuffer(data, dtype=np.uint8)
    n = src.size // es
    if n == 0:
        return
    coded = [bool(mask >> p & 1) for p in range(es)]
    dests = [np.empty(n + 64, dtype=np.uint8) for _ in range(es)]
    written = planes.encode_planes(src, es, dests, coded)
    sources = [dests[p][:written[p]].tobytes() if coded[p] else dests[p] for p in range(es)]
    out = np.zeros(n * es, dtype=np.uint8)
    planes.decode_planes(sources, es, coded, out)
    assert out.tobytes() == data[:n * es]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_damaged_literal_frame_raises_or_is_left_to_libzstd(data: st.DataObject) -> None:
    """Flip, cut or extend a frame: the shape check refuses it (then libzstd would judge it) or
    huff0 reports the stream corrupt, or the bytes decode to something; never a crash or a read
    outside the buffers."""
    plane = _skewed(2 * BLOCK + 100, seed=3)
    frame = bytearray(_literal_frame(plane))
    how = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        del frame[data.draw(st.integers(0, len(frame) - 1)):]
    else:
        frame += data.draw(st.binary(min_size=1, max_size=16))
    out = np.zeros(plane.size, dtype=np.uint8)
    if planes.is_literal_frame(bytes(frame), plane.size):
        try:
            planes.decode_planes([bytes(frame)], 1, [True], out)
        except ValueError as exc:
            assert "corrupt Huffman stream" in str(exc)
    else:
        with pytest.raises(ValueError, match="not a literal-only zstd frame"):
            planes.decode_planes([bytes(frame)], 1, [True], out)


def test_a_treeless_block_without_a_table_is_not_a_literal_frame() -> None:
    frame = bytearray(_literal_frame(_skewed(2 * BLOCK)))
    assert _blocks(bytes(frame))[0][2] == 2
    frame[14 + 3] = (frame[14 + 3] & ~3) | 3  # first block: "reuse the previous table"
    assert not planes.is_literal_frame(bytes(frame), 2 * BLOCK)
    with pytest.raises(pyzstd.ZstdError):
        pyzstd.decompress(bytes(frame))


@pytest.mark.parametrize("dtype,literal", [
    (torch.bfloat16, [False, True]),   # exponent plane about 3x: Huffman alone
    (torch.float32, [False, False, False, True]),
    (torch.float16, [False, True]),    # top plane about 1.4x, also a distribution, not repeats
], ids=str)
def test_level1_writes_the_planes_huffman_serves_as_literal_frames(
        dtype: torch.dtype, literal: list[bool]) -> None:
    src = gaussian([64, 4096], dtype, seed=7)
    frame = encode(src, ZstdSerializer(level=1))
    pos = HEADER_SIZE + plane_codec.table_size(len(literal))
    found = []
    for method, length in _table(frame):
        stored = frame[pos:pos + length]
        found.append(method == plane_codec.METHOD_ZSTD and
                     planes.is_literal_frame(stored, src.get_size() // len(literal)))
        pos += length
    assert found == literal
    assert same_bytes(decode(frame, src.get_layout()), src)


def test_a_plane_with_repeats_stays_with_zstd() -> None:
    """Repeated 64-byte patterns: zstd's matches beat Huffman by far, so zstd codes the plane."""
    rng = np.random.default_rng(5)
    pattern = rng.integers(0, 256, 64, dtype=np.uint8)
    values = np.tile(pattern, 1 << 12).astype(np.uint8)
    src = TensorMemoryObj.from_tensor(torch.from_numpy(values))
    frame = encode(src, ZstdSerializer(level=1))
    (method, length), = _table(frame)
    stored = frame[HEADER_SIZE + plane_codec.table_size(1):][:length]
    assert method == plane_codec.METHOD_ZSTD and not planes.is_literal_frame(stored, values.size)
    assert same_bytes(decode(frame, src.get_layout()), src)


def test_higher_levels_write_libzstd_frames() -> None:
    src = gaussian([64, 4096], torch.bfloat16, seed=7)
    frame = encode(src, ZstdSerializer(level=3))
    (_, n0), (method, n1) = _table(frame)
    stored = frame[HEADER_SIZE + plane_codec.table_size(2) + n0:][:n1]
    assert method == plane_codec.METHOD_ZSTD and not planes.is_literal_frame(stored, n0)
    assert same_bytes(decode(frame, src.get_layout()), src)


@pytest.mark.parametrize("writer_native,reader_native", [(True, False), (False, True)])
def test_frames_decode_with_and_without_the_native_kernel(writer_native: bool,
                                                          reader_native: bool) -> None:
    """A reader without the native kernel decodes literal frames with libzstd; a native reader
    decodes the libzstd frames a writer without it writes."""
    src = gaussian([64, 4096], torch.bfloat16, seed=9)
    was = planes.native_available()
    try:
        planes.set_native_enabled(writer_native)
        frame = encode(src)
        planes.set_native_enabled(reader_native)
        assert same_bytes(decode(frame, src.get_layout()), src)
    finally:
        planes.set_native_enabled(was)


def test_a_corrupt_huffman_stream_in_a_stored_object_is_a_frame_error() -> None:
    """int16 values whose high bytes repeat one skewed block: the high plane is a literal frame
    whose second block reuses the first one's table, so its Huffman data starts with the jump
    table of the four streams; a jump past the data is a corrupt stream huff0 reports."""
    rng = np.random.default_rng(11)
    high = np.tile(_skewed(BLOCK).astype(np.int16), 2)
    values = (high << 8) | rng.integers(0, 256, high.size).astype(np.int16)
    src = TensorMemoryObj.from_tensor(torch.from_numpy(values))
    frame = bytearray(encode(src))
    (_, n0), (_, n1) = _table(bytes(frame))
    start = HEADER_SIZE + plane_codec.table_size(2) + n0
    first, second = _blocks(bytes(frame[start:start + n1]))
    assert (first[2], second[2]) == (2, 3)
    jump = start + 14 + 3 + first[1] + 3 + 5
    frame[jump:jump + 2] = b"\xff\xff"
    with pytest.raises(FrameError, match="corrupt Huffman stream"):
        decode(bytes(frame), src.get_layout())


@pytest.mark.parametrize("mask,error", [(2**32 + 1, OverflowError), (-1, ValueError),
                                        (0b100, ValueError)])
def test_a_plane_mask_out_of_range_is_refused(mask: int, error: type[Exception]) -> None:
    from lmserde_zstd import _planes  # type: ignore[attr-defined]
    data = _skewed(4096)
    with pytest.raises(error):
        _planes.encode_planes(data, 2, [np.empty(2048, np.uint8)] * 2, mask)
    with pytest.raises(error):
        _planes.decode_planes([data[:2048]] * 2, 2, mask, np.empty(4096, np.uint8))
