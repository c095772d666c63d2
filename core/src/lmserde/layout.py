"""Memory layouts: the shapes and dtypes of an object's groups, and the flat byte layout of a serde buffer."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

__all__ = [
    "MemoryLayoutDesc",
    "serialized_layout_desc",
    "group_nbytes",
]


class MemoryLayoutDesc:
    """Per-group shapes and dtypes of a memory object; hashable and compared by value.

    ``shapes[i]`` / ``dtypes[i]`` describe object group ``i``. Lists of different lengths raise
    ``ValueError``. Group bytes are packed back to back in group order with no alignment padding.
    """

    __slots__ = ("_dtypes", "_shapes")

    def __init__(self, shapes: Sequence[Iterable[int]], dtypes: Sequence[torch.dtype]) -> None:
        shape_list = [torch.Size(s) for s in shapes]
        dtype_list = list(dtypes)
        if len(shape_list) != len(dtype_list):
            raise ValueError(
                f"MemoryLayoutDesc needs one dtype per shape: got {len(shape_list)} shapes and "
                f"{len(dtype_list)} dtypes"
            )
        for d in dtype_list:
            if not isinstance(d, torch.dtype):
                raise TypeError(f"MemoryLayoutDesc dtypes must be torch.dtype, got {d!r}")
        self._shapes = shape_list
        self._dtypes = dtype_list

    @property
    def shapes(self) -> list[torch.Size]:
        """Per-group shapes (a copy)."""
        return list(self._shapes)

    @property
    def dtypes(self) -> list[torch.dtype]:
        """Per-group dtypes (a copy)."""
        return list(self._dtypes)

    @property
    def num_groups(self) -> int:
        return len(self._shapes)

    def group_nbytes(self, index: int) -> int:
        """Bytes of group ``index``."""
        return group_nbytes(self._shapes[index], self._dtypes[index])

    def group_offsets(self) -> list[int]:
        """Byte offset of each group in the packed object, plus the total as last element."""
        offsets = [0]
        for i in range(len(self._shapes)):
            offsets.append(offsets[-1] + self.group_nbytes(i))
        return offsets

    @property
    def nbytes(self) -> int:
        """Total bytes of all groups."""
        return sum(self.group_nbytes(i) for i in range(len(self._shapes)))

    @property
    def numel(self) -> int:
        """Total elements of all groups."""
        return sum(math.prod(s) for s in self._shapes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryLayoutDesc):
            return NotImplemented
        return self._shapes == other._shapes and self._dtypes == other._dtypes

    def __hash__(self) -> int:
        return hash((tuple(self._shapes), tuple(self._dtypes)))

    def __repr__(self) -> str:
        groups = ", ".join(
            f"{list(s)}:{str(d).removeprefix('torch.')}"
            for s, d in zip(self._shapes, self._dtypes)
        )
        return f"MemoryLayoutDesc({groups})"


def group_nbytes(shape: Iterable[int], dtype: torch.dtype) -> int:
    """Bytes of one dense group of ``shape`` and ``dtype``."""
    return math.prod(shape) * dtype.itemsize


class _SizeEstimator(Protocol):
    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc, /) -> int: ...


def serialized_layout_desc(layout_desc: MemoryLayoutDesc, serde: _SizeEstimator) -> MemoryLayoutDesc:
    """Layout of a temporary byte buffer able to hold ``serde``'s output for ``layout_desc``.

    A single flat ``torch.uint8`` group of ``serde.estimate_serialized_size(layout_desc)`` bytes.
    """
    size = int(serde.estimate_serialized_size(layout_desc))
    if size < 0:
        raise ValueError(f"estimate_serialized_size returned a negative size ({size})")
    return MemoryLayoutDesc([torch.Size([size])], [torch.uint8])
