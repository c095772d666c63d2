"""What a serde wrapper's store path writes with: one serde configuration (:class:`StoreWriter`),
and what it tells about each store it finished (:data:`StoreObserver`). The ``auto`` serde's
candidates are several writers of one path (:mod:`lmserde.l2.serde.store_path`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lmserde.base import SerdeProcessor
from lmserde.l2.serde.serde_shape import SerdeShape
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.spec import SerdeSizeContract

__all__ = ["StoreObserver", "StoreWriter"]

#: Hears each group of a successful store task: ``(writer index, the group's KV bytes, its
#: stored bytes, its serialize seconds, its share of the inner store seconds)`` (stored bytes:
#: what the inner adapter was handed, frames included; serialize seconds: from the task's
#: serialize submit until that group's result was seen; the task's one inner store time is split
#: among its groups by stored bytes). Called on the poll thread; what it raises is logged, never
#: the task's failure.
StoreObserver = Callable[[int, int, int, float, float], None]


@dataclass(frozen=True)
class StoreWriter:
    """One serde configuration a store path writes with: its processor, its name in logs
    (``serde_type``), its size contract, its frame codec (``None``: unframed), whether its
    frame's head is finished while the inner adapter writes (``head_last``), and its bounds
    and item views (``shape``)."""

    serde: SerdeProcessor
    serde_type: str
    size_contract: SerdeSizeContract
    framer: ObjectFramer | None
    head_last: bool
    shape: SerdeShape
