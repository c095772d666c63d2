"""Object keys, byte buffers and KV objects for the aesgcm tests."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from lmserde import ObjectKey, TensorMemoryObj


def write_private(path: Path, data: bytes, mode: int = 0o600) -> Path:
    """Create ``path`` holding ``data`` with permission bits ``mode``."""
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def make_key(
    chunk: bytes = b"\x11" * 16,
    model: str = "org/model-7b",
    rank: int = 0x01010000,
    group: int = 0,
    salt: str = "alice",
) -> ObjectKey:
    return ObjectKey(chunk, model, rank, group, salt)


def byte_obj(data: bytes) -> TensorMemoryObj:
    """A byte-buffer object holding exactly ``data``."""
    tensor = torch.tensor(list(data), dtype=torch.uint8)
    return TensorMemoryObj.from_tensor(tensor)


def buffer(size: int, fill: int = 0) -> TensorMemoryObj:
    """A byte buffer of ``size`` bytes, every byte ``fill``."""
    return TensorMemoryObj.from_tensor(torch.full((size,), fill, dtype=torch.uint8))


def obj_bytes(obj: TensorMemoryObj) -> bytes:
    """The logical bytes of ``obj``."""
    return bytes(memoryview(obj.byte_array).cast("B"))


def kv_object(shape: list[int], dtype: torch.dtype, seed: int = 0) -> TensorMemoryObj:
    """A single-group KV-like object with seeded random values."""
    gen = torch.Generator().manual_seed(seed)
    return TensorMemoryObj.from_tensor(torch.randn(shape, generator=gen).to(dtype))
