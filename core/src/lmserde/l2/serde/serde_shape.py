"""How the wrapper's serde sees an object: its payload bound, the stored bound with the frame,
and the items (group slot views) it serializes from and deserializes into."""

from __future__ import annotations

from typing import Any

from lmserde.base import SerdeProcessor
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj
from lmserde.multi import GroupSlotView, layout_desc_to_group

__all__ = ["SerdeShape"]

_ESTIMATE_CACHE_LIMIT = 256


class SerdeShape:
    """The serde's bounds and item views for the objects of one wrapper.

    ``framer`` is the wrapper's frame codec (``None`` when it does not frame): a layout it cannot
    describe is refused by :meth:`payload_bound`, and its header is part of the stored bound.
    Thread-safe (the bound cache is a plain dict whose races only repeat an estimate).
    """

    def __init__(self, serde: SerdeProcessor, serde_type: str,
                 framer: ObjectFramer | None) -> None:
        self._serde = serde
        self._serde_type = serde_type
        self._framer = framer
        self._in_map = serde.input_slot_mapping()
        self._out_map = serde.output_slot_mapping()
        self._estimates: dict[MemoryLayoutDesc, int] = {}

    def payload_bound(self, layout: MemoryLayoutDesc) -> int:
        """The serde's bound for ``layout`` (cached); a layout the frame cannot describe, or a
        negative estimate, raises ``ValueError``."""
        size = self._estimates.get(layout)
        if size is None:
            if self._framer is not None:
                self._framer.check_layout(layout)
            arg: Any = (layout if self._in_map is None
                        else layout_desc_to_group(layout, self._in_map))
            size = int(self._serde.estimate_serialized_size(arg))
            if size < 0:
                raise ValueError(f"serde '{self._serde_type}' estimated a negative size ({size})")
            if len(self._estimates) >= _ESTIMATE_CACHE_LIMIT:
                self._estimates.clear()
            self._estimates[layout] = size
        return size

    def stored_bound(self, payload_bound: int) -> int:
        """Largest stored object for a serde bound: the frame header is added when framing."""
        return payload_bound + (self._framer.header_bytes if self._framer is not None else 0)

    def serialize_item(self, obj: MemoryObj, layout: MemoryLayoutDesc) -> Any:
        """What the serde serializes from: ``obj``, or its group slot views for a multi-input
        serde (whose input slots must cover each group exactly once)."""
        mapping = self._in_map
        if mapping is None:
            return obj
        used = sorted(g for g in mapping if g is not None)
        if used != list(range(layout.num_groups)):
            raise ValueError(
                f"serde '{self._serde_type}' input slots {mapping} must cover each of the "
                f"object's {layout.num_groups} groups exactly once"
            )
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)

    def deserialize_item(self, obj: MemoryObj, layout: MemoryLayoutDesc) -> Any:
        """What the serde deserializes into: ``obj``, or its group slot views for a
        multi-output serde (whose slots must name existing groups)."""
        mapping = self._out_map
        if mapping is None:
            return obj
        for g in mapping:
            if g is not None and not 0 <= g < layout.num_groups:
                raise ValueError(
                    f"serde '{self._serde_type}' output slot mapping {mapping} references group "
                    f"{g}, but the destination has {layout.num_groups} groups"
                )
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)
