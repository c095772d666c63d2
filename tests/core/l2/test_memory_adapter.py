"""The in-process ``memory`` adapter: contract, sizes, capacity with LRU eviction, locks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.l2 import L2StoreResult, MemoryL2Adapter, load_sync, lookup_sync, store_sync
from lmserde.testing import L2AdapterConformance, adapter_key, random_object

LAYOUT = L2AdapterConformance.layout
key = adapter_key

OBJ_BYTES = LAYOUT.nbytes  # 128


class TestMemoryAdapterConformance(L2AdapterConformance):
    def make_adapter(self, tmp_path: Path) -> MemoryL2Adapter:
        return MemoryL2Adapter()


def test_sizes_are_the_logical_sizes() -> None:
    adapter = MemoryL2Adapter()
    try:
        buf = TensorMemoryObj.allocate(MemoryLayoutDesc([[32]], [torch.uint8]))
        buf.set_used_size(7)
        store_sync(adapter, [key(0)], [buf])
        assert adapter.reports_object_sizes()
        assert adapter.get_object_sizes([key(0), key(1)]) == {key(0): 7}
    finally:
        adapter.close()


def _objs(n: int) -> list[TensorMemoryObj]:
    return [random_object(LAYOUT, i) for i in range(n)]


def test_capacity_evicts_least_recently_used_unlocked_objects() -> None:
    adapter = MemoryL2Adapter(max_capacity_bytes=3 * OBJ_BYTES)
    try:
        assert adapter.supports_global_eviction()
        store_sync(adapter, [key(0), key(1), key(2)], _objs(3))
        load_sync(adapter, [key(0)], _objs(1))  # key 0 is now the most recent
        assert lookup_sync(adapter, [key(1)]).to_list() == [True]  # key 1 is locked
        store_sync(adapter, [key(3)], _objs(1))
        assert lookup_sync(adapter, [key(0), key(1), key(2), key(3)]).to_list() == [
            True, True, False, True]
        assert adapter.report_status()["evictions"] == 1
        assert adapter.get_usage().total_bytes_used == 3 * OBJ_BYTES
        assert adapter.get_usage().usage_fraction == 1.0
    finally:
        adapter.close()


def test_store_that_cannot_fit_fails() -> None:
    adapter = MemoryL2Adapter(max_capacity_bytes=OBJ_BYTES)
    try:
        store_sync(adapter, [key(0)], _objs(1))
        lookup_sync(adapter, [key(0)])  # locks key 0: nothing can be evicted
        assert store_sync(adapter, [key(1)], _objs(1)) == L2StoreResult(False, 0)
        big = TensorMemoryObj.allocate(MemoryLayoutDesc([[OBJ_BYTES + 1]], [torch.uint8]))
        assert not store_sync(adapter, [key(2)], [big]).is_successful()
    finally:
        adapter.close()


def test_delete_of_a_locked_key_waits_for_its_unlock() -> None:
    adapter = MemoryL2Adapter()
    try:
        store_sync(adapter, [key(0), key(1)], _objs(2))
        lookup_sync(adapter, [key(0)])
        adapter.delete([key(0), key(1), key(7)])
        assert lookup_sync(adapter, [key(0), key(1)]).to_list() == [False, False]
        assert adapter.get_usage().total_bytes_used == OBJ_BYTES  # key 0 still held
        adapter.submit_unlock([key(0)])
        assert adapter.get_usage().total_bytes_used == 0
        assert adapter.report_status()["stored_object_count"] == 0
    finally:
        adapter.close()


def test_replacing_a_key_keeps_accounting_exact() -> None:
    adapter = MemoryL2Adapter()
    try:
        store_sync(adapter, [key(0)], _objs(1))
        store_sync(adapter, [key(0)], _objs(1))
        assert adapter.get_usage().total_bytes_used == OBJ_BYTES
        assert adapter.list_l2_keys() == [key(0)]
    finally:
        adapter.close()


def test_closed_adapter() -> None:
    adapter = MemoryL2Adapter()
    adapter.close()
    adapter.close()
    with pytest.raises(RuntimeError, match="closed"):
        adapter.submit_store_task([key(0)], _objs(1))
    with pytest.raises(ValueError, match="max_capacity_bytes"):
        MemoryL2Adapter(-5)
