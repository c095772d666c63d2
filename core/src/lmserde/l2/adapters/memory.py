"""``memory``: an in-process L2 adapter with an optional capacity and LRU eviction."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from lmserde.builtin_plugins import BUILTIN_FACTS
from lmserde.install_hints import L2_ADAPTER_GROUP
from lmserde.keys import ObjectKey
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId, check_keys_and_objects
from lmserde.l2.contract.key_pins import KeyPins
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.discovery.spec import L2AdapterSpec
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj, as_byte_tensor
from lmserde.options import SerdeOption

__all__ = ["MemoryL2Adapter", "MEMORY_ADAPTER_SPEC"]


class MemoryL2Adapter(QueuedResults, L2AdapterInterface):
    """Keeps a copy of each object's logical bytes in process memory.

    With ``max_capacity_bytes > 0`` the least recently used unlocked objects are evicted to make
    room; a store that cannot fit fails. A load is a hit only when the stored size equals the
    destination's ``get_size()`` (the same contract as ``fs``); ``get_object_sizes`` reports
    stored sizes. Work is done inside ``submit_*``; results are signalled through the fds as usual.
    Keys deleted while locked disappear for lookups at once and are freed on their last unlock.
    A store of a stored key always replaces its object (under the adapter's lock: a load sees
    the old copy or the new one), so :meth:`replace_existing_on_store` only says so.
    """

    adapter_type = "memory"

    def __init__(self, max_capacity_bytes: int = 0) -> None:
        if max_capacity_bytes < 0:
            raise ValueError(f"max_capacity_bytes must be >= 0, got {max_capacity_bytes}")
        super().__init__(max_capacity_bytes)
        self._queues = AdapterTaskQueues()
        self._lock = threading.Lock()
        self._data: OrderedDict[ObjectKey, torch.Tensor] = OrderedDict()
        self._pins = KeyPins()
        self._stored_bytes = 0
        self._evictions = 0
        self._closed = False

    # -- fds ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MemoryL2Adapter is closed")

    # -- store ----------------------------------------------------------------------------------

    def replace_existing_on_store(self) -> bool:
        """Replacing stores (see :mod:`lmserde.l2.contract.replacing_store`): this adapter's
        stores always replace a key's object, so this only answers ``True``."""
        return True

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_store_task")
        self._check_open()
        task_id = self._queues.new_task_id()
        copies = [as_byte_tensor(obj).clone() for obj in objects]
        stored: list[ObjectKey] = []
        evicted: list[ObjectKey] = []
        ok = True
        with self._lock:
            for key, data in zip(keys, copies):
                if not self._put_locked(key, data, evicted):
                    ok = False
                    break
                stored.append(key)
        if evicted:
            self._notify_keys_deleted(evicted)
        if stored:
            self._notify_keys_stored(stored, [c.numel() for c in copies[: len(stored)]])
        total = sum(c.numel() for c in copies)
        self._queues.store.complete(task_id, L2StoreResult(ok, total if ok else 0))
        return task_id

    def _put_locked(self, key: ObjectKey, data: torch.Tensor, evicted: list[ObjectKey]) -> bool:
        old = self._data.pop(key, None)
        if old is not None:
            self._stored_bytes -= old.numel()
        self._pins.cancel_deferred(key)
        capacity = self.max_capacity_bytes
        if capacity > 0:
            victims = iter([k for k in self._data if not self._pins.is_pinned(k)])
            while self._stored_bytes + data.numel() > capacity:
                victim = next(victims, None) if data.numel() <= capacity else None
                if victim is None:
                    if old is not None:  # the previous version is gone too
                        evicted.append(key)
                    return False
                self._stored_bytes -= self._data.pop(victim).numel()
                self._evictions += 1
                evicted.append(victim)
        self._data[key] = data
        self._stored_bytes += data.numel()
        return True

    # -- lookup / unlock ------------------------------------------------------------------------

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        self._check_open()
        task_id = self._queues.new_task_id()
        bitmap = Bitmap(len(keys))
        with self._lock:
            for i, key in enumerate(keys):
                if key in self._data and not self._pins.is_deferred(key):
                    bitmap.set(i)
                    self._pins.pin(key)
        self._queues.lookup.complete(task_id, bitmap)
        return task_id

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        freed: list[ObjectKey] = []
        with self._lock:
            for key in self._pins.unpin(keys):
                data = self._data.pop(key, None)
                if data is not None:
                    self._stored_bytes -= data.numel()
                    freed.append(key)
        if freed:
            self._notify_keys_deleted(freed)

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_load_task")
        self._check_open()
        task_id = self._queues.new_task_id()
        with self._lock:
            found = []
            for key in keys:
                data = None if self._pins.is_deferred(key) else self._data.get(key)
                if data is not None:
                    self._data.move_to_end(key)
                found.append(data)
        bitmap = Bitmap(len(keys))
        accessed: list[ObjectKey] = []
        for i, (key, data, dst) in enumerate(zip(keys, found, objects)):
            if data is None or data.numel() != dst.get_size():
                continue
            if data.numel():
                as_byte_tensor(dst).copy_(data)
            bitmap.set(i)
            accessed.append(key)
        if accessed:
            self._notify_keys_accessed(accessed)
        self._queues.load.complete(task_id, bitmap)
        return task_id

    # -- extras ---------------------------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def object_sizes_are_local(self) -> bool:
        return True

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        with self._lock:
            return {k: self._data[k].numel() for k in keys
                    if k in self._data and not self._pins.is_deferred(k)}

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        deleted: list[ObjectKey] = []
        with self._lock:
            for key in self._pins.defer_pinned(k for k in keys if k in self._data):
                self._stored_bytes -= self._data.pop(key).numel()
                deleted.append(key)
        if deleted:
            self._notify_keys_deleted(deleted)

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        with self._lock:
            for key in keys:
                if key in self._data:
                    self._data.move_to_end(key)

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> list[ObjectKey]:
        """Every stored key, least recently used first."""
        with self._lock:
            return [k for k in self._data if not self._pins.is_deferred(k)]

    def report_status(self) -> dict[str, Any]:
        status = super().report_status()
        with self._lock:
            status.update(stored_object_count=len(self._data) - self._pins.deferred_count,
                          stored_bytes=self._stored_bytes, evictions=self._evictions,
                          locked_keys=self._pins.pinned_count, is_healthy=not self._closed)
        return status

    def close(self) -> None:
        """Drop the stored data and close the fds; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._data.clear()
            self._pins.clear()
            self._stored_bytes = 0
        self._queues.close()


def _create_memory(options: dict[str, Any], l1_manager: Any) -> MemoryL2Adapter:
    return MemoryL2Adapter(options["max_capacity_bytes"])


MEMORY_ADAPTER_SPEC = L2AdapterSpec(
    factory=_create_memory,
    description=BUILTIN_FACTS[L2_ADAPTER_GROUP]["memory"].description,
    options=(
        SerdeOption("max_capacity_bytes", int, 0,
                    "capacity in bytes; least recently used objects are evicted (0: unlimited)",
                    minimum=0),
    ),
    reports_object_sizes=True,
)
