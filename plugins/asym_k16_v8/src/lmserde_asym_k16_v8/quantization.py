"""Per-tensor fp8 quantization of V, matching LMCache's codes bit for bit.

``scale = amax(|V| as float32) / finfo(fp8).max`` rounded to float32 (``1.0`` for an all-zero or
empty V), codes ``= clamp(V as float32 / scale, -max, max)`` cast to fp8, and decoding multiplies
the codes (as float32) by the scale. The elementwise work and the abs-max are ``lmserde_fp8``'s
native kernels (single-threaded, GIL released), so callers can run them on chunks in parallel.

Non-finite V (where LMCache's NaN/inf scale makes every code NaN): the amax is over the finite
values, NaN stays NaN and +-inf saturates to +-amax, exactly as the ``fp8`` serde's cast does.
"""

from __future__ import annotations

import struct

import torch
from lmserde_fp8 import dequantize_into, quantize_into
from lmserde_fp8 import finite_absmax as _fp8_finite_absmax

__all__ = [
    "SUPPORTED_FP8_DTYPES",
    "SUPPORTED_SCALE_DTYPES",
    "dequantize_v",
    "finite_absmax",
    "pack_scale",
    "per_tensor_scale",
    "quantize_v",
    "scale_for_absmax",
    "unpack_scale",
]

SUPPORTED_FP8_DTYPES: tuple[torch.dtype, ...] = (torch.float8_e4m3fn,)
"""V code dtypes; LMCache's codec rejects e5m2, so this format never writes it."""

SUPPORTED_SCALE_DTYPES: tuple[torch.dtype, ...] = (torch.float32,)
"""Scale payload dtypes (stored little-endian)."""

_F32 = struct.Struct("<f")


_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def finite_absmax(v: torch.Tensor) -> float:
    """Largest finite ``|x|`` of ``v`` as float32 (0.0 when there is none); one thread, no GIL."""
    return _fp8_finite_absmax(v)  # other float dtypes: |V as float32|, as LMCache does


def scale_for_absmax(amax: float, fp8_dtype: torch.dtype) -> float:
    """The float32 scale for a float32 ``amax`` (``1.0`` when the scale would be 0)."""
    # Dividing in double and rounding once to float32 equals the float32 division.
    scale = _F32.unpack(_F32.pack(amax / torch.finfo(fp8_dtype).max))[0]
    return scale if scale > 0.0 else 1.0


def per_tensor_scale(v: torch.Tensor, fp8_dtype: torch.dtype) -> float:
    """The float32 per-tensor scale of ``v`` (returned as the exactly equal Python float)."""
    return scale_for_absmax(finite_absmax(v), fp8_dtype)


def quantize_v(v: torch.Tensor, codes: torch.Tensor, fp8_dtype: torch.dtype, scale: float) -> None:
    """Write the fp8 codes of ``v`` (any shape, row-major) into the uint8 tensor ``codes``.

    float64 V goes through float32 first, as LMCache's ``V as float32`` does.
    """
    src = v if v.dtype in _KERNEL_DTYPES else v.float()
    quantize_into(src.reshape(-1), codes, fp8_dtype, scale=scale)


def dequantize_v(
    codes: torch.Tensor, v_out: torch.Tensor, fp8_dtype: torch.dtype, scale: float
) -> None:
    """Decode the uint8 ``codes`` into ``v_out`` (any float dtype, any shape) in row-major order.

    The value is ``float32(code) * scale`` cast to ``v_out``'s dtype (exact for float64).
    """
    if v_out.dtype in _KERNEL_DTYPES:
        dequantize_into(codes, v_out, fp8_dtype, scale=scale)
        return
    staged = torch.empty(v_out.shape, dtype=torch.float32)
    dequantize_into(codes, staged, fp8_dtype, scale=scale)
    v_out.copy_(staged)


def pack_scale(scale: float) -> bytes:
    """The 4-byte little-endian float32 scale payload."""
    return _F32.pack(scale)


def unpack_scale(raw: bytes | memoryview) -> float:
    """Read a 4-byte little-endian float32 scale payload."""
    return _F32.unpack(raw)[0]
