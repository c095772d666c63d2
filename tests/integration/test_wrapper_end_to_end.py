"""Store N keys through a serde into real L2 storage, drop them from L1, load them back (I.11/I.12)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import MemoryLayoutDesc
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    FSL2Adapter,
    L2AdapterInterface,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
)

KV = MemoryLayoutDesc([[100, 2, 512]], [torch.bfloat16])


@pytest.fixture(params=["fs", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    if request.param == "fs":
        return {"type": "fs", "base_path": str(tmp_path / "l2")}
    return {"type": "memory"}


@pytest.fixture
def identity_adapter(backend: dict, l1: L1Manager) -> Iterator[L2AdapterInterface]:
    adapter = create_l2_adapter({**backend, "serde": {"type": "identity"}}, l1)
    yield adapter
    adapter.close()


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten().float(), b.flatten().float()]))[0, 1])


def test_five_keys_round_trip_bit_exact_and_l1_returns_to_zero(
    identity_adapter: L2AdapterInterface, cache: Cache, l1: L1Manager
) -> None:
    keys = [key_of(i) for i in range(5)]
    objs = objects_for(KV, 5)
    result = cache.store(identity_adapter, keys, objs)
    assert result.is_successful()
    assert result.bytes_transferred() == 5 * (KV.nbytes + FRAME_HEADER_BYTES)
    assert l1.memory_used_bytes() == 0
    bitmap, data = cache.load(identity_adapter, keys, KV)
    assert bitmap.count_leading_ones() == 5
    for src, got in zip(objs, data):
        assert torch.equal(layout_bytes(src), got)
    assert l1.memory_used_bytes() == 0
    assert l1.num_objects() == 0


def test_without_serde_the_same_flow_hits(backend: dict, cache: Cache, l1: L1Manager) -> None:
    adapter = create_l2_adapter(backend, l1)
    try:
        assert not isinstance(adapter, SerdeL2AdapterWrapper)
        keys = [key_of(i) for i in range(5)]
        objs = objects_for(KV, 5)
        assert cache.store(adapter, keys, objs).is_successful()
        bitmap, data = cache.load(adapter, keys, KV)
        assert bitmap.count() == 5
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        assert l1.memory_used_bytes() == 0
    finally:
        adapter.close()


def test_partial_prefix(identity_adapter: L2AdapterInterface, cache: Cache, l1: L1Manager) -> None:
    stored = [0, 1, 3, 4]
    objs = objects_for(KV, 5)
    keys = [key_of(i) for i in range(5)]
    cache.store(identity_adapter, [keys[i] for i in stored], [objs[i] for i in stored])
    bitmap, data = cache.load(identity_adapter, keys, KV)
    assert bitmap.to_list() == [True, True, False, True, True]
    assert bitmap.count_leading_ones() == 2
    assert torch.equal(data[4], layout_bytes(objs[4]))
    assert l1.memory_used_bytes() == 0


def test_empty_l2_gives_no_hits(identity_adapter: L2AdapterInterface, cache: Cache,
                                l1: L1Manager) -> None:
    bitmap, _ = cache.load(identity_adapter, [key_of(i) for i in range(3)], KV)
    assert bitmap.count() == 0
    assert l1.memory_used_bytes() == 0


def test_repeated_cycles_never_leak(identity_adapter: L2AdapterInterface, cache: Cache,
                                    l1: L1Manager) -> None:
    for cycle in range(5):
        keys = [key_of(100 * cycle + i) for i in range(3)]
        objs = objects_for(KV, 3, seed=cycle)
        assert cache.store(identity_adapter, keys, objs).is_successful()
        bitmap, data = cache.load(identity_adapter, keys, KV)
        assert bitmap.count() == 3
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        assert l1.memory_used_bytes() == 0
    stats = l1.pool_stats()
    assert stats.hits > 0, "a steady store/load stream must reuse temporary buffers"


@pytest.mark.parametrize("layout", [
    MemoryLayoutDesc([[100, 2, 512]], [torch.float16]),
    MemoryLayoutDesc([[50, 2, 256]], [torch.float32]),
    MemoryLayoutDesc([[1]], [torch.bfloat16]),
    MemoryLayoutDesc([[7, 13, 3]], [torch.float16]),
    MemoryLayoutDesc([[3, 5], [4], [2, 2]], [torch.bfloat16, torch.float16, torch.float32]),
], ids=["fp16", "fp32", "tiny", "odd", "three-groups"])
def test_layouts_round_trip_exactly(identity_adapter: L2AdapterInterface, cache: Cache,
                                    l1: L1Manager, layout: MemoryLayoutDesc) -> None:
    keys = [key_of(i) for i in range(3)]
    objs = objects_for(layout, 3, seed=7)
    assert cache.store(identity_adapter, keys, objs).is_successful()
    bitmap, data = cache.load(identity_adapter, keys, layout)
    assert bitmap.count() == 3
    assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
    assert l1.memory_used_bytes() == 0


def test_large_objects(tmp_path: Path, cache: Cache, l1: L1Manager) -> None:
    layout = MemoryLayoutDesc([[256, 4, 2, 2048]], [torch.bfloat16])  # 8 MiB each
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "identity"}}, l1)
    try:
        keys = [key_of(i) for i in range(2)]
        objs = objects_for(layout, 2)
        assert cache.store(adapter, keys, objs).is_successful()
        bitmap, data = cache.load(adapter, keys, layout)
        assert bitmap.count() == 2
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        assert l1.memory_used_bytes() == 0
    finally:
        adapter.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_lossy_serde_round_trip(backend: dict, cache: Cache, l1: L1Manager,
                                dtype: torch.dtype) -> None:
    layout = MemoryLayoutDesc([[64, 2, 128]], [dtype])
    adapter = create_l2_adapter({**backend, "serde": {"type": "t_int8"}}, l1)
    try:
        keys = [key_of(i) for i in range(5)]
        objs = objects_for(layout, 5)
        result = cache.store(adapter, keys, objs)
        assert result.is_successful()
        assert result.bytes_transferred() == 5 * (FRAME_HEADER_BYTES + 4 + layout.numel)  # frames
        bitmap, data = cache.load(adapter, keys, layout)
        assert bitmap.count() == 5
        for src, got in zip(objs, data):
            a, b = layout_bytes(src).view(dtype), got.view(dtype)
            assert not torch.equal(a, b)
            assert _correlation(a, b) > 0.99
        assert l1.memory_used_bytes() == 0
    finally:
        adapter.close()


def test_lossy_serde_on_multi_group_objects(tmp_path: Path, cache: Cache, l1: L1Manager) -> None:
    layout = MemoryLayoutDesc([[32, 64], [16, 64], [8, 64]],
                              [torch.bfloat16, torch.float16, torch.float32])
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_int8"}}, l1)
    try:
        keys = [key_of(i) for i in range(3)]
        objs = objects_for(layout, 3)
        assert cache.store(adapter, keys, objs).is_successful()
        bitmap, data = cache.load(adapter, keys, layout)
        assert bitmap.count() == 3
        offsets = layout.group_offsets()
        for src, got in zip(objs, data):
            ref = layout_bytes(src)
            for g, dtype in enumerate(layout.dtypes):
                a = ref[offsets[g]:offsets[g + 1]].view(dtype)
                b = got[offsets[g]:offsets[g + 1]].view(dtype)
                assert _correlation(a, b) > 0.99
        assert l1.memory_used_bytes() == 0
    finally:
        adapter.close()


def test_fs_holds_serialized_files_under_the_original_keys(tmp_path: Path, cache: Cache,
                                                           l1: L1Manager) -> None:
    layout = MemoryLayoutDesc([[16, 16]], [torch.float32])
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_int8"}}, l1)
    try:
        keys = [key_of(i, salt="tenant-a") for i in range(2)]
        cache.store(adapter, keys, objects_for(layout, 2))
        files = sorted(p for p in os.listdir(tmp_path) if p.endswith(".data"))
        assert files == sorted(key_file_name(k) for k in keys)
        for key in keys:
            assert os.path.getsize(tmp_path / key_file_name(key)) == FRAME_HEADER_BYTES + 4 + 256
        assert adapter.get_object_sizes(keys) == {k: FRAME_HEADER_BYTES + 260 for k in keys}
        usage = adapter.get_usage()
        assert usage.total_bytes_used == 2 * (FRAME_HEADER_BYTES + 260)
        assert dict(usage.bytes_by_cache_salt) == {"tenant-a": 2 * (FRAME_HEADER_BYTES + 260)}
        assert isinstance(adapter, SerdeL2AdapterWrapper)
        assert isinstance(adapter.inner_adapter, FSL2Adapter)
    finally:
        adapter.close()


def test_a_second_adapter_on_the_same_directory_loads_what_the_first_stored(
    tmp_path: Path, cache: Cache, l1: L1Manager
) -> None:
    spec = {"type": "fs", "base_path": str(tmp_path), "serde": {"type": "t_crc"}}
    keys = [key_of(i) for i in range(4)]
    objs = objects_for(KV, 4)
    first = create_l2_adapter(spec, l1)
    try:
        assert cache.store(first, keys, objs).is_successful()
    finally:
        first.close()
    second = create_l2_adapter(spec, l1)
    try:
        bitmap, data = cache.load(second, keys, KV)
        assert bitmap.count() == 4
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
    finally:
        second.close()
