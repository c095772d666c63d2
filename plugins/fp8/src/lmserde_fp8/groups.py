"""The object groups of a KV memory object, as float buffers the codec can read or write.

Works on any object with LMCache's ``MemoryObj`` surface (duck typing): a single-group object is
used through ``.tensor``; a multi-group object through ``get_tensor(i)``, except that a group whose
byte offset is not aligned to its dtype (no typed view) is accessed in place through ``raw_data``.
Groups are packed back to back in group order; allocator padding after the last one is never
touched.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from lmserde_fp8.float_buffer import FloatBuffer

__all__ = ["object_groups", "object_shapes"]


def object_shapes(obj: Any) -> list[torch.Size] | None:
    """The group shapes of ``obj``, or ``None`` for a bare object that only has ``.tensor``."""
    get_shapes = getattr(obj, "get_shapes", None)
    if not callable(get_shapes):
        return None
    return [torch.Size(s) for s in get_shapes()]


def object_groups(obj: Any, *, role: str) -> list[FloatBuffer]:
    """One buffer per object group of ``obj`` (``role`` names it in errors: "src" or "dst")."""
    shapes = object_shapes(obj)
    if shapes is None or len(shapes) == 1:
        tensor = getattr(obj, "tensor", None)
        if tensor is None:
            raise ValueError(f"Fp8 serde requires src and dst to have tensors ({role} has none)")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"Fp8 serde: {role}.tensor is not a torch.Tensor")
        return [FloatBuffer.of_tensor(tensor)]
    dtypes = list(obj.get_dtypes())
    buffers: list[FloatBuffer] = []
    offset = 0
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True)):
        nbytes = math.prod(shape) * dtype.itemsize
        try:
            tensor = obj.get_tensor(index)
        except (RuntimeError, ValueError):
            tensor = None  # misaligned group: no typed view
        if tensor is not None:
            buffers.append(FloatBuffer.of_tensor(tensor))
        else:
            raw = getattr(obj, "raw_data", None)
            if raw is None:
                raise ValueError(f"Fp8 serde: {role} group {index} has neither a tensor nor raw_data")
            buffers.append(FloatBuffer.of_bytes(raw[offset : offset + nbytes], dtype))
        offset += nbytes
    return buffers
