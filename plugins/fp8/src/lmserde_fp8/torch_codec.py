"""The pure-torch codec: the reference the native kernels are tested against, and their fallback.

It is torch's own cast plus the pinned range rules, applied explicitly so that every torch version
writes the same bytes (older releases turned float8_e4m3fn overflow into NaN, and NaN payloads
differ between releases):

* encode, no scale: ``float8_e4m3fn`` saturates finite values beyond +-448 and +-inf to +-448;
  ``float8_e5m2`` rounds magnitudes >= 61440 (and inf) to +-inf; NaN becomes ``0x7F | sign``.
* encode, scale ``s``: ``clamp(x.float() / s, -max, max).to(fp8)``; NaN becomes ``0x7F | sign``.
* decode: the fp8 value in the destination dtype (times ``s`` in float32 when scaled); NaN codes
  decode to the bit patterns torch 2.13 produces on CPU (see :func:`nan_patterns`).
"""

from __future__ import annotations

import functools

import torch

from lmserde_fp8.formats import Fp8Format

__all__ = ["encode", "decode", "row_absmax", "nan_patterns"]

_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _as_signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


@functools.cache
def _nan_table(fmt: Fp8Format, dtype: torch.dtype, scaled: bool) -> torch.Tensor:
    bits = 32 if dtype == torch.float32 else 16
    values = [_as_signed(nan_patterns(fmt, dtype, scaled).get(c, 0), bits) for c in range(256)]
    return torch.tensor(values, dtype=_INT_VIEW[dtype])


def nan_patterns(fmt: Fp8Format, dtype: torch.dtype, scaled: bool) -> dict[int, int]:
    """Bit pattern each NaN code decodes to in ``dtype`` (torch 2.13 CPU behaviour, pinned).

    float32 and float16 keep the sign and a payload derived from the code; bfloat16 is 0x7FC0
    unscaled and 0xFFFF after a float32 multiplication (torch's float32 -> bfloat16 NaN).
    """
    patterns: dict[int, int] = {}
    for code in sorted(fmt.nan_codes):
        sign = code & 0x80
        e4m3 = fmt.dtype == torch.float8_e4m3fn
        if dtype == torch.float32:
            payload = 0x7FF00000 if e4m3 else 0x7FC00000 | ((code & 3) << 21)
            patterns[code] = payload | (sign << 24)
        elif dtype == torch.float16:
            patterns[code] = (0x7F80 | (sign << 8)) if e4m3 else ((code << 8) | 0x200)
        else:
            patterns[code] = 0xFFFF if scaled else 0x7FC0
    return patterns


def _rows(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return values.view(scales.numel(), -1)


def encode(values: torch.Tensor, out: torch.Tensor, fmt: Fp8Format,
           scales: torch.Tensor | None = None) -> None:
    """Write the fp8 codes of the 1-D float tensor ``values`` into the uint8 tensor ``out``.

    ``scales``: ``None``, or one float32 scale per row (``values`` split into equal rows).
    """
    if values.numel() == 0:
        return
    if scales is None:
        if fmt.dtype == torch.float8_e4m3fn:
            clamped = values.clamp(-fmt.max_finite, fmt.max_finite)
            codes = clamped.to(fmt.dtype).view(torch.uint8)
        else:
            codes = values.to(fmt.dtype).view(torch.uint8)
            overflow = values.abs() >= 61440.0  # rounds past 57344: IEEE overflow to inf
            if bool(overflow.any()):
                codes = torch.where(overflow, _sign_bytes(values) | 0x7C, codes)
    else:
        scaled = _rows(values.float(), scales) / scales.view(-1, 1).to(values.device)
        scaled = scaled.reshape(-1)
        codes = scaled.clamp(-fmt.max_finite, fmt.max_finite).to(fmt.dtype).view(torch.uint8)
    # x / s is NaN exactly when x is; the sign comes from x's bits (torch's own float conversions
    # drop a NaN's sign on some code paths)
    nan = torch.isnan(values)
    if bool(nan.any()):
        codes = torch.where(nan, _sign_bytes(values) | 0x7F, codes)
    out.copy_(codes)


def _sign_bytes(values: torch.Tensor) -> torch.Tensor:
    """0x80 where the sign bit of ``values`` is set (read from the bits, NaN included), else 0."""
    return (values.view(_INT_VIEW[values.dtype]) < 0).to(torch.uint8) << 7


def decode(codes: torch.Tensor, fmt: Fp8Format, dtype: torch.dtype,
           scales: torch.Tensor | None = None) -> torch.Tensor:
    """The values of the uint8 fp8 ``codes`` as a new 1-D tensor of ``dtype``."""
    if codes.numel() == 0:
        return torch.empty(0, dtype=dtype, device=codes.device)
    fp8 = codes.view(fmt.dtype)
    if scales is None:
        values = fp8.to(dtype)
    else:
        values = (_rows(fp8.float(), scales) * scales.view(-1, 1).to(codes.device)).reshape(-1)
        values = values.to(dtype)
    nan = fmt.is_nan(codes)
    if bool(nan.any()):
        table = _nan_table(fmt, dtype, scales is not None).to(codes.device)
        bits = values.view(_INT_VIEW[dtype])
        values = torch.where(nan, table[codes.long()], bits).view(dtype)
    return values


def row_absmax(values: torch.Tensor, rows: int) -> torch.Tensor:
    """Largest finite ``|x|`` of each of ``rows`` equal rows of ``values`` (0 when none), float32."""
    if rows == 0:
        return torch.zeros(0, dtype=torch.float32)
    if values.numel() == 0:
        return torch.zeros(rows, dtype=torch.float32)
    mags = values.float().abs()
    mags = torch.where(torch.isfinite(mags), mags, torch.zeros((), dtype=torch.float32,
                                                               device=mags.device))
    return mags.view(rows, -1).amax(dim=1).cpu()
