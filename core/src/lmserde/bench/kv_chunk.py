"""``KVChunk``: the keys and values of one cache chunk, as the bench's data sources produce them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["KVChunk", "KV_DTYPES", "select_layers"]

#: Element types a KV chunk may have (what attention layers cache in practice).
KV_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class KVChunk:
    """Keys and values of ``T`` tokens of ``L`` layers: two ``[L, T, H, D]`` tensors.

    ``layer_ids`` are the model's layer indices of the ``L`` layers (informational);
    ``start_position`` is the sequence position of token 0 (it fixes the rotary phase of keys).
    """

    keys: torch.Tensor
    values: torch.Tensor
    layer_ids: tuple[int, ...]
    start_position: int = 0

    def __post_init__(self) -> None:
        k, v = self.keys, self.values
        if k.dim() != 4:
            raise ValueError(f"KVChunk keys must be [layers, tokens, heads, head_dim], got {list(k.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"KVChunk keys {list(k.shape)} and values {list(v.shape)} differ in shape")
        if k.dtype != v.dtype or k.dtype not in KV_DTYPES:
            allowed = ", ".join(str(d).removeprefix("torch.") for d in KV_DTYPES)
            raise ValueError(
                f"KVChunk keys/values must share one dtype among {allowed}; got {k.dtype}, {v.dtype}"
            )
        if len(self.layer_ids) != k.shape[0]:
            raise ValueError(f"KVChunk has {k.shape[0]} layers but {len(self.layer_ids)} layer ids")

    @property
    def num_layers(self) -> int:
        return int(self.keys.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.keys.shape[1])

    @property
    def num_heads(self) -> int:
        return int(self.keys.shape[2])

    @property
    def head_dim(self) -> int:
        return int(self.keys.shape[3])

    @property
    def dtype(self) -> torch.dtype:
        return self.keys.dtype

    @property
    def nbytes(self) -> int:
        """Raw bytes of keys plus values."""
        return 2 * self.keys.numel() * self.keys.element_size()

    def fused(self) -> torch.Tensor:
        """The single-tensor layout ``[2, L, T, H*D]`` (K at index 0, V at 1), contiguous."""
        L, T, H, D = self.keys.shape
        return torch.stack((self.keys, self.values)).reshape(2, L, T, H * D).contiguous()


def select_layers(total: int, count: int) -> tuple[int, ...]:
    """``count`` layer indices of ``total``, evenly spaced, always including the first and last."""
    if not 1 <= count <= total:
        raise ValueError(f"layers per chunk must be in [1, {total}], got {count}")
    if count == 1:
        return (0,)
    # round half up (step >= 1 keeps the indices distinct)
    return tuple(math.floor(i * (total - 1) / (count - 1) + 0.5) for i in range(count))
