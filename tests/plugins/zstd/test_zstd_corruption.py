"""Damaged, truncated, foreign and forged frames raise ``ValueError``: never a crash, never a read
past the frame, never a write past (or an allocation beyond) the destination. Both codecs: the
default ``planes`` (codec 2) and ``blosc2`` (codec 1, the 0.1 format)."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde_zstd import HEADER_SIZE, FrameError, ZstdSerializer
from zstd_support import decode, encode, gaussian, rewrite_header, same_bytes

SRC = gaussian([8, 512], torch.bfloat16, seed=11)
LAYOUT = SRC.get_layout()
FRAME = encode(SRC, ZstdSerializer(codec="blosc2"))  # codec 1
PLANES = encode(SRC)  # codec 2, the default
STORED = encode(SRC, ZstdSerializer(min_saving=0.9))
BLOSC2_STORED = encode(SRC, ZstdSerializer(codec="blosc2", min_saving=0.9))
ALL = [FRAME, PLANES, STORED, BLOSC2_STORED]
ALL_IDS = ["blosc2", "planes", "stored", "blosc2-stored"]
COMPRESSED = [FRAME, PLANES]
COMPRESSED_IDS = ["blosc2", "planes"]


def _decodes_exactly_or_raises(frame: bytes, layout: MemoryLayoutDesc = LAYOUT) -> bool:
    """True when ``frame`` decoded to the original; False when it raised ``ValueError``."""
    try:
        out = decode(frame, layout)
    except ValueError:
        return False
    assert out.get_size() == layout.nbytes
    return same_bytes(out, SRC)


def test_the_fixtures_take_every_path() -> None:
    assert len(FRAME) < len(STORED) == HEADER_SIZE + SRC.get_size()
    assert len(PLANES) < len(STORED) == len(BLOSC2_STORED)
    assert [f[5] for f in ALL] == [1, 2, 2, 1]  # codec ids
    assert [f[4] for f in ALL] == [1, 2, 2, 1]  # versions


@pytest.mark.parametrize("frame", ALL, ids=ALL_IDS)
def test_every_truncation_raises(frame: bytes) -> None:
    for cut in range(len(frame)):
        with pytest.raises(ValueError):
            decode(frame[:cut], LAYOUT)
    with pytest.raises(ValueError):
        decode(frame[:-1], LAYOUT)


@pytest.mark.parametrize("frame", ALL, ids=ALL_IDS)
def test_every_header_bit_flip_raises(frame: bytes) -> None:
    for bit in range(HEADER_SIZE * 8):
        damaged = bytearray(frame)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(FrameError):
            decode(bytes(damaged), LAYOUT)


@pytest.mark.parametrize("frame", COMPRESSED, ids=COMPRESSED_IDS)
def test_payload_bit_flips_never_crash_nor_change_the_length(frame: bytes) -> None:
    """A flipped payload bit raises or decodes to exactly the destination's size.

    The payload carries no checksum of its own (the wrapper's stored-object frame checks whole
    objects); what this format guarantees is that a damaged payload cannot crash the process or
    write outside the destination.
    """
    gen = torch.Generator().manual_seed(5)
    positions = torch.randint(HEADER_SIZE, len(frame), (400,), generator=gen).tolist()
    raised = 0
    for i, pos in enumerate(positions):
        damaged = bytearray(frame)
        damaged[pos] ^= 1 << (i % 8)
        raised += not _decodes_exactly_or_raises(bytes(damaged))
    # blosc2: the chunk header, block offsets and zstd's structure catch most flips; planes: the
    # plane table's CRC and zstd's structure do, and a flip in a raw plane decodes to other bytes
    assert raised > 0


def test_every_bit_flip_in_the_plane_table_raises() -> None:
    """The plane table (2 entries of 16 bytes and an 8-byte trailer) is covered by its CRC."""
    for bit in range((2 * 16 + 8) * 8):
        damaged = bytearray(PLANES)
        damaged[HEADER_SIZE + bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(FrameError):
            decode(bytes(damaged), LAYOUT)


@pytest.mark.parametrize("frame", ALL, ids=ALL_IDS)
def test_wrong_destination_length_raises(frame: bytes) -> None:
    for layout in (MemoryLayoutDesc([[8, 511]], [torch.bfloat16]),
                   MemoryLayoutDesc([[8, 513]], [torch.bfloat16])):
        with pytest.raises(FrameError, match="destination"):
            decode(frame, layout)


def test_garbage_and_foreign_bytes_raise() -> None:
    for data in (b"", b"\0" * 100, os.urandom(len(FRAME)), b"LZST" + os.urandom(60),
                 bytes(SRC.byte_array)):
        with pytest.raises(FrameError):
            decode(data, LAYOUT)


@pytest.mark.parametrize("frame", COMPRESSED, ids=COMPRESSED_IDS)
def test_a_forged_payload_length_beyond_the_source_raises_before_reading(frame: bytes) -> None:
    forged = rewrite_header(frame, payload_length=len(frame))  # claims more than there is
    with pytest.raises(FrameError, match="truncated"):
        decode(forged, LAYOUT, extra=b"\0" * 16)  # some bytes follow, but not enough


@pytest.mark.parametrize("frame", COMPRESSED, ids=COMPRESSED_IDS)
def test_a_forged_payload_length_inside_the_source_raises(frame: bytes) -> None:
    """A header whose payload length is shorter or longer than the payload, with enough bytes in
    the source, is caught by the codec's own lengths (blosc2 chunk header, plane table)."""
    payload = len(frame) - HEADER_SIZE
    for claimed in (payload - 1, payload + 1):
        with pytest.raises(FrameError):
            decode(rewrite_header(frame, payload_length=claimed), LAYOUT, extra=b"\0" * 64)


@pytest.mark.parametrize("stored,frame", [(STORED, PLANES), (BLOSC2_STORED, FRAME)],
                         ids=COMPRESSED_IDS)
def test_a_forged_stored_frame_must_match_its_raw_length(stored: bytes, frame: bytes) -> None:
    with pytest.raises(FrameError, match="stored"):
        decode(rewrite_header(stored, payload_length=10), LAYOUT)
    with pytest.raises(FrameError, match="not smaller"):
        decode(rewrite_header(frame, payload_length=SRC.get_size()), LAYOUT, extra=b"\0" * 9000)


def test_a_chunk_claiming_more_bytes_than_the_destination_never_decodes() -> None:
    """python-blosc2 would trust the chunk's own size and write past a smaller destination."""
    body = bytearray(FRAME)
    nbytes_at = HEADER_SIZE + 4  # blosc2 chunk header: uncompressed size at offset 4
    claimed = int.from_bytes(body[nbytes_at:nbytes_at + 4], "little") + 4096
    body[nbytes_at:nbytes_at + 4] = claimed.to_bytes(4, "little")
    with pytest.raises(FrameError, match="blosc2 chunk header"):
        decode(bytes(body), LAYOUT)


def test_a_chunk_claiming_more_compressed_bytes_than_the_payload_never_decodes() -> None:
    body = bytearray(FRAME)
    cbytes_at = HEADER_SIZE + 12  # blosc2 chunk header: compressed size at offset 12
    claimed = int.from_bytes(body[cbytes_at:cbytes_at + 4], "little") + 64
    body[cbytes_at:cbytes_at + 4] = claimed.to_bytes(4, "little")
    with pytest.raises(FrameError, match="blosc2 chunk header"):
        decode(bytes(body) + b"\0" * 64, LAYOUT)


@pytest.mark.parametrize("fields", [
    {"codec": 2}, {"codec": 3}, {"shuffle": 3}, {"element_size": 0}, {"flags": 0x02},
    {"version": 2}, {"version": 3}, {"raw_length": 1 << 62}], ids=str)
def test_forged_header_fields_of_a_blosc2_frame_raise(fields: dict[str, int]) -> None:
    with pytest.raises(FrameError):
        decode(rewrite_header(FRAME, **fields), LAYOUT)


@pytest.mark.parametrize("fields", [
    {"codec": 1}, {"version": 1}, {"codec": 1, "version": 1}, {"shuffle": 0}, {"shuffle": 2},
    {"element_size": 3}, {"element_size": 16}, {"element_size": 4}, {"element_size": 1},
    {"flags": 0x02}, {"raw_length": 1 << 62}], ids=str)
def test_forged_header_fields_of_a_planes_frame_raise(fields: dict[str, int]) -> None:
    with pytest.raises(FrameError):
        decode(rewrite_header(PLANES, **fields), LAYOUT)


def test_element_size_disagreeing_with_the_chunk_raises() -> None:
    with pytest.raises(FrameError, match="element size"):
        decode(rewrite_header(FRAME, element_size=4), LAYOUT)


@pytest.mark.parametrize("frame", COMPRESSED, ids=COMPRESSED_IDS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_random_edits_anywhere_raise_or_decode_to_the_right_length(frame: bytes,
                                                                   data: st.DataObject) -> None:
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(1, 255)),
                               min_size=1, max_size=8))
    damaged = bytearray(frame)
    for pos, xor in edits:
        damaged[pos] ^= xor
    _decodes_exactly_or_raises(bytes(damaged))


def test_decoder_errors_fail_the_item_in_the_processor_not_the_host() -> None:
    from lmserde import create_serde_processor
    from lmserde.testing import wait_for_result
    from zstd_support import KEY, byte_object

    proc = create_serde_processor({"type": "zstd"})
    try:
        good = byte_object(PLANES)
        bad = byte_object(PLANES[:-5])
        outs = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in range(2)]
        task = proc.submit_deserialize([good, bad], outs, [KEY, KEY])
        assert wait_for_result(proc, task, serialize=False) is False
        assert same_bytes(outs[0], SRC)
    finally:
        proc.close()
