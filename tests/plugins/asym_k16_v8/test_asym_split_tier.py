"""``asym_k16_v8_v_only`` in split-tier placement: K stays in L1, V (fp8) goes to ``fs``.

The real path as a user configures it — ``create_l2_adapter({"type": "fs", ..., "serde":
{"type": "asym_k16_v8_v_only"}}, l1)`` — store, drop the objects, load back; plus the byte
accounting of the design (V-only stores 1/4 of a bf16 object, 1/3 of what ``asym_k16_v8``
stores; K, half the object, stays in host memory).
"""

from __future__ import annotations

import os
from pathlib import Path

import lmserde.l1 as l1
import lmserde.l2 as l2
import pytest
import torch
from lmserde import MemoryLayoutDesc, SerdeConfig, TensorMemoryObj, create_serde_processor
from lmserde.l2 import FRAME_HEADER_BYTES, SplitTierL2Adapter
from lmserde_asym_k16_v8 import AsymCodec, EncodedKVHeader
from test_asym_wrapper import NUMEL, SHAPE, key, kv_object, sentinel_object, v_close

V_BLOB = 213 + NUMEL + 4  # header + fp8 V + scale (k_payload_len 0)


def fs_spec(base: Path, serde: str = "asym_k16_v8_v_only", **extra: object) -> dict[str, object]:
    return {"type": "fs", "base_path": str(base), "serde": {"type": serde}, **extra}


def test_v_only_stores_through_the_wrapper(tmp_path: Path) -> None:
    """Issue #15: this configuration used to fail every store ("input slots (None, 1) ...")."""
    manager = l1.L1Manager(64 << 20)
    split = l2.create_l2_adapter(fs_spec(tmp_path / "kv"), manager)
    try:
        assert isinstance(split, SplitTierL2Adapter)
        keys = [key(i) for i in range(3)]
        objs = [kv_object(i) for i in range(3)]
        result = l2.store_sync(split, keys, objs)
        assert result.is_successful()
        assert result.bytes_transferred() == 3 * (FRAME_HEADER_BYTES + V_BLOB)
        for k in keys:  # the V child file: frame header + the codec's V-only blob
            with open(split.inner_adapter.path_of(split.v_child_key(k)), "rb") as f:
                data = f.read()
            assert len(data) == FRAME_HEADER_BYTES + V_BLOB
            header = EncodedKVHeader.unpack(data[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + 300])
            assert (header.k_payload_len, header.v_payload_len, header.scale_payload_len) == (
                0, NUMEL, 4)
        originals = [(o.get_tensor(0).clone(), o.get_tensor(1).clone()) for o in objs]
        del objs  # the caller's objects are gone; K must come from L1
        outs = [sentinel_object() for _ in keys]
        assert l2.load_sync(split, keys, outs).count() == 3
        for (k, v), out in zip(originals, outs):
            assert torch.equal(out.get_tensor(0), k), "K is not bit-exact"
            assert v_close(out.get_tensor(1), v)
        assert split.metrics()["rejections"] == {}
    finally:
        split.close()
    assert manager.memory_used_bytes() == 0, "K halves or temporaries leaked"


def test_v_only_split_tier_load_takes_k_from_l1(tmp_path: Path) -> None:
    """The V child decodes with the codec alone (V only); K comes from its L1 half, and a
    storage-only serde reading the same V-only bytes refuses them (a miss)."""
    manager = l1.L1Manager(64 << 20)
    base = tmp_path / "kv-v"
    split = l2.create_l2_adapter(fs_spec(base, serde_frame=False), manager)
    src = kv_object(31)
    try:
        assert l2.store_sync(split, [key(31)], [src]).is_successful()
        v_child = split.v_child_key(key(31))
        with open(split.inner_adapter.path_of(v_child), "rb") as f:
            raw = f.read()
        assert len(raw) == V_BLOB  # unframed: the codec's blob alone
        blob = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        v_out = torch.empty(SHAPE, dtype=torch.bfloat16)
        AsymCodec().decode_into(blob, AsymCodec.locate(blob), None, v_out)
        assert v_close(v_out, src.get_tensor(1))
        out = sentinel_object()
        assert l2.load_sync(split, [key(31)], [out]).count() == 1
        assert torch.equal(out.get_tensor(0), src.get_tensor(0)), "K was not filled from L1"
        assert v_close(out.get_tensor(1), src.get_tensor(1))
    finally:
        split.close()
    storage = l2.create_l2_adapter(fs_spec(base, "asym_k16_v8", serde_frame=False), manager)
    try:
        assert l2.load_sync(storage, [v_child], [sentinel_object()]).count() == 0
        assert storage.metrics()["rejections"] == {"decode": 1}
    finally:
        storage.close()
    assert manager.memory_used_bytes() == 0


def test_split_tier_byte_accounting_matches_the_design(tmp_path: Path) -> None:
    """0.75 (storage-only / object), 1/3 (V-only / storage-only), 0.25 (V-only / object), and K —
    half the object — in L1, on a chunk large enough that headers and frames are negligible."""
    shape = [32, 16, 8, 128]  # 524288 elements per group, 1 MiB of bf16
    layout = MemoryLayoutDesc([shape, shape], [torch.bfloat16, torch.bfloat16])
    gen = torch.Generator().manual_seed(5)
    obj = TensorMemoryObj.allocate(layout)
    for g in range(2):
        obj.get_tensor(g).copy_(torch.randn(shape, generator=gen).to(torch.bfloat16))
    object_bytes = layout.nbytes
    manager = l1.L1Manager(64 << 20)
    together = l2.create_l2_adapter(fs_spec(tmp_path / "a", "asym_k16_v8"), manager)
    try:
        storage_only = l2.store_sync(together, [key(1)], [obj]).bytes_transferred()
    finally:
        together.close()
    split = l2.create_l2_adapter(fs_spec(tmp_path / "b"), manager)
    try:
        v_only = l2.store_sync(split, [key(1)], [obj]).bytes_transferred()
        acct = split.accounting()
    finally:
        split.close()
    numel = layout.numel // 2
    assert v_only == FRAME_HEADER_BYTES + 213 + numel + 4
    assert storage_only == FRAME_HEADER_BYTES + 213 + 2 * numel + numel + 4
    assert storage_only / object_bytes == pytest.approx(0.75, abs=0.005)
    assert v_only / storage_only == pytest.approx(1 / 3, abs=0.005)
    assert v_only / object_bytes == pytest.approx(0.25, abs=0.005)
    assert acct["l2_v_bytes_stored"] == v_only and acct["logical_bytes_stored"] == object_bytes
    assert acct["stored_fraction"] == v_only / object_bytes
    assert acct["l1_k_bytes"] == acct["l1_k_bytes_stored"] == 2 * numel  # host: 2 bytes/element
    assert acct["l1_fraction"] == 0.5


def test_split_tier_v_only_with_the_fault_adapter(tmp_path: Path) -> None:
    """Keys the fault adapter drops on load are misses; the others load K exact and V close."""
    manager = l1.L1Manager(64 << 20)
    keys = [key(40 + i) for i in range(3)]
    # V child keys name their store's generation: with a known source, keys[1]'s is the second
    generations = l2.GenerationSource(b"\x01" * 8)
    drop = l2.derive_v_child_key(keys[1], b"\x01" * 8 + (2).to_bytes(8, "big")).chunk_hash
    fault = l2.FaultInjectingL2Adapter(
        l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv")}, None),
        l2.FaultPlan(miss_chunk_hashes=frozenset({drop})))
    split = l2.create_split_tier_adapter(
        fault, create_serde_processor(SerdeConfig("asym_k16_v8_v_only")), manager,
        serde_type="asym_k16_v8_v_only", generation_source=generations)
    try:
        objs = [kv_object(40 + i) for i in range(3)]
        assert l2.store_sync(split, keys, objs).is_successful()
        outs = [sentinel_object() for _ in keys]
        bitmap = l2.load_sync(split, keys, outs)
        assert [bitmap.test(i) for i in range(3)] == [True, False, True]
        for i in (0, 2):
            assert torch.equal(outs[i].get_tensor(0), objs[i].get_tensor(0))
            assert v_close(outs[i].get_tensor(1), objs[i].get_tensor(1))
        assert os.path.exists(split.inner_adapter.inner_adapter.path_of(split.v_child_key(keys[1])))
    finally:
        split.close()
    assert manager.memory_used_bytes() == 0
