"""What L2AdapterInterface gives every adapter: optional-method defaults, listeners, accounting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from lmserde import ObjectKey
from lmserde.l2 import (
    AdapterTaskQueues,
    Bitmap,
    L2AdapterInterface,
    L2StoreResult,
    check_keys_and_objects,
)
from lmserde.testing import adapter_key as key


class Minimal(L2AdapterInterface):
    """The smallest adapter: every optional method left at its default (like a native one)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.q = AdapterTaskQueues()

    def get_store_event_fd(self) -> int:
        return self.q.store.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self.q.lookup.fileno()

    def get_load_event_fd(self) -> int:
        return self.q.load.fileno()

    def submit_store_task(self, keys: Sequence[ObjectKey], objects: Sequence[Any]) -> int:
        task = self.q.new_task_id()
        self._notify_keys_stored(keys, [10] * len(keys))
        self.q.store.complete(task, L2StoreResult(True, 10 * len(keys)))
        return task

    def pop_completed_store_tasks(self) -> dict[int, L2StoreResult]:
        return self.q.store.pop_all()

    def submit_lookup_and_lock_task(self, keys: Sequence[ObjectKey],
                                    group_layout_descs: Any = None) -> int:
        task = self.q.new_task_id()
        self.q.lookup.complete(task, Bitmap(len(keys)))
        return task

    def query_lookup_and_lock_result(self, task_id: int) -> Bitmap | None:
        return self.q.lookup.pop(task_id)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        pass

    def submit_load_task(self, keys: Sequence[ObjectKey], objects: Sequence[Any]) -> int:
        task = self.q.new_task_id()
        self._notify_keys_accessed(keys)
        self.q.load.complete(task, Bitmap(len(keys)))
        return task

    def query_load_result(self, task_id: int) -> Bitmap | None:
        return self.q.load.pop(task_id)

    def close(self) -> None:
        self.q.close()


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []

    def on_l2_keys_stored(self, keys: list, sizes: list) -> None:
        self.calls.append(("stored", sizes))

    def on_l2_keys_accessed(self, keys: list) -> None:
        raise RuntimeError("a broken listener is ignored")

    def on_l2_keys_deleted(self, keys: list) -> None:
        self.calls.append(("deleted", keys))


def test_defaults() -> None:
    adapter = Minimal()
    try:
        assert adapter.get_object_sizes([key(0)]) == {}
        assert not adapter.reports_object_sizes()
        assert not adapter.supports_global_eviction()
        with pytest.raises(NotImplementedError):
            adapter.list_l2_keys()
        adapter.delete([key(0)])
        adapter.touch_keys([key(0)])
        adapter.set_backend_identity("cold-tier", shared=True)
        assert adapter.report_status() == {"is_healthy": True, "type": "Minimal"}
    finally:
        adapter.close()


def test_listeners_and_per_salt_accounting() -> None:
    adapter = Minimal()
    listener = Listener()
    adapter.register_listener(listener)
    adapter.register_listener(object())  # no methods at all: skipped
    try:
        adapter.submit_store_task([key(0, "a"), key(1, "b")], [None, None])
        adapter.submit_store_task([key(0, "a")], [None])  # stored again: replaces, no double count
        adapter.submit_load_task([key(0, "a")], [None])
        usage = adapter.get_usage()
        assert usage.total_bytes_used == 20 and dict(usage.bytes_by_cache_salt) == {"a": 10,
                                                                                    "b": 10}
        adapter._notify_keys_deleted([key(0, "a"), key(7)])
        assert dict(adapter.get_usage().bytes_by_cache_salt) == {"b": 10}
        assert listener.calls == [("stored", [10, 10]), ("stored", [10]),
                                  ("deleted", [key(0, "a"), key(7)])]
    finally:
        adapter.close()


def test_check_keys_and_objects_names_the_call_and_both_counts() -> None:
    check_keys_and_objects([1, 2], ["a", "b"], "submit_store_task")  # one object per key
    with pytest.raises(ValueError, match="^submit_load_task got 2 keys but 1 objects$"):
        check_keys_and_objects([1, 2], ["a"], "submit_load_task")
