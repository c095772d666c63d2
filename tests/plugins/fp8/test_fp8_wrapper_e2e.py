"""End to end: the fp8 serde on the fs L2 adapter through ``SerdeL2AdapterWrapper`` and an L1Manager.

Objects live in L1, are stored to disk through the wrapper, L1 is dropped (objects deleted, adapter
closed, a fresh L1 and adapter built on the same directory), and the keys are loaded back. With
``"serde_frame": false`` (the mode for an L2 shared with LMCache) files written with
``scaling: none`` are exactly LMCache's fp8 bytes, and LMCache-written files load; by default each
file is the stored-object frame header (``FRAME_HEADER_BYTES``) followed by those same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lmserde.l2")

from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
    load_sync,
    store_sync,
)
from lmserde.l2.serde.stored_frame import parse_header
from lmserde_fp8 import Fp8QuantizationDeserializer

LAYOUTS = {
    "single": MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16]),
    "two_groups": MemoryLayoutDesc([[3, 40], [2, 16, 8]], [torch.float16, torch.bfloat16]),
}
KEYS = [ObjectKey(bytes([i]) * 32, "model/x", 0x01010101, 0, "tenant") for i in range(3)]


def _fill(obj: Any, layout: MemoryLayoutDesc, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    offsets = layout.group_offsets()
    for g, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes)):
        values = torch.randn(shape, generator=gen) * 3
        values.view(-1)[:: 97] = 900.0  # some values beyond e4m3fn's range
        obj.raw_data[offsets[g] : offsets[g + 1]].copy_(values.to(dtype).reshape(-1).view(torch.uint8))


def _lmcache_bytes(obj: Any, layout: MemoryLayoutDesc, fp8: torch.dtype) -> bytes:
    """What LMCache's fp8 serde writes: each group cast with torch, concatenated."""
    offsets = layout.group_offsets()
    parts = []
    for g, dtype in enumerate(layout.dtypes):
        values = obj.raw_data[offsets[g] : offsets[g + 1]].clone().view(dtype)
        parts.append(values.to(fp8).view(torch.uint8))
    return bytes(torch.cat(parts).tolist())


def _lmcache_decode(data: bytes, layout: MemoryLayoutDesc, fp8: torch.dtype) -> bytes:
    codes = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    parts, offset = [], 0
    for shape, dtype in zip(layout.shapes, layout.dtypes):
        n = int(torch.Size(shape).numel())
        parts.append(codes[offset : offset + n].view(fp8).to(dtype).view(torch.uint8))
        offset += n
    return bytes(torch.cat(parts).tolist())


@pytest.fixture
def adapters(tmp_path: Path) -> Iterator[Any]:
    made: list[Any] = []

    def make(l1: L1Manager, *, frame: bool = True, base: str = "l2", **serde: Any) -> Any:
        adapter = create_l2_adapter(
            {"type": "fs", "base_path": str(tmp_path / base), "serde": {"type": "fp8", **serde},
             "serde_frame": frame}, l1)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.close()


def _store_from_l1(adapter: Any, l1: L1Manager, layout: MemoryLayoutDesc) -> list[bytes]:
    reserved = l1.reserve_write(KEYS, False, layout)
    originals = []
    for i, key in enumerate(KEYS):
        _, obj = reserved[key]
        _fill(obj, layout, seed=i)
        originals.append(obj)
    l1.finish_write(KEYS)
    read = l1.reserve_read(KEYS)
    objs = [read[k][1] for k in KEYS]
    result = store_sync(adapter, KEYS, objs)
    l1.finish_read(KEYS)
    assert result.is_successful()
    return [bytes(o.raw_data[: layout.nbytes].tolist()) for o in originals]


def _load_into_l1(adapter: Any, l1: L1Manager, layout: MemoryLayoutDesc) -> tuple[list[bool], list[bytes]]:
    reserved = l1.reserve_write(KEYS, False, layout)
    objs = [reserved[k][1] for k in KEYS]
    bitmap = load_sync(adapter, KEYS, objs)
    hits = [bitmap.test(i) for i in range(len(KEYS))]
    data = [bytes(o.raw_data[: layout.nbytes].tolist()) for o in objs]
    l1.finish_write(KEYS)
    return hits, data


@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
@pytest.mark.parametrize("fp8_name", ["float8_e4m3fn", "float8_e5m2"])
def test_store_drop_l1_load_is_lmcache_compatible(adapters: Any, tmp_path: Path,
                                                  layout_name: str, fp8_name: str) -> None:
    layout = LAYOUTS[layout_name]
    fp8 = getattr(torch, fp8_name)
    l1 = L1Manager(64 << 20)
    adapter = adapters(l1, frame=False, fp8_dtype=fp8_name)  # LMCache-shared mode
    assert isinstance(adapter, SerdeL2AdapterWrapper) and not adapter.framed
    originals = _store_from_l1(adapter, l1, layout)

    # on disk: exactly LMCache's fp8 bytes
    objs = [TensorMemoryObj.over(torch.frombuffer(bytearray(b), dtype=torch.uint8), layout)
            for b in originals]
    for key, obj in zip(KEYS, objs):
        stored = (tmp_path / "l2" / key_file_name(key)).read_bytes()
        assert stored == _lmcache_bytes(obj, layout, fp8)

    # drop L1 and the adapter; load with a fresh L1 and adapter
    l1.delete(KEYS)
    assert l1.num_objects() == 0 and l1.memory_used_bytes() == 0
    adapter.close()
    fresh = L1Manager(64 << 20)
    hits, loaded = _load_into_l1(adapters(fresh, frame=False, fp8_dtype=fp8_name), fresh, layout)
    assert hits == [True, True, True]
    assert fresh.memory_used_bytes() == 3 * layout.nbytes, "serde temporaries leaked"
    for key, data in zip(KEYS, loaded):
        stored = (tmp_path / "l2" / key_file_name(key)).read_bytes()
        assert data == _lmcache_decode(stored, layout, fp8)

    # with the frame (the default) the file is the header followed by the same payload bytes
    framed_l1 = L1Manager(64 << 20)
    framed = adapters(framed_l1, base="l2-framed", fp8_dtype=fp8_name)
    assert framed.framed
    _store_from_l1(framed, framed_l1, layout)
    for key in KEYS:
        payload = (tmp_path / "l2" / key_file_name(key)).read_bytes()
        stored = (tmp_path / "l2-framed" / key_file_name(key)).read_bytes()
        assert len(stored) == FRAME_HEADER_BYTES + len(payload)
        assert stored[FRAME_HEADER_BYTES:] == payload
        assert parse_header(stored).payload_length == len(payload)


def test_lmcache_written_files_load(adapters: Any, tmp_path: Path) -> None:
    layout = LAYOUTS["two_groups"]
    (tmp_path / "l2").mkdir()
    expected = []
    for i, key in enumerate(KEYS):
        obj = TensorMemoryObj.allocate(layout)
        _fill(obj, layout, seed=10 + i)
        data = _lmcache_bytes(obj, layout, torch.float8_e4m3fn)
        (tmp_path / "l2" / key_file_name(key)).write_bytes(data)
        expected.append(_lmcache_decode(data, layout, torch.float8_e4m3fn))
    l1 = L1Manager(64 << 20)
    hits, loaded = _load_into_l1(adapters(l1, frame=False), l1, layout)  # LMCache-shared mode
    assert hits == [True, True, True]
    assert loaded == expected
    # a framing adapter never decodes them as its own: LMCache's objects have no frame (no
    # magic), so they are not this reader's to read, and they stay for the LMCache readers
    # sharing the tier
    framed_l1 = L1Manager(64 << 20)
    framed = adapters(framed_l1)
    hits, _ = _load_into_l1(framed, framed_l1, layout)
    assert hits == [False, False, False]
    assert framed.metrics()["rejections"] == {"foreign": 3}
    assert all((tmp_path / "l2" / key_file_name(key)).exists() for key in KEYS)


@pytest.mark.parametrize("scaling", ["per_tensor", "per_token"])
def test_scaled_modes_store_drop_load(adapters: Any, tmp_path: Path, scaling: str) -> None:
    layout = LAYOUTS["single"]
    l1 = L1Manager(64 << 20)
    adapter = adapters(l1, scaling=scaling)
    originals = _store_from_l1(adapter, l1, layout)
    l1.delete(KEYS)
    adapter.close()
    fresh = L1Manager(64 << 20)
    hits, loaded = _load_into_l1(adapters(fresh, scaling=scaling), fresh, layout)
    assert hits == [True, True, True]
    reader = Fp8QuantizationDeserializer(scaling=scaling)
    for key, data, original in zip(KEYS, loaded, originals):
        stored = (tmp_path / "l2" / key_file_name(key)).read_bytes()
        payload = stored[FRAME_HEADER_BYTES:]  # the serde's bytes follow the frame header
        assert parse_header(stored).payload_length == len(payload)
        assert payload[:4] == b"LF8S"
        out = TensorMemoryObj.allocate(layout)
        reader.deserialize(TensorMemoryObj.from_tensor(torch.frombuffer(bytearray(payload),
                                                                        dtype=torch.uint8)), out, key)
        assert data == bytes(out.raw_data.tolist())
        x = torch.frombuffer(bytearray(original), dtype=torch.bfloat16).float()
        y = torch.frombuffer(bytearray(data), dtype=torch.bfloat16).float()
        assert float((x - y).norm() / x.norm()) < 0.05  # 900s are not saturated


def test_truncated_file_misses_alone(adapters: Any, tmp_path: Path) -> None:
    layout = LAYOUTS["single"]
    l1 = L1Manager(64 << 20)
    adapter = adapters(l1)
    _store_from_l1(adapter, l1, layout)
    l1.delete(KEYS)
    path = tmp_path / "l2" / key_file_name(KEYS[1])
    path.write_bytes(path.read_bytes()[:-1])
    fresh = L1Manager(64 << 20)
    hits, _ = _load_into_l1(adapters(fresh), fresh, layout)
    assert hits == [True, False, True]
