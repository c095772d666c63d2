"""The two halves of a caller's (K, V) object, as the split tier stores and loads them.

K is kept in L1 as bytes copied from (and, on load, back into) the caller's object; V is handed
to the V side's serde wrapper as a one-group object over the V group's bytes, in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lmserde.keys import ObjectKey
from lmserde.l2.split.placement import SplitSlots
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj

__all__ = ["KVHalves", "split_object", "check_store_keys"]


@dataclass
class KVHalves:
    """The two groups of one caller object: K as bytes in place, V as a one-group view."""

    k_layout: MemoryLayoutDesc
    k_bytes: torch.Tensor  # uint8 view of the K group inside the caller's object
    v_view: TensorMemoryObj  # one-group object over the V group's bytes
    nbytes: int  # the whole object


def split_object(obj: MemoryObj, slots: SplitSlots) -> KVHalves:
    """The halves of ``obj`` (groups ``slots.k_group`` and ``slots.v_group``); ``ValueError``
    for an object that is not two groups or holds fewer bytes than its layout needs."""
    layout = MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())
    if layout.num_groups != 2:
        raise ValueError(
            f"split-tier placement stores two-group (K, V) objects; this object has "
            f"{layout.num_groups} group(s)"
        )
    offsets = layout.group_offsets()
    k, v = slots.k_group, slots.v_group
    raw = obj.raw_data
    if raw.numel() < offsets[-1]:
        raise ValueError(f"object holds {raw.numel()} bytes, its layout needs {offsets[-1]}")
    v_layout = MemoryLayoutDesc([layout.shapes[v]], [layout.dtypes[v]])
    v_view = TensorMemoryObj.over(raw[offsets[v]:offsets[v + 1]], v_layout,
                                  fmt=MemoryFormat.KV_TENSOR)
    return KVHalves(MemoryLayoutDesc([layout.shapes[k]], [layout.dtypes[k]]),
                    raw[offsets[k]:offsets[k + 1]], v_view, offsets[-1])


def check_store_keys(keys: Sequence[ObjectKey]) -> None:
    """``ValueError`` for a store task naming a key twice or a key of an object group other
    than 0 (the split tier stores group 0 only)."""
    if len(set(keys)) != len(keys):
        raise ValueError("the same key appears more than once in one store task")
    groups = sorted({k.object_group_id for k in keys if k.object_group_id != 0})
    if groups:
        raise ValueError(
            f"split-tier placement supports object group 0 only; keys of group(s) {groups} "
            "cannot be stored (configure a serde that stores K and V together for them)"
        )
