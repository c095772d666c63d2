"""The table encoders of bfloat16 divided by a general scale write the division's bytes.

They never divide: a 128-entry code table is built per scale (``make_bf16_div_plan`` in
csrc/fastcodec.c), looked up with AVX-512 VBMI (level 2) or by counting thresholds with AVX2
(level 1), and blocks holding values near the fp8 subnormal range go to the float32 path. Each
case checks every level this CPU runs against ``clamp(x.float() / scale)`` cast by torch, mostly
over all 65536 bfloat16 patterns (which puts a block of every kind in every run).
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
from fp8_support import FP8_DTYPES, all_16bit, divided_codes
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_fp8 import kernel

pytestmark = pytest.mark.skipif(kernel.simd_level() < kernel.AVX2,
                                reason="the CPU has no AVX2 (or the native codec is not built)")
#: The table-encoder levels this CPU runs (AVX2 always; AVX-512 VBMI where present).
LEVELS = [level for level in (kernel.AVX2, kernel.AVX512_VBMI) if level <= kernel.simd_level()]

KIND_BF16 = 1
FP8_KIND = {torch.float8_e4m3fn: 0, torch.float8_e5m2: 1}
MIN_VALUES = 8192  # DIV_TABLE_MIN_VALUES: shorter inputs never take the table path


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _encode_at(values: torch.Tensor, fp8: torch.dtype, scale: float, level: int) -> torch.Tensor:
    out = torch.full((values.numel(),), 0xA5, dtype=torch.uint8)
    kernel.native_module().encode_scaled(values.data_ptr(), KIND_BF16, out.data_ptr(), values.numel(),
                                         FP8_KIND[fp8], scale, level)
    return out


def _check(values: torch.Tensor, fp8: torch.dtype, scale: float) -> None:
    expected = divided_codes(values, fp8, scale)
    for level in LEVELS:
        assert torch.equal(_encode_at(values, fp8, scale, level), expected), (scale, level)


def _scales() -> list[float]:
    gen = torch.Generator().manual_seed(2026)
    exponents = torch.randint(-80, 101, (48,), generator=gen).tolist()
    significands = torch.randint(0, 1 << 23, (48,), generator=gen).tolist()
    scales = [_f32(((e + 127) << 23) | m) for e, m in zip(exponents, significands)]
    for e in (-126, -100, -7, 0, 3, 100, 126):  # significand all ones, just above 1, and 1.0
        scales += [_f32(((e + 127) << 23) | ((1 << 23) - 1)), _f32(((e + 127) << 23) | 1),
                   math.ldexp(1.0, e)]
    # a per-tensor scale of typical V (amax / 448), an LMCache-style one, tiny and huge scales
    # (the tiny ones make bfloat16 subnormals encode to nonzero codes: no table, float32 lanes instead)
    return [*scales, 6.5 / 448, 0.0123, 1 / 3, 1e-30, 1e-38, 1e-40, 1e-45, 3e38]


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("scale", _scales())
def test_every_bf16_pattern_encodes_like_the_division(fp8: torch.dtype, scale: float) -> None:
    _check(all_16bit(torch.bfloat16), fp8, scale)


@pytest.mark.parametrize("fp8", FP8_DTYPES)
def test_tails_misalignment_and_short_inputs(fp8: torch.dtype) -> None:
    values = all_16bit(torch.bfloat16)[: MIN_VALUES + 200].flip(0).contiguous()
    scale = 0.0371
    for n in (MIN_VALUES - 1, MIN_VALUES, MIN_VALUES + 1, MIN_VALUES + 63, MIN_VALUES + 65):
        _check(values[:n], fp8, scale)
    # odd addresses for source (shifted by one element) and destination
    storage = torch.empty(MIN_VALUES + 129, dtype=torch.bfloat16)
    storage[1:] = values[: MIN_VALUES + 128]
    src = storage[1:]
    expected = divided_codes(src, fp8, scale)
    for level in LEVELS:
        dst = torch.zeros(src.numel() + 1, dtype=torch.uint8)
        kernel.native_module().encode_scaled(src.data_ptr(), KIND_BF16, dst.data_ptr() + 1,
                                             src.numel(), FP8_KIND[fp8], scale, level)
        assert torch.equal(dst[1:], expected) and int(dst[0]) == 0, level


@settings(max_examples=40)
@given(
    fp8=st.sampled_from(FP8_DTYPES),
    exponent=st.integers(-60, 60),
    significand=st.integers(0, (1 << 23) - 1),
    spread=st.integers(0, 24),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_gaussian_kv_data(fp8: torch.dtype, exponent: int, significand: int, spread: int,
                                   seed: int) -> None:
    """KV-like data (normal values over a range of magnitudes, zeros, some specials)."""
    gen = torch.Generator().manual_seed(seed)
    scale = _f32(((exponent + 127) << 23) | significand)
    magnitudes = torch.exp2(torch.randint(-spread, spread + 1, (MIN_VALUES + 77,), generator=gen).float())
    values = (torch.randn(MIN_VALUES + 77, generator=gen) * magnitudes * scale * 64).to(torch.bfloat16)
    values[::97] = 0.0
    values[5::101] = float("inf")
    values[7::103] = float("nan")
    _check(values, fp8, scale)
