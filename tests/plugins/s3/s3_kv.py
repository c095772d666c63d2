"""Keys, KV objects and a task collector for the s3 adapter tests."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l2 import Bitmap, L2StoreResult

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
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(0.02)
    return True


def _consume(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class TaskCollector:
    """Tracks many in-flight store, lookup and load tasks of one adapter and waits for all of
    them; ``wait_all`` fails naming the tasks that never completed (the hang it guards against)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.stores: dict[int, L2StoreResult | None] = {}
        self.loads: dict[int, Bitmap | None] = {}
        self.lookups: dict[int, Bitmap | None] = {}

    def store(self, keys: list[Any], objs: list[Any]) -> int:
        task = self.adapter.submit_store_task(keys, objs)
        self.stores[task] = None
        return task

    def load(self, keys: list[Any], objs: list[Any]) -> int:
        task = self.adapter.submit_load_task(keys, objs)
        self.loads[task] = None
        return task

    def lookup(self, keys: list[Any]) -> int:
        task = self.adapter.submit_lookup_and_lock_task(keys)
        self.lookups[task] = None
        return task

    def _drain(self) -> None:
        for task, result in self.adapter.pop_completed_store_tasks().items():
            if task in self.stores:
                self.stores[task] = result
        for task, bitmap in list(self.loads.items()):
            if bitmap is None:
                self.loads[task] = self.adapter.query_load_result(task)
        for task, bitmap in list(self.lookups.items()):
            if bitmap is None:
                self.lookups[task] = self.adapter.query_lookup_and_lock_result(task)

    def done(self) -> int:
        return sum(r is not None for d in (self.stores, self.loads, self.lookups)
                   for r in d.values())

    def pending(self) -> list[str]:
        return ([f"store {t}" for t, r in self.stores.items() if r is None]
                + [f"load {t}" for t, r in self.loads.items() if r is None]
                + [f"lookup {t}" for t, r in self.lookups.items() if r is None])

    def wait(self, count: int | None = None, timeout: float = 60.0) -> None:
        """Wait until ``count`` tasks (default: all) completed, waking on the adapter's fds."""
        poller = select.poll()
        for fd in {self.adapter.get_store_event_fd(), self.adapter.get_load_event_fd(),
                   self.adapter.get_lookup_and_lock_event_fd()}:
            poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            if (not self.pending()) if count is None else self.done() >= count:
                return
            if time.monotonic() > deadline:
                left = self.pending()
                raise AssertionError(f"{len(left)} task(s) never completed: {left[:10]}")
            for fd, _ in poller.poll(50):
                _consume(fd)
