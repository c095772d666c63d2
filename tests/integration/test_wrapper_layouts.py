"""Heterogeneous batches, serde chains and multi-output serdes through the wrapper."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import MemoryLayoutDesc
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    MemoryL2Adapter,
    SerdeChainProcessor,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
)
from lmserde.spec import SerdeSizeContract
from toy_serdes import make_processor

MIXED = [
    MemoryLayoutDesc([[4, 2, 16]], [torch.float16]),
    MemoryLayoutDesc([[64, 2, 128]], [torch.bfloat16]),
    MemoryLayoutDesc([[3, 7]], [torch.float32]),
    MemoryLayoutDesc([[5], [6, 2]], [torch.bfloat16, torch.float16]),
]


@pytest.mark.parametrize("serde", ["identity", "t_crc", "t_int8"])
def test_heterogeneous_layouts_in_one_batch(serde: str, tmp_path: Path, l1: L1Manager,
                                            cache: Cache) -> None:
    """Each temporary is sized from its own object: the small first object never undersizes."""
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": serde}}, l1)
    try:
        keys = [key_of(i) for i in range(len(MIXED))]
        objs = [objects_for(layout, 1, seed=i)[0] for i, layout in enumerate(MIXED)]
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, MIXED)
        assert bitmap.count() == len(MIXED)
        if serde != "t_int8":
            assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        estimates = [wrapper.serde.estimate_serialized_size(layout) for layout in MIXED]
        stored = [FRAME_HEADER_BYTES + e for e in estimates]  # frame header + payload
        assert [wrapper.get_object_sizes([k])[k] for k in keys] == stored
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_chain_quantize_then_checksum(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    layout = MemoryLayoutDesc([[32, 2, 64]], [torch.bfloat16])
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": [{"type": "t_int8"}, {"type": "t_crc"}]}, l1)
    try:
        assert isinstance(wrapper, SerdeL2AdapterWrapper)
        assert isinstance(wrapper.serde, SerdeChainProcessor)
        assert wrapper.serde_type == "t_int8+t_crc"
        assert wrapper.size_contract is SerdeSizeContract.EXACT
        int8_size = 4 + layout.numel
        assert wrapper.serde.estimate_serialized_size(layout) == 16 + int8_size
        keys = [key_of(i) for i in range(3)]
        objs = objects_for(layout, 3)
        assert cache.store(wrapper, keys, objs).is_successful()
        stored = FRAME_HEADER_BYTES + 16 + int8_size
        assert (tmp_path / key_file_name(keys[0])).stat().st_size == stored
        bitmap, data = cache.load(wrapper, keys, layout)
        assert bitmap.count() == 3
        for src, got in zip(objs, data):
            a, b = layout_bytes(src).view(torch.bfloat16).float(), got.view(torch.bfloat16).float()
            assert float(torch.corrcoef(torch.stack([a, b]))[0, 1]) > 0.99
        # the outer stage guards the inner one: a flipped byte is a miss for that key only
        path = tmp_path / key_file_name(keys[1])
        raw = bytearray(path.read_bytes())
        raw[20] ^= 1
        path.write_bytes(bytes(raw))
        bitmap, _ = cache.load(wrapper, keys, layout)
        assert bitmap.to_list() == [True, False, True]
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_chain_with_an_upper_bound_first_stage(tmp_path: Path, l1: L1Manager,
                                               cache: Cache) -> None:
    layout = MemoryLayoutDesc([[16, 64]], [torch.float16])
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": [{"type": "t_zlib"}, {"type": "t_crc"}]}, l1)
    try:
        # t_crc (EXACT, input + 4 bytes) gets only what t_zlib wrote: the chain is upper-bound
        assert wrapper.size_contract is SerdeSizeContract.UPPER_BOUND
        objs = objects_for(layout, 2)
        objs[1].raw_data.zero_()  # compresses far below the bound
        keys = [key_of(i) for i in range(2)]
        assert cache.store(wrapper, keys, objs).is_successful()
        sizes = wrapper.get_object_sizes(keys)
        assert sizes[keys[1]] < sizes[keys[0]] < FRAME_HEADER_BYTES + 8 + layout.nbytes + 4
        bitmap, data = cache.load(wrapper, keys, layout)
        assert bitmap.count() == 2
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
    finally:
        wrapper.close()


KV2 = MemoryLayoutDesc([[4, 16, 2, 32], [4, 16, 2, 32]], [torch.bfloat16, torch.bfloat16])


def test_multi_output_serde_end_to_end(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_kv3"}}, l1)
    try:
        assert wrapper.serde.input_slot_mapping() == (0, None, 1)
        keys = [key_of(i) for i in range(3)]
        objs = objects_for(KV2, 3)
        result = cache.store(wrapper, keys, objs)
        assert result.bytes_transferred() == 3 * (FRAME_HEADER_BYTES + 27 + KV2.nbytes)
        bitmap, data = cache.load(wrapper, keys, KV2)
        assert bitmap.count() == 3
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_multi_output_chain(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": [{"type": "t_kv3"}, {"type": "t_crc"}]}, l1)
    try:
        assert wrapper.serde.input_slot_mapping() == (0, None, 1)
        keys = [key_of(i) for i in range(2)]
        objs = objects_for(KV2, 2)
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, KV2)
        assert bitmap.count() == 2
        assert all(torch.equal(layout_bytes(s), d) for s, d in zip(objs, data))
    finally:
        wrapper.close()


def test_multi_output_store_needs_every_group_covered(l1: L1Manager, cache: Cache) -> None:
    wrapper = SerdeL2AdapterWrapper(MemoryL2Adapter(), make_processor("t_kv3"), l1)
    try:
        three = MemoryLayoutDesc([[4, 8]] * 3, [torch.float16] * 3)  # group 2 has no slot
        result = cache.store(wrapper, [key_of(0)], objects_for(three, 1))
        assert not result.is_successful()
        assert wrapper.metrics()["failures"] == {"prepare": 1}
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()
