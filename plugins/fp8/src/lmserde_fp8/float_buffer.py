"""``FloatBuffer``: a run of float values the codec reads or writes, typed or as raw bytes."""

from __future__ import annotations

import torch

from lmserde_fp8.formats import float_kind

__all__ = ["FloatBuffer"]


class FloatBuffer:
    """``numel`` values of ``dtype`` stored contiguously in ``data``.

    ``data`` is a contiguous 1-D tensor: either of ``dtype`` itself, or the uint8 bytes of the
    values, which may start at an address that is not a multiple of the dtype's size (a misaligned
    object group). The native kernels read and write either form in place. Writers call
    :meth:`commit` after the codec wrote ``data``: a buffer made from a non-contiguous tensor is
    decoded into a contiguous copy and copied back there.
    """

    __slots__ = ("_target", "data", "dtype")

    def __init__(self, data: torch.Tensor, dtype: torch.dtype,
                 target: torch.Tensor | None = None) -> None:
        float_kind(dtype)  # validates the dtype
        if data.dim() != 1 or not data.is_contiguous():
            raise ValueError("FloatBuffer data must be a contiguous 1-D tensor")
        if data.dtype not in (dtype, torch.uint8):
            raise ValueError(f"FloatBuffer data must be {dtype} or uint8 bytes, got {data.dtype}")
        if data.dtype == torch.uint8 and data.numel() % dtype.itemsize:
            raise ValueError(
                f"{data.numel()} bytes are not a whole number of {dtype} values"
            )
        self.data = data
        self.dtype = dtype
        self._target = target

    @classmethod
    def of_tensor(cls, tensor: torch.Tensor) -> FloatBuffer:
        """The values of ``tensor`` (any shape and strides) in row-major order."""
        float_kind(tensor.dtype)
        if tensor.is_contiguous():
            return cls(tensor.reshape(-1), tensor.dtype)
        return cls(tensor.contiguous().reshape(-1), tensor.dtype, target=tensor)

    @classmethod
    def of_bytes(cls, raw: torch.Tensor, dtype: torch.dtype) -> FloatBuffer:
        """Values of ``dtype`` held in the uint8 tensor ``raw`` (alignment not required)."""
        if raw.dtype != torch.uint8:
            raise ValueError(f"expected uint8 bytes, got {raw.dtype}")
        return cls(raw.reshape(-1), dtype)

    @property
    def numel(self) -> int:
        """Number of float values."""
        if self.data.dtype == torch.uint8:
            return self.data.numel() // self.dtype.itemsize
        return self.data.numel()

    @property
    def device(self) -> torch.device:
        return self.data.device

    def address(self) -> int:
        """Address of the first value (for the native kernels)."""
        return self.data.data_ptr()

    def typed(self) -> torch.Tensor:
        """The values as a 1-D tensor of ``dtype`` (a copy when the bytes are misaligned)."""
        if self.data.dtype == self.dtype:
            return self.data
        if self.data.numel() == 0:
            return torch.empty(0, dtype=self.dtype, device=self.data.device)
        if self.data.data_ptr() % self.dtype.itemsize == 0:
            return self.data.view(self.dtype)
        return self.data.clone().view(self.dtype)

    def store(self, values: torch.Tensor) -> None:
        """Write ``values`` (1-D, ``dtype``, ``numel`` elements) into the buffer."""
        if self.data.dtype == self.dtype:
            self.data.copy_(values)
        elif values.numel():
            self.data.copy_(values.contiguous().view(torch.uint8))

    def commit(self) -> None:
        """Copy written values back to a non-contiguous origin tensor, if there is one."""
        if self._target is not None:
            self._target.copy_(self.data.view(self._target.shape))
