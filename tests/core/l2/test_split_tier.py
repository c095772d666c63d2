"""Split-tier placement through the real path: L1 → SplitTierL2Adapter → framed wrapper → ``fs``.

The serde is ``split_test_v_only`` (V bytes unchanged, K slot absent), so K and V must come back
bit-exactly; the asym_k16_v8_v_only tests in tests/plugins/asym_k16_v8 cover the real codec.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import lmserde.l2 as l2
import pytest
from lmserde import SerdeConfig, create_serde_processor
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    SPLIT_TIER_K_TAG,
    SplitTierConfigError,
    SplitTierL2Adapter,
    SplitTierState,
)
from split_serdes import (
    GROUP_BYTES,
    LAYOUT,
    V_ONLY,
    key,
    kv_object,
    same,
    sentinel_object,
    v_only_serde_registered,
)


@pytest.fixture(autouse=True)
def _serde() -> Iterator[None]:
    with v_only_serde_registered():
        yield


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


def fs_spec(base: Path, **extra: object) -> dict[str, object]:
    return {"type": "fs", "base_path": str(base), "serde": {"type": V_ONLY}, **extra}


@pytest.fixture
def split(tmp_path: Path, l1: L1Manager) -> Iterator[SplitTierL2Adapter]:
    adapter = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), l1)
    assert isinstance(adapter, SplitTierL2Adapter)
    yield adapter
    adapter.close()


def stored_files(adapter: SplitTierL2Adapter) -> list[str]:
    return sorted(n for n in os.listdir(adapter.inner_adapter.base_path) if n.endswith(".data"))


def test_store_drop_load_round_trip(split: SplitTierL2Adapter, l1: L1Manager) -> None:
    keys = [key(i) for i in range(3)]
    objs = [kv_object(i) for i in range(3)]
    result = l2.store_sync(split, keys, objs)
    assert result.is_successful()
    assert result.bytes_transferred() == 3 * (FRAME_HEADER_BYTES + GROUP_BYTES)
    # K is in L1 under its child key (tagged), V in fs under its child key, nothing else
    inner = split.inner_adapter
    for k in keys:
        assert split.k_child_key(k) in l1 and split.holds_k(k)
        assert os.path.getsize(inner.path_of(split.v_child_key(k))) == FRAME_HEADER_BYTES + GROUP_BYTES
        assert not os.path.exists(inner.path_of(k))
        assert not os.path.exists(inner.path_of(split.k_child_key(k)))
        assert split.manifest.lookup(k) is SplitTierState.COMPLETE
    assert l1.memory_used_bytes() == 3 * GROUP_BYTES, "only the K halves stay in L1"
    del objs[1:]  # the caller's objects are gone: K must come from L1
    assert l2.lookup_sync(split, keys).count() == 3
    split.submit_unlock(keys)
    outs = [sentinel_object() for _ in keys]
    assert l2.load_sync(split, keys, outs).count() == 3
    for i, out in enumerate(outs):
        assert same(out, kv_object(i))
    assert set(split.list_l2_keys()) == set(keys) and len(split.list_l2_keys()) == 3
    assert split.get_object_sizes(keys) == {k: FRAME_HEADER_BYTES + GROUP_BYTES for k in keys}


def test_byte_accounting(split: SplitTierL2Adapter) -> None:
    keys = [key(i) for i in range(4)]
    assert l2.store_sync(split, keys, [kv_object(i) for i in range(4)]).is_successful()
    acct = split.accounting()
    logical = 4 * LAYOUT.nbytes
    assert acct["logical_bytes_stored"] == logical
    assert acct["l1_k_bytes"] == acct["l1_k_bytes_stored"] == logical // 2
    assert acct["l2_v_bytes_stored"] == 4 * (FRAME_HEADER_BYTES + GROUP_BYTES)
    assert acct["l1_fraction"] == 0.5
    assert acct["stored_fraction"] == pytest.approx((GROUP_BYTES + FRAME_HEADER_BYTES)
                                                    / LAYOUT.nbytes)
    assert acct["k_children"] == 4 and acct["manifest"]["complete"] == 4
    status = split.report_status()
    assert status["placement"] == "kv_split_tier" and status["split_tier"]["k_children"] == 4
    assert status["serde_framed"] is True


def test_listeners_hear_logical_keys(split: SplitTierL2Adapter) -> None:
    events: list[tuple[str, list[object]]] = []

    class Listener:
        def on_l2_keys_stored(self, keys: list[object], sizes: list[int]) -> None:
            events.append(("stored", keys))

        def on_l2_keys_accessed(self, keys: list[object]) -> None:
            events.append(("accessed", keys))

        def on_l2_keys_deleted(self, keys: list[object]) -> None:
            events.append(("deleted", keys))

    split.register_listener(Listener())
    a = key(1)
    assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
    assert l2.load_sync(split, [a], [sentinel_object()]).count() == 1
    split.delete([a])
    assert events == [("stored", [a]), ("accessed", [a]), ("deleted", [a])]


def test_lookup_and_load_miss_unless_complete(split: SplitTierL2Adapter) -> None:
    a, b = key(1), key(2)
    assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
    split.manifest.register_pending(a)  # e.g. a re-store in flight: not complete
    assert l2.lookup_sync(split, [a, b]).count() == 0
    out = sentinel_object()
    assert l2.load_sync(split, [a, b], [out, sentinel_object()]).count() == 0
    assert same(out, sentinel_object()), "a miss must leave the caller's object alone"


def test_evicting_k_makes_the_key_a_miss_and_deletes_v(split: SplitTierL2Adapter,
                                                        l1: L1Manager) -> None:
    a, b = key(1), key(2)
    assert l2.store_sync(split, [a, b], [kv_object(1), kv_object(2)]).is_successful()
    v_path = split.inner_adapter.path_of(split.v_child_key(a))
    # the L1 owner evicts a's K half
    l1.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)
    assert split.manifest.lookup(a) is None
    assert not os.path.exists(v_path), "the orphaned V child is removed from L2"
    assert [l2.lookup_sync(split, [a, b]).test(i) for i in range(2)] == [False, True]
    split.submit_unlock([b])
    outs = [sentinel_object(), sentinel_object()]
    bitmap = l2.load_sync(split, [a, b], outs)
    assert [bitmap.test(i) for i in range(2)] == [False, True]
    assert same(outs[1], kv_object(2))
    assert split.accounting()["k_evictions"] == 1


def test_losing_v_in_l2_drops_k(split: SplitTierL2Adapter, l1: L1Manager) -> None:
    a = key(1)
    assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
    split.inner_adapter.delete([split.v_child_key(a)])  # e.g. L2 eviction or an operator
    assert not split.holds_k(a) and split.k_child_key(a) not in l1
    assert l2.lookup_sync(split, [a]).count() == 0
    assert split.accounting()["v_losses"] == 1


def test_v_file_removed_behind_the_adapters_back_is_a_miss(split: SplitTierL2Adapter) -> None:
    a = key(1)
    assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
    os.unlink(split.inner_adapter.path_of(split.v_child_key(a)))  # no listener sees this
    assert l2.lookup_sync(split, [a]).count() == 0
    assert l2.load_sync(split, [a], [sentinel_object()]).count() == 0
    # the K lock the lookup and the load took was released: the K half can be evicted
    result = split.l1_manager.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)
    assert result[split.k_child_key(a)][0].name == "SUCCESS"


def test_lookup_lock_protects_k_from_eviction(split: SplitTierL2Adapter, l1: L1Manager) -> None:
    a = key(1)
    assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
    assert l2.lookup_sync(split, [a]).count() == 1
    refused = l1.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)
    assert refused[split.k_child_key(a)][0].name == "KEY_IN_WRONG_STATE"
    out = sentinel_object()
    assert l2.load_sync(split, [a], [out]).count() == 1 and same(out, kv_object(1))
    split.submit_unlock([a])
    l1.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)
    assert l2.lookup_sync(split, [a]).count() == 0


def test_delete_removes_both_halves(split: SplitTierL2Adapter, l1: L1Manager) -> None:
    keys = [key(i) for i in range(3)]
    assert l2.store_sync(split, keys, [kv_object(i) for i in range(3)]).is_successful()
    assert l2.lookup_sync(split, [keys[0]]).count() == 1  # locked while deleted
    split.delete(keys[:2])
    assert l2.lookup_sync(split, keys).count() == 1
    assert stored_files(split) == [os.path.basename(split.inner_adapter.path_of(
        split.v_child_key(keys[2])))]
    assert split.k_child_key(keys[0]) in l1, "a locked K half waits for its unlock"
    split.submit_unlock([keys[0]])
    assert split.k_child_key(keys[0]) not in l1 and split.k_child_key(keys[1]) not in l1
    assert l1.memory_used_bytes() == GROUP_BYTES
    assert split.list_l2_keys() == [keys[2]]


def test_manifest_is_process_local(tmp_path: Path) -> None:
    """After a restart (new L1, new adapter over the same directory) V children are misses."""
    a = key(1)
    first = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), L1Manager(1 << 20))
    assert l2.store_sync(first, [a], [kv_object(1)]).is_successful()
    first.close()
    assert os.listdir(tmp_path / "kv"), "the V child stays in L2"
    second = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), L1Manager(1 << 20))
    try:
        assert second.list_l2_keys() == [a]
        assert l2.lookup_sync(second, [a]).count() == 0
        assert l2.load_sync(second, [a], [sentinel_object()]).count() == 0
        assert l2.store_sync(second, [a], [kv_object(1)]).is_successful()  # stored again: a hit
        assert l2.lookup_sync(second, [a]).count() == 1
    finally:
        second.close()


def test_k_pool_is_bounded(tmp_path: Path, l1: L1Manager) -> None:
    inner = l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv")}, None)
    proc = create_serde_processor(SerdeConfig(V_ONLY))
    split = l2.create_split_tier_adapter(inner, proc, l1, serde_type=V_ONLY, k_child_max_slots=2)
    try:
        keys = [key(i) for i in range(3)]
        v_children = []  # V child keys name their store's generation: known once stored
        for i, k in enumerate(keys):
            assert l2.store_sync(split, [k], [kv_object(i)]).is_successful()
            v_children.append(split.v_child_key(k))
        assert [split.holds_k(k) for k in keys] == [False, True, True]
        assert [l2.lookup_sync(split, [k]).count() for k in keys] == [0, 1, 1]
        split.submit_unlock(keys[1:])
        assert not os.path.exists(inner.path_of(v_children[0]))
        acct = split.accounting()
        assert acct["k_pool_evictions"] == 1 and acct["k_children"] == 2
        assert l1.memory_used_bytes() == 2 * GROUP_BYTES
        # a batch larger than the pool cannot keep its K halves: the store fails, nothing stays
        more = [key(10 + i) for i in range(3)]
        assert not l2.store_sync(split, more, [kv_object(i) for i in range(3)]).is_successful()
        assert not any(split.holds_k(k) for k in more)
        assert all(split.manifest.lookup(k) is None for k in more)
    finally:
        split.close()
    assert l1.memory_used_bytes() == 0, "closing deletes the K halves"


def test_store_fails_cleanly_when_l1_is_full(tmp_path: Path) -> None:
    l1 = L1Manager(GROUP_BYTES + GROUP_BYTES // 2)  # room for one K half only
    split = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), l1)
    try:
        assert not l2.store_sync(split, [key(1), key(2)], [kv_object(1), kv_object(2)]
                                 ).is_successful()
        assert l1.memory_used_bytes() == 0 and len(split.manifest) == 0
        assert stored_files(split) == []
    finally:
        split.close()


def test_bad_input_fails_the_task(split: SplitTierL2Adapter, l1: L1Manager) -> None:
    from lmserde import MemoryLayoutDesc, TensorMemoryObj

    one_group = TensorMemoryObj.allocate(MemoryLayoutDesc([[16]], [LAYOUT.dtypes[0]]))
    assert not l2.store_sync(split, [key(1)], [one_group]).is_successful()
    assert not l2.store_sync(split, [key(2, group=1)], [kv_object(2)]).is_successful()
    assert not l2.store_sync(split, [key(3), key(3)], [kv_object(3), kv_object(3)]
                             ).is_successful()
    assert l1.memory_used_bytes() == 0 and len(split.manifest) == 0
    assert l2.load_sync(split, [key(2, group=1)], [sentinel_object()]).count() == 0
    with pytest.raises(ValueError, match="keys but"):
        split.submit_store_task([key(1)], [])


def test_startup_rules(tmp_path: Path, l1: L1Manager) -> None:
    with pytest.raises(SplitTierConfigError, match="cannot be part of a chain"):
        l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "c"),
                              "serde": [{"type": V_ONLY}, {"type": "identity"}]}, l1)
    first = l2.create_l2_adapter(fs_spec(tmp_path / "a"), l1)
    try:
        with pytest.raises(SplitTierConfigError, match="exactly one L2 adapter per L1"):
            l2.create_l2_adapter(fs_spec(tmp_path / "b"), l1)
    finally:
        first.close()
    l2.create_l2_adapter(fs_spec(tmp_path / "b"), l1).close()  # free again once closed
    with pytest.raises(ValueError, match="needs an L1Manager"):
        l2.create_l2_adapter(fs_spec(tmp_path / "d"), None)


def test_startup_rule_on_slot_mapping(tmp_path: Path, l1: L1Manager) -> None:
    inner = l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv")}, None)
    proc = create_serde_processor(SerdeConfig("identity"))
    try:
        with pytest.raises(SplitTierConfigError, match="no slot mapping"):
            l2.create_split_tier_adapter(inner, proc, l1, serde_type="identity")
        vproc = create_serde_processor(SerdeConfig(V_ONLY))
        try:
            with pytest.raises(SplitTierConfigError, match="k_child_max_slots"):
                l2.create_split_tier_adapter(inner, vproc, l1, serde_type=V_ONLY,
                                             k_child_max_slots=0)
        finally:
            vproc.close()
    finally:
        proc.close()
        inner.close()


def test_unframed_split_tier_round_trips(tmp_path: Path, l1: L1Manager) -> None:
    split = l2.create_l2_adapter(fs_spec(tmp_path / "kv", serde_frame=False), l1)
    try:
        assert l2.store_sync(split, [key(1)], [kv_object(1)]).bytes_transferred() == GROUP_BYTES
        out = sentinel_object()
        assert l2.load_sync(split, [key(1)], [out]).count() == 1 and same(out, kv_object(1))
    finally:
        split.close()


def test_close_releases_everything(tmp_path: Path, l1: L1Manager) -> None:
    split = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), l1)
    assert l2.store_sync(split, [key(1)], [kv_object(1)]).is_successful()
    assert l2.lookup_sync(split, [key(1)]).count() == 1  # a lock still held at close
    split.close()
    split.close()
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0
    with pytest.raises(RuntimeError, match="closed"):
        split.submit_store_task([key(2)], [kv_object(2)])


def test_close_completes_unfinished_loads_as_misses(tmp_path: Path, l1: L1Manager) -> None:
    """A load still waiting on the V side when the adapter closes completes as all misses (and
    its K half is released), as every unfinished task of a closing adapter completes."""
    generations = l2.GenerationSource(b"\x01" * 8)
    v_key = l2.derive_v_child_key(key(1), b"\x01" * 8 + (1).to_bytes(8, "big"))
    # a plan (by seed) that lets the V store through and holds the V load back for a minute+
    plan = next(p for p in (l2.FaultPlan(seed=s, delay_rate=0.5, delay_seconds=3600)
                            for s in range(1000))
                if p.delay_for("store", [v_key]) == 0.0 and p.delay_for("load", [v_key]) > 60)
    fault = l2.FaultInjectingL2Adapter(
        l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv")}, None), plan)
    split = l2.create_split_tier_adapter(fault, create_serde_processor(SerdeConfig(V_ONLY)), l1,
                                         serde_type=V_ONLY, generation_source=generations)
    assert l2.store_sync(split, [key(1)], [kv_object(1)]).is_successful()
    assert split.v_child_key(key(1)) == v_key
    task = split.submit_load_task([key(1)], [sentinel_object()])
    assert split.query_load_result(task) is None  # held back by the fault plan
    split.close()
    bitmap = split.query_load_result(task)
    assert bitmap is not None and len(bitmap) == 1 and bitmap.count() == 0
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0
