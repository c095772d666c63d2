"""Collect the results of many in-flight adapter tasks (the way a store/prefetch controller does)."""

from __future__ import annotations

import os
import select
import time
from typing import Any

from lmserde.l2 import Bitmap, L2StoreResult


def _consume(fd: int) -> None:
    """Clear a (non-blocking) completion fd's signal."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class TaskCollector:
    """Tracks submitted store, lookup and load tasks of one adapter and waits for all of them.

    ``wait_all(timeout)`` raises ``AssertionError`` naming the unfinished tasks when they do not
    all complete in time: a task that never completes is exactly the hang this guards against.
    """

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

    def pending(self) -> list[str]:
        return ([f"store {t}" for t, r in self.stores.items() if r is None]
                + [f"load {t}" for t, r in self.loads.items() if r is None]
                + [f"lookup {t}" for t, r in self.lookups.items() if r is None])

    def wait_all(self, timeout: float = 30.0) -> None:
        poller = select.poll()
        for fd in {self.adapter.get_store_event_fd(), self.adapter.get_load_event_fd(),
                   self.adapter.get_lookup_and_lock_event_fd()}:
            poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            left = self.pending()
            if not left:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(left)} task(s) never completed: {left[:10]}")
            for fd, _ in poller.poll(50):
                _consume(fd)

    def wait_for_results(self, count: int, timeout: float = 30.0) -> None:
        """Wait until at least ``count`` tasks (of any kind) have completed."""
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            done = sum(r is not None for d in (self.stores, self.loads, self.lookups)
                       for r in d.values())
            if done >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"only {done} of {count} tasks completed")
            time.sleep(0.005)
