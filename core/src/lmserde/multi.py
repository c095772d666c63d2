"""Multi-output serdes: one serialized blob from, or to, a fixed-length tuple of optional objects.

A ``None`` slot means "absent" on the serialize input (it must be allowed by the serde, else
``ValueError``) and "do not materialise, never touch" on the deserialize output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch

from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc, group_nbytes
from lmserde.memory import MemoryObj
from lmserde.transforms import Deserializer, Serializer

__all__ = [
    "MemoryObjGroup",
    "LayoutDescGroup",
    "MultiSerializer",
    "MultiDeserializer",
    "validate_group_size",
    "check_group_size",
    "single_to_multi_serializer",
    "single_to_multi_deserializer",
    "layout_desc_to_group",
    "GroupSlotView",
    "item_size",
]

MemoryObjGroup = tuple[Any | None, ...]
LayoutDescGroup = tuple[MemoryLayoutDesc | None, ...]


def check_group_size(group_size: int, *, owner: str) -> int:
    """Validate a declared ``group_size``: a positive int."""
    if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
        raise ValueError(f"{owner}.group_size must be a positive int, got {group_size!r}")
    return group_size


def validate_group_size(group: Sequence[Any], expected: int, *, role: str) -> None:
    """Raise ``ValueError`` unless ``len(group) == expected``; ``role`` names the argument."""
    check_group_size(expected, owner="MultiSerde")
    if len(group) != expected:
        raise ValueError(
            f"MultiSerde {role} group length {len(group)} does not match expected {expected}"
        )


class MultiSerializer(ABC):
    """Serializes a ``MemoryObjGroup`` of ``group_size`` slots into one byte buffer.

    Implementations document ``group_size``, what each slot means and which slots may be ``None``;
    ``estimate_serialized_size`` must accept ``None`` for optional slots.
    ``authenticates_output`` has the meaning documented on :class:`~lmserde.Serializer`.
    """

    authenticates_output: bool = False

    @property
    @abstractmethod
    def group_size(self) -> int:
        """Number of slots of every source group (a positive ``int``, constant per instance)."""

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        """Parent object-group index of each slot; identity by default."""
        return tuple(range(check_group_size(self.group_size, owner=type(self).__name__)))

    @abstractmethod
    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        """Write the serialized form of the slots ``src`` (``None`` = absent) into ``dst``;
        return the bytes written. Contract, ownership and threading as
        :meth:`lmserde.Serializer.serialize`."""

    @abstractmethod
    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        """An upper bound on ``serialize``'s output for slots of these layouts (``None`` for an
        absent slot). Depends on the layouts only; thread-safe."""


class MultiDeserializer(ABC):
    """Deserializes one byte buffer into a ``MemoryObjGroup``; ``None`` slots are never touched."""

    @property
    @abstractmethod
    def group_size(self) -> int:
        """Number of slots of every destination group (a positive ``int``, constant)."""

    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        """Parent object-group index each slot restores; identity by default."""
        return tuple(range(check_group_size(self.group_size, owner=type(self).__name__)))

    @abstractmethod
    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        """Decode ``src`` into the slots ``dst``; a ``None`` slot is never touched. Contract,
        ownership and threading as :meth:`lmserde.Deserializer.deserialize`."""


class _SingleAsMultiSerializer(MultiSerializer):
    def __init__(self, inner: Serializer) -> None:
        self._inner = inner

    @property
    def group_size(self) -> int:
        return 1

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        if len(src) != 1:
            raise ValueError(f"single-tensor bridge expected group of size 1, got {len(src)}")
        if src[0] is None:
            raise ValueError("single-tensor bridge does not admit a None src slot")
        return self._inner.serialize(src[0], dst, key)

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        if len(layout_descs) != 1:
            raise ValueError(
                f"single-tensor bridge expected group of size 1, got {len(layout_descs)}"
            )
        if layout_descs[0] is None:
            raise ValueError("single-tensor bridge requires a non-None layout descriptor")
        return self._inner.estimate_serialized_size(layout_descs[0])


class _SingleAsMultiDeserializer(MultiDeserializer):
    def __init__(self, inner: Deserializer) -> None:
        self._inner = inner

    @property
    def group_size(self) -> int:
        return 1

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        if len(dst) != 1:
            raise ValueError(f"single-tensor bridge expected group of size 1, got {len(dst)}")
        if dst[0] is None:
            return
        self._inner.deserialize(src, dst[0], key)


def single_to_multi_serializer(serializer: Serializer) -> MultiSerializer:
    """Adapt a single-tensor serializer to the length-1 group interface (identical bytes)."""
    return _SingleAsMultiSerializer(serializer)


def single_to_multi_deserializer(deserializer: Deserializer) -> MultiDeserializer:
    """Adapt a single-tensor deserializer; a ``(None,)`` destination is a deliberate no-op."""
    return _SingleAsMultiDeserializer(deserializer)


def layout_desc_to_group(
    parent: MemoryLayoutDesc, mapping: Sequence[int | None]
) -> LayoutDescGroup:
    """Per-slot layouts: slot ``j`` gets parent group ``mapping[j]``, or ``None``."""
    shapes, dtypes = parent.shapes, parent.dtypes
    slots: list[MemoryLayoutDesc | None] = []
    for j in mapping:
        if j is None:
            slots.append(None)
            continue
        if not 0 <= j < len(shapes):
            raise ValueError(
                f"slot mapping references parent group {j} but parent layout has only "
                f"{len(shapes)} groups"
            )
        slots.append(MemoryLayoutDesc([shapes[j]], [dtypes[j]]))
    return tuple(slots)


class GroupSlotView:
    """One object group of a parent object, handed to one serde slot.

    Exposes ``tensor`` (the typed group view), the group's shape/dtype, and ``parent`` / ``index``.
    """

    __slots__ = ("index", "parent")

    def __init__(self, parent: MemoryObj, index: int) -> None:
        self.parent = parent
        self.index = index

    @property
    def tensor(self) -> torch.Tensor:
        return self.parent.get_tensor(self.index)

    def get_shapes(self) -> list[torch.Size]:
        return [self.parent.get_shapes()[self.index]]

    def get_dtypes(self) -> list[torch.dtype]:
        return [self.parent.get_dtypes()[self.index]]

    def get_size(self) -> int:
        """Bytes of the group."""
        return group_nbytes(self.parent.get_shapes()[self.index],
                            self.parent.get_dtypes()[self.index])

    def group_bytes(self) -> torch.Tensor:
        """Flat uint8 view of the group's bytes in the parent (works for misaligned groups)."""
        layout = MemoryLayoutDesc(self.parent.get_shapes(), self.parent.get_dtypes())
        start = layout.group_offsets()[self.index]
        return self.parent.raw_data[start : start + layout.group_nbytes(self.index)]

    def __repr__(self) -> str:
        return f"GroupSlotView(group={self.index}, parent={self.parent!r})"


def item_size(item: Any) -> int:
    """Logical bytes of a processor item: an object, a ``GroupSlotView``, ``None`` (0) or a tuple
    of those (summed). Objects without ``get_size`` count their ``tensor``'s bytes, or 0."""
    if item is None:
        return 0
    if isinstance(item, tuple):
        return sum(item_size(i) for i in item)
    get_size = getattr(item, "get_size", None)
    if callable(get_size):
        return int(get_size())
    tensor = getattr(item, "tensor", None)
    return int(tensor.numel() * tensor.element_size()) if tensor is not None else 0
