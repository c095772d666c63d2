"""TurboQuant presets: how the key and the value of one token-head slot are coded.

A slot is ``[key part][value part][one zero byte if the sum is odd]``. Part codecs:

* ``fp8`` (keys only): ``D`` float8 e4m3fn codes of a direct cast (saturating at +-448).
* ``mse`` (TurboQuant-MSE): ``ceil(D*b/8)`` bytes of packed codebook indices of the rotated unit
  vector, then its L2 norm as little-endian fp16.
* ``minmax`` (values only, LMCache's value path): ``ceil(D*b/8)`` bytes of packed
  ``round((v - min)/scale)`` codes, then fp16 ``scale`` and fp16 ``zero`` (= min), little-endian.

The four ``turboquant_*`` presets are LMCache's (same sizes, codebook solver and bytes); the
``tq*`` presets are ours and use TurboQuant-MSE for values too, with the exact codebook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lmserde_turboquant.bitpack import packed_size
from lmserde_turboquant.codebook import CodebookSolver

__all__ = ["PRESETS", "LMCACHE_PRESET_NAMES", "PartCodec", "TurboQuantPreset", "get_preset"]

PartCodec = Literal["fp8", "mse", "minmax"]

_NORM_BYTES = 2  # fp16 norm
_MINMAX_SIDE_BYTES = 4  # fp16 scale + fp16 zero


@dataclass(frozen=True)
class TurboQuantPreset:
    """One preset: codec and bit width for keys and for values, decoding and codebook choices."""

    name: str
    key_codec: PartCodec
    key_bits: int
    value_codec: PartCodec
    value_bits: int
    norm_correction: bool
    codebook_solver: CodebookSolver
    lmcache_compatible: bool
    summary: str

    def part_bytes(self, codec: PartCodec, bits: int, head_dim: int) -> int:
        """Size of one key or value part for ``head_dim``."""
        if codec == "fp8":
            return head_dim
        side = _NORM_BYTES if codec == "mse" else _MINMAX_SIDE_BYTES
        return packed_size(head_dim, bits) + side

    def key_bytes(self, head_dim: int) -> int:
        """KPS: bytes of the key part."""
        return self.part_bytes(self.key_codec, self.key_bits, head_dim)

    def value_bytes(self, head_dim: int) -> int:
        """VPS: bytes of the value part."""
        return self.part_bytes(self.value_codec, self.value_bits, head_dim)

    def slot_bytes(self, head_dim: int) -> int:
        """Key part plus value part, before alignment."""
        return self.key_bytes(head_dim) + self.value_bytes(head_dim)

    def slot_stride(self, head_dim: int) -> int:
        """Bytes per slot in the stream: :meth:`slot_bytes` rounded up to even."""
        size = self.slot_bytes(head_dim)
        return size + size % 2

    def compression_ratio(self, head_dim: int, itemsize: int = 2) -> float:
        """Raw K+V bytes of one token-head over its slot stride (``itemsize`` 2 = fp16/bf16)."""
        return 2 * head_dim * itemsize / self.slot_stride(head_dim)


def _lmcache(name: str, key_bits: int, value_bits: int, nc: bool, summary: str) -> TurboQuantPreset:
    return TurboQuantPreset(
        name=name,
        key_codec="fp8" if key_bits == 8 else "mse",
        key_bits=key_bits,
        value_codec="minmax",
        value_bits=value_bits,
        norm_correction=nc,
        codebook_solver="lmcache",
        lmcache_compatible=True,
        summary=summary,
    )


def _ours(name: str, key_bits: int, value_bits: int, summary: str) -> TurboQuantPreset:
    return TurboQuantPreset(
        name=name,
        key_codec="mse",
        key_bits=key_bits,
        value_codec="mse",
        value_bits=value_bits,
        norm_correction=True,
        codebook_solver="exact",
        lmcache_compatible=False,
        summary=summary,
    )


PRESETS: dict[str, TurboQuantPreset] = {
    p.name: p
    for p in (
        _lmcache("turboquant_k8v4", 8, 4, False, "LMCache: fp8 keys, 4-bit min/max values"),
        _lmcache("turboquant_4bit_nc", 4, 4, True, "LMCache: 4-bit MSE keys, 4-bit min/max values"),
        _lmcache("turboquant_k3v4_nc", 3, 4, True, "LMCache: 3-bit MSE keys, 4-bit min/max values"),
        _lmcache("turboquant_3bit_nc", 3, 3, True, "LMCache: 3-bit MSE keys, 3-bit min/max values"),
        _ours("tq4", 4, 4, "4-bit TurboQuant-MSE keys and values"),
        _ours("tq3", 3, 3, "3-bit TurboQuant-MSE keys and values"),
        _ours("tq2", 2, 2, "2-bit TurboQuant-MSE keys and values"),
        _ours("tq_k4v3", 4, 3, "4-bit MSE keys, 3-bit MSE values"),
        _ours("tq_k4v2", 4, 2, "4-bit MSE keys, 2-bit MSE values"),
        _ours("tq_k3v2", 3, 2, "3-bit MSE keys, 2-bit MSE values"),
    )
}

LMCACHE_PRESET_NAMES: tuple[str, ...] = tuple(n for n, p in PRESETS.items() if p.lmcache_compatible)


def get_preset(name: str) -> TurboQuantPreset:
    """The preset called ``name``; ``ValueError`` listing the valid names otherwise."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        valid = ", ".join(PRESETS)
        raise ValueError(
            f"Unsupported TurboQuant preset: {name!r}. Valid presets: {valid}"
        ) from None
