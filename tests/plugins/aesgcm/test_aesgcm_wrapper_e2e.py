"""End to end: the aesgcm serde on the fs L2 adapter through the serde wrapper and an L1Manager.

Stores KV objects, reloads them bit-exactly, and shows that a tampered file, or (frame v2) a file
copied under another key, misses alone while the other keys of the same load still hit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from aesgcm_objects import kv_object, make_key, obj_bytes
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, key_file_name, load_sync, store_sync

SHAPE = [2, 4, 16, 64]
NBYTES = 2 * 4 * 16 * 64 * 2
KEYS = [make_key(chunk=bytes([i]) * 32, salt="alice") for i in range(3)]


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


@pytest.fixture
def make_adapter(tmp_path: Path, master_key_file: Path, l1: L1Manager) -> Iterator[Any]:
    adapters: list[Any] = []

    def make(**serde: Any) -> Any:
        adapter = create_l2_adapter(
            {"type": "fs", "base_path": str(tmp_path / "l2"),
             "serde": {"type": "aesgcm", "master_key_path": str(master_key_file), **serde}},
            l1,
        )
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def _objects() -> list[TensorMemoryObj]:
    return [kv_object(SHAPE, torch.bfloat16, seed=i) for i in range(len(KEYS))]


def _load(adapter: Any, l1: L1Manager) -> tuple[list[bool], list[TensorMemoryObj]]:
    layout = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
    outs = [TensorMemoryObj.allocate(layout, zero=True) for _ in KEYS]
    for out in outs:
        out.raw_data.fill_(0xAA)
    bitmap = load_sync(adapter, KEYS, outs)
    assert l1.memory_used_bytes() == 0, "serde temporaries leaked"
    return [bitmap.test(i) for i in range(len(KEYS))], outs


def _path(adapter: Any, key: ObjectKey) -> Path:
    return Path(adapter.inner_adapter.base_path) / key_file_name(key)


@pytest.mark.parametrize(("frame_version", "overhead"), [(2, 42), (1, 29)])
def test_store_and_load_round_trip(make_adapter: Any, l1: L1Manager, frame_version: int,
                                   overhead: int) -> None:
    adapter = make_adapter(frame_version=frame_version)
    objs = _objects()
    result = store_sync(adapter, KEYS, objs)
    assert result.is_successful() and result.bytes_transferred() == 3 * (NBYTES + overhead)
    for key, obj in zip(KEYS, objs):
        stored = _path(adapter, key).read_bytes()
        assert len(stored) == NBYTES + overhead and stored[0] == frame_version
        assert obj_bytes(obj)[:64] not in stored, "plaintext reached the disk"
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, True]
    for obj, out in zip(objs, outs):
        assert torch.equal(obj.raw_data, out.raw_data)


@pytest.mark.parametrize("where", [0, 20, 5000, -1], ids=["version", "iv", "body", "tag"])
def test_tampered_file_misses_alone(make_adapter: Any, l1: L1Manager, where: int) -> None:
    adapter = make_adapter()
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    path = _path(adapter, KEYS[1])
    data = bytearray(path.read_bytes())
    data[where] ^= 0x10
    path.write_bytes(bytes(data))
    hits, outs = _load(adapter, l1)
    assert hits == [True, False, True]
    assert torch.equal(outs[0].raw_data, objs[0].raw_data)
    assert torch.equal(outs[2].raw_data, objs[2].raw_data)
    assert int(outs[1].raw_data.count_nonzero()) == 0, "a missed key must not keep plaintext"


def test_truncated_file_misses_alone(make_adapter: Any, l1: L1Manager) -> None:
    adapter = make_adapter()
    assert store_sync(adapter, KEYS, _objects()).is_successful()
    path = _path(adapter, KEYS[2])
    path.write_bytes(path.read_bytes()[:-1])
    hits, _ = _load(adapter, l1)
    assert hits == [True, True, False]


def test_v2_file_moved_to_another_key_misses(make_adapter: Any, l1: L1Manager) -> None:
    adapter = make_adapter()
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    shutil.copyfile(_path(adapter, KEYS[0]), _path(adapter, KEYS[2]))
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, False], "a frame copied under another key must not be served"
    assert int(outs[2].raw_data.count_nonzero()) == 0


def test_v1_file_moved_to_another_key_is_served(make_adapter: Any, l1: L1Manager) -> None:
    """The documented limit of LMCache's format: nothing binds a v1 frame to its key."""
    adapter = make_adapter(frame_version=1)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    shutil.copyfile(_path(adapter, KEYS[0]), _path(adapter, KEYS[2]))
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, True]
    assert torch.equal(outs[2].raw_data, objs[0].raw_data)


def test_v1_files_readable_after_switching_to_v2(make_adapter: Any, l1: L1Manager) -> None:
    writer = make_adapter(frame_version=1)
    objs = _objects()
    assert store_sync(writer, KEYS, objs).is_successful()
    reader = make_adapter()  # frame_version 2 by default; reads both
    hits, outs = _load(reader, l1)
    assert hits == [True, True, True]
    assert all(torch.equal(o.raw_data, r.raw_data) for o, r in zip(objs, outs))


def test_other_master_key_misses_everything(make_adapter: Any, l1: L1Manager,
                                            tmp_path: Path) -> None:
    adapter = make_adapter()
    assert store_sync(adapter, KEYS, _objects()).is_successful()
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32))
    other.chmod(0o600)
    stranger = create_l2_adapter(
        {"type": "fs", "base_path": adapter.inner_adapter.base_path,
         "serde": {"type": "aesgcm", "master_key_path": str(other)}}, l1)
    try:
        hits, outs = _load(stranger, l1)
    finally:
        stranger.close()
    assert hits == [False, False, False]
    assert all(int(o.raw_data.count_nonzero()) == 0 for o in outs)


def test_chained_after_another_serde(tmp_path: Path, master_key_file: Path,
                                     l1: L1Manager) -> None:
    """aesgcm as the last stage of a chain encrypts the previous stage's output."""
    adapter = create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "chain"),
         "serde": [{"type": "identity"},
                   {"type": "aesgcm", "master_key_path": str(master_key_file)}]},
        l1,
    )
    try:
        objs = _objects()
        result = store_sync(adapter, KEYS, objs)
        assert result.is_successful() and result.bytes_transferred() == 3 * (NBYTES + 42)
        assert (tmp_path / "chain" / key_file_name(KEYS[0])).read_bytes()[0] == 2
        hits, outs = _load(adapter, l1)
        assert hits == [True, True, True]
        assert all(torch.equal(o.raw_data, r.raw_data) for o, r in zip(objs, outs))
    finally:
        adapter.close()
