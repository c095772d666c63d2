"""Keys, layouts, memory objects and temp-buffer utilities (upstream A.1-A.3, B.6, I.10)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from lmserde import (
    MemoryFormat,
    MemoryLayoutDesc,
    ObjectKey,
    TensorMemoryObj,
    as_byte_tensor,
    make_temp_key,
    serialized_layout_desc,
)
from lmserde.identity import IdentitySerializer


def test_object_key_validation() -> None:
    ObjectKey(b"h", "model", 0, 0, "tenant")
    with pytest.raises(ValueError, match="model_name"):
        ObjectKey(b"h", "a@b", 0)
    with pytest.raises(ValueError, match="object_group_id"):
        ObjectKey(b"h", "m", 0, -1)
    for salt in ("a@b", "a/b", "a\\b", "a\x00b", "x" * 129):
        with pytest.raises(ValueError, match="cache_salt"):
            ObjectKey(b"h", "m", 0, 0, salt)
    ObjectKey(b"h", "m", 0, 0, "x" * 128)
    assert ObjectKey(b"h", "m", 1) == ObjectKey(b"h", "m", 1)
    assert len({ObjectKey(b"h", "m", 1), ObjectKey(b"h", "m", 1)}) == 1


def test_temp_key_keeps_identity_and_adds_16_fresh_bytes() -> None:
    key = ObjectKey(ObjectKey.IntHash2Bytes(7), "model", 0x01020304, 3, "alice")
    a, b = make_temp_key(key), make_temp_key(key)
    for t in (a, b):
        assert t.chunk_hash.startswith(key.chunk_hash) and t.chunk_hash != key.chunk_hash
        assert len(t.chunk_hash) == len(key.chunk_hash) + 16
        assert (t.model_name, t.kv_rank, t.object_group_id, t.cache_salt) == (
            "model", 0x01020304, 3, "alice")
    assert a.chunk_hash != b.chunk_hash


def test_layout_equality_hash_and_validation() -> None:
    a = MemoryLayoutDesc([[2, 3]], [torch.float16])
    assert a == MemoryLayoutDesc([torch.Size([2, 3])], [torch.float16])
    assert hash(a) == hash(MemoryLayoutDesc([(2, 3)], [torch.float16]))
    assert a.shapes == [torch.Size([2, 3])]
    assert a != MemoryLayoutDesc([[2, 3]], [torch.bfloat16])
    with pytest.raises(ValueError):
        MemoryLayoutDesc([[1], [2]], [torch.float16])
    multi = MemoryLayoutDesc([[3], [4, 8]], [torch.float16, torch.float32])
    assert multi.group_offsets() == [0, 6, 134] and multi.nbytes == 134 and multi.numel == 35


def test_serialized_layout_desc_is_a_flat_byte_buffer_of_the_estimate() -> None:
    layout = MemoryLayoutDesc([[4, 8], [16]], [torch.float16, torch.uint8])
    out = serialized_layout_desc(layout, IdentitySerializer())
    assert out.shapes == [torch.Size([80])] and out.dtypes == [torch.uint8]


def test_byte_array_is_a_ctypes_view_of_the_logical_size() -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[32]], [torch.uint8]), padding=16)
    view = obj.byte_array
    assert view.format == "<B" and view.nbytes == 32
    with pytest.raises(NotImplementedError):
        view[0:2] = b"ab"
    memoryview(obj.byte_array).cast("B")[0:2] = b"ab"
    assert bytes(obj.raw_data[:2].tolist()) == b"ab"


def test_narrowing_changes_size_byte_array_and_tensor() -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[32]], [torch.uint8]))
    assert obj.metadata.fmt == MemoryFormat.BINARY_BUFFER
    obj.set_used_size(7)
    assert obj.get_size() == 7 and len(obj.byte_array) == 7 and obj.tensor.numel() == 7
    assert as_byte_tensor(obj).numel() == 7
    with pytest.raises(ValueError):
        obj.set_used_size(33)
    with pytest.raises(ValueError):
        obj.set_used_size(-1)
    obj.reset_used_size()
    assert obj.get_size() == 32


def test_kv_objects_cannot_be_narrowed() -> None:
    obj = TensorMemoryObj.from_tensor(torch.zeros(4, 4, dtype=torch.float16))
    with pytest.raises(ValueError, match="BINARY_BUFFER"):
        obj.set_used_size(2)


def test_multi_group_object_views() -> None:
    layout = MemoryLayoutDesc([[3], [4, 8]], [torch.float16, torch.float32])
    obj = TensorMemoryObj.allocate(layout, padding=32, zero=True)
    assert obj.get_size() == 134 and obj.raw_data.numel() == 166
    assert obj.get_shapes() == layout.shapes and obj.get_dtypes() == layout.dtypes
    obj.get_tensor(0)[:] = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="invalid"):
        _ = obj.tensor
    with pytest.raises(RuntimeError, match="not a multiple"):
        obj.get_tensor(1)  # starts at byte 6: misaligned for float32
    assert obj.group_bytes(1).numel() == 128
    assert obj.get_layout() == layout


def test_empty_groups_have_empty_views() -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[2], [0], [2]], [torch.float16] * 3))
    assert obj.get_tensor(1).shape == torch.Size([0])


def test_from_tensor_shares_memory() -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    obj = TensorMemoryObj.from_tensor(t)
    obj.tensor[0, 0] = 42
    assert t[0, 0] == 42 and obj.get_size() == 24


@given(st.lists(st.integers(0, 5), min_size=1, max_size=4),
       st.lists(st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.uint8]),
                min_size=4, max_size=4))
def test_group_offsets_pack_groups_back_to_back(sizes: list[int], dtypes: list[torch.dtype]) -> None:
    layout = MemoryLayoutDesc([[n] for n in sizes], dtypes[: len(sizes)])
    obj = TensorMemoryObj.allocate(layout)
    total = sum(obj.group_bytes(i).numel() for i in range(len(sizes)))
    assert total == layout.nbytes == obj.get_size()
