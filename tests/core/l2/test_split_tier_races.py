"""Split-tier placement under concurrency and injected faults (real threads, real ``fs``).

The invariant: a logical key is a hit only with both halves present and right — concurrent
stores, deletes and K evictions may turn hits into misses, never into wrong or partial data, and
nothing is left behind in L1 once the adapter closes.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lmserde.l2 as l2
import pytest
from lmserde import SerdeConfig, create_serde_processor
from lmserde.l1 import L1Manager
from lmserde.l2 import SPLIT_TIER_K_TAG, FaultPlan, SplitTierL2Adapter, SplitTierState
from split_serdes import V_ONLY, key, kv_object, same, sentinel_object, v_only_serde_registered


@pytest.fixture(autouse=True)
def _serde() -> Iterator[None]:
    with v_only_serde_registered():
        yield


def fault_spec(base: Path, **plan: object) -> dict[str, object]:
    return {"type": "fault", "inner": {"type": "fs", "base_path": str(base)},
            "serde": {"type": V_ONLY}, **plan}


def v_file(split: SplitTierL2Adapter, k: object, generation: bytes | None = None) -> str:
    fs = split.inner_adapter.inner_adapter  # fault -> fs
    return fs.path_of(split.v_child_key(k, generation))


def test_k_evicted_while_the_v_store_is_in_flight(tmp_path: Path) -> None:
    """The V store's result is held back by the fault adapter; K is evicted meanwhile: the store
    finishes, but the key never becomes a hit and its V child does not stay in L2."""
    plan = FaultPlan(delay_rate=1.0, delay_seconds=4.0)
    # a store generation whose injected delay (drawn from the V child key, which names the
    # generation) is long enough to evict K while its store is in flight
    a = key(1)
    source = l2.GenerationSource(b"\x00" * 8)
    generation = next(g for g in iter(source, None)
                      if plan.delay_for("store", [l2.derive_v_child_key(a, g)]) > 1.0)
    l1 = L1Manager(1 << 20)
    fs = l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv")}, None)
    split = l2.create_split_tier_adapter(
        l2.FaultInjectingL2Adapter(fs, plan), create_serde_processor(SerdeConfig(V_ONLY)), l1,
        serde_type=V_ONLY, generation_source=lambda: generation)
    try:
        task = split.submit_store_task([a], [kv_object(1)])
        assert split.store_generation(a) == generation
        assert split.manifest.lookup(a) is SplitTierState.STORE_IN_FLIGHT
        l1.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)  # evicted mid-store
        assert split.manifest.lookup(a) is None
        assert l2.wait_for_store(split, task).is_successful()
        assert split.accounting()["stores_superseded"] == 1
        assert split.manifest.lookup(a) is None
        assert not os.path.exists(v_file(split, a, generation)), "the late V child was removed"
        assert l2.lookup_sync(split, [a]).count() == 0
        assert l1.memory_used_bytes() == 0
    finally:
        split.close()


@pytest.mark.parametrize("plan", [{"store_failure_rate": 1.0}, {"submit_exception_rate": 1.0}])
def test_failed_v_store_leaves_nothing(tmp_path: Path, plan: dict[str, float]) -> None:
    l1 = L1Manager(1 << 20)
    split = l2.create_l2_adapter(fault_spec(tmp_path / "kv", **plan), l1)
    try:
        keys = [key(1), key(2)]
        assert not l2.store_sync(split, keys, [kv_object(1), kv_object(2)]).is_successful()
        assert l1.memory_used_bytes() == 0, "K halves of a failed store are removed"
        assert len(split.manifest) == 0 and split.list_l2_keys() == []
        assert l2.lookup_sync(split, keys).count() == 0
        assert split.accounting()["store_tasks_failed"] == 1
    finally:
        split.close()


def test_v_load_miss_is_a_miss_and_releases_k(tmp_path: Path) -> None:
    l1 = L1Manager(1 << 20)
    split = l2.create_l2_adapter(fault_spec(tmp_path / "kv", load_miss_rate=1.0), l1)
    try:
        a = key(1)
        assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
        out = sentinel_object()
        assert l2.load_sync(split, [a], [out]).count() == 0
        assert same(out, sentinel_object()), "K is copied only for a V hit"
        result = l1.delete([split.k_child_key(a)], tag=SPLIT_TIER_K_TAG)
        assert result[split.k_child_key(a)][0].name == "SUCCESS", "the load's K lock was kept"
    finally:
        split.close()


def test_corrupt_v_is_a_miss_and_drops_k(tmp_path: Path) -> None:
    """A damaged V child fails the frame check: a miss, repaired (deleted), and K goes with it."""
    l1 = L1Manager(1 << 20)
    split = l2.create_l2_adapter(fault_spec(tmp_path / "kv", corrupt_rate=1.0), l1)
    try:
        a = key(1)
        assert l2.store_sync(split, [a], [kv_object(1)]).is_successful()
        path = v_file(split, a)
        assert l2.load_sync(split, [a], [sentinel_object()]).count() == 0
        assert split.metrics()["rejections"], "the frame check refused the V child"
        assert not os.path.exists(path)
        assert not split.holds_k(a) and split.manifest.lookup(a) is None
        assert split.accounting()["v_losses"] == 1
        assert l1.memory_used_bytes() == 0
    finally:
        split.close()


def test_concurrent_store_delete_evict_and_read(tmp_path: Path) -> None:
    """Four threads for a fixed time on eight keys: every hit must be bit-exact."""
    l1 = L1Manager(16 << 20)
    split = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv"), "serde": {"type": V_ONLY}}, l1)
    keys = [key(i) for i in range(8)]
    objects = {k: kv_object(i) for i, k in enumerate(keys)}
    deadline = time.monotonic() + 1.5
    errors: list[str] = []
    hits = [0]

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            rng = random.Random(threading.get_ident())
            try:
                while time.monotonic() < deadline:
                    fn(rng)
            except BaseException as exc:  # reported by the main thread
                errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")
        return run

    def storer(rng: random.Random) -> None:
        batch = rng.sample(keys, rng.randint(1, 3))
        l2.store_sync(split, batch, [objects[k] for k in batch])

    def deleter(rng: random.Random) -> None:
        split.delete([rng.choice(keys)])
        time.sleep(0.002)

    def evictor(rng: random.Random) -> None:
        l1.delete([split.k_child_key(rng.choice(keys))], tag=SPLIT_TIER_K_TAG)
        time.sleep(0.001)

    def reader(rng: random.Random) -> None:
        batch = rng.sample(keys, rng.randint(1, 4))
        found = l2.lookup_sync(split, batch)
        locked = [k for i, k in enumerate(batch) if found.test(i)]
        outs = [sentinel_object() for _ in batch]
        loaded = l2.load_sync(split, batch, outs)
        split.submit_unlock(locked)
        for i, k in enumerate(batch):
            if loaded.test(i):
                hits[0] += 1
                if not same(outs[i], objects[k]):
                    errors.append(f"wrong data for key {i}")

    threads = [threading.Thread(target=guarded(f)) for f in (storer, deleter, evictor, reader)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        # quiet now: every complete key with both halves loads exactly; the others miss
        for k in keys:
            out = sentinel_object()
            hit = l2.load_sync(split, [k], [out]).count() == 1
            if hit:
                assert same(out, objects[k])
            complete = split.manifest.lookup(k) is SplitTierState.COMPLETE
            assert hit == (complete and split.holds_k(k) and os.path.exists(
                split.inner_adapter.path_of(split.v_child_key(k))))
        acct = split.accounting()
        assert acct["store_tasks_ok"] > 0 and acct["deletes"] > 0
    finally:
        split.close()
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0, "L1 leaked after close"
