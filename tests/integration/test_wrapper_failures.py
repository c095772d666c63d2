"""Failure semantics of the serde wrapper: every failure is reported, every temporary released."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    SerdeProcessor,
    SerdeSizeContract,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.keys import TEMP_KEY_SUFFIX_BYTES
from lmserde.l1 import L1Error, L1Manager, L1Result
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    Bitmap,
    FaultInjectingL2Adapter,
    FaultPlan,
    FSL2Adapter,
    L2StoreResult,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    wait_for_load,
    wait_for_store,
)
from toy_serdes import make_processor

KV = MemoryLayoutDesc([[8, 2, 16]], [torch.float16])


class SpyL1(L1Manager):
    """Records every call; ``oom_index`` makes that position of a reservation fail."""

    def __init__(self, capacity: int = 1 << 30, oom_index: int | None = None) -> None:
        super().__init__(capacity)
        self.calls: list[tuple[str, Any]] = []
        self.oom_index = oom_index

    def reserve_write(self, keys: Sequence[ObjectKey], is_temporary: Any, layout_desc: Any,
                      tag: str = "", mode: str = "new") -> L1Result:
        self.calls.append(("reserve_write", (list(keys), is_temporary, layout_desc, tag)))
        if self.oom_index is None or not all(is_temporary):
            return super().reserve_write(keys, is_temporary, layout_desc, tag, mode)
        keys = list(keys)
        layouts = layout_desc if isinstance(layout_desc, list) else [layout_desc] * len(keys)
        others = [i for i in range(len(keys)) if i != self.oom_index]
        result = super().reserve_write([keys[i] for i in others], [True] * len(others),
                                       [layouts[i] for i in others], tag, mode)
        result[keys[self.oom_index]] = (L1Error.OUT_OF_MEMORY, None)
        return result

    def finish_write_and_reserve_read(self, keys: Sequence[ObjectKey], read_locks: int = 1,
                                      tag: str = "") -> L1Result:
        self.calls.append(("finish_write_and_reserve_read", list(keys)))
        return super().finish_write_and_reserve_read(keys, read_locks, tag)

    def finish_read(self, keys: Sequence[ObjectKey]) -> L1Result:
        self.calls.append(("finish_read", list(keys)))
        return super().finish_read(keys)

    def finish_write_and_delete(self, keys: Sequence[ObjectKey], tag: str = "") -> L1Result:
        self.calls.append(("finish_write_and_delete", list(keys)))
        return super().finish_write_and_delete(keys, tag)

    def named(self, name: str) -> list[Any]:
        return [args for call, args in self.calls if call == name]


def _identity() -> AsyncSerdeProcessor:
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="identity")


def test_store_reserves_once_and_releases_exactly_the_temporaries() -> None:
    l1 = SpyL1()
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    try:
        keys = [key_of(i, salt="t1") for i in range(3)]
        objs = objects_for(MemoryLayoutDesc([[32]], [torch.float16]), 3)  # 64 bytes each
        assert wait_for_store(wrapper, wrapper.submit_store_task(keys, objs)).is_successful()
        (reserve,) = l1.named("reserve_write")
        temp_keys, is_temporary, layout, tag = reserve
        assert is_temporary == [True, True, True]
        # 64 payload bytes plus the stored-object frame's header
        assert layout == MemoryLayoutDesc([torch.Size([64 + FRAME_HEADER_BYTES])], [torch.uint8])
        assert tag == "serde_wrapper"
        for key, temp in zip(keys, temp_keys):
            assert temp.chunk_hash.startswith(key.chunk_hash)
            assert len(temp.chunk_hash) == len(key.chunk_hash) + TEMP_KEY_SUFFIX_BYTES
            assert (temp.model_name, temp.kv_rank, temp.object_group_id, temp.cache_salt) == (
                key.model_name, key.kv_rank, key.object_group_id, key.cache_salt)
        assert l1.named("finish_write_and_reserve_read") == [temp_keys]
        assert l1.named("finish_read") == [temp_keys]
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_middle_key_out_of_memory_fails_the_store_at_once_and_releases_the_rest() -> None:
    l1 = SpyL1(oom_index=1)
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    try:
        keys = [key_of(i) for i in range(3)]
        task = wrapper.submit_store_task(keys, objects_for(KV, 3))
        assert wrapper.pop_completed_store_tasks() == {task: L2StoreResult(False, 0)}
        assert l1.memory_used_bytes() == 0
        (released,) = l1.named("finish_write_and_delete")
        assert len(released) == 2
        assert wrapper.metrics()["failures"] == {"reserve": 1}
    finally:
        wrapper.close()


def test_load_reservation_failure_is_an_immediate_all_miss() -> None:
    l1 = SpyL1(oom_index=2)
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    cache = Cache(l1)
    try:
        keys = [key_of(i) for i in range(3)]
        l1.oom_index = None
        cache.store(wrapper, keys, objects_for(KV, 3))
        l1.oom_index = 2
        dsts = [o for o in objects_for(KV, 3)]
        task = wrapper.submit_load_task(keys, dsts)
        assert wrapper.query_load_result(task) == Bitmap(3)
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_real_l1_exhaustion_fails_cleanly() -> None:
    l1 = L1Manager((KV.nbytes + FRAME_HEADER_BYTES) * 2)  # room for two temporaries, not three
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    try:
        task = wrapper.submit_store_task([key_of(i) for i in range(3)], objects_for(KV, 3))
        assert wrapper.pop_completed_store_tasks() == {task: L2StoreResult(False, 0)}
        assert l1.memory_used_bytes() == 0
        task = wrapper.submit_store_task([key_of(i) for i in range(2)], objects_for(KV, 2))
        assert wait_for_store(wrapper, task).is_successful()
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def _faulty(l1: L1Manager, **plan: Any) -> SerdeL2AdapterWrapper:
    inner = FaultInjectingL2Adapter(MemoryL2Adapter(), FaultPlan(**plan))
    return SerdeL2AdapterWrapper(inner, make_processor("t_crc"), l1)


def test_inner_store_failure_is_reported(l1: L1Manager, cache: Cache) -> None:
    wrapper = _faulty(l1, store_failure_rate=1.0)
    try:
        result = cache.store(wrapper, [key_of(1), key_of(2)], objects_for(KV, 2))
        assert result == L2StoreResult(False, 0)
        assert l1.memory_used_bytes() == 0
        metrics = wrapper.metrics()
        assert metrics["failures"] == {"inner_store": 1}
        assert metrics["store_failed"] == 1
        bitmap, _ = cache.load(wrapper, [key_of(1), key_of(2)], KV)
        assert bitmap.count() == 0
    finally:
        wrapper.close()


def test_inner_load_misses_only_those_keys(l1: L1Manager, cache: Cache) -> None:
    keys = [key_of(i) for i in range(5)]
    wrapper = _faulty(l1, miss_chunk_hashes=[keys[1].chunk_hash, keys[3].chunk_hash])
    try:
        objs = objects_for(KV, 5)
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, False, True, False, True]
        for i in (0, 2, 4):
            assert torch.equal(data[i], layout_bytes(objs[i]))
        assert wrapper.metrics()["failures"] == {"inner_load": 2}
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_inner_submit_exceptions(l1: L1Manager) -> None:
    wrapper = _faulty(l1, submit_exception_rate=1.0)
    try:
        keys = [key_of(i) for i in range(2)]
        task = wrapper.submit_store_task(keys, objects_for(KV, 2))
        assert wait_for_store(wrapper, task) == L2StoreResult(False, 0)
        task = wrapper.submit_load_task(keys, objects_for(KV, 2))
        assert wrapper.query_load_result(task) == Bitmap(2)  # at once, no waiting
        assert wrapper.metrics()["failures"] == {"inner_store_submit": 1, "inner_load_submit": 2}
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


class _RaisingProcessor(AsyncSerdeProcessor):
    def __init__(self, *, on_serialize: bool, on_deserialize: bool) -> None:
        super().__init__(IdentitySerializer(), IdentityDeserializer(), serde_type="raising")
        self.size_contract = SerdeSizeContract.EXACT
        self.on_serialize, self.on_deserialize = on_serialize, on_deserialize

    def submit_serialize(self, *args: Any) -> int:
        if self.on_serialize:
            raise RuntimeError("serialize submit refused")
        return super().submit_serialize(*args)

    def submit_deserialize(self, *args: Any) -> int:
        if self.on_deserialize:
            raise RuntimeError("deserialize submit refused")
        return super().submit_deserialize(*args)


def test_serde_submit_exceptions(l1: L1Manager, cache: Cache) -> None:
    proc = _RaisingProcessor(on_serialize=True, on_deserialize=False)
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), proc, l1)
    try:
        task = wrapper.submit_store_task([key_of(1)], objects_for(KV, 1))
        assert wrapper.pop_completed_store_tasks() == {task: L2StoreResult(False, 0)}
        assert l1.memory_used_bytes() == 0
        proc.on_serialize, proc.on_deserialize = False, True
        assert cache.store(wrapper, [key_of(1)], objects_for(KV, 1)).is_successful()
        bitmap, _ = cache.load(wrapper, [key_of(1)], KV)
        assert bitmap == Bitmap(1)
        assert wrapper.metrics()["failures"] == {"serialize_submit": 1, "deserialize_submit": 1}
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


class _PoisonSerializer(IdentitySerializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        if key.chunk_hash.startswith(b"BAD"):
            raise ValueError("poisoned object")
        return super().serialize(src, dst, key)


def test_one_failing_serialize_fails_the_store_task(l1: L1Manager, cache: Cache) -> None:
    proc = AsyncSerdeProcessor(_PoisonSerializer(), IdentityDeserializer(), serde_type="poison")
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), proc, l1,
                                    size_contract=SerdeSizeContract.EXACT)
    try:
        keys = [key_of(0), key_of(1, tag=b"BAD"), key_of(2)]
        assert cache.store(wrapper, keys, objects_for(KV, 3)) == L2StoreResult(False, 0)
        assert wrapper.metrics()["failures"] == {"serialize": 1}
        assert l1.memory_used_bytes() == 0
        assert wrapper.inner_adapter.report_status()["stored_object_count"] == 0
    finally:
        wrapper.close()


def _damage_files(base: Path, keys: list[ObjectKey]) -> None:
    path = [base / key_file_name(k) for k in keys]
    data = bytearray(path[1].read_bytes())
    data[len(data) // 2] ^= 0x40
    path[1].write_bytes(bytes(data))  # corrupt
    path[2].write_bytes(path[2].read_bytes()[:-5])  # truncated
    path[3].write_bytes(path[0].read_bytes())  # foreign: another key's valid frame
    path[4].write_bytes(path[4].read_bytes() + b"\0" * 64)  # longer than the serde can write
    path[5].write_bytes(os.urandom(path[5].stat().st_size))  # garbage


def test_damaged_files_miss_only_their_keys(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    # unframed, so that the serde's own check sees the damage (framed: see test_fail_closed)
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_crc"}, "serde_frame": False}, l1)
    try:
        keys = [key_of(i) for i in range(8)]
        objs = objects_for(KV, 8)
        assert cache.store(wrapper, keys, objs).is_successful()
        _damage_files(tmp_path, keys)
        bitmap, data = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, False, False, False, False, False, True, True]
        for i in (0, 6, 7):
            assert torch.equal(data[i], layout_bytes(objs[i]))
        for i in (1, 2, 3, 5):  # decoded and rejected: the destination is zeroed
            assert int(data[i].count_nonzero()) == 0
        assert int((data[4] != 0xA5).sum()) == 0  # never read: larger than any valid payload
        assert wrapper.metrics()["failures"] == {"deserialize": 4, "stored_size": 1}
        assert wrapper.metrics()["rejections"]["foreign"] == 1  # not provably damage: kept
        assert (tmp_path / key_file_name(keys[4])).exists()
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


class _BoolOnlyProcessor(SerdeProcessor):
    """A foreign processor: the upstream bool results only, no per-item outcomes."""

    def __init__(self, inner: AsyncSerdeProcessor) -> None:
        self._inner = inner
        self.serde_type = inner.serde_type

    def __getattr__(self, name: str) -> Any:
        if name.startswith("query_") and name.endswith("_outcome"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def get_serialize_event_fd(self) -> int:
        return self._inner.get_serialize_event_fd()

    def get_deserialize_event_fd(self) -> int:
        return self._inner.get_deserialize_event_fd()

    def submit_serialize(self, *args: Any) -> int:
        return self._inner.submit_serialize(*args)

    def query_serialize_result(self, task_id: int) -> bool | None:
        return self._inner.query_serialize_result(task_id)

    def submit_deserialize(self, *args: Any) -> int:
        return self._inner.submit_deserialize(*args)

    def query_deserialize_result(self, task_id: int) -> bool | None:
        return self._inner.query_deserialize_result(task_id)

    def estimate_serialized_size(self, layout_desc: Any) -> int:
        return self._inner.estimate_serialized_size(layout_desc)

    def close(self) -> None:
        self._inner.close()


def test_processor_without_outcomes_fails_the_whole_batch(tmp_path: Path, l1: L1Manager,
                                                          cache: Cache) -> None:
    proc = _BoolOnlyProcessor(make_processor("t_crc"))
    wrapper = SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), proc, l1, frame=False)
    try:
        keys = [key_of(i) for i in range(6)]
        assert cache.store(wrapper, keys, objects_for(KV, 6)).is_successful()
        _damage_files(tmp_path, keys)
        bitmap, _ = cache.load(wrapper, keys, KV)
        assert bitmap == Bitmap(6)  # upstream: one bad object fails every key
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


class _NoSizesAdapter(MemoryL2Adapter):
    adapter_type = "nosizes"

    def reports_object_sizes(self) -> bool:
        return False

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        return {}


def test_upper_bound_serde_needs_an_adapter_that_reports_sizes(l1: L1Manager) -> None:
    proc, inner = make_processor("t_zlib"), _NoSizesAdapter()
    with pytest.raises(ValueError, match="Upper-bound serde output requires .* t_zlib on nosizes"):
        SerdeL2AdapterWrapper(inner, proc, l1)
    proc.close()
    inner.close()


def test_exact_serde_works_without_reported_sizes(l1: L1Manager, cache: Cache) -> None:
    wrapper = SerdeL2AdapterWrapper(_NoSizesAdapter(), make_processor("t_crc"), l1)
    try:
        objs = objects_for(KV, 3)
        keys = [key_of(i) for i in range(3)]
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, KV)
        assert bitmap.count() == 3
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
    finally:
        wrapper.close()


@pytest.mark.parametrize("backend", ["fs", "memory"])
def test_upper_bound_serde_loads_variable_sizes(backend: str, tmp_path: Path, l1: L1Manager,
                                                cache: Cache) -> None:
    spec = {"type": backend, "serde": {"type": "t_zlib"}}
    if backend == "fs":
        spec["base_path"] = str(tmp_path)
    wrapper = create_l2_adapter(spec, l1)
    try:
        layout = MemoryLayoutDesc([[64, 64]], [torch.float16])
        objs = objects_for(layout, 4)
        for i, obj in enumerate(objs):  # different compressibility per object
            layout_bytes(obj)
            obj.raw_data[: 2048 * i].zero_()
        keys = [key_of(i) for i in range(4)]
        assert cache.store(wrapper, keys, objs).is_successful()
        sizes = wrapper.get_object_sizes(keys)
        assert len(set(sizes.values())) == 4
        assert all(s < wrapper.serde.estimate_serialized_size(layout) for s in sizes.values())
        bitmap, data = cache.load(wrapper, keys, layout)
        assert bitmap.count() == 4
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_zero_byte_objects_store_a_header_only_file_and_hit(tmp_path: Path, l1: L1Manager,
                                                          cache: Cache) -> None:
    layout = MemoryLayoutDesc([[0, 4]], [torch.float16])
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "identity"}}, l1)
    try:
        key = key_of(9)
        stored = cache.store(wrapper, [key], objects_for(layout, 1))
        assert stored == L2StoreResult(True, FRAME_HEADER_BYTES)  # an empty payload's frame
        assert (tmp_path / key_file_name(key)).stat().st_size == FRAME_HEADER_BYTES
        bitmap, _ = cache.load(wrapper, [key], layout)
        assert bitmap.to_list() == [True]
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_mismatched_lists_and_bad_input(l1: L1Manager) -> None:
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    try:
        with pytest.raises(ValueError, match="2 keys but 1 objects"):
            wrapper.submit_store_task([key_of(0), key_of(1)], objects_for(KV, 1))
        with pytest.raises(ValueError, match="1 keys but 2 objects"):
            wrapper.submit_load_task([key_of(0)], objects_for(KV, 2))
        empty = wrapper.submit_store_task([], [])
        assert wait_for_store(wrapper, empty) == L2StoreResult(True, 0)
        assert wait_for_load(wrapper, wrapper.submit_load_task([], [])) == Bitmap(0)
    finally:
        wrapper.close()


class _RefusingL1(L1Manager):
    """Refuses to read-lock the second temporary of a batch (an L1 bug, not a normal path)."""

    def finish_write_and_reserve_read(self, keys: Sequence[ObjectKey], read_locks: int = 1,
                                      tag: str = "") -> L1Result:
        keys = list(keys)
        result = super().finish_write_and_reserve_read(
            [k for i, k in enumerate(keys) if i != 1], read_locks, tag)
        result[keys[1]] = (L1Error.KEY_IN_WRONG_STATE, None)
        return result


def test_an_l1_that_refuses_read_locks_still_gets_every_temporary_back() -> None:
    l1 = _RefusingL1(1 << 20)
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), _identity(), l1)
    try:
        task = wrapper.submit_store_task([key_of(i) for i in range(3)], objects_for(KV, 3))
        assert wait_for_store(wrapper, task) == L2StoreResult(False, 0)
        assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0
        assert wrapper.metrics()["failures"] == {"internal": 1}
    finally:
        wrapper.close()


def test_colliding_fds_are_refused(l1: L1Manager) -> None:
    proc = _identity()
    inner = MemoryL2Adapter()

    class SameFds(_BoolOnlyProcessor):
        def get_deserialize_event_fd(self) -> int:
            return self.get_serialize_event_fd()

    with pytest.raises(ValueError, match="four distinct file descriptors"):
        SerdeL2AdapterWrapper(inner, SameFds(proc), l1, size_contract=SerdeSizeContract.EXACT)
    proc.close()
    inner.close()
