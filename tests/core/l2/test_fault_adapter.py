"""The ``fault`` adapter: seeded, deterministic failures in front of another adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
from lmserde import TensorMemoryObj, as_byte_tensor
from lmserde.l2 import (
    Bitmap,
    FaultInjectingL2Adapter,
    FaultPlan,
    InjectedFaultError,
    L2StoreResult,
    MemoryL2Adapter,
    load_sync,
    lookup_sync,
    store_sync,
)
from lmserde.testing import L2AdapterConformance, adapter_key, random_object

LAYOUT = L2AdapterConformance.layout
key = adapter_key


def _fault(**plan: object) -> FaultInjectingL2Adapter:
    return FaultInjectingL2Adapter(MemoryL2Adapter(), FaultPlan(**plan))


def _objs(n: int) -> list[TensorMemoryObj]:
    return [random_object(LAYOUT, i) for i in range(n)]


class TestFaultAdapterConformance(L2AdapterConformance):
    """With an empty plan the fault adapter is a transparent proxy and meets the whole contract."""

    def make_adapter(self, tmp_path: Path) -> FaultInjectingL2Adapter:
        return _fault()


def test_reports_the_inner_adapters_sizes() -> None:
    adapter = _fault()
    try:
        assert adapter.reports_object_sizes()
    finally:
        adapter.close()


def test_decisions_are_deterministic_by_seed() -> None:
    keys = [key(i) for i in range(200)]
    a, b, c = FaultPlan(seed=1), FaultPlan(seed=1), FaultPlan(seed=2)
    draws_a = [a.draw("load/miss", [k]) for k in keys]
    assert draws_a == [b.draw("load/miss", [k]) for k in keys]
    assert draws_a != [c.draw("load/miss", [k]) for k in keys]
    assert all(0.0 <= d < 1.0 for d in draws_a)
    chosen = sum(a.hits("load/miss", 0.25, [k]) for k in keys)
    assert 20 < chosen < 80  # roughly the rate


def test_store_failures_never_reach_the_inner_adapter() -> None:
    adapter = _fault(store_failure_rate=1.0)
    try:
        assert store_sync(adapter, [key(0)], _objs(1)) == L2StoreResult(False, 0)
        assert lookup_sync(adapter, [key(0)]).to_list() == [False]
        assert adapter.report_status()["fault_inject"]["store_failures"] == 1
    finally:
        adapter.close()


def test_load_misses_follow_the_plan() -> None:
    keys = [key(i) for i in range(40)]
    plan = FaultPlan(seed=5, load_miss_rate=0.5)
    adapter = FaultInjectingL2Adapter(MemoryL2Adapter(), plan)
    try:
        store_sync(adapter, keys, [random_object(LAYOUT, i) for i in range(40)])
        bitmap = load_sync(adapter, keys, [TensorMemoryObj.allocate(LAYOUT) for _ in keys])
        expected = [not plan.hits("load/miss", 0.5, [k]) for k in keys]
        assert bitmap.to_list() == expected
        assert 0 < sum(expected) < 40
    finally:
        adapter.close()


def test_corruption_flips_exactly_one_byte() -> None:
    adapter = _fault(corrupt_rate=1.0)
    try:
        objs = _objs(3)
        keys = [key(i) for i in range(3)]
        store_sync(adapter, keys, objs)
        dsts = [TensorMemoryObj.allocate(LAYOUT) for _ in keys]
        assert load_sync(adapter, keys, dsts).count() == 3  # still hits
        for src, dst in zip(objs, dsts):
            assert int((as_byte_tensor(src) != as_byte_tensor(dst)).sum()) == 1
        assert adapter.report_status()["fault_inject"]["corruptions"] == 3
    finally:
        adapter.close()


def test_submit_exceptions_and_chunk_hash_misses() -> None:
    adapter = _fault(submit_exception_rate=1.0)
    try:
        with pytest.raises(InjectedFaultError, match="submit_store"):
            adapter.submit_store_task([key(0)], _objs(1))
        with pytest.raises(InjectedFaultError, match="submit_load"):
            adapter.submit_load_task([key(0)], _objs(1))
        assert adapter.report_status()["fault_inject"]["submit_exceptions"] == 2
    finally:
        adapter.close()
    adapter = _fault(miss_chunk_hashes=[key(1).chunk_hash])
    try:
        store_sync(adapter, [key(0), key(1)], _objs(2))
        assert load_sync(adapter, [key(0), key(1)], _objs(2)) == Bitmap.from_bools([True, False])
    finally:
        adapter.close()


def test_delayed_results_still_arrive() -> None:
    adapter = _fault(delay_rate=1.0, delay_seconds=0.01)
    try:
        assert store_sync(adapter, [key(0)], _objs(1)).is_successful()
        assert load_sync(adapter, [key(0)], _objs(1)).to_list() == [True]
        assert adapter.report_status()["fault_inject"]["delays"] == 2
    finally:
        adapter.close()


def test_plan_validation() -> None:
    with pytest.raises(ValueError, match="load_miss_rate"):
        FaultPlan(load_miss_rate=1.5)
    with pytest.raises(ValueError, match="delay_seconds"):
        FaultPlan(delay_seconds=-1)


def test_close_closes_the_inner_adapter() -> None:
    inner = MemoryL2Adapter()
    adapter = FaultInjectingL2Adapter(inner)
    adapter.close()
    adapter.close()
    with pytest.raises(RuntimeError, match="closed"):
        inner.submit_store_task([key(0)], _objs(1))
    with pytest.raises(RuntimeError, match="closed"):
        adapter.submit_load_task([key(0)], _objs(1))


def test_throttled_link_queues_transfers_at_its_bandwidth() -> None:
    import time

    from lmserde.l2.adapters.throttled_link import ThrottledLink

    link = ThrottledLink(1e6)  # 1 MB/s
    before = time.monotonic()
    first = link.reserve(100_000)  # 0.1 s of transfer
    second = link.reserve(50_000)  # queued behind the first
    assert first >= before + 0.1
    assert second == pytest.approx(first + 0.05)
    link.set_bandwidth(0.0)  # unthrottled: done now
    assert link.reserve(10**9) <= time.monotonic()
    with pytest.raises(ValueError, match="bandwidth"):
        link.set_bandwidth(-1.0)


def test_fault_spec_throttles_both_directions() -> None:
    from lmserde.l2 import create_l2_adapter

    adapter = create_l2_adapter({"type": "fault", "inner": {"type": "memory"},
                                 "bandwidth_bytes_per_second": 5e6})
    try:
        assert adapter.plan.bandwidth_bytes_per_second == 5e6
        links = adapter._links  # the two directions
        assert links["store"].bandwidth == links["load"].bandwidth == 5e6
        adapter.set_bandwidth(1e6, "load")
        assert links["store"].bandwidth == 5e6 and links["load"].bandwidth == 1e6
        with pytest.raises(ValueError, match="direction"):
            adapter.set_bandwidth(1e6, "sideways")
    finally:
        adapter.close()
