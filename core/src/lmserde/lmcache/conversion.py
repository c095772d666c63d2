"""Turning LMCache's keys, layouts and whole KV objects into what lmserde serdes expect.

LMCache's ``ObjectKey`` and ``MemoryLayoutDesc`` carry the same fields as lmserde's, so the
conversion is a field copy; LMCache's memory objects are used as they are (``MemoryObj`` is
duck-type compatible). A host that hands a multi serde one whole object instead of a tuple of
per-slot views (LMCache 0.5.6's wrapper does) gets the tuple built here from the slot mapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.multi import GroupSlotView, layout_desc_to_group

__all__ = ["as_lmserde_key", "as_lmserde_layout", "as_slot_group", "as_slot_layouts"]


def as_lmserde_key(key: Any) -> ObjectKey:
    """An lmserde :class:`~lmserde.ObjectKey` with the fields of ``key`` (LMCache's or ours)."""
    if isinstance(key, ObjectKey):
        return key
    try:
        return ObjectKey(
            chunk_hash=bytes(key.chunk_hash),
            model_name=key.model_name,
            kv_rank=int(key.kv_rank),
            object_group_id=int(getattr(key, "object_group_id", 0)),
            cache_salt=getattr(key, "cache_salt", "") or "",
        )
    except AttributeError as exc:
        raise ValueError(f"not an object key: {key!r} ({exc})") from None


def as_lmserde_layout(layout: Any) -> Any:
    """An lmserde layout (or tuple of layouts/``None``) with the shapes and dtypes of ``layout``."""
    if layout is None or isinstance(layout, MemoryLayoutDesc):
        return layout
    if isinstance(layout, tuple):
        return tuple(as_lmserde_layout(item) for item in layout)
    try:
        return MemoryLayoutDesc(list(layout.shapes), list(layout.dtypes))
    except AttributeError as exc:
        raise ValueError(f"not a memory layout: {layout!r} ({exc})") from None


def as_slot_layouts(layout: Any, mapping: Sequence[int | None] | None) -> Any:
    """The per-slot layouts a multi serde estimates from, given a whole-object layout."""
    converted = as_lmserde_layout(layout)
    if mapping is None or isinstance(converted, tuple):
        return converted
    return layout_desc_to_group(converted, mapping)


def as_slot_group(obj: Any, mapping: Sequence[int | None] | None) -> Any:
    """The item a serde processor expects: ``obj`` itself for a single-tensor serde, or one
    :class:`~lmserde.GroupSlotView` per slot (``None`` for absent slots) for a multi serde.

    A tuple is passed through: the host already split the object into slots.
    """
    if mapping is None or obj is None or isinstance(obj, tuple):
        return obj
    groups = len(obj.get_shapes())
    for g in mapping:
        if g is not None and not 0 <= g < groups:
            raise ValueError(
                f"serde slot mapping {tuple(mapping)} references group {g}, but the object has "
                f"{groups} group(s)"
            )
    return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)
