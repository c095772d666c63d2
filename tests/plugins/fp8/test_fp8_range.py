"""Pinned range behaviour (overflow, inf, NaN, underflow), identical on every backend and dtype,
exact round trips of representable values, and round-trip quality on normal data."""

from __future__ import annotations

import math

import pytest
import torch
from fp8_support import BACKENDS, FLOAT_DTYPES, FP8_DTYPES, all_codes, bits
from lmserde_fp8 import dequantize_into, quantize_into
from lmserde_fp8.codec import decode, encode
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import fp8_format

NAN = float("nan")
INF = float("inf")

#: (value, float8_e4m3fn code, float8_e5m2 code), casts without a scale
UNSCALED = [
    (448.0, 0x7E, 0x5F),
    (500.0, 0x7E, 0x60),
    (1e4, 0x7E, 0x71),
    (6e4, 0x7E, 0x7B),
    (61440.0, 0x7E, 0x7C),    # e5m2: halfway past 57344 rounds to inf (IEEE overflow)
    (1e5, 0x7E, 0x7C),
    (INF, 0x7E, 0x7C),        # e4m3fn has no inf: saturates
    (-INF, 0xFE, 0xFC),
    (-500.0, 0xFE, 0xE0),
    (NAN, 0x7F, 0x7F),
    (-NAN, 0xFF, 0xFF),
    (2.0**-10, 0x00, 0x14),   # e4m3fn: tie between 0 and 2^-9 -> even (0)
    (1.5 * 2.0**-10, 0x01, 0x16),
    (-(2.0**-12), 0x80, 0x8C),
    (2.0**-17, 0x00, 0x00),   # e5m2: tie between 0 and 2^-16
    (1.5 * 2.0**-17, 0x00, 0x01),
]

#: (value, e4m3fn code, e5m2 code) with scale 1.0: both formats saturate, NaN stays NaN
SCALED = [
    (1e5, 0x7E, 0x7B),
    (INF, 0x7E, 0x7B),
    (-INF, 0xFE, 0xFB),
    (NAN, 0x7F, 0x7F),
    (-NAN, 0xFF, 0xFF),
    (61440.0, 0x7E, 0x7B),
]


_QUIET_NAN = {torch.float32: 0x7FC00000, torch.bfloat16: 0x7FC0, torch.float16: 0x7E00}


def _tensor(values: list[float], dtype: torch.dtype) -> torch.Tensor:
    """``values`` in ``dtype``; NaNs are built from bits so that their sign is the one written
    (torch's float32 -> bfloat16 conversion turns every NaN into 0xFFFF)."""
    out = torch.tensor(values, dtype=torch.float32).to(dtype)
    width = 32 if dtype == torch.float32 else 16
    for i, v in enumerate(values):
        if v != v:
            pattern = _QUIET_NAN[dtype] | ((1 << (width - 1)) if math.copysign(1.0, v) < 0 else 0)
            signed = pattern - (1 << width) if pattern >= 1 << (width - 1) else pattern
            bits(out)[i] = signed
    return out


def _codes(values: list[float], dtype: torch.dtype, fp8: torch.dtype, backend: str,
           scale: float | None) -> list[int]:
    src = torch.cat([_tensor(values, dtype)] * 3)  # long enough for the vector loops and tails
    out = torch.empty(src.numel(), dtype=torch.uint8)
    scales = None if scale is None else torch.tensor([scale], dtype=torch.float32)
    encode(FloatBuffer.of_tensor(src), out, fp8_format(fp8), scales, backend=backend)
    return out[: len(values)].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize(("table", "scale"), [(UNSCALED, None), (SCALED, 1.0)],
                         ids=["unscaled", "scaled"])
def test_pinned_range_codes(backend: str, dtype: torch.dtype, table: list, scale: float | None) -> None:
    values = [row[0] for row in table]
    for column, fp8 in ((1, torch.float8_e4m3fn), (2, torch.float8_e5m2)):
        expected = [row[column] for row in table]
        got = _codes(values, dtype, fp8, backend, scale)
        assert [hex(c) for c in got] == [hex(c) for c in expected], (fp8, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_nan_rows_carry_the_written_sign(dtype: torch.dtype) -> None:
    t = _tensor([NAN, -NAN], dtype)
    assert bool(torch.isnan(t).all())
    assert int(bits(t)[0]) > 0 and int(bits(t)[1]) < 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_every_representable_value_round_trips_exactly(backend: str, fp8: torch.dtype,
                                                       dtype: torch.dtype) -> None:
    fmt = fp8_format(fp8)
    codes = all_codes()
    codes = codes[~fmt.is_nan(codes)]
    values = torch.empty(codes.numel(), dtype=dtype)
    decode(codes, FloatBuffer.of_tensor(values), fmt, backend=backend)
    again = torch.empty_like(codes)
    encode(FloatBuffer.of_tensor(values), again, fmt, backend=backend)
    assert torch.equal(again, codes)
    # and the decoded values are the fp8 values themselves
    assert torch.equal(bits(values), bits(codes.view(fp8).to(dtype)))


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_fp8_exact_values_round_trip_through_public_api(fp8: torch.dtype, dtype: torch.dtype) -> None:
    x = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.0, -6.0, 0.25], dtype=dtype)
    codes = torch.empty(x.numel(), dtype=torch.uint8)
    quantize_into(x, codes, fp8)
    y = torch.empty_like(x)
    dequantize_into(codes, y, fp8)
    assert torch.equal(bits(y), bits(x))


@pytest.mark.parametrize(("fp8", "minimum"), [(torch.float8_e4m3fn, 0.999), (torch.float8_e5m2, 0.99)])
def test_randn_bf16_round_trip_correlation(fp8: torch.dtype, minimum: float) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 256, 128, generator=gen).to(torch.bfloat16)
    codes = torch.empty(x.numel(), dtype=torch.uint8)
    quantize_into(x, codes, fp8)
    y = torch.empty_like(x)
    dequantize_into(codes, y, fp8)
    corr = torch.corrcoef(torch.stack([x.float().reshape(-1), y.float().reshape(-1)]))[0, 1]
    assert float(corr) > minimum
