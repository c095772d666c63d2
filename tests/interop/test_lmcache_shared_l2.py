"""One L2 directory shared by LMCache 0.5.6 and lmserde.

LMCache's own wrapper, fs adapter and fp8 serde write; lmserde's ``create_l2_adapter`` with
LMCache's file names (``"naming": "lmcache"``) and the frame turned off (``"serde_frame":
false``) reads the same files, and the other way round. With the frame on (the default)
LMCache's files are refused as ``format`` — misses, never wrong KV.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lmcache", reason="the interop session installs lmcache==0.5.6")
pytest.importorskip("lmserde_fp8")

import torch
from lmcache_objects import (
    fill_seeded,
    lmcache_key,
    lmcache_layout,
    release,
    reserve_objects,
    wait_load,
    wait_store,
)
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync

SHAPE = [2, 4, 16, 32]
N = 3
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])


def _ours(key: Any) -> ObjectKey:
    return ObjectKey(key.chunk_hash, key.model_name, key.kv_rank, key.object_group_id,
                     key.cache_salt)


@pytest.fixture
def lmcache_fs(tmp_path: Path, lmcache_l1: Any) -> Iterator[Any]:
    from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import FSL2Adapter, FSL2AdapterConfig
    from lmcache.v1.distributed.l2_adapters.serde_wrapper import SerdeL2AdapterWrapper
    from lmcache.v1.distributed.serde import SerdeConfig, create_serde_processor

    inner = FSL2Adapter(FSL2AdapterConfig(base_path=str(tmp_path / "l2")))
    adapter = SerdeL2AdapterWrapper(inner, create_serde_processor(SerdeConfig(type="fp8")),
                                    lmcache_l1)
    yield adapter
    adapter.close()


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(1 << 26)


def _lmserde_fs(tmp_path: Path, l1: L1Manager, frame: bool) -> Any:
    return create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "l2"), "naming": "lmcache",
                              "serde": {"type": "fp8"}, "serde_frame": frame}, l1)


def _lmcache_objects(l1: Any, first: int, seed: int | None) -> tuple[list[Any], list[Any]]:
    keys = [lmcache_key(first + i) for i in range(N)]
    objs = reserve_objects(l1, keys, lmcache_layout([SHAPE], [torch.bfloat16]))
    for i, obj in enumerate(objs):
        if seed is None:
            obj.raw_data.fill_(0x5A)
        else:
            fill_seeded(obj, seed + i)
    return keys, objs


def test_lmserde_unframed_reads_what_lmcache_wrote(tmp_path: Path, lmcache_fs: Any,
                                                  lmcache_l1: Any, l1: L1Manager) -> None:
    keys, srcs = _lmcache_objects(lmcache_l1, 7000, seed=5)
    try:
        assert wait_store(lmcache_fs, lmcache_fs.submit_store_task(keys, srcs)).is_successful()
        expected = [s.tensor.to(torch.float8_e4m3fn).to(torch.bfloat16).clone() for s in srcs]
    finally:
        release(lmcache_l1, keys)
    ours = _lmserde_fs(tmp_path, l1, frame=False)
    try:
        dsts = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in keys]
        assert load_sync(ours, [_ours(k) for k in keys], dsts).to_list() == [True] * N
        assert all(torch.equal(d.tensor, e) for d, e in zip(dsts, expected))
    finally:
        ours.close()


def test_lmcache_reads_what_lmserde_unframed_wrote(tmp_path: Path, lmcache_fs: Any,
                                                  lmcache_l1: Any, l1: L1Manager) -> None:
    ours = _lmserde_fs(tmp_path, l1, frame=False)
    keys = [lmcache_key(7100 + i) for i in range(N)]
    srcs = [TensorMemoryObj.from_tensor(torch.randn(SHAPE).to(torch.bfloat16)) for _ in keys]
    try:
        assert store_sync(ours, [_ours(k) for k in keys], srcs).is_successful()
    finally:
        ours.close()
    _, outs = _lmcache_objects(lmcache_l1, 7100, seed=None)
    try:
        hits = wait_load(lmcache_fs, lmcache_fs.submit_load_task(keys, outs), N)
        assert hits == [True] * N
        for out, src in zip(outs, srcs):
            assert torch.equal(out.tensor, src.tensor.to(torch.float8_e4m3fn).to(torch.bfloat16))
    finally:
        release(lmcache_l1, keys)


def test_framed_lmserde_refuses_lmcache_files_as_foreign_and_keeps_them(
        tmp_path: Path, lmcache_fs: Any, lmcache_l1: Any, l1: L1Manager) -> None:
    """LMCache's objects carry no lmserde frame: not this reader's to read (``foreign``), left in
    place for the LMCache processes sharing the tier, which still load them."""
    keys, srcs = _lmcache_objects(lmcache_l1, 7200, seed=9)
    try:
        assert wait_store(lmcache_fs, lmcache_fs.submit_store_task(keys, srcs)).is_successful()
    finally:
        release(lmcache_l1, keys)
    ours = _lmserde_fs(tmp_path, l1, frame=True)
    try:
        dsts = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in keys]
        assert load_sync(ours, [_ours(k) for k in keys], dsts).to_list() == [False] * N
        assert ours.metrics()["rejections"] == {"foreign": N}
        assert ours.metrics()["repaired"] == 0
        assert all(int(d.raw_data.count_nonzero()) == 0 for d in dsts)  # nothing was written
    finally:
        ours.close()
    _, outs = _lmcache_objects(lmcache_l1, 7200, seed=None)
    try:
        assert wait_load(lmcache_fs, lmcache_fs.submit_load_task(keys, outs), N) == [True] * N
    finally:
        release(lmcache_l1, keys)
