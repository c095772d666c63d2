"""Every codec backend writes torch's cast, byte for byte, and the backends agree on every input.

Exhaustive over the 65536 bfloat16/float16 patterns and the 256 fp8 codes; property-based and
sampled for float32 and for the scaled forms.
"""

from __future__ import annotations

import math

import pytest
import torch
from fp8_support import (
    AVAILABLE_BACKENDS,
    BACKENDS,
    FLOAT_DTYPES,
    FP8_DTYPES,
    NATIVE_BUILT,
    TORCH_SATURATES,
    all_16bit,
    all_codes,
    bits,
    divided_codes,
    torch_codes,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_fp8.codec import decode, encode, row_absmax
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import fp8_format
from lmserde_fp8.torch_codec import nan_patterns

FP32_SPECIALS = [
    0.0, -0.0, float("inf"), float("-inf"), float("nan"), -float("nan"),
    448.0, 449.0, 463.99, 464.0, 464.01, 479.0, 480.0, 1e30, 3.4028235e38,
    57344.0, 59000.0, 61439.99, 61440.0, 65504.0, 65536.0, 1e6,
    2.0**-6, 2.0**-6 * (1 - 2**-10), 2.0**-7, 2.0**-9, 2.0**-10, 2.0**-10 * 1.0001, 2.0**-11,
    2.0**-14, 2.0**-15, 2.0**-16, 2.0**-17, 2.0**-17 * 1.0001, 2.0**-18,
    1.0625, 1.1875, 1.125 + 2**-20, 1e-45, 1.17549435e-38, 1.1754942e-38,
]


def _encode(values: torch.Tensor, fp8: torch.dtype, backend: str,
            scales: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty(values.numel(), dtype=torch.uint8)
    encode(FloatBuffer.of_tensor(values), out, fp8_format(fp8), scales, backend=backend)
    return out


def _decode(codes: torch.Tensor, fp8: torch.dtype, dtype: torch.dtype, backend: str,
            scales: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty(codes.numel(), dtype=dtype)
    decode(codes, FloatBuffer.of_tensor(out), fp8_format(fp8), scales, backend=backend)
    return out


def _in_range(values: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """Finite values every torch release casts the same way (no overflow involved)."""
    return torch.isfinite(values) & (values.abs() <= fp8_format(fp8).max_finite)


def _assert_matches_torch(values: torch.Tensor, codes: torch.Tensor, fp8: torch.dtype) -> None:
    """torch's cast for every non-NaN value (overflow too when this torch saturates, as 2.13 does);
    the pinned ``0x7F | sign`` for NaN."""
    expected = torch_codes(values, fp8)
    nan = torch.isnan(values)
    expected = torch.where(nan, ((bits(values) < 0).to(torch.uint8) << 7) | 0x7F, expected)
    mask = ~nan if TORCH_SATURATES else _in_range(values, fp8)
    bad = (codes != expected) & (mask | nan)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{values.dtype}->{fp8}: value {values[i].item()!r} gave {int(codes[i]):#04x}, "
            f"torch gives {int(expected[i]):#04x} ({int(bad.sum())} mismatches)"
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16bit_pattern_encodes_like_torch(backend: str, fp8: torch.dtype,
                                                dtype: torch.dtype) -> None:
    values = all_16bit(dtype)
    codes = _encode(values, fp8, backend)
    _assert_matches_torch(values, codes, fp8)
    if backend != "torch":
        assert torch.equal(codes, _encode(values, fp8, "torch"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
def test_float32_samples_encode_like_torch(backend: str, fp8: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(7)
    random_bits = torch.randint(-(2**31), 2**31 - 1, (1 << 17,), generator=gen, dtype=torch.int32)
    scales = torch.exp2(torch.randint(-20, 12, (1 << 17,), generator=gen).float())
    values = torch.cat([
        torch.tensor(FP32_SPECIALS, dtype=torch.float32),
        random_bits.view(torch.float32),
        torch.randn(1 << 17, generator=gen) * scales,
    ])
    values = torch.cat([values, -values])
    codes = _encode(values, fp8, backend)
    _assert_matches_torch(values, codes, fp8)
    if backend != "torch":
        assert torch.equal(codes, _encode(values, fp8, "torch"))


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.floats(width=32), min_size=0, max_size=200))
def test_property_encode_backends_agree_with_torch(fp8: torch.dtype, dtype: torch.dtype,
                                                   data: list[float]) -> None:
    values = torch.tensor(data, dtype=torch.float32).to(dtype)
    reference = _encode(values, fp8, "torch")
    _assert_matches_torch(values, reference, fp8)
    for backend in AVAILABLE_BACKENDS[1:]:
        assert torch.equal(_encode(values, fp8, backend), reference), backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_every_code_decodes_like_torch(backend: str, fp8: torch.dtype, dtype: torch.dtype) -> None:
    # every code at every position of a 32-wide vector block, plus ragged tails
    codes = torch.cat([all_codes().roll(k) for k in range(33)])[: 256 * 33 - 5]
    got = _decode(codes, fp8, dtype, backend)
    expected = codes.view(fp8).to(dtype)
    fmt = fp8_format(fp8)
    nan = fmt.is_nan(codes)
    assert torch.equal(bits(got)[~nan], bits(expected)[~nan])
    pinned = nan_patterns(fmt, dtype, scaled=False)
    for i in nan.nonzero().flatten()[:64].tolist():
        width = 0xFFFFFFFF if dtype == torch.float32 else 0xFFFF
        assert (int(bits(got)[i]) & width) == pinned[int(codes[i])]
    if torch.__version__.startswith("2.13"):
        assert torch.equal(bits(got), bits(expected)), "torch 2.13: NaN payloads match too"


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(st.floats(width=32), min_size=1, max_size=150),
    scale=st.one_of(
        st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False),
        st.integers(min_value=-126, max_value=126).map(lambda k: 2.0**k),
    ),
)
def test_property_scaled_encode_is_the_torch_expression(fp8: torch.dtype, dtype: torch.dtype,
                                                        data: list[float], scale: float) -> None:
    values = torch.tensor(data, dtype=torch.float32).to(dtype)
    scales = torch.tensor([scale], dtype=torch.float32)
    fmax = fp8_format(fp8).max_finite
    quotient = values.float() / float(scales[0])
    expected = torch.clamp(quotient, -fmax, fmax).to(fp8).view(torch.uint8)
    # pinned: NaN -> 0x7F | the source's sign bit
    nan = torch.isnan(values)
    expected = torch.where(nan, ((bits(values) < 0).to(torch.uint8) << 7) | 0x7F, expected)
    for backend in AVAILABLE_BACKENDS:
        assert torch.equal(_encode(values, fp8, backend, scales), expected), backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scaled_decode_is_the_torch_expression(backend: str, fp8: torch.dtype,
                                               dtype: torch.dtype) -> None:
    codes = torch.cat([all_codes()] * 4)[:-3]
    fmt = fp8_format(fp8)
    # powers of two inside and just outside the range where the products stay normal bfloat16
    edges = [2.0**k for k in (-126, -118, -117, -111, -110, 0, 112, 113, 119, 120, 126)]
    for scale in (1.0, 2.0**-20, 2.0**30, 0.1, 3.0, 1e20, 1e-30, *edges):
        scales = torch.tensor([scale], dtype=torch.float32)
        got = _decode(codes, fp8, dtype, backend, scales)
        expected = (codes.view(fp8).float() * scales[0]).to(dtype)
        nan = fmt.is_nan(codes)
        assert torch.equal(bits(got)[~nan], bits(expected)[~nan]), scale
        assert torch.equal(bits(got), bits(_decode(codes, fp8, dtype, "torch", scales)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_per_row_scales(backend: str, fp8: torch.dtype, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    rows, width = 37, 45  # ragged against the 32-wide vector blocks
    values = (torch.randn(rows, width, generator=gen) * 100).to(dtype)
    scales = torch.exp2(torch.randint(-10, 10, (rows,), generator=gen).float())
    codes = _encode(values.reshape(-1), fp8, backend, scales)
    fmax = fp8_format(fp8).max_finite
    expected = torch.clamp(values.float() / scales[:, None], -fmax, fmax).to(fp8).view(torch.uint8)
    assert torch.equal(codes, expected.reshape(-1))
    restored = _decode(codes, fp8, dtype, backend, scales)
    expected_values = (codes.view(fp8).float().view(rows, width) * scales[:, None]).to(dtype)
    assert torch.equal(bits(restored), bits(expected_values.reshape(-1)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_misaligned_byte_buffers(backend: str, dtype: torch.dtype) -> None:
    """Values stored at an odd address (a misaligned object group) encode and decode in place."""
    gen = torch.Generator().manual_seed(5)
    values = torch.randn(301, generator=gen).to(dtype)
    store = torch.zeros(values.numel() * dtype.itemsize + 1, dtype=torch.uint8)
    store[1:].copy_(values.view(torch.uint8))
    src = FloatBuffer.of_bytes(store[1:], dtype)
    out = torch.empty(values.numel(), dtype=torch.uint8)
    fmt = fp8_format(torch.float8_e4m3fn)
    encode(src, out, fmt, backend=backend)
    assert torch.equal(out, torch_codes(values, torch.float8_e4m3fn))
    target = torch.full_like(store, 0xEE)
    decode(out, FloatBuffer.of_bytes(target[1:], dtype), fmt, backend=backend)
    assert int(target[0]) == 0xEE
    expected = out.view(torch.float8_e4m3fn).to(dtype)
    assert torch.equal(target[1:], expected.view(torch.uint8))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_row_absmax_ignores_inf_and_nan(backend: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(11)
    values = torch.randn(9, 70, generator=gen) * torch.arange(1, 10)[:, None]
    values[2, 5] = float("inf")
    values[3, 7] = float("-inf")
    values[4, 1] = float("nan")
    values[5] = float("nan")
    values[6] = 0.0
    values = values.to(dtype)
    got = row_absmax(FloatBuffer.of_tensor(values), 9, backend=backend)
    mags = values.float().abs()
    expected = torch.where(torch.isfinite(mags), mags, 0.0).amax(dim=1)
    assert torch.equal(got, expected)
    assert float(got[5]) == 0.0 and float(got[6]) == 0.0


def test_power_of_two_and_general_scales_divide_exactly() -> None:
    """The native encoder multiplies by 2**-k for power-of-two scales: same bytes as dividing."""
    if not NATIVE_BUILT:
        pytest.skip("native codec not built")
    gen = torch.Generator().manual_seed(9)
    values = torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-140, 140, (4096,),
                                                                        generator=gen).float())
    for k in (-126, -100, -3, 0, 5, 126):
        scales = torch.tensor([math.ldexp(1.0, k)], dtype=torch.float32)
        assert torch.equal(_encode(values, torch.float8_e4m3fn, "native", scales),
                           _encode(values, torch.float8_e4m3fn, "torch", scales)), k


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
def test_scaled_bf16_subnormals_and_zeros(backend: str, fp8: torch.dtype) -> None:
    """bfloat16 subnormals multiplied up by a small scale (the vector path's rare fallback)."""
    gen = torch.Generator().manual_seed(13)
    values = torch.randn(256, generator=gen).to(torch.bfloat16)
    values[::3] = 0.0
    values[5::64] = -0.0
    subnormals = torch.tensor([1, 3, 64, 127, -32768 + 5], dtype=torch.int16).view(torch.bfloat16)
    values[100:105] = subnormals
    fmax = fp8_format(fp8).max_finite
    for k in (-126, -120, -117, -116, -110, -109, -7, 0, 3, 126):  # around the subnormal cut-offs
        scales = torch.tensor([2.0**k], dtype=torch.float32)
        expected = torch.clamp(values.float() / scales[0], -fmax, fmax).to(fp8).view(torch.uint8)
        assert torch.equal(_encode(values, fp8, backend, scales), expected), k


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
def test_huge_power_of_two_scales_saturate_infinities(backend: str, fp8: torch.dtype) -> None:
    """bfloat16 inf divided by 2^k (k up to 126) is still inf and saturates to the largest code."""
    values = torch.tensor([float("inf"), float("-inf"), 3.3e38, -3.3e38, 1e36, 1.0, 0.0] * 8,
                          dtype=torch.bfloat16)
    for k in (100, 112, 113, 119, 120, 126):
        scales = torch.tensor([2.0**k], dtype=torch.float32)
        assert torch.equal(_encode(values, fp8, backend, scales), divided_codes(values, fp8, 2.0**k)), k
