"""The scaled modes: frame format, scales, header checks, and where they beat ``scaling: none``."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from fp8_support import AVAILABLE_BACKENDS
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde_fp8 import Fp8QuantizationDeserializer, Fp8QuantizationSerializer, ScalingMode
from lmserde_fp8.codec import encode_pow2
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import FP8_FORMATS, fp8_format
from lmserde_fp8.frame import HEADER_SIZE, MAGIC, FrameHeader
from lmserde_fp8.scaling import (
    exponent_cap,
    exponent_for,
    exponents_to_scales,
    group_rows,
    scale_exponents,
)

KEY = ObjectKey(b"\x02" * 32, "model", 0x01010101)
MODES = ("none", "per_tensor", "per_token")


def _obj(values: list[torch.Tensor]) -> TensorMemoryObj:
    layout = MemoryLayoutDesc([v.shape for v in values], [v.dtype for v in values])
    obj = TensorMemoryObj.allocate(layout)
    offsets = layout.group_offsets()
    for i, v in enumerate(values):
        obj.raw_data[offsets[i] : offsets[i + 1]].copy_(v.reshape(-1).view(torch.uint8))
    return obj


def _serialize(obj: TensorMemoryObj, mode: str, fp8: torch.dtype = torch.float8_e4m3fn,
               backend: str = "auto") -> TensorMemoryObj:
    ser = Fp8QuantizationSerializer(fp8, mode, backend=backend)  # type: ignore[arg-type]
    size = ser.estimate_serialized_size(obj.get_layout())
    blob = TensorMemoryObj.from_tensor(torch.zeros(size, dtype=torch.uint8))
    assert ser.serialize(obj, blob, KEY) == size
    return blob


def _deserialize(blob: TensorMemoryObj, layout: MemoryLayoutDesc, mode: str,
                 fp8: torch.dtype = torch.float8_e4m3fn, backend: str = "auto") -> TensorMemoryObj:
    out = TensorMemoryObj.allocate(layout, zero=True)
    Fp8QuantizationDeserializer(fp8, mode, backend=backend).deserialize(  # type: ignore[arg-type]
        blob, out, KEY)
    return out


def _values(obj: TensorMemoryObj, g: int) -> torch.Tensor:
    return obj.group_bytes(g).clone().view(obj.get_layout().dtypes[g]).float()


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(a))


# -- the frame -----------------------------------------------------------------------------------


def test_golden_per_token_frame() -> None:
    x = torch.tensor([[1.0, -2.0, 0.5], [1000.0, 0.0, -3000.0]], dtype=torch.bfloat16)
    blob = _serialize(_obj([x]), "per_token")
    data = bytes(blob.raw_data.tolist())
    # row 0: amax 2 -> k = -7 (2 * 2^7 = 256 <= 448); row 1: amax 3000 -> k = 3 (375 <= 448)
    header = MAGIC + bytes([1, 2, 1, 0]) + struct.pack("<QI", 6, 2)
    exponents = bytes([(-7) & 0xFF, 3])
    row0 = (x[0].float() * 2.0**7).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    row1 = (x[1].float() / 8.0).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    assert data == header + exponents + bytes(row0 + row1)
    assert len(data) == HEADER_SIZE + 2 + 6
    out = _deserialize(blob, MemoryLayoutDesc([[2, 3]], [torch.bfloat16]), "per_token")
    assert torch.equal(_values(out, 0).view(2, 3), torch.tensor([[1.0, -2.0, 0.5],
                                                                 [1024.0, 0.0, -3072.0]]))


@pytest.mark.parametrize("mode", ["per_tensor", "per_token"])
def test_estimate_is_exact(mode: str) -> None:
    ser = Fp8QuantizationSerializer(scaling=mode)
    layouts = [
        MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16]),
        MemoryLayoutDesc([[3], [0], [4, 8], []], [torch.float16, torch.bfloat16, torch.float32,
                                                  torch.float32]),
        MemoryLayoutDesc([[0, 5]], [torch.float16]),
    ]
    for layout in layouts:
        scales = 1 if mode == "per_tensor" else sum(group_rows(s) for s in layout.shapes)
        assert ser.estimate_serialized_size(layout) == HEADER_SIZE + scales + layout.numel
        src = _obj([torch.randn(s).to(d) for s, d in zip(layout.shapes, layout.dtypes)])
        assert _serialize(src, mode).get_size() == HEADER_SIZE + scales + layout.numel


def test_group_rows() -> None:
    assert group_rows([2, 4, 16, 64]) == 2 * 4 * 16
    assert group_rows([7]) == 1
    assert group_rows([]) == 1
    assert group_rows([0]) == 0
    assert group_rows([4, 0]) == 0


def test_header_round_trip_and_rejections() -> None:
    fmt = fp8_format(torch.float8_e5m2)
    header = FrameHeader(ScalingMode.PER_TOKEN, fmt, 123, 7)
    packed = header.pack()
    assert len(packed) == HEADER_SIZE and FrameHeader.parse(packed) == header
    assert header.frame_size == HEADER_SIZE + 7 + 123
    cases = {
        "not a scaled fp8 frame": b"XXXX" + packed[4:],
        "unsupported scaled frame version 2": packed[:4] + b"\x02" + packed[5:],
        "unknown scaling mode id 9": packed[:5] + b"\x09" + packed[6:],
        "unknown fp8 dtype id 7": packed[:6] + b"\x07" + packed[7:],
        "reserved header byte": packed[:7] + b"\x01" + packed[8:],
        "source buffer too small": packed[:19],
    }
    for message, data in cases.items():
        with pytest.raises(ValueError, match=message):
            FrameHeader.parse(data)


@pytest.mark.parametrize("backend", AVAILABLE_BACKENDS)
def test_deserializer_checks_the_frame_against_the_layout(backend: str) -> None:
    layout = MemoryLayoutDesc([[4, 8]], [torch.bfloat16])
    blob = _serialize(_obj([torch.randn(4, 8).to(torch.bfloat16)]), "per_token")
    with pytest.raises(ValueError, match="frame holds 32 elements, destination layout has 24"):
        _deserialize(blob, MemoryLayoutDesc([[3, 8]], [torch.bfloat16]), "per_token")
    with pytest.raises(ValueError, match="frame holds 4 scales"):
        _deserialize(blob, MemoryLayoutDesc([[2, 16]], [torch.bfloat16]), "per_token")
    for mode in ("per_token", "per_tensor"):
        bad = _serialize(_obj([torch.randn(4, 8).to(torch.bfloat16)]), mode).raw_data.clone()
        bad[HEADER_SIZE] = 127  # exponent out of range
        with pytest.raises(ValueError, match="scale exponent outside"):
            _deserialize(TensorMemoryObj.from_tensor(bad), layout, mode, backend=backend)
    empty = _serialize(_obj([torch.zeros(0, 8, dtype=torch.bfloat16)]), "per_tensor").raw_data.clone()
    empty[HEADER_SIZE] = -127 & 0xFF
    with pytest.raises(ValueError, match="scale exponent outside"):
        _deserialize(TensorMemoryObj.from_tensor(empty), MemoryLayoutDesc([[0, 8]], [torch.bfloat16]),
                     "per_tensor", backend=backend)
    with pytest.raises(ValueError, match="source buffer too small"):
        _deserialize(TensorMemoryObj.from_tensor(blob.raw_data[:-1].clone()), layout, "per_token")
    with pytest.raises(ValueError, match="not a scaled fp8 frame"):
        _deserialize(_serialize(_obj([torch.ones(4, 8, dtype=torch.bfloat16)]), "none"), layout,
                     "per_tensor")


def test_scaled_reader_follows_the_header() -> None:
    """A scaled reader reads either scaled mode and either fp8 dtype: the header says which."""
    x = torch.randn(3, 40).to(torch.float16) * 50
    layout = MemoryLayoutDesc([[3, 40]], [torch.float16])
    blob = _serialize(_obj([x]), "per_token", torch.float8_e5m2)
    expected = _deserialize(blob, layout, "per_token", torch.float8_e5m2)
    other = _deserialize(blob, layout, "per_tensor", torch.float8_e4m3fn)
    assert torch.equal(other.raw_data, expected.raw_data)


# -- scales --------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(amax=st.floats(min_value=2.0**-120, max_value=2.0**127, allow_nan=False, width=32),
       fp8=st.sampled_from(sorted(FP8_FORMATS, key=str)))
def test_scale_maps_amax_into_the_upper_binade(amax: float, fp8: torch.dtype) -> None:
    fmt = fp8_format(fp8)
    (k,) = scale_exponents(torch.tensor([amax]), fmt, exponent_cap(fmt, [torch.float32])).tolist()
    assert k == exponent_for(float(torch.tensor(amax, dtype=torch.float32)), fmt, 126)
    scaled = amax / math.ldexp(1.0, k)
    assert scaled <= fmt.max_finite
    if k > -126:  # not limited by the smallest scale
        assert scaled > fmt.max_finite / 2


def test_scales_of_zero_and_caps() -> None:
    e4m3 = fp8_format(torch.float8_e4m3fn)
    e5m2 = fp8_format(torch.float8_e5m2)
    assert scale_exponents(torch.tensor([0.0]), e4m3, 126).tolist() == [0]
    # float16 sources: 448 * 2^k must stay finite in float16 (<= 65504), so k <= 7
    assert exponent_cap(e4m3, [torch.float16]) == 7 and exponent_cap(e5m2, [torch.float16]) == 0
    assert exponent_cap(e4m3, [torch.float32]) == 119 and exponent_cap(e5m2, [torch.bfloat16]) == 112
    assert exponent_cap(e4m3, [torch.bfloat16, torch.float16]) == 7
    assert scale_exponents(torch.tensor([65504.0]), e4m3, 7).tolist() == [7]
    assert scale_exponents(torch.tensor([3.0e38]), e4m3, 119).tolist() == [119]
    assert exponents_to_scales(torch.tensor([-3, 0, 5], dtype=torch.int8)).tolist() == [0.125, 1, 32]


@pytest.mark.parametrize("backend", AVAILABLE_BACKENDS)
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_every_path_computes_the_same_exponents(backend: str, fp8: torch.dtype) -> None:
    """Exponents from the torch rule, the scalar rule and the native kernels agree."""
    gen = torch.Generator().manual_seed(8)
    bits32 = torch.randint(0, 0x7F800000, (4000,), generator=gen, dtype=torch.int32)
    special = torch.tensor([0.0, 1e-45, 1e-40, 1.1754942e-38, 2.0**-126, 0.875 * 2**9, 448.0, 448.5,
                            449.0, 57344.0, 57345.0, 3.4e38, float("inf"), float("nan")])
    values = torch.cat([bits32.view(torch.float32), special, -special])
    fmt = fp8_format(fp8)
    for cap in (126, 7, 0):
        exponents = torch.zeros(values.numel(), dtype=torch.int8)
        codes = torch.empty(values.numel(), dtype=torch.uint8)
        encode_pow2(FloatBuffer.of_tensor(values), codes, fmt, exponents, cap=cap, backend=backend)
        mags = torch.where(torch.isfinite(values), values.abs(), 0.0)
        assert torch.equal(exponents, scale_exponents(mags, fmt, cap))
        scalar = [exponent_for(float(m), fmt, cap) for m in mags[::37].tolist()]
        assert exponents[::37].tolist() == scalar


def test_inf_nan_and_zeros_in_scaled_modes() -> None:
    x = torch.tensor([[float("inf"), 1.0, float("nan"), -2.0], [0.0, 0.0, 0.0, 0.0]])
    for mode in ("per_tensor", "per_token"):
        out = _values(_deserialize(_serialize(_obj([x]), mode), MemoryLayoutDesc([[2, 4]],
                                   [torch.float32]), mode), 0).view(2, 4)
        # amax ignores inf/NaN (2.0 -> k = -7); inf saturates to 448 * 2^-7; NaN stays NaN
        assert out[0, 0].item() == 448.0 / 128 and math.isnan(out[0, 2].item())
        assert out[0, 1].item() == 1.0 and out[0, 3].item() == -2.0
        assert torch.equal(out[1], torch.zeros(4))


# -- backends ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_torch_and_native_codecs_write_identical_frames(mode: str, fp8: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(21)
    groups = [
        torch.randn(2, 4, 16, 72, generator=gen).to(torch.bfloat16) * 300,
        torch.randn(3, generator=gen).to(torch.float16),
        torch.randn(5, 33, generator=gen) * 1e-3,
    ]
    groups[0][0, 0, 0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 1e30])
    src = _obj(groups)
    blobs = [_serialize(src, mode, fp8, backend) for backend in AVAILABLE_BACKENDS]
    outs = [_deserialize(blobs[0], src.get_layout(), mode, fp8, backend)
            for backend in AVAILABLE_BACKENDS]
    for blob, out in zip(blobs[1:], outs[1:]):
        assert torch.equal(blob.raw_data, blobs[0].raw_data)
        assert torch.equal(out.raw_data, outs[0].raw_data)


# -- where scaling beats none --------------------------------------------------------------------


def _kv_with_large_channels(seed: int) -> torch.Tensor:
    """K of shape [layers, tokens, hidden]: small values, plus bias channels far beyond +-448."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(4, 64, 256, generator=gen) * 0.05
    k[..., 7] += 1500.0  # Qwen-style key bias channels
    k[..., 131] -= 900.0
    return k.to(torch.bfloat16)


@pytest.mark.parametrize("mode", ["per_tensor", "per_token"])
def test_scaling_beats_none_on_large_channels(mode: str) -> None:
    x = _kv_with_large_channels(0)
    layout = MemoryLayoutDesc([x.shape], [x.dtype])
    src = _obj([x])
    err = {m: _rel_err(_values(src, 0), _values(_deserialize(_serialize(src, m), layout, m), 0))
           for m in ("none", mode)}
    assert err["none"] > 0.5  # the bias channels saturate at 448
    assert err[mode] < err["none"] / 10


@pytest.mark.parametrize("mode", ["per_tensor", "per_token"])
def test_scaling_beats_none_on_tiny_values(mode: str) -> None:
    x = (torch.randn(8, 128) * 2e-4).to(torch.float16)  # mostly below e4m3fn's 2^-9 subnormal step
    layout = MemoryLayoutDesc([x.shape], [x.dtype])
    src = _obj([x])
    none = _rel_err(_values(src, 0), _values(_deserialize(_serialize(src, "none"), layout, "none"), 0))
    scaled = _rel_err(_values(src, 0), _values(_deserialize(_serialize(src, mode), layout, mode), 0))
    assert none > 0.5 and scaled < 0.05


def test_per_token_beats_per_tensor_when_token_magnitudes_differ() -> None:
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(256, 128, generator=gen) * torch.exp2(torch.randint(-12, 12, (256, 1),
                                                                         generator=gen).float())
    layout = MemoryLayoutDesc([x.shape], [x.dtype])
    src = _obj([x])
    errs = {}
    for mode in ("per_tensor", "per_token"):
        out = _values(_deserialize(_serialize(src, mode), layout, mode), 0).view(256, 128)
        # mean relative error per token: small tokens must not drown
        errs[mode] = float(((out - x).norm(dim=1) / x.norm(dim=1)).mean())
    assert errs["per_token"] < errs["per_tensor"] / 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("src_dtype", "dst_dtype"), [(torch.float32, torch.bfloat16),
                                                      (torch.bfloat16, torch.float16),
                                                      (torch.float16, torch.float32)])
def test_load_into_another_float_dtype(mode: str, src_dtype: torch.dtype, dst_dtype: torch.dtype) -> None:
    """The stored codes do not depend on the destination dtype: any float layout of the same shape
    loads them (exact fp8 values times the scale, rounded to the destination)."""
    x = torch.randn(6, 40).to(src_dtype) * 10
    blob = _serialize(_obj([x]), mode)
    same = _values(_deserialize(blob, MemoryLayoutDesc([[6, 40]], [src_dtype]), mode), 0)
    other = _values(_deserialize(blob, MemoryLayoutDesc([[6, 40]], [dst_dtype]), mode), 0)
    assert torch.equal(other, same.to(dst_dtype).float())
