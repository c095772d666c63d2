"""``AdapterUsage``: bytes an L2 adapter holds, in total and per ``cache_salt``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AdapterUsage"]


@dataclass(frozen=True)
class AdapterUsage:
    """A snapshot of stored bytes; ``bytes_by_cache_salt`` is read-only."""

    total_bytes_used: int
    total_capacity_bytes: int
    bytes_by_cache_salt: Mapping[str, int]

    @property
    def usage_fraction(self) -> float:
        """``used / capacity``, or ``-1.0`` when the adapter has no capacity limit."""
        if self.total_capacity_bytes <= 0:
            return -1.0
        return self.total_bytes_used / self.total_capacity_bytes
