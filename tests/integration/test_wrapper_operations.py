"""The serde wrapper through a fleet's ordinary operations (issue: operations-safe tier).

* "Not mine" is a miss, never a deletion: a deserializer's :class:`~lmserde.ForeignObjectError`
  and the frame's not-mine reasons leave the object in place and do not make the tier unhealthy.
* A load never waits on the network on the caller's thread: stored sizes an adapter cannot
  answer locally are looked up on the wrapper's background worker (fs's and memory's inline).
* A framed wrapper switches an inner adapter that can replace objects to replacing stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import (
    AsyncSerdeProcessor,
    ForeignObjectError,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    Bitmap,
    FSL2Adapter,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    wait_for_load,
)
from lmserde.l2.serde.wrapper import UNHEALTHY_AFTER_FAILURES
from lmserde.spec import SerdeSizeContract

KV = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])

#: A submit that waits on nothing returns at once; this bound only has to separate "returned"
#: from "waited for a blocked size lookup" (held for seconds) on a loaded 2-core CI machine.
SUBMIT_RETURNS_WITHIN_S = 0.5


class _NotMineDeserializer(IdentityDeserializer):
    """Decodes only objects of keys it holds key material for; the others are not its to read."""

    def __init__(self) -> None:
        self.readable: set[bytes] = set()

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        if key.chunk_hash not in self.readable:
            raise ForeignObjectError(f"no key material for {key.chunk_hash.hex()}")
        super().deserialize(src, dst, key)


def _not_mine_wrapper(base: Path, l1: L1Manager) -> tuple[SerdeL2AdapterWrapper,
                                                          _NotMineDeserializer]:
    decoder = _NotMineDeserializer()
    proc = AsyncSerdeProcessor(IdentitySerializer(), decoder, serde_type="t_not_mine")
    return SerdeL2AdapterWrapper(FSL2Adapter(base), proc, l1,
                                 size_contract=SerdeSizeContract.EXACT), decoder


def test_a_foreign_object_error_is_a_kept_miss(tmp_path: Path, l1: L1Manager,
                                               cache: Cache) -> None:
    wrapper, decoder = _not_mine_wrapper(tmp_path, l1)
    try:
        keys = [key_of(i) for i in range(3)]
        objs = objects_for(KV, 3)
        assert cache.store(wrapper, keys, objs).is_successful()
        decoder.readable = {keys[0].chunk_hash, keys[2].chunk_hash}
        bitmap, data = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, False, True]
        assert torch.equal(data[0], layout_bytes(objs[0]))
        assert int(data[1].count_nonzero()) == 0  # never handed back as KV data
        assert (tmp_path / key_file_name(keys[1])).exists()  # someone else's: left in place
        metrics = wrapper.metrics()
        assert metrics["rejections"] == {"foreign": 1}
        assert metrics["repaired"] == 0
        decoder.readable.add(keys[1].chunk_hash)  # the key material arrives: the object hits
        bitmap, data = cache.load(wrapper, keys[1:2], KV)
        assert bitmap.to_list() == [True]
        assert torch.equal(data[0], layout_bytes(objs[1]))
    finally:
        wrapper.close()


def test_not_mine_misses_do_not_make_the_tier_unhealthy(tmp_path: Path, l1: L1Manager,
                                                        cache: Cache) -> None:
    wrapper, _decoder = _not_mine_wrapper(tmp_path, l1)
    other = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                               "serde": {"type": "identity"}}, l1)
    try:
        keys = [key_of(i) for i in range(UNHEALTHY_AFTER_FAILURES + 2)]
        assert cache.store(wrapper, keys[:2], objects_for(KV, 2)).is_successful()
        assert cache.store(other, keys[2:], objects_for(KV, len(keys) - 2)).is_successful()
        for key in keys:  # foreign (key material), then config (another serde wrote them)
            assert cache.load(wrapper, [key], KV)[0].to_list() == [False]
        status = wrapper.report_status()
        assert status["serde_wrapper"]["rejections"] == {"foreign": 2, "config": len(keys) - 2}
        assert status["is_healthy"] is True
        assert all((tmp_path / key_file_name(k)).exists() for k in keys)
        assert cache.load(other, keys[2:3], KV)[0].to_list() == [True]  # still its own
    finally:
        wrapper.close()
        other.close()


class _BlockingSizes(MemoryL2Adapter):
    """A memory adapter whose size lookup blocks until released, and says so (a frozen network
    store): its sizes are not local."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.size_threads: list[str] = []

    def object_sizes_are_local(self) -> bool:
        return False

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        self.size_threads.append(threading.current_thread().name)
        self.release.wait(30)
        return super().get_object_sizes(keys)


class _CountedLocalSizes(MemoryL2Adapter):
    """A memory adapter (local sizes) that records the thread of each size lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.size_threads: list[str] = []

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        self.size_threads.append(threading.current_thread().name)
        return super().get_object_sizes(keys)


def _upper_bound_wrapper(l1: L1Manager) -> tuple[SerdeL2AdapterWrapper, _BlockingSizes]:
    inner = _BlockingSizes()
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="t_ub")
    return SerdeL2AdapterWrapper(inner, proc, l1,
                                 size_contract=SerdeSizeContract.UPPER_BOUND), inner


def test_a_load_never_waits_for_the_size_lookup(l1: L1Manager, cache: Cache) -> None:
    wrapper, inner = _upper_bound_wrapper(l1)
    try:
        keys = [key_of(i) for i in range(2)]
        objs = objects_for(KV, 2)
        inner.release.set()
        assert cache.store(wrapper, keys, objs).is_successful()
        inner.release.clear()
        dsts = cache.put(keys, objects_for(KV, 2, seed=9))
        started = time.monotonic()
        task = wrapper.submit_load_task(keys, dsts)
        assert time.monotonic() - started < SUBMIT_RETURNS_WITHIN_S
        assert wrapper.query_load_result(task) is None  # still waiting for the sizes
        inner.release.set()
        bitmap = wait_for_load(wrapper, task, timeout=10)
        assert bitmap.to_list() == [True, True]
        for dst, obj in zip(dsts, objs):
            assert torch.equal(layout_bytes(dst), layout_bytes(obj))
    finally:
        inner.release.set()
        wrapper.close()
        l1.delete(keys)


def test_close_fails_a_load_waiting_for_its_sizes(l1: L1Manager, cache: Cache) -> None:
    wrapper, inner = _upper_bound_wrapper(l1)
    keys = [key_of(1)]
    try:
        dsts = cache.put(keys, objects_for(KV, 1))
        task = wrapper.submit_load_task(keys, dsts)
        started = time.monotonic()
        wrapper.close()  # the size lookup is still blocked: close does not wait for it
        assert time.monotonic() - started < 5
        assert wrapper.query_load_result(task) == Bitmap(1)
        assert l1.memory_used_bytes() == sum(d.get_size() for d in dsts)  # no temporaries left
    finally:
        inner.release.set()
        l1.delete(keys)


@pytest.mark.parametrize("contract", [SerdeSizeContract.EXACT, SerdeSizeContract.UPPER_BOUND])
def test_sizes_that_may_wait_on_the_network_are_asked_on_the_worker(
        l1: L1Manager, cache: Cache, contract: SerdeSizeContract) -> None:
    inner = _BlockingSizes()
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="t_net")
    wrapper = SerdeL2AdapterWrapper(inner, proc, l1, size_contract=contract)
    keys = [key_of(i) for i in range(3)]
    try:
        inner.release.set()
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        assert cache.load(wrapper, keys, KV)[0].to_list() == [True] * 3
        assert inner.size_threads == ["serde-l2-wrapper-sizes"]
    finally:
        inner.release.set()
        wrapper.close()


def test_local_sizes_are_asked_on_the_callers_thread(l1: L1Manager, cache: Cache) -> None:
    """fs and memory answer sizes from local state: no hand-off to the worker."""
    inner = _CountedLocalSizes()
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="t_local")
    wrapper = SerdeL2AdapterWrapper(inner, proc, l1, size_contract=SerdeSizeContract.EXACT)
    keys = [key_of(i) for i in range(3)]
    try:
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        assert cache.load(wrapper, keys, KV)[0].to_list() == [True] * 3
        assert inner.size_threads == [threading.current_thread().name]
    finally:
        wrapper.close()


class _Replacing(MemoryL2Adapter):
    def __init__(self) -> None:
        super().__init__()
        self.switched = 0

    def replace_existing_on_store(self) -> bool:
        self.switched += 1
        return True


@pytest.mark.parametrize("frame", [True, False])
def test_a_framed_wrapper_switches_its_inner_adapter_to_replacing_stores(
        l1: L1Manager, frame: bool) -> None:
    inner = _Replacing()
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="t_id")
    wrapper = SerdeL2AdapterWrapper(inner, proc, l1, size_contract=SerdeSizeContract.EXACT,
                                    frame=frame)
    try:
        assert inner.switched == (1 if frame else 0)  # unframed: LMCache's first-writer-wins
        assert wrapper.report_status()["serde_replacing_stores"] is frame
    finally:
        wrapper.close()
