"""Typed access to the KV groups of a memory object (single- or multi-group, aligned or not)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from lmserde import MemoryObj

__all__ = ["GroupAccess", "kv_groups"]


@dataclass
class GroupAccess:
    """One group as a typed tensor; ``write_back`` stores it into the object when it is a copy."""

    tensor: torch.Tensor
    write_back: Callable[[], None] | None = None


def _shapes(obj: MemoryObj) -> list[torch.Size] | None:
    get_shapes = getattr(obj, "get_shapes", None)
    if not callable(get_shapes):
        return None
    try:
        return list(get_shapes())
    except (AssertionError, NotImplementedError, RuntimeError):
        return None


def _copy_group(obj: MemoryObj, begin: int, shape: torch.Size, dtype: torch.dtype,
                load: bool) -> GroupAccess:
    """A typed copy of a group that has no typed view (its byte offset is misaligned)."""
    raw = obj.raw_data[begin : begin + shape.numel() * dtype.itemsize]
    copy = torch.empty(shape, dtype=dtype, device=raw.device)
    flat = copy.view(-1).view(torch.uint8) if copy.numel() else None
    if load and flat is not None:
        flat.copy_(raw)

    def write_back() -> None:
        if flat is not None:
            raw.copy_(flat)

    return GroupAccess(copy, write_back)


def kv_groups(obj: MemoryObj, *, load: bool) -> list[GroupAccess]:
    """Every group of ``obj`` as a tensor, in group order.

    A single-group object uses ``obj.tensor``; groups are views where possible, else copies
    (``load``: fill the copy from the object, for reading). ``ValueError`` without tensors.
    """
    shapes = _shapes(obj)
    if shapes is None or len(shapes) <= 1:
        tensor = obj.tensor
        if tensor is None:
            raise ValueError("TurboQuant serde needs tensor-backed memory objects (.tensor is None)")
        return [GroupAccess(tensor)]
    dtypes = list(obj.get_dtypes())
    groups: list[GroupAccess] = []
    begin = 0
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        shape = torch.Size(shape)
        tensor: torch.Tensor | None
        try:
            tensor = obj.get_tensor(i)
        except (RuntimeError, ValueError):
            tensor = None
        if tensor is None:
            groups.append(_copy_group(obj, begin, shape, dtype, load))
        else:
            groups.append(GroupAccess(tensor))
        begin += shape.numel() * dtype.itemsize
    return groups
