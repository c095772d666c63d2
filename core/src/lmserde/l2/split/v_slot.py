"""``VHalfProcessor``: a split-tier serde seen as a serde of one-group objects holding V alone.

The split-tier adapter hands the serde wrapper a view of the V group only (a one-group object),
so the wrapper — and its stored-object frame — works unchanged. This view renumbers the serde's
slot mapping for such objects (``(None, 1)`` → ``(None, 0)``) and delegates everything else to the
real processor, which it owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lmserde.base import SerdeProcessor, SerdeTaskId

__all__ = ["VHalfProcessor"]


class VHalfProcessor(SerdeProcessor):
    """``processor`` with slot mappings ``v_mapping`` (both directions); closing closes it."""

    def __init__(self, processor: SerdeProcessor, v_mapping: tuple[int | None, ...]) -> None:
        self._proc = processor
        self._mapping = tuple(v_mapping)

    @property
    def processor(self) -> SerdeProcessor:
        """The wrapped processor."""
        return self._proc

    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return self._mapping

    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return self._mapping

    def serializer_group_size(self) -> int | None:
        return self._proc.serializer_group_size()

    def deserializer_group_size(self) -> int | None:
        return self._proc.deserializer_group_size()

    def get_serialize_event_fd(self) -> int:
        return self._proc.get_serialize_event_fd()

    def get_deserialize_event_fd(self) -> int:
        return self._proc.get_deserialize_event_fd()

    def submit_serialize(self, src_objs: Sequence[Any], dst_objs: Sequence[Any],
                         keys: Sequence[Any]) -> SerdeTaskId:
        return self._proc.submit_serialize(src_objs, dst_objs, keys)

    def query_serialize_result(self, task_id: SerdeTaskId) -> bool | None:
        return self._proc.query_serialize_result(task_id)

    def submit_deserialize(self, src_objs: Sequence[Any], dst_objs: Sequence[Any],
                           keys: Sequence[Any]) -> SerdeTaskId:
        return self._proc.submit_deserialize(src_objs, dst_objs, keys)

    def query_deserialize_result(self, task_id: SerdeTaskId) -> bool | None:
        return self._proc.query_deserialize_result(task_id)

    def estimate_serialized_size(self, layout_desc: Any) -> int:
        return self._proc.estimate_serialized_size(layout_desc)

    def close(self) -> None:
        self._proc.close()

    def __getattr__(self, name: str) -> Any:
        # optional capabilities (get_config, authenticates_output, query_deserialize_outcome,
        # serde_type, serializer, ...) are the wrapped processor's
        if name.startswith("__") or name in ("_proc", "_mapping"):
            raise AttributeError(name)
        return getattr(self._proc, name)
