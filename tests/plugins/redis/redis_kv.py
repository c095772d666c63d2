"""Keys and KV objects for the redis adapter tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj

SHAPE = [2, 4, 16, 32]
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
NBYTES = 2 * 4 * 16 * 32 * 2
KV_LAYOUT = MemoryLayoutDesc([SHAPE, SHAPE], [torch.bfloat16, torch.bfloat16])


def make_key(i: int, *, salt: str = "", model: str = "acme/llm-7b", group: int = 0) -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i) * 4, model, 0x01010000, group, salt)


def kv_object(seed: int, layout: MemoryLayoutDesc = LAYOUT) -> TensorMemoryObj:
    """An object of ``layout`` filled with seeded normal values."""
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(layout)
    for g, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes)):
        obj.get_tensor(g).copy_(torch.randn(list(shape), generator=gen).to(dtype))
    return obj


def sentinel(layout: MemoryLayoutDesc = LAYOUT, value: int = 0x5A) -> TensorMemoryObj:
    """A destination pre-filled with a byte pattern, so untouched bytes are visible."""
    obj = TensorMemoryObj.allocate(layout)
    obj.raw_data.fill_(value)
    return obj


def byte_object(data: bytes) -> TensorMemoryObj:
    """A 1-D uint8 object holding ``data``."""
    if not data:
        return TensorMemoryObj.from_tensor(torch.empty(0, dtype=torch.uint8))
    return TensorMemoryObj.from_tensor(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def same_bytes(a: TensorMemoryObj, b: TensorMemoryObj) -> bool:
    return bytes(a.byte_array) == bytes(b.byte_array)


def eventually(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; returns its last value.

    For state that settles asynchronously (a deferred delete, a cluster failover); the timeout
    only bounds the wait, it is not what the test checks.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(0.02)
    return True
