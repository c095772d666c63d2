"""The public arbitrary-scale codec (``quantize_into`` / ``dequantize_into`` with ``scale=``) and
``finite_absmax``: bytes identical to the torch expressions, on the native and the torch paths."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from fp8_support import FLOAT_DTYPES, FP8_DTYPES, NATIVE_BUILT, all_16bit, all_codes, bits, divided_codes
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_fp8 import dequantize_into, finite_absmax, kernel, quantize_into
from lmserde_fp8.formats import fp8_format

PATHS = ("native", "torch") if NATIVE_BUILT else ("torch",)

#: Scales that are not powers of two, from tiny (subnormal quotients/products) to huge.
GENERAL_SCALES = (0.1, 3.0, 0.0123, 1.0 / 448.0, 7.3e-3, 5.5, 1e-30, 3e-39, 1e20, 1e38)

SPECIALS = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), -float("nan"), 1e-45, 3e38]


@contextmanager
def _path(name: str) -> Iterator[None]:
    """Run the public functions on the native kernels or on the pure-torch codec."""
    before = kernel.fast_path_available()
    kernel.set_fast_path_enabled(name == "native")
    try:
        yield
    finally:
        kernel.set_fast_path_enabled(before)


def _f32(x: float) -> float:
    return float(torch.tensor([x], dtype=torch.float32)[0])


def _quantize(values: torch.Tensor, fp8: torch.dtype, scale: float, path: str) -> torch.Tensor:
    out = torch.empty(values.numel(), dtype=torch.uint8)
    with _path(path):
        quantize_into(values, out, fp8, scale=scale)
    return out


def _dequantize(codes: torch.Tensor, fp8: torch.dtype, dtype: torch.dtype, scale: float,
                path: str) -> torch.Tensor:
    out = torch.empty(codes.numel(), dtype=dtype)
    with _path(path):
        dequantize_into(codes, out, fp8, scale=scale)
    return out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16bit_pattern_with_general_scales(path: str, fp8: torch.dtype,
                                                 dtype: torch.dtype) -> None:
    values = all_16bit(dtype)
    for scale in GENERAL_SCALES:
        got = _quantize(values, fp8, scale, path)
        expected = divided_codes(values, fp8, scale)
        bad = got != expected
        assert not bool(bad.any()), (scale, values[bad][:4], got[bad][:4], expected[bad][:4])


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(st.one_of(st.floats(width=32), st.sampled_from(SPECIALS)), min_size=1,
                  max_size=140),
    scale=st.floats(min_value=2.0**-149, max_value=3.4028234663852886e38, allow_nan=False,
                    allow_infinity=False, width=32),
)
def test_property_quantize_with_any_scale(fp8: torch.dtype, dtype: torch.dtype,
                                          data: list[float], scale: float) -> None:
    """Values overflowing after the division, subnormal quotients, NaN/inf, ragged tails."""
    values = torch.tensor(data, dtype=torch.float32).to(dtype)
    expected = divided_codes(values, fp8, scale)
    for path in PATHS:
        assert torch.equal(_quantize(values, fp8, scale, path), expected), path


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@settings(max_examples=40, deadline=None)
@given(scale=st.floats(min_value=2.0**-149, max_value=3.4028234663852886e38, allow_nan=False,
                       allow_infinity=False, width=32))
def test_property_dequantize_with_any_scale(fp8: torch.dtype, dtype: torch.dtype,
                                            scale: float) -> None:
    """Every code (4 rounds plus a ragged tail, so the vector blocks and the scalar tail both run)
    times any float32 scale: products that are subnormal or overflow in the destination too."""
    codes = torch.cat([all_codes()] * 4 + [all_codes()[:45]])
    nan = fp8_format(fp8).is_nan(codes)
    expected = (codes.view(fp8).float() * torch.tensor([scale], dtype=torch.float32)).to(dtype)
    reference = _dequantize(codes, fp8, dtype, scale, "torch")
    for path in PATHS:
        got = _dequantize(codes, fp8, dtype, scale, path)
        assert torch.equal(bits(got)[~nan], bits(expected)[~nan]), path
        assert torch.equal(bits(got), bits(reference)), path  # NaN codes: the pinned patterns


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_dequantize_general_scales_every_code(path: str, fp8: torch.dtype,
                                              dtype: torch.dtype) -> None:
    codes = torch.cat([all_codes()] * 3)
    nan = fp8_format(fp8).is_nan(codes)
    for scale in GENERAL_SCALES:
        got = _dequantize(codes, fp8, dtype, scale, path)
        expected = (codes.view(fp8).float() * torch.tensor([scale], dtype=torch.float32)).to(dtype)
        assert torch.equal(bits(got)[~nan], bits(expected)[~nan]), scale


@pytest.mark.parametrize("path", PATHS)
def test_strided_tensors_and_realistic_kv(path: str) -> None:
    gen = torch.Generator().manual_seed(21)
    v = (torch.randn(64, 96, generator=gen) * 3).to(torch.bfloat16)
    scale = _f32(float(v.float().abs().max()) / 448.0)
    src = v.t()  # not contiguous
    codes = _quantize(src, torch.float8_e4m3fn, scale, path)
    assert torch.equal(codes, divided_codes(src.contiguous(), torch.float8_e4m3fn, scale))
    out = torch.empty(96, 64, dtype=torch.bfloat16).t()  # not contiguous
    with _path(path):
        dequantize_into(codes, out, torch.float8_e4m3fn, scale=scale)
    expected = (codes.view(torch.float8_e4m3fn).float() * scale).to(torch.bfloat16)
    assert torch.equal(bits(out.contiguous().reshape(-1)), bits(expected))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 1e300, 1e-50, True, "2"])
def test_bad_scales_are_rejected(bad: object) -> None:
    values = torch.ones(40, dtype=torch.bfloat16)
    codes = torch.empty(40, dtype=torch.uint8)
    for path in PATHS:
        with _path(path), pytest.raises(ValueError, match="scale"):
            quantize_into(values, codes, torch.float8_e4m3fn, scale=bad)  # type: ignore[arg-type]
        with _path(path), pytest.raises(ValueError, match="scale"):
            dequantize_into(codes, values, torch.float8_e4m3fn, scale=bad)  # type: ignore[arg-type]


def test_integer_scale_is_accepted() -> None:
    values = torch.linspace(-900, 900, 77).to(torch.bfloat16)
    for path in PATHS:
        assert torch.equal(_quantize(values, torch.float8_e4m3fn, 3, path),
                           divided_codes(values, torch.float8_e4m3fn, 3.0))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [*FLOAT_DTYPES, torch.float64])
def test_finite_absmax(path: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(8)
    values = torch.randn(333, generator=gen, dtype=torch.float64).clamp(-5, 5) * 20
    values[7] = float("inf")
    values[8] = float("-inf")
    values[9] = float("nan")
    values[200] = -123.0  # the largest finite magnitude
    t = values.to(dtype)
    with _path(path):
        got = finite_absmax(t)
        assert got == finite_absmax(t.flip(0))
        assert finite_absmax(t.view(9, 37).t()) == got  # strided
        for strided in (t[::2], t[1::2], t[150::3]):  # not one run of memory
            expected = float(strided.float().abs().nan_to_num(0.0, 0.0, 0.0).max())
            assert finite_absmax(strided) == expected
        assert finite_absmax(torch.empty(0, dtype=dtype)) == 0.0
        assert finite_absmax(torch.full((50,), float("nan"), dtype=dtype)) == 0.0
        assert finite_absmax(torch.full((50,), -0.0, dtype=dtype)) == 0.0
    mags = t.float().abs()
    assert got == float(torch.where(torch.isfinite(mags), mags, 0.0).max())
    assert got == 123.0


def test_finite_absmax_rejects_non_float() -> None:
    with pytest.raises(ValueError, match="floating-point"):
        finite_absmax(torch.ones(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="floating-point"):
        finite_absmax([1.0])  # type: ignore[arg-type]
