"""Typed tensors of the K and V slot objects a multi serde receives.

A slot object exposes ``tensor`` (``GroupSlotView``, ``MemoryObj``, test doubles). A group whose
byte offset is not aligned to its dtype has no typed view; for a ``GroupSlotView`` its bytes are
then reached through the parent's ``raw_data`` and staged through an aligned copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lmserde import MemoryLayoutDesc

__all__ = ["input_tensor", "output_tensor"]


def _group_bytes(obj: Any) -> tuple[torch.Tensor, torch.Size, torch.dtype] | None:
    """The raw bytes, shape and dtype of a parent object's group, or ``None`` if not a group view."""
    parent, index = getattr(obj, "parent", None), getattr(obj, "index", None)
    raw = getattr(parent, "raw_data", None)
    if parent is None or not isinstance(index, int) or not isinstance(raw, torch.Tensor):
        return None
    shapes, dtypes = parent.get_shapes(), parent.get_dtypes()
    offsets = MemoryLayoutDesc(shapes, dtypes).group_offsets()
    return raw[offsets[index] : offsets[index + 1]], shapes[index], dtypes[index]


def _typed(obj: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(typed tensor, raw group bytes it was staged from or None)``."""
    try:
        return obj.tensor, None
    except RuntimeError:
        located = _group_bytes(obj)
        if located is None:
            raise
        raw, shape, dtype = located
        staged = raw.clone()
        return (staged.view(dtype).view(shape) if raw.numel() else torch.empty(shape, dtype=dtype)), raw


def input_tensor(obj: Any) -> torch.Tensor | None:
    """The typed tensor of a source slot object (``None`` if the object carries none)."""
    return _typed(obj)[0]


def output_tensor(obj: Any) -> tuple[torch.Tensor | None, Callable[[], None] | None]:
    """The tensor to decode a destination slot into, and a commit step for a staged group.

    Call the commit step (when not ``None``) after writing the tensor: it copies the staged bytes
    into the misaligned group.
    """
    tensor, raw = _typed(obj)
    if tensor is None or raw is None:
        return tensor, None
    staged = tensor

    def commit() -> None:
        if raw.numel():
            raw.copy_(staged.reshape(-1).view(torch.uint8))

    return tensor, commit
