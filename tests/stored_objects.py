"""Stored objects as bytes, for frame tests: a byte buffer holding exactly those bytes, as an L1
temporary holds an object read back from L2."""

from __future__ import annotations

import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.memory import MemoryFormat


def stored_buffer(stored: bytes) -> TensorMemoryObj:
    """A byte object whose used size is ``len(stored)`` and whose bytes are ``stored`` (at least
    one byte is allocated, so an empty object is a buffer too)."""
    raw = torch.zeros(max(len(stored), 1), dtype=torch.uint8)
    if stored:
        raw[:len(stored)] = torch.frombuffer(bytearray(stored), dtype=torch.uint8)
    buf = TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                               fmt=MemoryFormat.BINARY_BUFFER)
    buf.set_used_size(len(stored))
    return buf
