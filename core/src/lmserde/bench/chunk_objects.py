"""KV chunks as the memory objects a serde expects, and the serde items built from them.

Single-tensor serdes get one group ``[2, L, T, H*D]`` (K at index 0, V at 1: the layout LMCache's
TurboQuant parses). Two-slot multi serdes (``serializer_group_size() == 2``) get a two-group
object: group 0 = K ``[L, T, H*D]``, group 1 = V ``[L, T, H*D]``, handed to the serde as
:class:`~lmserde.GroupSlotView` tuples through its slot mappings (as the serde wrapper does).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import torch

from lmserde.base import SerdeProcessor
from lmserde.bench.kv_chunk import KVChunk
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj
from lmserde.multi import GroupSlotView, layout_desc_to_group

__all__ = ["ChunkForm", "chunk_form", "chunk_layout", "fill_object", "make_object", "read_kv",
           "serialize_items", "deserialize_items", "serialized_capacity", "allocate_buffer"]


class ChunkForm(enum.Enum):
    """How a chunk is laid out for a serde."""

    SINGLE = "single group [2, L, T, H*D]"
    KV_GROUPS = "two groups: K [L, T, H*D], V [L, T, H*D]"


def chunk_form(processor: SerdeProcessor) -> ChunkForm:
    """The form ``processor`` consumes; ``ValueError`` for group arities other than 1 and 2."""
    sizes = (processor.serializer_group_size(), processor.deserializer_group_size())
    if sizes == (None, None) or sizes == (1, 1):
        return ChunkForm.SINGLE
    if sizes == (2, 2):
        return ChunkForm.KV_GROUPS
    raise ValueError(
        f"bench runs single-tensor serdes and two-slot (K, V) multi serdes; this serde has group "
        f"sizes {sizes[0]} (serialize) / {sizes[1]} (deserialize)"
    )


def chunk_layout(form: ChunkForm, layers: int, tokens: int, hidden: int,
                 dtype: torch.dtype) -> MemoryLayoutDesc:
    """The object layout of a chunk in ``form``."""
    if form is ChunkForm.SINGLE:
        return MemoryLayoutDesc([[2, layers, tokens, hidden]], [dtype])
    return MemoryLayoutDesc([[layers, tokens, hidden]] * 2, [dtype, dtype])


def _layout_of(chunk: KVChunk, form: ChunkForm) -> MemoryLayoutDesc:
    return chunk_layout(form, chunk.num_layers, chunk.num_tokens,
                        chunk.num_heads * chunk.head_dim, chunk.dtype)


def fill_object(obj: TensorMemoryObj, chunk: KVChunk, form: ChunkForm) -> None:
    """Copy ``chunk`` into ``obj`` (whose layout must be ``chunk``'s layout in ``form``)."""
    expected = _layout_of(chunk, form)
    if obj.get_layout() != expected:
        raise ValueError(f"object layout {obj.get_layout()!r} does not match the chunk's {expected!r}")
    L, T, H, D = chunk.keys.shape
    if form is ChunkForm.SINGLE:
        target = obj.get_tensor(0)
        target[0].copy_(chunk.keys.reshape(L, T, H * D))
        target[1].copy_(chunk.values.reshape(L, T, H * D))
    else:
        obj.get_tensor(0).copy_(chunk.keys.reshape(L, T, H * D))
        obj.get_tensor(1).copy_(chunk.values.reshape(L, T, H * D))


def make_object(chunk: KVChunk, form: ChunkForm) -> TensorMemoryObj:
    """A new object holding ``chunk`` in ``form``."""
    obj = TensorMemoryObj.allocate(_layout_of(chunk, form))
    fill_object(obj, chunk, form)
    return obj


def read_kv(obj: MemoryObj, form: ChunkForm, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values ``[L, T, H, D]`` of a chunk object (views, no copy)."""
    if form is ChunkForm.SINGLE:
        both = obj.get_tensor(0)
        k, v = both[0], both[1]
    else:
        k, v = obj.get_tensor(0), obj.get_tensor(1)
    L, T, hidden = k.shape
    return k.view(L, T, heads, hidden // heads), v.view(L, T, heads, hidden // heads)


def _slot_items(obj: MemoryObj, mapping: Sequence[int | None]) -> tuple[Any, ...]:
    return tuple(None if j is None else GroupSlotView(obj, j) for j in mapping)


def serialize_items(processor: SerdeProcessor, objs: Sequence[MemoryObj], form: ChunkForm) -> list[Any]:
    """Source items for ``submit_serialize``: the objects, or slot tuples for multi serdes."""
    if form is ChunkForm.SINGLE:
        return list(objs)
    mapping = processor.input_slot_mapping() or (0, 1)
    return [_slot_items(o, mapping) for o in objs]


def deserialize_items(processor: SerdeProcessor, objs: Sequence[MemoryObj], form: ChunkForm) -> list[Any]:
    """Destination items for ``submit_deserialize``."""
    if form is ChunkForm.SINGLE:
        return list(objs)
    mapping = processor.output_slot_mapping() or (0, 1)
    return [_slot_items(o, mapping) for o in objs]


def serialized_capacity(processor: SerdeProcessor, layout: MemoryLayoutDesc, form: ChunkForm) -> int:
    """Bytes a serialized-buffer must hold for an object of ``layout`` (the serde's estimate)."""
    if form is ChunkForm.SINGLE:
        return int(processor.estimate_serialized_size(layout))
    mapping = processor.input_slot_mapping() or (0, 1)
    return int(processor.estimate_serialized_size(layout_desc_to_group(layout, mapping)))


def allocate_buffer(capacity: int) -> TensorMemoryObj:
    """A byte buffer (``BINARY_BUFFER``, narrowable) of ``capacity`` bytes."""
    return TensorMemoryObj.allocate(MemoryLayoutDesc([[capacity]], [torch.uint8]),
                                    fmt=MemoryFormat.BINARY_BUFFER)
