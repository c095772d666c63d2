"""Re-stores in the split tier (issue 27, item 2): a hit is one store's K and V, never a mix.

A second prefill of a prefix stores the same key with other bits. K stays in L1 and V goes to
``fs``, which skips a key it already holds: before store generations, the re-store replaced K and
kept the old V, and the next load was a hit with K of one store and V of another. Real ``fs``
tier, real threads; the serde (``split_test_v_only``) stores V bytes unchanged, so every hit can
be compared bit-exactly with the store it came from.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lmserde.l2 as l2
import pytest
import torch
from lmserde import MemoryLayoutDesc, SerdeConfig, TensorMemoryObj, create_serde_processor
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, SharedStores, SplitTierL2Adapter, SplitTierState
from lmserde.l2.split.v_slot import VHalfProcessor
from lmserde.memory import MemoryFormat
from split_serdes import (
    GROUP_BYTES,
    SHAPE,
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
def split(tmp_path: Path) -> Iterator[SplitTierL2Adapter]:
    adapter = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv"), "serde": {"type": V_ONLY}},
        L1Manager(64 << 20))
    assert isinstance(adapter, SplitTierL2Adapter)
    yield adapter
    adapter.close()


def halves(obj: TensorMemoryObj) -> tuple[bytes, bytes]:
    """The K and V groups' bytes."""
    return tuple(bytes(obj.get_tensor(g).contiguous().view(torch.uint8).reshape(-1).numpy())
                 for g in range(2))  # type: ignore[return-value]


def v_files(split: SplitTierL2Adapter) -> set[str]:
    base = split.inner_adapter.base_path
    return {n for n in os.listdir(base) if n.endswith(".data")}


def v_file_name(split: SplitTierL2Adapter, k: object) -> str:
    return os.path.basename(split.inner_adapter.path_of(split.v_child_key(k)))


def test_sequential_restore_loads_the_second_store(split: SplitTierL2Adapter) -> None:
    """D1 then D2 under one key: the load is D2's K and D2's V; D1's V is gone from L2."""
    a = key(1)
    d1, d2 = kv_object(1), kv_object(2)
    assert l2.store_sync(split, [a], [d1]).is_successful()
    first_file = v_file_name(split, a)
    first = l2.parse_v_child_key(split.v_child_key(a))
    assert l2.store_sync(split, [a], [d2]).is_successful()
    out = sentinel_object()
    assert l2.load_sync(split, [a], [out]).count() == 1
    assert same(out, d2), "a re-store must replace both halves"
    second = split.store_generation(a)
    assert first is not None and second is not None and first[1] != second
    # the re-store wrote V again (fs skips existing keys: it went to a new key) ...
    assert v_files(split) == {v_file_name(split, a)} and first_file not in v_files(split)
    with open(split.inner_adapter.path_of(split.v_child_key(a)), "rb") as f:
        assert f.read()[FRAME_HEADER_BYTES:] == halves(d2)[1]
    # ... and the V child names the store generation the K half carries
    assert l2.parse_v_child_key(split.v_child_key(a)) == (a, second)
    acct = split.accounting()
    assert acct["load_hits"] == 1 and acct["load_misses_generation"] == 0


def test_many_sequential_restores_never_mix(split: SplitTierL2Adapter) -> None:
    a, b = key(1), key(2)
    for seed in range(10, 20):
        obj = kv_object(seed)
        assert l2.store_sync(split, [a, b], [obj, kv_object(seed + 100)]).is_successful()
        outs = [sentinel_object(), sentinel_object()]
        assert l2.load_sync(split, [a, b], outs).count() == 2
        assert same(outs[0], obj) and same(outs[1], kv_object(seed + 100))
    assert v_files(split) == {v_file_name(split, a), v_file_name(split, b)}, "old V halves leaked"


def test_generation_mismatch_is_a_counted_miss(split: SplitTierL2Adapter) -> None:
    """The state racing stores can leave: the complete entry and the V child in L2 are of one
    store, the K half in L1 of another. That is a miss (counted, named), not a mixed hit; the
    next store heals the key."""
    a = key(1)
    d1, d2 = kv_object(1), kv_object(2)
    assert l2.store_sync(split, [a], [d1]).is_successful()  # K of D1 in L1
    other = l2.GenerationSource(b"\xee" * 8)()
    v_layout = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
    v_view = TensorMemoryObj.over(d2.raw_data[GROUP_BYTES:2 * GROUP_BYTES], v_layout,
                                  fmt=MemoryFormat.KV_TENSOR)
    # D2's V half as the split tier writes it, by a second writer of the same tier
    writer = l2.SerdeL2AdapterWrapper(
        l2.create_l2_adapter({"type": "fs", "base_path": split.inner_adapter.base_path}, None),
        VHalfProcessor(create_serde_processor(SerdeConfig(V_ONLY)), split.slots.v_mapping),
        L1Manager(1 << 20), serde_type=V_ONLY)
    try:
        v_key = l2.derive_v_child_key(a, other)
        assert l2.store_sync(writer, [v_key], [v_view]).is_successful()
    finally:
        writer.close()
    split.manifest.register_store(a, other)
    assert split.manifest.mark_complete(a)  # the entry of D2's store
    assert l2.lookup_sync(split, [a]).count() == 0
    out = sentinel_object()
    assert l2.load_sync(split, [a], [out]).count() == 0
    assert same(out, sentinel_object()), "a miss leaves the caller's object alone"
    status = split.report_status()["split_tier"]
    assert status["lookup_misses_generation"] == 1 and status["load_misses_generation"] == 1
    assert status["load_misses_k_absent"] == 0
    # the next store replaces both halves and deletes the V it displaced (in a real race, D1's
    # V goes when D1's store finds itself superseded; here it stands for that store's)
    other_file = v_file_name(split, a)
    d3 = kv_object(3)
    assert l2.store_sync(split, [a], [d3]).is_successful()
    assert l2.load_sync(split, [a], [out]).count() == 1 and same(out, d3)
    assert v_file_name(split, a) in v_files(split) and other_file not in v_files(split)


def test_restore_of_a_key_being_read_is_refused(split: SplitTierL2Adapter) -> None:
    """A lookup holds K of D1: the store of D2 cannot replace it, so it replaces nothing —
    the store fails, and the key is never D2's K with D1's V (or the reverse)."""
    a = key(1)
    d1, d2 = kv_object(1), kv_object(2)
    assert l2.store_sync(split, [a], [d1]).is_successful()
    assert l2.lookup_sync(split, [a]).count() == 1  # K of D1 locked
    assert not l2.store_sync(split, [a], [d2]).is_successful()
    out = sentinel_object()
    hit = l2.load_sync(split, [a], [out]).count() == 1
    assert not hit and same(out, sentinel_object())
    split.submit_unlock([a])
    assert not split.holds_k(a) and split.manifest.lookup(a) is None
    assert v_files(split) == set(), "the refused store left no V half behind"
    assert split.l1_manager.memory_used_bytes() == 0
    assert l2.store_sync(split, [a], [d2]).is_successful()
    assert l2.load_sync(split, [a], [out]).count() == 1 and same(out, d2)


def test_racing_restores_never_give_a_mixed_hit(split: SplitTierL2Adapter) -> None:
    """Four threads store two keys over and over, each store with its own data, and load after
    each store: every hit is bit-exactly the K and the V of one store."""
    keys = [key(1), key(2)]
    seeds = itertools.count(1000)
    by_k: dict[bytes, bytes] = {}  # K bytes of every store -> that store's V bytes
    table_lock = threading.Lock()
    errors: list[str] = []
    counts = {"hits": 0, "mixed": 0, "loads": 0, "stored": 0}
    stores = SharedStores(split)
    deadline = time.monotonic() + 2.0

    def worker(index: int) -> None:
        try:
            n = 0
            while time.monotonic() < deadline:
                k = keys[n % 2]
                n += 1
                with table_lock:
                    seed = next(seeds)
                obj = kv_object(seed)
                kb, vb = halves(obj)
                with table_lock:
                    by_k[kb] = vb  # recorded before the store: any hit of it is known
                if stores.store([k], [obj]).is_successful():
                    with table_lock:
                        counts["stored"] += 1
                out = sentinel_object()
                hit = l2.load_sync(split, [k], [out]).count() == 1
                with table_lock:
                    counts["loads"] += 1
                    if not hit:
                        continue
                    counts["hits"] += 1
                    got_k, got_v = halves(out)
                    if by_k.get(got_k) != got_v:
                        counts["mixed"] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(f"worker {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert counts["mixed"] == 0, f"mixed hits: {counts}"
    assert counts["hits"] > 0 and counts["stored"] > 0, f"the race never hit: {counts}"
    # quiet now: each key is a hit of one store or a miss, and only current V halves remain
    live = set()
    for k in keys:
        out = sentinel_object()
        if l2.load_sync(split, [k], [out]).count() == 1:
            got_k, got_v = halves(out)
            assert by_k[got_k] == got_v
        if split.manifest.lookup(k) in (SplitTierState.COMPLETE, SplitTierState.STORE_IN_FLIGHT):
            live.add(v_file_name(split, k))
    assert v_files(split) <= live, "V halves of displaced stores were left in L2"
