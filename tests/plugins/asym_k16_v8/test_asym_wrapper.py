"""End to end: two-group K/V objects through ``SerdeL2AdapterWrapper`` and the ``fs`` adapter.

Every stored file is the wrapper's stored-object frame header (``FRAME_HEADER_BYTES``) followed by
the codec's blob, unless the adapter spec says ``"serde_frame": false`` (LMCache-shared mode).
"""

from __future__ import annotations

import os
from pathlib import Path

import lmserde.l1 as l1
import lmserde.l2 as l2
import pytest
import torch
from lmserde import (
    MemoryLayoutDesc,
    ObjectKey,
    SerdeConfig,
    TensorMemoryObj,
    create_serde_processor,
)
from lmserde.l2 import FRAME_HEADER_BYTES
from lmserde.l2.serde.stored_frame import parse_header
from lmserde_asym_k16_v8 import AsymCodec, EncodedKVHeader

SHAPE = [16, 4, 2, 32]  # 4096 elements per tensor
LAYOUT = MemoryLayoutDesc([SHAPE, SHAPE], [torch.bfloat16, torch.bfloat16])
NUMEL = 16 * 4 * 2 * 32
BLOB = 213 + 2 * NUMEL + NUMEL + 4  # header + bf16 K + fp8 V + scale


def key(i: int) -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i) * 4, "acme/llm", 0x01010000, 0, "tenant-a")


def kv_object(seed: int) -> TensorMemoryObj:
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(LAYOUT)
    for g in range(2):
        obj.get_tensor(g).copy_(torch.randn(SHAPE, generator=gen).to(torch.bfloat16))
    return obj


def sentinel_object(value: float = 7.0) -> TensorMemoryObj:
    obj = TensorMemoryObj.allocate(LAYOUT)
    for g in range(2):
        obj.get_tensor(g).fill_(value)
    return obj


def v_close(restored: torch.Tensor, original: torch.Tensor) -> bool:
    x, y = original.float(), restored.float()
    return (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < 0.05


@pytest.fixture
def manager() -> l1.L1Manager:
    return l1.L1Manager(64 << 20)


@pytest.fixture
def fs_wrapper(tmp_path: Path, manager: l1.L1Manager):
    adapter = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv"), "serde": {"type": "asym_k16_v8"}}, manager
    )
    yield adapter
    adapter.close()


@pytest.fixture
def raw_fs_wrapper(tmp_path: Path, manager: l1.L1Manager):
    """The same serde storing the codec's blob alone (``serde_frame: false``, LMCache-shared)."""
    adapter = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv-raw"), "serde": {"type": "asym_k16_v8"},
         "serde_frame": False}, manager
    )
    yield adapter
    adapter.close()


def test_store_and_load_through_fs(fs_wrapper, manager, tmp_path: Path) -> None:
    keys = [key(i) for i in range(3)]
    objs = [kv_object(i) for i in range(3)]
    result = l2.store_sync(fs_wrapper, keys, objs)
    assert result.is_successful()
    assert result.bytes_transferred() == 3 * (FRAME_HEADER_BYTES + BLOB)
    inner = fs_wrapper.inner_adapter
    for k in keys:
        path = inner.path_of(k)
        # narrowed: the file is the frame header + the blob, not the estimate
        assert os.path.getsize(path) == FRAME_HEADER_BYTES + BLOB
        with open(path, "rb") as f:
            data = f.read()
        assert parse_header(data).payload_length == BLOB
        header = EncodedKVHeader.unpack(data[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + 300])
        assert (header.k_payload_len, header.v_payload_len, header.scale_payload_len) == (
            2 * NUMEL, NUMEL, 4)
    outs = [sentinel_object() for _ in keys]
    bitmap = l2.load_sync(fs_wrapper, keys, outs)
    assert bitmap.count() == 3
    for src, out in zip(objs, outs):
        assert torch.equal(out.get_tensor(0), src.get_tensor(0)), "K is not bit-exact"
        assert v_close(out.get_tensor(1), src.get_tensor(1))
    assert fs_wrapper.metrics()["rejections"] == {}
    assert manager.memory_used_bytes() == 0, "temporaries leaked"


def test_stored_files_decode_with_the_codec(fs_wrapper, raw_fs_wrapper) -> None:
    """Without the frame the file is the codec's blob; with it, the header + that same blob."""
    obj = kv_object(9)
    assert l2.store_sync(raw_fs_wrapper, [key(9)], [obj]).is_successful()
    assert l2.store_sync(fs_wrapper, [key(9)], [obj]).is_successful()
    with open(raw_fs_wrapper.inner_adapter.path_of(key(9)), "rb") as f:
        raw = f.read()
    with open(fs_wrapper.inner_adapter.path_of(key(9)), "rb") as f:
        framed = f.read()
    assert len(raw) == BLOB
    assert len(framed) == FRAME_HEADER_BYTES + BLOB and framed[FRAME_HEADER_BYTES:] == raw
    blob = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    k_out = torch.empty(SHAPE, dtype=torch.bfloat16)
    v_out = torch.empty(SHAPE, dtype=torch.bfloat16)
    codec = AsymCodec()
    codec.decode_into(blob, codec.locate(blob), k_out, v_out)
    assert torch.equal(k_out, obj.get_tensor(0))
    assert v_close(v_out, obj.get_tensor(1))


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_file_is_a_miss_for_that_key_only(fs_wrapper, manager, damage: str) -> None:
    keys = [key(20 + i) for i in range(3)]
    objs = [kv_object(20 + i) for i in range(3)]
    assert l2.store_sync(fs_wrapper, keys, objs).is_successful()
    path = fs_wrapper.inner_adapter.path_of(keys[1])
    with open(path, "r+b") as f:
        if damage == "flip":
            f.seek(BLOB - 100)
            byte = f.read(1)
            f.seek(BLOB - 100)
            f.write(bytes([byte[0] ^ 0x40]))
        else:
            f.truncate(BLOB - 1)
    outs = [sentinel_object() for _ in keys]
    bitmap = l2.load_sync(fs_wrapper, keys, outs)
    assert [bitmap.test(i) for i in range(3)] == [True, False, True]
    for i in (0, 2):
        assert torch.equal(outs[i].get_tensor(0), objs[i].get_tensor(0))
    assert manager.memory_used_bytes() == 0


def test_upper_bound_serde_refused_on_adapter_without_sizes(manager) -> None:
    class NoSizes(l2.MemoryL2Adapter):
        def reports_object_sizes(self) -> bool:
            return False

    inner = NoSizes()
    proc = create_serde_processor(SerdeConfig("asym_k16_v8"))
    try:
        with pytest.raises(ValueError, match="Upper-bound serde output requires"):
            l2.SerdeL2AdapterWrapper(inner, proc, manager, serde_type="asym_k16_v8")
    finally:
        proc.close()
        inner.close()
