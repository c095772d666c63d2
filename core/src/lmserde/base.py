"""The serde contracts: synchronous transforms and the asynchronous, fd-signalled processor."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["SerdeTaskId", "Serializer", "Deserializer", "SerdeProcessor", "SerdeConfig"]

SerdeTaskId = int


class Serializer(ABC):
    """Turns one KV-shaped object into bytes. Pure: no threads, no fds.

    ``serialize(src, dst, key)`` writes into the byte buffer ``dst`` (capacity at least
    ``estimate_serialized_size(layout of src)``) and returns the number of bytes written. Write raw
    bytes through ``memoryview(dst.byte_array).cast("B")`` or a tensor view, never by slicing
    ``byte_array`` directly. ``key`` is the object's key; per-object serdes (encryption) read it.
    """

    @abstractmethod
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int: ...

    @abstractmethod
    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        """An upper bound on ``serialize``'s output for any object of this layout.

        Depends on the layout only; any safety margin belongs here.
        """


class Deserializer(ABC):
    """Turns bytes back into one KV-shaped object. Pure: no threads, no fds.

    ``src`` may be larger than the stored frame: lengths come from ``dst`` or an in-band header,
    never from ``len(src)``. Any problem raises; the caller turns it into a miss.
    """

    @abstractmethod
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None: ...


class SerdeProcessor(ABC):
    """Asynchronous, batched serde: submit returns an id at once; completion signals an event fd.

    The serialize and deserialize fds are distinct and coalescing. ``query_*_result(id)`` returns
    ``True`` (every item succeeded) or ``False`` exactly once, ``None`` while pending, for unknown
    ids and after the result was taken; it never raises. ``close()`` releases fds and workers.
    """

    @abstractmethod
    def get_serialize_event_fd(self) -> int: ...

    @abstractmethod
    def get_deserialize_event_fd(self) -> int: ...

    @abstractmethod
    def submit_serialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[MemoryObj], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId: ...

    @abstractmethod
    def query_serialize_result(self, task_id: SerdeTaskId) -> bool | None: ...

    @abstractmethod
    def submit_deserialize(
        self, src_objs: Sequence[MemoryObj], dst_objs: Sequence[Any], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId: ...

    @abstractmethod
    def query_deserialize_result(self, task_id: SerdeTaskId) -> bool | None: ...

    @abstractmethod
    def estimate_serialized_size(self, layout_desc: Any) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def serializer_group_size(self) -> int | None:
        """Group arity of a multi serde; ``None`` for a single-tensor serde."""
        return None

    def deserializer_group_size(self) -> int | None:
        return None

    def input_slot_mapping(self) -> tuple[int | None, ...] | None:
        """Parent object-group index feeding each serialize slot (``None`` = absent slot)."""
        return None

    def output_slot_mapping(self) -> tuple[int | None, ...] | None:
        return None


@dataclass
class SerdeConfig:
    """Which serde an adapter uses: ``type`` selects the factory; ``kwargs`` reach it."""

    type: str
    kwargs: dict[str, Any] = field(default_factory=dict)
