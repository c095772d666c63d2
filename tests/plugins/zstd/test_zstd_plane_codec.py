"""Codec 2 (``planes``): which planes are coded, the checked plane table, forged zstd frames,
the frames of lmserde-zstd 0.1 and a pinned codec-2 frame."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import zstandard
from lmserde import TensorMemoryObj, create_serde_processor
from lmserde.testing import wait_for_result
from lmserde_zstd import HEADER_SIZE, FrameError, FrameHeader, ZstdSerializer, plane_codec, planes
from lmserde_zstd.frame import Codec
from zstd_support import KEY, byte_object, decode, encode, gaussian, rewrite_header, same_bytes

DATA = Path(__file__).parent / "data"
ENTRY = struct.Struct("<B7sQ")


def _table(frame: bytes) -> list[tuple[int, int]]:
    """(method, stored length) of every plane of a codec-2 frame."""
    es = frame[7]
    return [ENTRY.unpack_from(frame, HEADER_SIZE + p * ENTRY.size)[::2] for p in range(es)]


def _forge(frame: bytes, entries: list[tuple[int, int]], body: bytes | None = None) -> bytes:
    """``frame`` with a new plane table (checksum recomputed), optionally a new plane area, and
    the header's payload length fitted to it."""
    es = frame[7]
    table = b"".join(ENTRY.pack(m, bytes(7), n) for m, n in entries)
    table += struct.pack("<I4s", zlib.crc32(table), bytes(4))
    rest = frame[HEADER_SIZE + len(table):] if body is None else body
    out = frame[:HEADER_SIZE] + table + rest
    assert len(table) == plane_codec.table_size(es)
    return rewrite_header(out, payload_length=len(out) - HEADER_SIZE)


SRC = gaussian([16, 1024], torch.bfloat16, seed=4)
LAYOUT = SRC.get_layout()
FRAME = encode(SRC)
P = SRC.get_size() // 2


def test_bf16_codes_the_exponent_plane_and_stores_the_mantissa_plane() -> None:
    (m0, n0), (m1, n1) = _table(FRAME)
    assert (m0, n0) == (plane_codec.METHOD_RAW, P)
    assert m1 == plane_codec.METHOD_ZSTD and n1 < P / 2
    assert FRAME[HEADER_SIZE + 40:HEADER_SIZE + 40 + P] == bytes(SRC.byte_array)[0::2]


@pytest.mark.parametrize("dtype,coded", [
    (torch.float16, [False, True]),
    (torch.float32, [False, False, False, True]),
    (torch.float64, [False] * 6 + [True, True]),
    (torch.float8_e4m3fn, [True]),
], ids=str)
def test_only_the_planes_that_pay_are_coded(dtype: torch.dtype, coded: list[bool]) -> None:
    values = torch.randn(32, 1024, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    src = TensorMemoryObj.from_tensor(values.to(dtype))
    frame = encode(src)
    assert [m == plane_codec.METHOD_ZSTD for m, _ in _table(frame)] == coded
    assert same_bytes(decode(frame, src.get_layout()), src)


@pytest.mark.parametrize("level", [3, 9])
def test_every_level_writes_frames_its_reader_accepts(level: int) -> None:
    """An exponent plane larger than the 2 MiB window readers accept: zstd's level 9 would use a
    4 MiB window, so writers cap the window at every level."""
    big = gaussian([2560, 1024], torch.bfloat16, seed=8)  # 5 MiB: 2.5 MiB planes
    frame = encode(big, ZstdSerializer(level=level))
    assert [m for m, _ in _table(frame)] == [plane_codec.METHOD_RAW, plane_codec.METHOD_ZSTD]
    zframe = frame[HEADER_SIZE + 40 + big.get_size() // 2:]
    assert zstandard.get_frame_parameters(zframe).window_size <= 1 << 21
    assert same_bytes(decode(frame, big.get_layout()), big)


def test_a_raw_plane_after_a_coded_plane_round_trips() -> None:
    """int16 values whose low byte is small (compressible) and high byte random: the coded plane
    comes first, so the raw plane is written from scratch after it."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 4, 1 << 16) + 256 * rng.integers(0, 256, 1 << 16)
    src = TensorMemoryObj.from_tensor(torch.from_numpy(values.astype(np.int16)))
    frame = encode(src)
    assert [m for m, _ in _table(frame)] == [plane_codec.METHOD_ZSTD, plane_codec.METHOD_RAW]
    assert same_bytes(decode(frame, src.get_layout()), src)


@pytest.mark.parametrize("way", ["zstd", "literal"])
def test_a_plane_the_sample_misjudged_is_stored_raw(monkeypatch: pytest.MonkeyPatch,
                                                    way: str) -> None:
    """When the sample says "code it" but the plane does not shrink, the plane is raw (a literal
    frame that does not fit is written again through libzstd, which stores it raw)."""
    monkeypatch.setattr(plane_codec, "_choose_ways",
                        lambda data, es, count, level, state: [way] * es)
    frame = encode(SRC, ZstdSerializer(min_saving=0.0))
    assert [m for m, _ in _table(frame)] == [plane_codec.METHOD_RAW, plane_codec.METHOD_ZSTD]
    assert same_bytes(decode(frame, LAYOUT), SRC)
    monkeypatch.undo()
    # and the next object is coded as before
    assert encode(SRC) == FRAME


@pytest.mark.parametrize("writer", [True, False], ids=["native", "fallback"])
def test_both_split_paths_write_frames_both_read(writer: bool) -> None:
    """The torch fallback writes libzstd frames where the native kernel writes literal-only
    ones; every frame decodes to the same object on either path."""
    was = planes.native_available()
    sources = [gaussian([8, 777], dt, seed=1) for dt in
               (torch.bfloat16, torch.float32, torch.float64, torch.uint8)]
    try:
        planes.set_native_enabled(writer)
        frames = [encode(src) for src in sources]
        for reader in (True, False):
            planes.set_native_enabled(reader)
            for src, frame in zip(sources, frames, strict=True):
                assert same_bytes(decode(frame, src.get_layout()), src)
    finally:
        planes.set_native_enabled(was)


@pytest.mark.parametrize("entries,match", [
    ([(0, P), (1, 10)], "table, planes and tail"),      # lengths no longer add up
    ([(0, P - 1), (1, 0)], "raw plane 0"),
    ([(0, P), (1, P)], "not shorter"),
    ([(0, P), (1, 0)], "not shorter"),
    ([(2, P), (1, 10)], "unknown method"),
    ([(1, P - 1), (1, 10)], "table, planes and tail"),
], ids=str)
def test_forged_plane_tables_raise(entries: list[tuple[int, int]], match: str) -> None:
    with pytest.raises(FrameError, match=match):
        decode(_forge(FRAME, entries), LAYOUT)


def test_nonzero_reserved_table_bytes_raise() -> None:
    forged = bytearray(FRAME)
    forged[HEADER_SIZE + 3] = 1  # inside entry 0's reserved bytes
    table = bytes(forged[HEADER_SIZE:HEADER_SIZE + 32])
    forged[HEADER_SIZE + 32:HEADER_SIZE + 36] = struct.pack("<I", zlib.crc32(table))
    with pytest.raises(FrameError, match="reserved"):
        decode(bytes(forged), LAYOUT)


def _with_zstd_plane(frame: bytes, zframe: bytes) -> bytes:
    (m0, n0), _ = _table(frame)
    raw_plane = frame[HEADER_SIZE + 40:HEADER_SIZE + 40 + n0]
    return _forge(frame, [(m0, n0), (1, len(zframe))], raw_plane + zframe)


def test_a_zstd_plane_of_another_size_raises_before_decoding() -> None:
    other = zstandard.ZstdCompressor().compress(bytes(P + 100))  # claims more than the plane
    with pytest.raises(FrameError, match="zstd frame says"):
        decode(_with_zstd_plane(FRAME, other), LAYOUT)
    shorter = zstandard.ZstdCompressor().compress(bytes(P - 1))
    with pytest.raises(FrameError, match="zstd frame says"):
        decode(_with_zstd_plane(FRAME, shorter), LAYOUT)


def test_a_zstd_plane_without_a_content_size_raises() -> None:
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(P))
    with pytest.raises(FrameError, match="zstd frame says"):
        decode(_with_zstd_plane(FRAME, unsized), LAYOUT)


def test_a_zstd_plane_asking_for_a_large_window_raises() -> None:
    """A valid frame (one RLE block of P zero bytes) whose header asks for a 16 MiB window."""
    big_window = (zstandard.MAGIC_NUMBER.to_bytes(4, "little")
                  + bytes([0x80, 14 << 3])  # 4-byte content size, no single segment; 2^24 window
                  + P.to_bytes(4, "little")
                  + ((P << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\0")  # last RLE block
    params = zstandard.get_frame_parameters(big_window)
    assert (params.window_size, params.content_size) == (1 << 24, P)
    assert zstandard.ZstdDecompressor().decompress(big_window) == bytes(P)
    with pytest.raises(FrameError, match="window"):
        decode(_with_zstd_plane(FRAME, big_window), LAYOUT)


def test_a_zstd_plane_with_bytes_after_its_frame_raises_before_decoding() -> None:
    """The stored plane must be exactly one frame: a second frame (which would decode to more
    than the plane) or trailing bytes are refused."""
    zeros = zstandard.ZstdCompressor().compress(bytes(P))
    for extra in (zeros, zstandard.ZstdCompressor().compress(bytes(1 << 20)), b"\0" * 8):
        with pytest.raises(FrameError, match="its zstd frame"):
            decode(_with_zstd_plane(FRAME, zeros + extra), LAYOUT)


def test_a_zstd_plane_that_is_not_zstd_raises() -> None:
    with pytest.raises(FrameError, match="zstd"):
        decode(_with_zstd_plane(FRAME, b"\x00" * 64), LAYOUT)


def test_a_valid_foreign_zstd_plane_decodes_to_exactly_the_destination() -> None:
    """A well-formed frame of the right size decodes (no payload checksum) - to exactly the
    destination's length, never beyond."""
    zeros = zstandard.ZstdCompressor().compress(bytes(P))
    out = decode(_with_zstd_plane(FRAME, zeros), LAYOUT)
    assert bytes(out.byte_array)[1::2] == bytes(P)


def test_frames_of_lmserde_zstd_0_1_still_decode() -> None:
    """A codec-1 frame written by lmserde-zstd 0.1.0 (tests/plugins/zstd/data) decodes, and the
    blosc2 codec of this version writes the same bytes."""
    raw = (DATA / "bf16_16x64.raw").read_bytes()
    old = (DATA / "v1_blosc2_bf16_16x64.frame").read_bytes()
    src = TensorMemoryObj.from_tensor(torch.frombuffer(bytearray(raw), dtype=torch.bfloat16)
                                      .reshape(16, 64))
    header = FrameHeader.parse(old, expected_raw_length=len(raw), available=len(old))
    assert (old[4], header.codec, header.stored) == (1, Codec.BLOSC2_ZSTD, False)
    assert bytes(decode(old, src.get_layout()).byte_array) == raw
    assert encode(src, ZstdSerializer(codec="blosc2")) == old


def test_a_pinned_codec_2_frame_decodes() -> None:
    """The codec-2 format is pinned: this frame (written by lmserde-zstd 0.2.0) must decode."""
    raw = (DATA / "bf16_16x64.raw").read_bytes()
    frame = (DATA / "v2_planes_bf16_16x64.frame").read_bytes()
    layout = TensorMemoryObj.from_tensor(torch.zeros(16, 64, dtype=torch.bfloat16)).get_layout()
    assert (frame[4], frame[5], _table(frame)[0]) == (2, 2, (plane_codec.METHOD_RAW, 1024))
    assert bytes(decode(frame, layout).byte_array) == raw


def test_parallel_workers_share_one_serializer_safely() -> None:
    """max_workers 3 runs one serializer/deserializer on three threads (per-thread contexts and
    scratch planes): every object round trips."""
    srcs = [gaussian([64, 512], dt, seed=i) for i, dt in enumerate(
        [torch.bfloat16, torch.float32, torch.float16, torch.bfloat16, torch.float64,
         torch.bfloat16] * 2)]
    proc = create_serde_processor({"type": "zstd", "max_workers": 3})
    try:
        ser = proc.serializer
        dsts = [byte_object(torch.zeros(ser.estimate_serialized_size(s.get_layout()),
                                        dtype=torch.uint8)) for s in srcs]
        tasks = [proc.submit_serialize([s], [d], [KEY]) for s, d in zip(srcs, dsts)]
        assert all(wait_for_result(proc, t, serialize=True) for t in tasks)
        outs = [TensorMemoryObj.allocate(s.get_layout(), zero=True) for s in srcs]
        tasks = [proc.submit_deserialize([d], [o], [KEY]) for d, o in zip(dsts, outs)]
        assert all(wait_for_result(proc, t, serialize=False) for t in tasks)
    finally:
        proc.close()
    assert all(same_bytes(o, s) for o, s in zip(outs, srcs))
