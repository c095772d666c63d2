"""The checks a processor applies around one item: a serializer's returned byte count, and the
zeroing of a deserialize destination whose item failed."""

from __future__ import annotations

import logging
from typing import Any

from lmserde.memory import as_byte_tensor
from lmserde.multi import GroupSlotView, item_size

__all__ = ["SerializedSizeError", "check_serialized_size", "scrub_destination", "capacity_of"]

_log = logging.getLogger(__name__)


class SerializedSizeError(ValueError):
    """A serializer returned something other than a byte count within its destination."""


def capacity_of(dst: Any) -> int | None:
    """Bytes a serialize destination can hold (``None`` when it cannot be told)."""
    if dst is None or isinstance(dst, tuple):
        return None
    if not callable(getattr(dst, "get_size", None)) and getattr(dst, "tensor", None) is None:
        return None
    try:
        return item_size(dst)
    except Exception:
        return None


def check_serialized_size(serde_type: str, n: Any, capacity: int | None) -> int:
    """``n`` if it is a valid byte count for a destination of ``capacity`` bytes."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {type(n).__name__} {n!r}; it must return the "
            "number of bytes written (an int)"
        )
    if n < 0:
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {n}, a negative byte count"
        )
    if capacity is not None and n > capacity:
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {n} bytes, more than its destination holds "
            f"({capacity} bytes)"
        )
    return int(n)


def scrub_destination(dst: Any) -> None:
    """Zero a deserialize destination (an object, a slot view or a tuple of them) whose data must
    not be used, so no partial data survives; best effort, never raises."""
    for obj in dst if isinstance(dst, tuple) else (dst,):
        if obj is None:
            continue
        try:
            if isinstance(obj, GroupSlotView):
                obj.group_bytes().zero_()
            elif hasattr(obj, "byte_array"):
                as_byte_tensor(obj).zero_()
            elif getattr(obj, "tensor", None) is not None:
                obj.tensor.zero_()
        except BaseException:  # best effort on a worker thread
            _log.debug("could not scrub destination %r", obj, exc_info=True)
