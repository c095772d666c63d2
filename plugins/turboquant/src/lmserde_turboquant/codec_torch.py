"""Pure-torch slot codec: encode K/V rows into slots and decode them back, on any device.

This is the reference implementation of the arithmetic; the native kernel (``codec_native``)
performs the same float32 operations in the same order and must produce identical bytes and
identical decoded values. Per row (``D`` = head_dim, all arithmetic in float32, IEEE rounding):

MSE part (TurboQuant-MSE) encode, for ``x``:
  1. ``ss`` = sum of ``x*x`` by folding halves (``s[i] += s[i + w]`` for ``w = D/2, ..., 1``)
  2. ``norm = sqrt(ss)``
  3. ``z = fwht(x * signs)``  (see :mod:`rotation`)
  4. ``y = z * (1 / ((norm + 1e-8) * sqrt_d))``
  5. index = ``count(boundaries <= y)``; norm stored as fp16
MSE part decode: ``c = centroids[index]``; ``den = sqrt(fold_sum(c*c) + 1e-16) * sqrt_d`` with
norm correction, else ``sqrt_d``; ``g = norm / den``; ``x = (fwht(c) * g) * signs``.

min/max part encode, for ``v``: ``lo = min(v) + 0`` (``-0`` becomes ``+0``), ``hi = max(v)``,
``scale = (hi - lo) / (2**b - 1)`` floored at 1e-8, ``q = trunc(clamp((v - lo) / scale + 0.5,
0, 2**b - 1))``; fp16 scale and fp16 zero (= lo) stored. Decode ``v = q * scale + zero``.

fp8 part: ``clamp(k, -448, 448)`` cast to float8_e4m3fn (round to nearest even); decoded by the
exact cast back.

A row that cannot be stored (a non-finite value, or a norm, scale or minimum beyond the fp16
range) makes the encoder return its index; nothing else reports errors.
"""

from __future__ import annotations

import sys

import torch

from lmserde_turboquant.bitpack import pack_indices, packed_size, unpack_indices
from lmserde_turboquant.codebook import Codebook
from lmserde_turboquant.layer_tables import LayerTables
from lmserde_turboquant.presets import PartCodec, TurboQuantPreset
from lmserde_turboquant.rotation import fwht

__all__ = ["BLOCK_ROWS", "decode_rows", "encode_rows", "fold_sum"]

BLOCK_ROWS = 2048  # rows per block: keeps the float32 working set cache-sized
_EPS_NORM = 1e-8
_EPS_NC = 1e-16
_SCALE_FLOOR = 1e-8
_FP8_MAX = 448.0
_LITTLE_ENDIAN = sys.byteorder == "little"


def fold_sum(x: torch.Tensor) -> torch.Tensor:
    """Row sums of a float32 ``[N, D]`` tensor (power-of-two ``D``) by folding halves."""
    s = x
    w = x.shape[1] // 2
    while w >= 1:
        s = s[:, :w] + s[:, w : 2 * w]
        w //= 2
    return s[:, 0]


def _fp16_bytes(x: torch.Tensor) -> torch.Tensor:
    """float32 ``[N]`` as little-endian fp16 bytes ``[N, 2]``."""
    b = x.to(torch.float16).view(torch.uint8).view(x.shape[0], 2)
    return b if _LITTLE_ENDIAN else b.flip(1)


def _fp16_from_bytes(b: torch.Tensor) -> torch.Tensor:
    """Little-endian fp16 bytes ``[N, 2]`` as float32 ``[N]``."""
    b = b.clone() if _LITTLE_ENDIAN else b.flip(1).clone()  # a fresh, aligned copy
    return b.view(torch.float16).view(-1).to(torch.float32)


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float32 square root on every device.

    torch's CPU float32 ``sqrt`` may be off by one ulp; the double square root rounded to float32
    is the correctly rounded result (double has more than 2*24 + 2 bits).
    """
    return x.to(torch.float64).sqrt().to(torch.float32)


def _fp16_ok(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x.to(torch.float16))


def _bucket_count(y: torch.Tensor, cb: Codebook) -> torch.Tensor:
    """``count(boundaries <= y)`` per element, as uint8 (one vectorized compare per boundary)."""
    idx = torch.zeros(y.shape, dtype=torch.uint8, device=y.device)
    for b in cb.boundaries.tolist():
        idx += y >= b  # b is a float32 value: the comparison is exact
    return idx


def _encode_mse(
    x: torch.Tensor, out: torch.Tensor, cb: Codebook, t: LayerTables
) -> torch.Tensor:
    norm = _sqrt(fold_sum(x * x))
    z = fwht(x * t.signs)
    inv = torch.reciprocal((norm + _EPS_NORM) * t.sqrt_d)
    y = z * inv.unsqueeze(1)
    idx = _bucket_count(y, cb)
    nb = packed_size(x.shape[1], cb.bits)
    out[:, :nb] = pack_indices(idx, cb.bits)
    out[:, nb : nb + 2] = _fp16_bytes(norm)
    return ~_fp16_ok(norm)


def _decode_mse(
    part: torch.Tensor, cb: Codebook, t: LayerTables, nc: bool, d: int
) -> torch.Tensor:
    nb = packed_size(d, cb.bits)
    c = cb.centroids[unpack_indices(part, cb.bits, d)]
    norm = _fp16_from_bytes(part[:, nb : nb + 2])
    if nc:
        den = _sqrt(fold_sum(c * c) + _EPS_NC) * t.sqrt_d
        g = norm / den
    else:
        g = norm / torch.full_like(norm, t.sqrt_d)  # a true division on every device
    return (fwht(c) * g.unsqueeze(1)) * t.signs


def _encode_minmax(v: torch.Tensor, out: torch.Tensor, bits: int) -> torch.Tensor:
    levels = float(2**bits - 1)
    lo = v.amin(dim=1) + 0.0
    hi = v.amax(dim=1)
    scale = (hi - lo) / torch.full_like(hi, levels)
    scale = torch.where(scale > _SCALE_FLOOR, scale, torch.full_like(scale, _SCALE_FLOOR))
    q = (v - lo.unsqueeze(1)) / scale.unsqueeze(1) + 0.5
    q = q.clamp_(0.0, levels).nan_to_num_(0.0).to(torch.uint8)
    nb = packed_size(v.shape[1], bits)
    out[:, :nb] = pack_indices(q, bits)
    out[:, nb : nb + 2] = _fp16_bytes(scale)
    out[:, nb + 2 : nb + 4] = _fp16_bytes(lo)
    return ~(_fp16_ok(scale) & _fp16_ok(lo))


def _decode_minmax(part: torch.Tensor, bits: int, d: int) -> torch.Tensor:
    nb = packed_size(d, bits)
    q = unpack_indices(part, bits, d).to(torch.float32)
    scale = _fp16_from_bytes(part[:, nb : nb + 2])
    zero = _fp16_from_bytes(part[:, nb + 2 : nb + 4])
    return q * scale.unsqueeze(1) + zero.unsqueeze(1)


def _encode_fp8(k: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    codes = k.clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    out[:, : k.shape[1]] = codes
    return ~torch.isfinite(k).all(dim=1)


def _encode_part(
    codec: PartCodec, bits: int, cb: Codebook | None, x: torch.Tensor, out: torch.Tensor,
    t: LayerTables,
) -> torch.Tensor:
    if codec == "fp8":
        return _encode_fp8(x, out)
    if codec == "minmax":
        return _encode_minmax(x, out, bits)
    assert cb is not None
    return _encode_mse(x, out, cb, t)


def _decode_part(
    codec: PartCodec, bits: int, cb: Codebook | None, part: torch.Tensor, t: LayerTables,
    nc: bool, d: int,
) -> torch.Tensor:
    if codec == "fp8":
        return part[:, :d].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    if codec == "minmax":
        return _decode_minmax(part, bits, d)
    assert cb is not None
    return _decode_mse(part, cb, t, nc, d)


def encode_rows(
    k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables,
) -> int:
    """Encode rows ``k[i]``, ``v[i]`` (``[N, D]``, float16/bfloat16/float32) into ``out[i]``.

    ``out`` is uint8 ``[N, preset.slot_stride(D)]`` (any strides); every byte of it is written
    (alignment bytes as zero). Returns -1, or the index of the first row that cannot be stored
    (then the content of ``out`` is unspecified).
    """
    n, d = k.shape
    kps = preset.key_bytes(d)
    slot = preset.slot_bytes(d)
    if out.shape[1] > slot:
        out[:, slot:] = 0
    bad_rows = torch.zeros(n, dtype=torch.bool, device=k.device)
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        kf = k[start:stop].to(torch.float32)
        vf = v[start:stop].to(torch.float32)
        o = out[start:stop]
        bad = _encode_part(
            preset.key_codec, preset.key_bits, tables.key_codebook, kf, o[:, :kps], tables
        )
        bad |= _encode_part(
            preset.value_codec, preset.value_bits, tables.value_codebook, vf, o[:, kps:slot],
            tables,
        )
        bad_rows[start:stop] = bad
    if bool(bad_rows.any()):
        return int(torch.nonzero(bad_rows)[0, 0])
    return -1


def decode_rows(
    slots: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables,
) -> None:
    """Decode uint8 slots ``[N, >= slot_bytes]`` into ``k_out``/``v_out`` (``[N, D]``, any dtype).

    Values are computed in float32 and rounded once to the output dtype.
    """
    n, d = k_out.shape
    kps = preset.key_bytes(d)
    slot = preset.slot_bytes(d)
    nc = preset.norm_correction
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        s = slots[start:stop]
        k_out[start:stop] = _decode_part(
            preset.key_codec, preset.key_bits, tables.key_codebook, s[:, :kps], tables, nc, d
        )
        v_out[start:stop] = _decode_part(
            preset.value_codec, preset.value_bits, tables.value_codebook, s[:, kps:slot],
            tables, nc, d,
        )
