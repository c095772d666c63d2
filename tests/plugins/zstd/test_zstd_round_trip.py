"""Bit-exact round trips with both codecs: every dtype, NaN payloads, -0.0, odd sizes, multi-group
objects."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde_zstd import HEADER_SIZE, FrameHeader, Shuffle, ZstdSerializer
from lmserde_zstd.frame import Codec
from zstd_support import byte_object, decode, encode, gaussian, same_bytes

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.bool, torch.complex64, torch.complex128]
CODEC_SHUFFLES = [("planes", "byte"), ("planes", "none"), ("blosc2", "byte"), ("blosc2", "bit"),
                  ("blosc2", "none")]


def _header(frame: bytes) -> FrameHeader:
    return FrameHeader.parse(frame, expected_raw_length=FrameHeader.parse(
        frame, expected_raw_length=_raw_length(frame), available=len(frame)).raw_length,
        available=len(frame))


def _raw_length(frame: bytes) -> int:
    return int.from_bytes(frame[16:24], "little")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("codec,shuffle", CODEC_SHUFFLES, ids=str)
def test_every_dtype_round_trips_bit_exact(dtype: torch.dtype, codec: str, shuffle: str) -> None:
    gen = torch.Generator().manual_seed(3)
    values = torch.randn(3, 257, generator=gen) * 4
    if dtype.is_complex:
        tensor = torch.complex(values, values.flip(1)).to(dtype)
    elif dtype.is_floating_point:
        tensor = values.to(dtype)
    elif dtype is torch.bool:
        tensor = values > 0
    else:
        tensor = values.round().to(dtype)
    src = TensorMemoryObj.from_tensor(tensor)
    frame = encode(src, ZstdSerializer(codec=codec, shuffle=shuffle, min_saving=0.0))
    header = _header(frame)
    if codec == "blosc2":
        assert header.codec is Codec.BLOSC2_ZSTD and frame[4] == 1
        assert header.element_size == tensor.element_size()
        assert header.shuffle is Shuffle(shuffle)
    else:
        assert header.codec is Codec.PLANES_ZSTD and frame[4] == 2
        # complex128 (16 bytes) splits as two 8-byte halves; shuffle none codes the plain bytes
        expected = min(tensor.element_size(), 8) if shuffle == "byte" else 1
        assert header.element_size == expected
        assert header.shuffle is Shuffle.BYTE
    assert same_bytes(decode(frame, src.get_layout()), src)


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
@pytest.mark.parametrize("dtype,int_dtype", [(torch.bfloat16, torch.int16),
                                             (torch.float16, torch.int16),
                                             (torch.float32, torch.int32),
                                             (torch.float64, torch.int64)], ids=str)
def test_nan_payloads_infinities_and_negative_zero_survive(dtype: torch.dtype,
                                                           int_dtype: torch.dtype,
                                                           codec: str) -> None:
    bits = torch.randn(4096, generator=torch.Generator().manual_seed(1)).to(dtype).view(int_dtype)
    nbits = dtype.itemsize * 8
    sign = -(1 << (nbits - 1))
    exp_mask = {16: 0x7F80 if dtype is torch.bfloat16 else 0x7C00, 32: 0x7F800000,
                64: 0x7FF0000000000000}[nbits]
    special = [sign,                  # -0.0
               exp_mask | 1,          # signalling-style NaN payload
               exp_mask | 0x5,        # another payload
               sign | exp_mask | 0x3,  # negative NaN with payload
               exp_mask, sign | exp_mask, 0, 1]  # +-inf, +0, smallest subnormal
    bits[::97][: len(special)] = torch.tensor(special, dtype=torch.int64).to(int_dtype)
    src = TensorMemoryObj.from_tensor(bits.view(dtype))
    frame = encode(src, ZstdSerializer(codec=codec))
    assert not _header(frame).stored, "normal KV-like data must take the compressed path"
    out = decode(frame, src.get_layout())
    assert same_bytes(out, src)
    assert torch.equal(out.tensor.view(int_dtype), bits)


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
def test_multi_group_object_with_padding_round_trips(codec: str) -> None:
    layout = MemoryLayoutDesc([[3, 5], [0], [7, 33]], [torch.bfloat16, torch.float16, torch.float32])
    src = TensorMemoryObj.allocate(layout)
    src.raw_data.copy_(torch.randint(0, 256, (src.raw_data.numel(),), dtype=torch.uint8))
    src.raw_data[::3] = 0  # compressible enough to take the compressed path
    frame = encode(src, ZstdSerializer(codec=codec, min_saving=0.0))
    assert not _header(frame).stored
    assert _header(frame).element_size == 1  # mixed element sizes: no element-wise shuffle
    assert same_bytes(decode(frame, layout), src)


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
def test_empty_object_round_trips(codec: str) -> None:
    layout = MemoryLayoutDesc([[0]], [torch.bfloat16])
    src = TensorMemoryObj.allocate(layout)
    frame = encode(src, ZstdSerializer(codec=codec))
    assert len(frame) == HEADER_SIZE
    assert _header(frame).stored
    decode(frame, layout)


@settings(max_examples=80, deadline=None)
@given(data=st.binary(min_size=0, max_size=6000), level=st.integers(1, 9),
       codec_shuffle=st.sampled_from(CODEC_SHUFFLES),
       min_saving=st.sampled_from([0.0, 1 / 64, 0.5]), extra=st.binary(max_size=40))
def test_any_bytes_round_trip(data: bytes, level: int, codec_shuffle: tuple[str, str],
                              min_saving: float, extra: bytes) -> None:
    src = byte_object(data)
    codec, shuffle = codec_shuffle
    frame = encode(src, ZstdSerializer(codec=codec, level=level, shuffle=shuffle,
                                       min_saving=min_saving))
    assert len(frame) <= HEADER_SIZE + len(data)
    out = decode(frame, src.get_layout(), extra=extra)  # an over-allocated source is fine
    assert bytes(out.byte_array) == data


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), rows=st.integers(1, 64), cols=st.integers(1, 300),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.float64,
                              torch.float8_e4m3fn, torch.float8_e5m2]),
       scale=st.sampled_from([1e-3, 1.0, 300.0]), codec=st.sampled_from(["planes", "blosc2"]),
       level=st.sampled_from([1, 3]))
def test_float_tensors_round_trip(seed: int, rows: int, cols: int, dtype: torch.dtype,
                                  scale: float, codec: str, level: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    src = TensorMemoryObj.from_tensor((torch.randn(rows, cols, generator=gen) * scale).to(dtype))
    out = decode(encode(src, ZstdSerializer(codec=codec, level=level)), src.get_layout())
    assert same_bytes(out, src)


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=700),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.float64,
                              torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
                              torch.complex128]),
       codec=st.sampled_from(["planes", "blosc2"]))
def test_arbitrary_bit_patterns_round_trip(words: list[int], dtype: torch.dtype,
                                           codec: str) -> None:
    """Any bit pattern (NaN payloads of both signs, -0.0, infinities, subnormals) survives."""
    raw = b"".join(w.to_bytes(8, "little") for w in words)
    raw += raw[:8] * (len(words) % 2)  # complex128 needs 16-byte elements
    tensor = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    src = TensorMemoryObj.from_tensor(tensor.clone())
    out = decode(encode(src, ZstdSerializer(codec=codec, min_saving=0.0)), src.get_layout())
    assert same_bytes(out, src)


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
def test_incompressible_input_is_stored_raw_with_the_flag(codec: str) -> None:
    data = os.urandom(1 << 16)  # encrypted-like
    frame = encode(byte_object(data), ZstdSerializer(codec=codec))
    header = _header(frame)
    assert header.stored and header.payload_length == len(data)
    assert len(frame) == HEADER_SIZE + len(data)
    assert frame[HEADER_SIZE:] == data


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
def test_min_saving_decides_between_compressed_and_raw(codec: str) -> None:
    src = gaussian([64, 1024], torch.bfloat16)  # compresses about 1.3-1.45x
    compressed = encode(src, ZstdSerializer(codec=codec, min_saving=1 / 64))
    assert not _header(compressed).stored and len(compressed) < 0.85 * src.get_size()
    demanding = encode(src, ZstdSerializer(codec=codec, min_saving=0.5))  # would need 2x
    assert _header(demanding).stored and len(demanding) == HEADER_SIZE + src.get_size()
    for frame in (compressed, demanding):
        assert same_bytes(decode(frame, src.get_layout()), src)


@pytest.mark.parametrize("codec", ["planes", "blosc2"])
def test_byte_shuffle_beats_no_shuffle_on_bf16(codec: str) -> None:
    src = gaussian([64, 1024], torch.bfloat16)
    shuffled = encode(src, ZstdSerializer(codec=codec, shuffle="byte"))
    plain = encode(src, ZstdSerializer(codec=codec, shuffle="none"))
    assert len(shuffled) < len(plain)
