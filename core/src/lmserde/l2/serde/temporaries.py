"""The serde wrapper's L1 temporaries: the byte buffers a store serializes into and a load reads
stored objects into, reserved in L1 under the wrapper's tag (invisible to other readers)."""

from __future__ import annotations

import logging

from lmserde.keys import ObjectKey
from lmserde.l1.errors import L1Error
from lmserde.l1.manager import L1Manager
from lmserde.memory import MemoryFormat, MemoryObj, byte_layout

__all__ = ["L1_WRITE_TAG", "Temporaries"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")

#: Tag of the wrapper's L1 staging objects (invisible to other readers).
L1_WRITE_TAG = "serde_wrapper"


class Temporaries:
    """Reserves and releases the wrapper's temporaries in ``l1``. Thread-safe (L1 is)."""

    def __init__(self, l1: L1Manager) -> None:
        self.l1 = l1

    def reserve(self, temp_keys: list[ObjectKey], sizes: list[int]) -> list[MemoryObj] | None:
        """One batched reservation of byte buffers of ``sizes``; on any failure everything
        reserved is released and ``None`` returned (logged)."""
        layouts = [byte_layout(s) for s in sizes]
        same = all(layout is layouts[0] for layout in layouts)
        try:
            result = self.l1.reserve_write(temp_keys, [True] * len(temp_keys),
                                           layouts[0] if same else layouts, tag=L1_WRITE_TAG)
        except (MemoryError, RuntimeError, ValueError) as exc:
            _log.warning("serde wrapper: reserving %d temporaries failed: %s", len(temp_keys), exc)
            self.release_written(temp_keys)
            return None
        temps: list[MemoryObj] = []
        for key in temp_keys:
            error, obj = result.get(key, (L1Error.KEY_NOT_EXIST, None))
            if error is not L1Error.SUCCESS or obj is None:
                reserved = [k for k in temp_keys if result.get(k, (None,))[0] is L1Error.SUCCESS]
                _log.warning("serde wrapper: temporary reservation failed (%s); releasing %d",
                             getattr(error, "name", error), len(reserved))
                self.release_written(reserved)
                return None
            obj.metadata.fmt = MemoryFormat.BINARY_BUFFER
            temps.append(obj)
        return temps

    def to_read_locked(self, temp_keys: list[ObjectKey]) -> list[ObjectKey]:
        """Finish writing ``temp_keys`` and read-lock them; returns the keys L1 locked."""
        result = self.l1.finish_write_and_reserve_read(temp_keys, 1, tag=L1_WRITE_TAG)
        return [k for k in temp_keys if result[k][0] is L1Error.SUCCESS]

    def release_written(self, temp_keys: list[ObjectKey]) -> None:
        """Release temporaries still held for writing."""
        if temp_keys:
            self.l1.finish_write_and_delete(temp_keys, tag=L1_WRITE_TAG)

    def release_read(self, temp_keys: list[ObjectKey]) -> None:
        """Release read-locked temporaries (they are deleted with their last reader)."""
        if temp_keys:
            self.l1.finish_read(temp_keys)
