"""Shared helpers of the TurboQuant plugin tests."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde_turboquant import codec_native

needs_native = pytest.mark.skipif(not codec_native.available(),
                                  reason="native TurboQuant codec not built")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

KEY = ObjectKey(b"\x01" * 32, "tq/model", 0)


def kv_tensor(shape: list[int], dtype: torch.dtype = torch.bfloat16, seed: int = 0,
              outliers: bool = False) -> torch.Tensor:
    """Seeded normal KV data; ``outliers`` gives a few channels 20x the others (like real keys)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    if outliers:
        x[..., ::37] *= 20.0
    return x.to(dtype)


def serialize(serializer: Any, x: torch.Tensor | list[torch.Tensor], *, fill: int = 0xA5,
              padding: int = 0) -> torch.Tensor:
    """Serialize a tensor (or a multi-group object of several) into a fresh buffer; its bytes."""
    obj = to_object(x)
    n = serializer.estimate_serialized_size(obj.get_layout())
    dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[n + padding]], [torch.uint8]))
    dst.raw_data.fill_(fill)
    written = serializer.serialize(obj, dst, KEY)
    assert written == n
    return dst.raw_data[:n].clone()


def deserialize(deserializer: Any, data: torch.Tensor, like: torch.Tensor | list[torch.Tensor],
                ) -> list[torch.Tensor]:
    """Deserialize ``data`` into an object shaped like ``like``; returns its groups' tensors."""
    layout = to_object(like).get_layout()
    out = TensorMemoryObj.allocate(layout, zero=True)
    deserializer.deserialize(TensorMemoryObj.from_tensor(data.contiguous()), out, KEY)
    return [out.get_tensor(i).clone() for i in range(layout.num_groups)]


def to_object(x: torch.Tensor | list[torch.Tensor]) -> TensorMemoryObj:
    """A memory object holding ``x`` (one group) or the tensors of a list (one group each)."""
    if isinstance(x, torch.Tensor):
        return TensorMemoryObj.from_tensor(x.contiguous())
    layout = MemoryLayoutDesc([t.shape for t in x], [t.dtype for t in x])
    obj = TensorMemoryObj.allocate(layout)
    offsets = layout.group_offsets()
    for i, t in enumerate(x):
        obj.raw_data[offsets[i] : offsets[i + 1]].copy_(t.contiguous().view(-1).view(torch.uint8))
    return obj


def rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """||x - y|| / ||x|| in float32."""
    x, y = x.float(), y.float()
    return float(torch.linalg.vector_norm(x - y) / torch.linalg.vector_norm(x))
