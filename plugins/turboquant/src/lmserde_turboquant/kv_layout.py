"""KV tensor layouts TurboQuant accepts, and the exact size of their serialized stream.

Split ``[2, L, T, H*D]`` (K at index 0, V at 1) or fused ``[1, L, T, H*2*D]`` (each head's
``[K | V]`` pair side by side). The stream of one tensor is ``first_raw | compressed | last_raw``:

* ``first_raw``: the bytes of ``x[:, :quant_start]`` in C order (for the split layout: all K rows
  of those layers, then all V rows), bit-exact;
* ``compressed``: uint8 ``[Lq, ceil(T/block_size), block_size, H, slot_stride]``, padding tokens
  and alignment bytes zero;
* ``last_raw``: the bytes of ``x[:, quant_end:]``, laid out like ``first_raw``.

with ``quant_start = min(skip_first, L)``, ``quant_end = max(quant_start, L - skip_last)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lmserde_turboquant.presets import TurboQuantPreset

__all__ = ["SUPPORTED_DTYPES", "KVPlan", "plan_kv"]

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class KVPlan:
    """How one KV tensor is split into raw and compressed layers, with all the byte counts."""

    shape: tuple[int, int, int, int]
    dtype: torch.dtype
    fused: bool
    num_layers: int
    num_tokens: int
    num_heads: int
    head_dim: int
    quant_start: int
    quant_end: int
    padded_tokens: int
    slot_stride: int

    @property
    def quant_layers(self) -> int:
        return self.quant_end - self.quant_start

    @property
    def all_raw(self) -> bool:
        """True when no layer is compressed (the tensor would be stored uncompressed)."""
        return self.quant_layers == 0 and self.num_layers > 0

    def raw_bytes(self, layers: int) -> int:
        """Bytes of ``layers`` raw layers (K and V together)."""
        kv, _, t, hidden = self.shape
        return kv * layers * t * hidden * self.dtype.itemsize

    @property
    def first_raw_bytes(self) -> int:
        return self.raw_bytes(self.quant_start)

    @property
    def compressed_bytes(self) -> int:
        return self.quant_layers * self.padded_tokens * self.num_heads * self.slot_stride

    @property
    def last_raw_bytes(self) -> int:
        return self.raw_bytes(self.num_layers - self.quant_end)

    @property
    def nbytes(self) -> int:
        """Exact size of the serialized stream of this tensor."""
        return self.first_raw_bytes + self.compressed_bytes + self.last_raw_bytes


def plan_kv(
    shape: torch.Size | tuple[int, ...] | list[int],
    dtype: torch.dtype,
    *,
    preset: TurboQuantPreset,
    head_dim: int,
    block_size: int,
    skip_first_layers: int,
    skip_last_layers: int,
) -> KVPlan:
    """Validate one KV tensor's shape and dtype and plan its stream; ``ValueError`` if invalid."""
    dims = tuple(int(s) for s in shape)
    if len(dims) != 4:
        raise ValueError(
            "TurboQuant serde expects 4D KV tensor [kv_size, L, T, hidden_dim] "
            f"(kv_size 2: K and V; kv_size 1: fused [K|V] per head), got {dims}"
        )
    kv_size, num_layers, num_tokens, hidden = dims
    if kv_size not in (1, 2):
        raise ValueError(
            f"TurboQuant serde expects kv_size 1 (fused K/V) or 2 (split K/V) in dimension 0 "
            f"of {dims}, got kv_size={kv_size}"
        )
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"TurboQuant serde supports bfloat16, float16 and float32 KV tensors, got {dtype}"
        )
    fused = kv_size == 1
    unit = 2 * head_dim if fused else head_dim
    if hidden % unit:
        what = f"2*head_dim={unit} (fused [K|V] layout)" if fused else f"head_dim={head_dim}"
        raise ValueError(f"hidden_dim={hidden} must be divisible by {what}; shape {dims}")
    quant_start = min(skip_first_layers, num_layers)
    quant_end = max(quant_start, num_layers - skip_last_layers)
    return KVPlan(
        shape=(kv_size, num_layers, num_tokens, hidden),
        dtype=dtype,
        fused=fused,
        num_layers=num_layers,
        num_tokens=num_tokens,
        num_heads=hidden // unit,
        head_dim=head_dim,
        quant_start=quant_start,
        quant_end=quant_end,
        padded_tokens=math.ceil(num_tokens / block_size) * block_size,
        slot_stride=preset.slot_stride(head_dim),
    )
