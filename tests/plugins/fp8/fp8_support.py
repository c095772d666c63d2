"""Shared helpers of the fp8 plugin tests: backends, bit views, reference values."""

from __future__ import annotations

import pytest
import torch
from lmserde_fp8 import kernel
from lmserde_fp8.formats import fp8_format

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}

#: Whether the native extension is built (its tests are skipped otherwise; the torch codec never is).
NATIVE_BUILT = kernel.simd_level() >= 0
#: Names of the backends that can run here.
AVAILABLE_BACKENDS = ("torch", "portable", "native") if NATIVE_BUILT else ("torch",)

#: Every codec backend; the native ones are skipped (not failed) when the extension is not built.
BACKENDS = (
    "torch",
    pytest.param("portable", marks=pytest.mark.skipif(kernel.simd_level() < 0,
                                                      reason="native codec not built")),
    pytest.param("native", marks=pytest.mark.skipif(kernel.simd_level() < 0,
                                                    reason="native codec not built")),
)

#: Whether this torch saturates float8_e4m3fn overflow like the pinned rule (torch >= 2.13 on CPU).
TORCH_SATURATES = bool(
    torch.tensor([1000.0, float("inf")]).to(torch.float8_e4m3fn).view(torch.uint8).eq(0x7E).all()
)


def all_16bit(dtype: torch.dtype) -> torch.Tensor:
    """Every bit pattern of a 16-bit float dtype, in order."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def all_codes() -> torch.Tensor:
    """The 256 fp8 codes."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor, for bitwise comparisons."""
    return t.view(INT_VIEW[t.dtype])


def torch_codes(values: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """torch's own cast, as uint8 codes."""
    return values.to(fp8).view(torch.uint8)


def divided_codes(values: torch.Tensor, fp8: torch.dtype, scale: float) -> torch.Tensor:
    """The codes of ``clamp(x.float() / s, -fmax, fmax).to(fp8)`` in row-major order, ``s`` the
    float32 value of ``scale``; NaN -> ``0x7F | sign`` (pinned rule)."""
    fmax = fp8_format(fp8).max_finite
    flat = values.reshape(-1)
    s = torch.tensor([scale], dtype=torch.float32)
    expected = torch.clamp(flat.float() / s, -fmax, fmax).to(fp8).view(torch.uint8)
    sign = (bits(flat) < 0).to(torch.uint8) << 7
    return torch.where(torch.isnan(flat), sign | 0x7F, expected)
