"""Driving the L1 -> serde -> L2 data path like a storage manager does (tests only)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import torch
from lmserde import MemoryLayoutDesc, MemoryObj, ObjectKey, as_byte_tensor
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import Bitmap, L2AdapterInterface, L2StoreResult, load_sync, store_sync
from lmserde.testing import random_object


def key_of(i: int, *, salt: str = "", model: str = "test/model", tag: bytes = b"") -> ObjectKey:
    return ObjectKey(tag + ObjectKey.IntHash2Bytes(i), model, 0x01010101, 0, salt)


def layout_bytes(obj: MemoryObj) -> torch.Tensor:
    """A copy of an object's logical bytes."""
    return as_byte_tensor(obj).clone()


class Cache:
    """An L1 manager plus the store/load round trips the storage manager would do."""

    def __init__(self, l1: L1Manager) -> None:
        self.l1 = l1

    def put(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> list[MemoryObj]:
        """Write objects into L1 as regular (non-temporary) ready objects."""
        layouts = [MemoryLayoutDesc(o.get_shapes(), o.get_dtypes()) for o in objects]
        result = self.l1.reserve_write(list(keys), False, layouts)
        out = []
        for key, src in zip(keys, objects):
            error, obj = result[key]
            assert error is L1Error.SUCCESS, error
            as_byte_tensor(obj).copy_(as_byte_tensor(src))
            out.append(obj)
        self.l1.finish_write(list(keys))
        return out

    def store(self, adapter: L2AdapterInterface, keys: Sequence[ObjectKey],
              objects: Sequence[MemoryObj]) -> L2StoreResult:
        """Store through L1 like the store controller: read-lock, store, unlock, drop from L1."""
        held = self.put(keys, objects)
        self.l1.reserve_read(list(keys))
        try:
            return store_sync(adapter, keys, held)
        finally:
            self.l1.finish_read(list(keys))
            self.l1.delete(list(keys))

    def load(self, adapter: L2AdapterInterface, keys: Sequence[ObjectKey],
             layouts: Sequence[MemoryLayoutDesc] | MemoryLayoutDesc,
             ) -> tuple[Bitmap, list[torch.Tensor]]:
        """Load into freshly reserved L1 objects; returns the bitmap and each object's bytes.

        The L1 objects are deleted afterwards (hits and misses alike).
        """
        result = self.l1.reserve_write(list(keys), False, layouts)
        dsts = []
        for key in keys:
            error, obj = result[key]
            assert error is L1Error.SUCCESS, error
            as_byte_tensor(obj).fill_(0xA5)
            dsts.append(obj)
        try:
            bitmap = load_sync(adapter, keys, dsts)
            data = [layout_bytes(d) for d in dsts]
        finally:
            self.l1.finish_write_and_delete(list(keys))
        return bitmap, data


def objects_for(layout: MemoryLayoutDesc, n: int, seed: int = 0) -> list[MemoryObj]:
    return [random_object(layout, seed * 1000 + i) for i in range(n)]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def live_threads() -> set[threading.Thread]:
    return set(threading.enumerate())
