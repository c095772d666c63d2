"""Blocking helpers over the asynchronous adapter contract (tests, tools, benchmarks).

Each helper waits on the adapter's event fd (never by sleeping in a loop) and consumes its signal,
so they suit a single consumer per adapter; concurrent consumers need one collector that
dispatches results. Waiting longer than ``timeout`` raises ``TimeoutError``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from lmserde.events import wait_on_fd
from lmserde.keys import ObjectKey
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.memory import MemoryObj

__all__ = [
    "DEFAULT_TIMEOUT",
    "wait_for_store",
    "wait_for_load",
    "wait_for_lookup",
    "store_sync",
    "load_sync",
    "lookup_sync",
    "SharedStores",
]

#: Seconds a helper waits for one task before raising ``TimeoutError``.
DEFAULT_TIMEOUT = 30.0



def wait_for_store(
    adapter: L2AdapterInterface, task_id: int, timeout: float = DEFAULT_TIMEOUT,
    *, others: dict[int, L2StoreResult] | None = None,
) -> L2StoreResult:
    """Wait for store ``task_id``; results of other tasks popped meanwhile go to ``others``."""
    found: dict[int, L2StoreResult] = {}

    def poll() -> L2StoreResult | None:
        for tid, result in adapter.pop_completed_store_tasks().items():
            if tid == task_id:
                found[tid] = result
            elif others is not None:
                others[tid] = result
        return found.get(task_id)

    return wait_on_fd(adapter.get_store_event_fd(), poll, timeout=timeout,
                      what=f"store task {task_id}")


def wait_for_load(
    adapter: L2AdapterInterface, task_id: int, timeout: float = DEFAULT_TIMEOUT
) -> Bitmap:
    return wait_on_fd(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task_id),
                      timeout=timeout, what=f"load task {task_id}")


def wait_for_lookup(
    adapter: L2AdapterInterface, task_id: int, timeout: float = DEFAULT_TIMEOUT
) -> Bitmap:
    return wait_on_fd(adapter.get_lookup_and_lock_event_fd(),
                      lambda: adapter.query_lookup_and_lock_result(task_id),
                      timeout=timeout, what=f"lookup task {task_id}")


def store_sync(
    adapter: L2AdapterInterface, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
    timeout: float = DEFAULT_TIMEOUT,
) -> L2StoreResult:
    """Submit one store and wait for its result (only for callers that own the store queue)."""
    return wait_for_store(adapter, adapter.submit_store_task(keys, objects), timeout)


def load_sync(
    adapter: L2AdapterInterface, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
    timeout: float = DEFAULT_TIMEOUT,
) -> Bitmap:
    return wait_for_load(adapter, adapter.submit_load_task(keys, objects), timeout)


def lookup_sync(
    adapter: L2AdapterInterface, keys: Sequence[ObjectKey], timeout: float = DEFAULT_TIMEOUT
) -> Bitmap:
    return wait_for_lookup(adapter, adapter.submit_lookup_and_lock_task(keys), timeout)


class SharedStores:
    """Synchronous stores from several threads on one adapter: store results are popped once
    per adapter, so whichever thread pops them keeps the others' results for their owners
    (:func:`store_sync` suits a single consumer of the store queue only). Thread-safe."""

    def __init__(self, adapter: L2AdapterInterface) -> None:
        self._adapter = adapter
        self._lock = threading.Lock()
        self._done: dict[int, L2StoreResult] = {}

    def store(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
              timeout: float = DEFAULT_TIMEOUT) -> L2StoreResult:
        """Submit a store task and wait for its result (``TimeoutError`` after ``timeout``)."""
        task_id = self._adapter.submit_store_task(list(keys), list(objects))

        def poll() -> L2StoreResult | None:
            with self._lock:
                self._done.update(self._adapter.pop_completed_store_tasks())
                return self._done.pop(task_id, None)

        return wait_on_fd(self._adapter.get_store_event_fd(), poll, timeout=timeout,
                          what=f"store task {task_id}")
