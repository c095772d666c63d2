"""The native (C) slot codec: same contract and same bits as :mod:`codec_torch`, much faster.

The extension ``lmserde_turboquant._native`` is built by the package's setuptools build when a C
compiler is available; without it :func:`available` is false and the serde uses the pure-torch
codec. It handles CPU tensors of dtype float32/float16/bfloat16 whose rows are contiguous
(:func:`supports`), codes many layers in one call and releases the GIL while it works.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from lmserde import NativeExtension

from lmserde_turboquant.codebook import Codebook
from lmserde_turboquant.layer_tables import LayerTables
from lmserde_turboquant.presets import TurboQuantPreset

__all__ = [
    "MAX_HEAD_DIM",
    "NATIVE_CODEC",
    "available",
    "decode_layers",
    "decode_rows",
    "encode_layers",
    "encode_rows",
    "log_fallback_once",
    "native_status",
    "simd_isa",
    "supports",
]

#: The extension (no run-time switch: ``backend="torch"`` in the config picks the torch codec).
NATIVE_CODEC = NativeExtension("lmserde_turboquant._native", distribution="lmserde-turboquant",
                               simd=lambda module: str(module.simd_isa()))

_log = logging.getLogger("lmserde_turboquant")

_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_CODEC_CODES = {"fp8": 0, "mse": 1, "minmax": 2}
MAX_HEAD_DIM = 1024


def available() -> bool:
    """True when the C extension was built and imported."""
    return NATIVE_CODEC.built()


def simd_isa() -> str | None:
    """``"avx2"`` or ``"scalar"``: the instruction path of the extension; ``None`` without it."""
    return NATIVE_CODEC.simd()


def native_status() -> dict[str, Any]:
    """What this process runs for CPU tensors: ``backend`` (``"native"`` or ``"torch"``),
    ``simd`` (``"avx2"`` or ``"scalar"``; ``None`` when not built), ``built`` and, on the torch
    backend, the ``reason``. (GPU tensors always use torch ops.)"""
    return NATIVE_CODEC.status()


def log_fallback_once() -> None:
    """Log a warning, once per process, when the native codec is not built (CPU tensors then run
    the pure-torch codec: same bytes, several times slower). Called when a processor is built."""
    NATIVE_CODEC.log_fallback_once(
        _log, "the turboquant serde runs its pure-torch codec on CPU tensors")


def _rows_ok(t: torch.Tensor) -> bool:
    """CPU float rows ``[..., N, D]`` with a unit inner stride and non-overlapping rows."""
    return (
        t.device.type == "cpu"
        and t.dtype in _DTYPE_CODES
        and 8 <= t.shape[-1] <= MAX_HEAD_DIM
        and t.stride(-1) == 1
        and (t.shape[-2] <= 1 or t.stride(-2) >= t.shape[-1])
    )


def supports(rows: torch.Tensor, slots: torch.Tensor) -> bool:
    """Whether the native codec can work on these row and slot tensors (any leading dims)."""
    return (
        NATIVE_CODEC.built()
        and _rows_ok(rows)
        and slots.device.type == "cpu"
        and slots.dtype == torch.uint8
        and slots.is_contiguous()
    )


def _call_args(
    k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, preset: TurboQuantPreset,
    signs: torch.Tensor, key_table: torch.Tensor | None, value_table: torch.Tensor | None,
    sqrt_d: float, simd: bool,
) -> tuple[object, ...]:
    """Arguments of ``_native.encode``/``decode`` for ``[L, N, D]`` rows and ``[L, P, S]`` slots."""
    n_layers, n, d = k.shape
    if v.shape != k.shape or v.dtype != k.dtype or not supports(k, slots) or not _rows_ok(v):
        raise ValueError("native TurboQuant codec: unsupported tensors")
    stride = preset.slot_stride(d)
    if slots.dim() != 3 or slots.shape[0] != n_layers or slots.shape[1] < n or (
            slots.shape[2] != stride):
        raise ValueError(
            f"slots must be [{n_layers}, >= {n}, {stride}] uint8, got {tuple(slots.shape)}")
    if signs.shape != (n_layers, d):
        raise ValueError(f"signs must be [{n_layers}, {d}], got {tuple(signs.shape)}")
    for t in (signs, key_table, value_table):
        if t is not None and (t.device.type != "cpu" or t.dtype != torch.float32
                              or not t.is_contiguous()):
            raise ValueError("native TurboQuant codec: tables must be contiguous float32 on CPU")
    return (
        k.data_ptr(), v.data_ptr(), slots.data_ptr(),
        k.stride(1) if n > 1 else d, v.stride(1) if n > 1 else d,
        k.stride(0), v.stride(0), n_layers, n, slots.shape[1], d,
        _DTYPE_CODES[k.dtype],
        _CODEC_CODES[preset.key_codec], preset.key_bits,
        _CODEC_CODES[preset.value_codec], preset.value_bits,
        int(preset.norm_correction), preset.key_bytes(d), preset.slot_bytes(d), stride, simd,
        signs.data_ptr(),
        0 if key_table is None else key_table.data_ptr(),
        0 if value_table is None else value_table.data_ptr(),
        sqrt_d,
    )


def _tables(tables: LayerTables, encode: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The key and value codebook tables the kernel reads: boundaries to encode, centroids to
    decode (``None`` for parts without a codebook)."""

    def pick(cb: Codebook | None) -> torch.Tensor | None:
        if cb is None:
            return None
        return cb.boundaries if encode else cb.centroids

    return pick(tables.key_codebook), pick(tables.value_codebook)


def encode_layers(
    k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables, signs: torch.Tensor, *, simd: bool = True,
) -> int:
    """Encode rows ``[L, N, D]`` of ``L`` layers into contiguous slots ``[L, P >= N, stride]``.

    ``signs`` is float32 ``[L, D]`` (each layer's rotation); ``tables`` supplies the codebooks.
    Slot rows ``N..P-1`` are zeroed. Returns -1 or ``layer * N + row`` of the first row that
    cannot be stored.
    """
    native = NATIVE_CODEC.require()
    kt, vt = _tables(tables, encode=True)
    args = _call_args(k, v, slots, preset, signs, kt, vt, tables.sqrt_d, simd)
    return int(native.encode(*args))


def decode_layers(
    slots: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables, signs: torch.Tensor, *, simd: bool = True,
) -> None:
    """Decode slots ``[L, P, stride]`` into rows ``k_out``/``v_out`` ``[L, N <= P, D]``."""
    native = NATIVE_CODEC.require()
    kt, vt = _tables(tables, encode=False)
    native.decode(*_call_args(k_out, v_out, slots, preset, signs, kt, vt, tables.sqrt_d, simd))


def encode_rows(
    k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables, *, simd: bool = True,
) -> int:
    """One layer, like :func:`codec_torch.encode_rows`; ``simd=False`` forces the scalar path."""
    return encode_layers(k.unsqueeze(0), v.unsqueeze(0), out.unsqueeze(0), preset, tables,
                         tables.signs.unsqueeze(0), simd=simd)


def decode_rows(
    slots: torch.Tensor, k_out: torch.Tensor, v_out: torch.Tensor, preset: TurboQuantPreset,
    tables: LayerTables, *, simd: bool = True,
) -> None:
    """One layer, like :func:`codec_torch.decode_rows`; ``slots`` is ``[N, slot_stride]``."""
    decode_layers(slots.unsqueeze(0), k_out.unsqueeze(0), v_out.unsqueeze(0), preset, tables,
                  tables.signs.unsqueeze(0), simd=simd)
