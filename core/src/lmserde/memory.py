"""Memory objects: KV data and serialized byte buffers as seen by serdes, L1 and L2.

``MemoryObj`` is the duck-typed surface LMCache's serdes use (``tensor``, ``byte_array``,
``get_size``, ``set_used_size``, ``get_shapes``, ``get_dtypes``, ``get_tensor``, ``raw_data``,
``metadata``), so a serde written against lmserde runs on LMCache's objects too.
"""

from __future__ import annotations

import ctypes
import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch

from lmserde.layout import MemoryLayoutDesc

__all__ = [
    "MemoryFormat",
    "MemoryObjMetadata",
    "MemoryObj",
    "TensorMemoryObj",
    "as_byte_tensor",
    "byte_layout",
]


class MemoryFormat(enum.IntEnum):
    """What the bytes of an object mean. Only ``BINARY_BUFFER`` objects may be narrowed."""

    UNDEFINED = 0
    KV_TENSOR = 1
    BINARY_BUFFER = 5


@dataclass
class MemoryObjMetadata:
    """Bookkeeping of a memory object (upstream-compatible field names)."""

    shape: torch.Size
    dtype: torch.dtype | None
    address: int
    phy_size: int
    ref_count: int = 1
    shapes: list[torch.Size] = field(default_factory=list)
    dtypes: list[torch.dtype] = field(default_factory=list)
    fmt: MemoryFormat = MemoryFormat.UNDEFINED


class MemoryObj(ABC):
    """A region of memory holding one object: typed KV groups, or a flat serialized byte buffer."""

    @property
    @abstractmethod
    def metadata(self) -> MemoryObjMetadata: ...

    @property
    @abstractmethod
    def tensor(self) -> torch.Tensor | None:
        """Typed tensor of a single-group object; a flat uint8 view of the used bytes once narrowed."""

    @property
    @abstractmethod
    def byte_array(self) -> memoryview:
        """A ``"<B"`` memoryview over ``get_size()`` bytes; cast with ``.cast("B")`` before writing."""

    @property
    @abstractmethod
    def raw_data(self) -> torch.Tensor:
        """Flat uint8 tensor over the whole allocation, tail padding included."""

    @abstractmethod
    def get_size(self) -> int:
        """Logical size in bytes: the used size once narrowed, else the sum of the group sizes."""

    @abstractmethod
    def set_used_size(self, n: int) -> None:
        """Narrow the logical size to ``n`` bytes (``0 <= n <= phy_size``)."""

    @abstractmethod
    def get_shapes(self) -> list[torch.Size]: ...

    @abstractmethod
    def get_dtypes(self) -> list[torch.dtype]: ...

    @abstractmethod
    def get_tensor(self, index: int) -> torch.Tensor:
        """Typed view of group ``index``."""

    def get_layout(self) -> MemoryLayoutDesc:
        """The object's layout, built from its shapes and dtypes."""
        return MemoryLayoutDesc(self.get_shapes(), self.get_dtypes())


_BYTE_LAYOUTS: dict[int, MemoryLayoutDesc] = {}
_BYTE_LAYOUT_CACHE_LIMIT = 256


def byte_layout(nbytes: int) -> MemoryLayoutDesc:
    """The layout of a flat buffer of ``nbytes`` bytes (one 1-D ``uint8`` group), shared per size
    (layouts are immutable): byte buffers and views are made on the data path for every stored
    object, where building a layout each time costs."""
    layout = _BYTE_LAYOUTS.get(nbytes)
    if layout is None:
        if len(_BYTE_LAYOUTS) >= _BYTE_LAYOUT_CACHE_LIMIT:
            _BYTE_LAYOUTS.clear()
        layout = _BYTE_LAYOUTS[nbytes] = MemoryLayoutDesc([[nbytes]], [torch.uint8])
    return layout


def _layout_of_metadata(metadata: MemoryObjMetadata) -> MemoryLayoutDesc:
    """The layout ``metadata`` describes (a flat byte buffer's: the shared :func:`byte_layout`)."""
    shapes, dtypes = metadata.shapes, metadata.dtypes
    if len(shapes) == 1 and len(shapes[0]) == 1 and dtypes == [torch.uint8]:
        return byte_layout(int(shapes[0][0]))
    return MemoryLayoutDesc(shapes, dtypes)


class TensorMemoryObj(MemoryObj):
    """A memory object backed by a flat uint8 torch tensor.

    Groups are packed back to back in group order with no alignment padding, exactly as the
    layout's :meth:`~lmserde.MemoryLayoutDesc.group_offsets` says; bytes past the last group are
    allocator padding that serdes never read or write. A group whose byte offset is not a multiple
    of its dtype's size has no typed view: :meth:`get_tensor` raises and callers copy through
    :attr:`raw_data` instead.
    """

    def __init__(
        self,
        raw_data: torch.Tensor,
        metadata: MemoryObjMetadata,
        parent_allocator: Any = None,
    ) -> None:
        if raw_data.dtype != torch.uint8 or raw_data.dim() != 1 or not raw_data.is_contiguous():
            raise ValueError("TensorMemoryObj.raw_data must be a contiguous 1-D uint8 tensor")
        if not metadata.shapes:
            metadata.shapes = [metadata.shape]
            metadata.dtypes = [metadata.dtype] if metadata.dtype is not None else []
        self._raw = raw_data
        self._meta = metadata
        self._layout = _layout_of_metadata(metadata)
        self._offsets = self._layout.group_offsets()
        if self._offsets[-1] > raw_data.numel():
            raise ValueError(
                f"layout needs {self._offsets[-1]} bytes but raw_data holds {raw_data.numel()}"
            )
        self._used_size: int | None = None
        self.parent_allocator = parent_allocator

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor) -> TensorMemoryObj:
        """Wrap ``tensor`` (contiguous, on CPU) as a single-group object sharing its memory.

        A 1-D uint8 tensor becomes a ``BINARY_BUFFER`` (narrowable byte buffer).
        """
        if not tensor.is_contiguous():
            raise ValueError("TensorMemoryObj.from_tensor needs a contiguous tensor")
        raw = tensor.reshape(-1).view(torch.uint8) if tensor.numel() else torch.empty(
            0, dtype=torch.uint8, device=tensor.device
        )
        fmt = (
            MemoryFormat.BINARY_BUFFER
            if tensor.dtype == torch.uint8 and tensor.dim() == 1
            else MemoryFormat.KV_TENSOR
        )
        meta = MemoryObjMetadata(
            shape=tensor.shape,
            dtype=tensor.dtype,
            address=raw.data_ptr(),
            phy_size=raw.numel(),
            shapes=[tensor.shape],
            dtypes=[tensor.dtype],
            fmt=fmt,
        )
        obj = cls(raw, meta)
        obj._source = tensor  # keep the caller's tensor alive with the object
        return obj

    @classmethod
    def allocate(
        cls,
        layout: MemoryLayoutDesc,
        *,
        padding: int = 0,
        fmt: MemoryFormat | None = None,
        zero: bool = False,
    ) -> TensorMemoryObj:
        """Allocate an object of ``layout`` (any number of groups) plus ``padding`` tail bytes.

        ``fmt`` defaults to ``BINARY_BUFFER`` for a single 1-D uint8 group, else ``KV_TENSOR``.
        Memory is uninitialised unless ``zero`` is true.
        """
        if padding < 0:
            raise ValueError(f"padding must be >= 0, got {padding}")
        total = layout.nbytes + padding
        raw = torch.zeros(total, dtype=torch.uint8) if zero else torch.empty(total, dtype=torch.uint8)
        return cls.over(raw, layout, fmt=fmt)

    @classmethod
    def over(
        cls, raw: torch.Tensor, layout: MemoryLayoutDesc, *, fmt: MemoryFormat | None = None
    ) -> TensorMemoryObj:
        """An object of ``layout`` over existing uint8 storage ``raw`` (which may be larger)."""
        if fmt is None:
            single_bytes = (
                layout.num_groups == 1
                and layout.dtypes[0] == torch.uint8
                and len(layout.shapes[0]) == 1
            )
            fmt = MemoryFormat.BINARY_BUFFER if single_bytes else MemoryFormat.KV_TENSOR
        shapes, dtypes = layout.shapes, layout.dtypes
        meta = MemoryObjMetadata(
            shape=shapes[0] if len(shapes) == 1 else torch.Size([layout.nbytes]),
            dtype=dtypes[0] if len(dtypes) == 1 else None,
            address=raw.data_ptr(),
            phy_size=raw.numel(),
            shapes=shapes,
            dtypes=dtypes,
            fmt=fmt,
        )
        return cls(raw, meta)

    # -- MemoryObj surface --------------------------------------------------------------------

    @property
    def metadata(self) -> MemoryObjMetadata:
        return self._meta

    @property
    def layout(self) -> MemoryLayoutDesc:
        """The object's layout (shared, immutable)."""
        return self._layout

    @property
    def raw_data(self) -> torch.Tensor:
        return self._raw

    @property
    def tensor(self) -> torch.Tensor:
        if self._used_size is not None:
            return self._raw[: self._used_size]
        if len(self._offsets) != 2:
            raise RuntimeError(
                f".tensor is invalid for a multi-group object ({len(self._offsets) - 1} groups); "
                "use get_tensor(i)"
            )
        return self.get_tensor(0)

    def get_size(self) -> int:
        return self._offsets[-1] if self._used_size is None else self._used_size

    def set_used_size(self, n: int) -> None:
        if self._meta.fmt != MemoryFormat.BINARY_BUFFER:
            raise ValueError(
                "set_used_size is only allowed on byte buffers (metadata.fmt == BINARY_BUFFER); "
                f"this object has fmt={self._meta.fmt.name}"
            )
        n = int(n)
        if not 0 <= n <= self._raw.numel():
            raise ValueError(f"used size {n} outside [0, {self._raw.numel()}] (physical size)")
        self._used_size = n

    def reset_used_size(self) -> None:
        """Undo :meth:`set_used_size`: the logical size is the layout size again."""
        self._used_size = None

    @property
    def byte_array(self) -> memoryview:
        size = self.get_size()
        array = (ctypes.c_uint8 * size).from_address(self._raw.data_ptr())
        array._owner = self._raw  # type: ignore[attr-defined]  # keeps the storage alive
        return memoryview(array)

    def get_shapes(self) -> list[torch.Size]:
        return self._layout.shapes

    def get_dtypes(self) -> list[torch.dtype]:
        return self._layout.dtypes

    def group_bytes(self, index: int) -> torch.Tensor:
        """Flat uint8 view of group ``index``'s bytes (always possible, aligned or not)."""
        return self._raw[self._offsets[index] : self._offsets[index + 1]]

    def group_is_aligned(self, index: int) -> bool:
        """Whether group ``index`` starts at a multiple of its dtype's size."""
        itemsize = self._layout.dtypes[index].itemsize
        return (self._raw.data_ptr() + self._offsets[index]) % itemsize == 0

    def get_tensor(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self._offsets) - 1:
            raise IndexError(f"group {index} out of range ({len(self._offsets) - 1} groups)")
        shape = self._layout.shapes[index]
        dtype = self._layout.dtypes[index]
        if not self.group_is_aligned(index):
            raise RuntimeError(
                f"group {index} ({dtype}) starts at byte offset {self._offsets[index]}, which is not "
                f"a multiple of {dtype.itemsize}; read it through raw_data / group_bytes()"
            )
        raw = self.group_bytes(index)
        if raw.numel() == 0:
            return torch.empty(shape, dtype=dtype, device=raw.device)
        return raw.view(dtype).view(shape)

    def __repr__(self) -> str:
        used = "" if self._used_size is None else f", used={self._used_size}"
        return f"TensorMemoryObj({self._layout!r}, phy={self._raw.numel()}{used})"


def as_byte_tensor(obj: MemoryObj) -> torch.Tensor:
    """A writable flat uint8 tensor over ``obj``'s logical bytes (``get_size()``), without copying.

    Works for any object exposing ``byte_array`` (LMCache's included).
    """
    size = obj.get_size()
    if size == 0:
        return torch.empty(0, dtype=torch.uint8)
    raw = getattr(obj, "raw_data", None)
    if isinstance(raw, torch.Tensor) and raw.dtype == torch.uint8 and raw.dim() == 1:
        return raw[:size]
    view = memoryview(obj.byte_array).cast("B")
    return torch.frombuffer(view, dtype=torch.uint8, count=size)
