"""End to end on the ``fs`` adapter: L1 → wrapper (zstd) → disk, drop L1, load into a fresh L1.

The wrapper stores the length the serde wrote, not its estimate: a file holds the compressed
frame, so compressible KV takes fewer bytes on disk, and incompressible data a 32-byte header more.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import SerdeL2AdapterWrapper, create_l2_adapter, key_file_name, load_sync, store_sync
from lmserde_zstd import HEADER_SIZE
from zstd_support import encode

LAYOUT = MemoryLayoutDesc([[2, 4, 64, 256]], [torch.bfloat16])
KEYS = [ObjectKey(bytes([i + 1]) * 32, "model/x", 0x01010101, 0, "tenant") for i in range(3)]


def _fill(obj: Any, seed: int) -> None:
    if seed == 2:  # one incompressible object: stored raw in its frame
        data = torch.frombuffer(bytearray(os.urandom(LAYOUT.nbytes)), dtype=torch.uint8)
    else:
        gen = torch.Generator().manual_seed(seed)
        data = torch.randn(LAYOUT.shapes[0], generator=gen).to(torch.bfloat16).reshape(-1)
        data = data.view(torch.uint8)
    obj.raw_data[: LAYOUT.nbytes].copy_(data)


@pytest.fixture
def adapters(tmp_path: Path) -> Iterator[Any]:
    made: list[Any] = []

    def make(l1: L1Manager) -> Any:
        adapter = create_l2_adapter(
            {"type": "fs", "base_path": str(tmp_path / "l2"), "serde": {"type": "zstd"}}, l1)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.close()


def test_store_drop_l1_load_and_file_sizes(adapters: Any, tmp_path: Path) -> None:
    l1 = L1Manager(64 << 20)
    adapter = adapters(l1)
    assert isinstance(adapter, SerdeL2AdapterWrapper)
    reserved = l1.reserve_write(KEYS, False, LAYOUT)
    for i, key in enumerate(KEYS):
        _fill(reserved[key][1], i)
    l1.finish_write(KEYS)
    read = l1.reserve_read(KEYS)
    objs = [read[k][1] for k in KEYS]
    originals = [bytes(o.raw_data[: LAYOUT.nbytes].tolist()) for o in objs]
    frames = [encode(TensorMemoryObj.over(o.raw_data[: LAYOUT.nbytes], LAYOUT)) for o in objs]
    assert store_sync(adapter, KEYS, objs).is_successful()
    l1.finish_read(KEYS)

    sizes = [(tmp_path / "l2" / key_file_name(k)).stat().st_size for k in KEYS]
    overheads = {size - len(frame) for size, frame in zip(sizes, frames)}
    # the file holds the compressed frame (plus, at most, a fixed per-object wrapper frame)
    assert len(overheads) == 1 and 0 <= overheads.pop() <= 256
    assert sizes[0] < 0.8 * LAYOUT.nbytes and sizes[1] < 0.8 * LAYOUT.nbytes
    assert len(frames[2]) == HEADER_SIZE + LAYOUT.nbytes

    l1.delete(KEYS)
    assert l1.num_objects() == 0
    adapter.close()
    fresh = L1Manager(64 << 20)
    adapter = adapters(fresh)
    reserved = fresh.reserve_write(KEYS, False, LAYOUT)
    outs = [reserved[k][1] for k in KEYS]
    bitmap = load_sync(adapter, KEYS, outs)
    assert [bitmap.test(i) for i in range(3)] == [True, True, True]
    assert [bytes(o.raw_data[: LAYOUT.nbytes].tolist()) for o in outs] == originals
    fresh.finish_write(KEYS)
    assert fresh.memory_used_bytes() == 3 * LAYOUT.nbytes, "serde temporaries leaked"


def test_a_damaged_file_misses_alone(adapters: Any, tmp_path: Path) -> None:
    l1 = L1Manager(64 << 20)
    adapter = adapters(l1)
    reserved = l1.reserve_write(KEYS, False, LAYOUT)
    for i, key in enumerate(KEYS):
        _fill(reserved[key][1], i)
    l1.finish_write(KEYS)
    read = l1.reserve_read(KEYS)
    assert store_sync(adapter, KEYS, [read[k][1] for k in KEYS]).is_successful()
    l1.finish_read(KEYS)
    l1.delete(KEYS)
    path = tmp_path / "l2" / key_file_name(KEYS[0])
    path.write_bytes(path.read_bytes()[:-7])
    fresh = L1Manager(64 << 20)
    reserved = fresh.reserve_write(KEYS, False, LAYOUT)
    bitmap = load_sync(adapters(fresh), KEYS, [reserved[k][1] for k in KEYS])
    assert [bitmap.test(i) for i in range(3)] == [False, True, True]
    fresh.finish_write(KEYS)
