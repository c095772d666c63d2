"""The EncodedKV v1 header codec: golden bytes written by hand from the spec, round trips, errors."""

from __future__ import annotations

import struct
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_asym_k16_v8.codec import AsymCodec
from lmserde_asym_k16_v8.dtype_ids import DTYPE_TO_ID, dtype_from_id, dtype_to_id
from lmserde_asym_k16_v8.encoded_kv import (
    MAGIC,
    PROVENANCE_KEYS,
    CorruptEncodedKVError,
    EncodedKVHeader,
    locate_payload,
)
from lmserde_asym_k16_v8.scale_scope import ScaleScope

# The header of LMCache 0.5.6's `asym_k16_v8` blob for bf16 K and V of shape [2, 3, 4, 8], no
# provenance (upstream-contract.md G.4), written out field by field. The CRC is checked separately.
GOLDEN_HEADER_WITHOUT_CRC = bytes.fromhex(
    "4c4d434b56010001"  # magic "LMCKV" 01 00 01
    "0100"  # version 1
    "0000"  # scale_scope PER_TENSOR
    "0300"  # k dtype id 3 (bfloat16)
    "0700"  # v dtype id 7 (float8_e4m3fn)
    "0400"  # scale dtype id 4 (float32)
    "0000"  # reserved
    + "ffffffffffffffff" * 6  # layer_id, chunk_id, chunk_size, page_size, kv_head_count, head_dim
    + "0000000000000000"  # scale_shape_n = 0
    "8001000000000000"  # k_payload_len 384
    "c000000000000000"  # v_payload_len 192
    "0400000000000000"  # scale_payload_len 4
    "0600"  # hash_count 6
    "0800" + b"model_id".hex() + "0000"
    "1300" + b"model_revision_hash".hex() + "0000"
    "0e00" + b"tokenizer_hash".hex() + "0000"
    "1000" + b"rope_config_hash".hex() + "0000"
    "1100" + b"attention_backend".hex() + "0000"
    "0900" + b"kv_layout".hex() + "0000"
)


def _golden_header(crc: int = 0) -> EncodedKVHeader:
    return EncodedKVHeader(
        k_dtype=torch.bfloat16,
        v_dtype=torch.float8_e4m3fn,
        scale_dtype=torch.float32,
        k_payload_len=384,
        v_payload_len=192,
        scale_payload_len=4,
        crc32=crc,
    )


def test_golden_header_bytes() -> None:
    packed = _golden_header(0x12345678).pack()
    assert len(GOLDEN_HEADER_WITHOUT_CRC) == 209
    assert len(packed) == 213 == _golden_header().header_len
    assert packed[:-4] == GOLDEN_HEADER_WITHOUT_CRC
    assert packed[-4:] == bytes.fromhex("78563412")
    assert _golden_header().blob_len == 793


def test_golden_header_parses() -> None:
    header = EncodedKVHeader.unpack(GOLDEN_HEADER_WITHOUT_CRC + bytes.fromhex("efbeadde"))
    assert header == _golden_header(0xDEADBEEF)
    assert header.provenance == tuple((k, "") for k in PROVENANCE_KEYS)


def test_dtype_ids_match_upstream_numbering() -> None:
    assert dtype_to_id(None) == 0
    assert dtype_to_id(torch.half) == 2
    assert [dtype_to_id(d) for d in (torch.bfloat16, torch.float32, torch.float64)] == [3, 4, 5]
    assert [dtype_to_id(d) for d in (torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2)] == [
        6,
        7,
        8,
    ]
    assert all(dtype_from_id(i) is d for d, i in DTYPE_TO_ID.items())
    with pytest.raises(ValueError, match="no EncodedKV dtype id"):
        dtype_to_id(torch.int32)
    with pytest.raises(ValueError, match="unknown EncodedKV dtype id 1"):
        dtype_from_id(1)


_texts = st.text(max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    scope=st.sampled_from(list(ScaleScope)),
    dtypes=st.tuples(*[st.sampled_from(list(DTYPE_TO_ID))] * 3),
    lengths=st.tuples(*[st.integers(0, 2**40)] * 3),
    ints=st.tuples(*[st.integers(-(2**63), 2**63 - 1)] * 6),
    scale_shape=st.lists(st.integers(0, 2**31), max_size=8),
    provenance=st.lists(st.tuples(_texts, _texts), max_size=8),
    crc=st.integers(0, 2**32 - 1),
)
def test_header_round_trip(scope, dtypes, lengths, ints, scale_shape, provenance, crc) -> None:
    header = EncodedKVHeader(
        k_dtype=dtypes[0],
        v_dtype=dtypes[1],
        scale_dtype=dtypes[2],
        k_payload_len=lengths[0],
        v_payload_len=lengths[1],
        scale_payload_len=lengths[2],
        scale_scope=scope,
        crc32=crc,
        layer_id=ints[0],
        chunk_id=ints[1],
        chunk_size=ints[2],
        page_size=ints[3],
        kv_head_count=ints[4],
        head_dim=ints[5],
        scale_shape=tuple(scale_shape),
        provenance=tuple(provenance),
    )
    packed = header.pack()
    assert len(packed) == header.header_len
    assert EncodedKVHeader.unpack(packed + b"\x00trailing") == header
    # any shorter prefix is reported as truncated, never misread
    for cut in {0, 7, 8, 75, len(packed) // 2, len(packed) - 1}:
        with pytest.raises(CorruptEncodedKVError):
            EncodedKVHeader.unpack(packed[:cut])


def _patched(offset: int, fmt: str, value: int) -> bytes:
    raw = bytearray(_golden_header().pack())
    struct.pack_into(fmt, raw, offset, value)
    return bytes(raw)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"LMCKW\x01\x00\x01" + bytes(205), "bad magic"),
        (b"", "bad magic"),
        (MAGIC, "truncated header"),
        (_patched(8, "<H", 2), "unsupported codec version 2"),
        (_patched(8, "<H", 0), "unsupported codec version 0"),
        (_patched(10, "<H", 9), "unknown scale_scope id 9"),
        (_patched(12, "<H", 1), "unknown EncodedKV dtype id 1"),
        (_patched(14, "<H", 99), "unknown EncodedKV dtype id 99"),
        (_patched(68, "<q", 9), "scale_shape_n 9"),
        (_patched(68, "<q", -1), "scale_shape_n -1"),
        (_patched(76, "<q", -5), "negative payload length"),
    ],
)
def test_bad_headers_raise(blob: bytes, message: str) -> None:
    with pytest.raises(CorruptEncodedKVError, match=message):
        EncodedKVHeader.unpack(blob)


def test_corrupt_error_is_value_error() -> None:
    assert issubclass(CorruptEncodedKVError, ValueError)


def test_invalid_utf8_provenance_rejected() -> None:
    raw = bytearray(_golden_header().pack())
    raw[104] = 0xFF  # first byte of "model_id"
    with pytest.raises(CorruptEncodedKVError, match="UTF-8"):
        EncodedKVHeader.unpack(bytes(raw))


def test_pack_rejects_unrepresentable_fields() -> None:
    with pytest.raises(ValueError, match="scale_shape has 9 dims"):
        EncodedKVHeader(None, None, None, 0, 0, 0, scale_shape=(1,) * 9).pack()
    with pytest.raises(ValueError, match="v_payload_len must be >= 0"):
        EncodedKVHeader(None, None, None, 0, -1, 0).pack()
    with pytest.raises(ValueError, match="crc32 must fit"):
        EncodedKVHeader(None, None, None, 0, 0, 0, crc32=2**32).pack()
    with pytest.raises(ValueError, match="exceeds"):
        EncodedKVHeader(None, None, None, 0, 0, 0, provenance=(("k", "x" * 70000),)).pack()


def test_locate_payload_offsets_and_truncation() -> None:
    header = _golden_header()
    blob = header.pack() + bytes(580)
    loc = locate_payload(blob)
    assert (loc.k_offset, loc.v_offset, loc.scale_offset, loc.end) == (213, 597, 789, 793)
    assert locate_payload(blob + b"extra").end == 793  # trailing bytes are ignored
    for cut in (214, 600, 792):
        with pytest.raises(CorruptEncodedKVError, match="truncated blob"):
            locate_payload(blob[:cut])


def test_golden_blob_byte_for_byte() -> None:
    """The whole 793-byte blob: header, CRC of the payload, K bytes, LMCache's V codes, scale."""
    k = (torch.arange(192, dtype=torch.float32) * 0.37 - 30.0).to(torch.bfloat16).reshape(2, 3, 4, 8)
    # |V| peaks at exactly 3.5, so the scale is 3.5 / 448 = 2**-7
    v = torch.linspace(-3.5, 2.0, 192).to(torch.bfloat16).reshape(2, 3, 4, 8)
    out = torch.zeros(2000, dtype=torch.uint8)
    n = AsymCodec().encode_into(out, k, v)
    codes = torch.clamp(v.reshape(-1).float() / 2.0**-7, -448.0, 448.0).to(torch.float8_e4m3fn)
    payload = (
        bytes(k.reshape(-1).view(torch.uint8).numpy())
        + bytes(codes.view(torch.uint8).numpy())
        + struct.pack("<f", 2.0**-7)
    )
    assert len(payload) == 580
    expected = GOLDEN_HEADER_WITHOUT_CRC + struct.pack("<I", zlib.crc32(payload)) + payload
    assert n == 793
    assert bytes(out[:n].numpy()) == expected
