"""Real plugin serdes through the wrapper and fs: the fp8-then-aesgcm chain, asym_k16_v8."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import MemoryLayoutDesc
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
)
from lmserde.registry import create_serde_processor
from lmserde.spec import SerdeSizeContract

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_aesgcm")
pytest.importorskip("lmserde_asym_k16_v8")

KV = MemoryLayoutDesc([[16, 2, 256]], [torch.bfloat16])
KV2 = MemoryLayoutDesc([[4, 16, 2, 64], [4, 16, 2, 64]], [torch.bfloat16, torch.bfloat16])


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.flatten().float(), b.flatten().float()]))[0, 1])


@pytest.fixture
def master_key(tmp_path: Path) -> str:
    path = tmp_path / "master.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return str(path)


def test_fp8_then_aesgcm_chain_on_fs(tmp_path: Path, master_key: str, l1: L1Manager,
                                     cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(base), "serde": [
        {"type": "fp8"}, {"type": "aesgcm", "master_key_path": master_key}]}, l1)
    try:
        assert wrapper.serde_type == "fp8+aesgcm"
        assert wrapper.size_contract is SerdeSizeContract.EXACT
        keys = [key_of(i, salt="tenant-a") for i in range(4)]
        objs = objects_for(KV, 4)
        assert cache.store(wrapper, keys, objs).is_successful()
        estimate = wrapper.serde.estimate_serialized_size(KV)
        stored = FRAME_HEADER_BYTES + estimate  # the wrapper's frame header, then the payload
        assert all((base / key_file_name(k)).stat().st_size == stored for k in keys)
        assert estimate < KV.nbytes  # fp8 halves bf16; aesgcm's frame adds a little
        path = base / key_file_name(keys[2])
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0x01  # tamper with the ciphertext of one key
        path.write_bytes(bytes(raw))
        bitmap, data = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, True, False, True]
        for i in (0, 1, 3):
            a, b = layout_bytes(objs[i]).view(torch.bfloat16), data[i].view(torch.bfloat16)
            assert _corr(a, b) > 0.99
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_asym_k16_v8_upper_bound_multi_output_on_fs(tmp_path: Path, l1: L1Manager,
                                                    cache: Cache) -> None:
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "asym_k16_v8"}}, l1)
    try:
        assert wrapper.size_contract is SerdeSizeContract.UPPER_BOUND
        assert wrapper.serde.input_slot_mapping() == (0, 1)
        keys = [key_of(i) for i in range(3)]
        objs = objects_for(KV2, 3)
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, KV2)
        assert bitmap.count() == 3
        half = KV2.group_nbytes(0)
        for src, got in zip(objs, data):
            ref = layout_bytes(src)
            assert torch.equal(ref[:half], got[:half])  # K is kept at 16 bits
            assert _corr(ref[half:].view(torch.bfloat16), got[half:].view(torch.bfloat16)) > 0.99
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


class _NoSizes(MemoryL2Adapter):
    adapter_type = "no-sizes"

    def reports_object_sizes(self) -> bool:
        return False


def test_asym_k16_v8_is_refused_where_sizes_are_unknown(l1: L1Manager) -> None:
    proc, inner = create_serde_processor({"type": "asym_k16_v8"}), _NoSizes()
    with pytest.raises(ValueError, match="unsupported pairing.*asym_k16_v8 on no-sizes"):
        SerdeL2AdapterWrapper(inner, proc, l1, serde_type="asym_k16_v8")
    proc.close()
    inner.close()
