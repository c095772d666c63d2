"""Checks every adapter of this package must pass (imported by the per-adapter test modules)."""

from __future__ import annotations

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l2 import L2AdapterInterface, load_sync, lookup_sync, store_sync, wait_for_load
from lmserde.testing import random_object

LAYOUT = MemoryLayoutDesc([[4, 16]], [torch.float16])


def key(i: int, salt: str = "") -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "model/a", 0x01000100, 0, salt)


def check_contract(adapter: L2AdapterInterface) -> None:
    """Distinct fds, store/lookup/load round trip, per-key results, taken-once semantics."""
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
           adapter.get_load_event_fd()}
    assert len(fds) == 3
    keys = [key(i, salt="tenant") for i in range(3)]
    objs = [random_object(LAYOUT, i) for i in range(3)]
    result = store_sync(adapter, keys, objs)
    assert result.is_successful() and result.bytes_transferred() == 3 * LAYOUT.nbytes
    assert adapter.pop_completed_store_tasks() == {}
    probe = [keys[0], key(99), keys[2]]
    assert lookup_sync(adapter, probe).to_list() == [True, False, True]
    adapter.submit_unlock([keys[0], keys[2]])
    dsts = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in probe]
    task = adapter.submit_load_task(probe, dsts)
    assert wait_for_load(adapter, task).to_list() == [True, False, True]
    assert adapter.query_load_result(task) is None  # taken once
    assert torch.equal(dsts[0].raw_data, objs[0].raw_data)
    assert torch.equal(dsts[2].raw_data, objs[2].raw_data)
    assert int(dsts[1].raw_data.count_nonzero()) == 0
    assert adapter.get_usage().total_bytes_used == 3 * LAYOUT.nbytes
    assert dict(adapter.get_usage().bytes_by_cache_salt) == {"tenant": 3 * LAYOUT.nbytes}
    assert adapter.report_status()["is_healthy"] is True
    wrong = [TensorMemoryObj.allocate(MemoryLayoutDesc([[5]], [torch.float16]))]
    assert load_sync(adapter, [keys[1]], wrong).to_list() == [False]  # size must match
