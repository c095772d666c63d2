"""Multi-output contract and single-tensor bridges (upstream B.5, I.4)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lmserde import (
    GroupSlotView,
    MemoryLayoutDesc,
    MultiSerializer,
    ObjectKey,
    TensorMemoryObj,
    layout_desc_to_group,
    single_to_multi_deserializer,
    single_to_multi_serializer,
    validate_group_size,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.multi import check_group_size

KEY = ObjectKey(b"k", "m", 0)


def test_validate_group_size_names_the_role() -> None:
    validate_group_size((None, None), 2, role="src")
    with pytest.raises(ValueError, match="MultiSerde src group length 1 does not match expected 2"):
        validate_group_size((None,), 2, role="src")
    with pytest.raises(ValueError, match="dst group length 3"):
        validate_group_size((None,) * 3, 2, role="dst")


@pytest.mark.parametrize("size", [0, -1, True, 1.0])
def test_group_size_must_be_positive(size: Any) -> None:
    class Bad(MultiSerializer):
        @property
        def group_size(self) -> Any:
            return size

        def serialize(self, src: Any, dst: Any, key: ObjectKey) -> int:
            return 0

        def estimate_serialized_size(self, layout_descs: Any) -> int:
            return 0

    with pytest.raises(ValueError, match="group_size"):
        check_group_size(Bad().group_size, owner="Bad")
    with pytest.raises(ValueError, match="group_size"):
        _ = Bad().input_slot_mapping


def test_bridge_produces_identical_bytes() -> None:
    src = TensorMemoryObj.from_tensor(torch.arange(8, dtype=torch.int16))
    direct = TensorMemoryObj.from_tensor(torch.zeros(16, dtype=torch.uint8))
    bridged = TensorMemoryObj.from_tensor(torch.zeros(16, dtype=torch.uint8))
    n1 = IdentitySerializer().serialize(src, direct, KEY)
    multi = single_to_multi_serializer(IdentitySerializer())
    assert multi.group_size == 1 and multi.input_slot_mapping == (0,)
    n2 = multi.serialize((src,), bridged, KEY)
    assert n1 == n2 == 16 and torch.equal(direct.raw_data, bridged.raw_data)
    assert multi.estimate_serialized_size((src.get_layout(),)) == 16


def test_bridge_rejections() -> None:
    multi = single_to_multi_serializer(IdentitySerializer())
    dst = TensorMemoryObj.from_tensor(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="size 1"):
        multi.serialize((None, None), dst, KEY)
    with pytest.raises(ValueError, match="None src"):
        multi.serialize((None,), dst, KEY)
    with pytest.raises(ValueError, match="non-None layout"):
        multi.estimate_serialized_size((None,))


def test_bridged_deserializer_skips_none_and_restores_bytes() -> None:
    d = single_to_multi_deserializer(IdentityDeserializer())
    src = TensorMemoryObj.from_tensor(torch.full((8,), 0x5A, dtype=torch.uint8))
    d.deserialize(src, (None,), KEY)  # deliberate no-op
    out = TensorMemoryObj.from_tensor(torch.zeros(8, dtype=torch.uint8))
    d.deserialize(src, (out,), KEY)
    assert torch.all(out.raw_data == 0x5A)
    with pytest.raises(ValueError, match="size 1"):
        d.deserialize(src, (out, out), KEY)


def test_layout_desc_to_group_maps_slots() -> None:
    parent = MemoryLayoutDesc([[4, 8], [16]], [torch.bfloat16, torch.float16])
    k, v = layout_desc_to_group(parent, (0, 1))
    assert k == MemoryLayoutDesc([[4, 8]], [torch.bfloat16])
    assert v == MemoryLayoutDesc([[16]], [torch.float16])
    assert layout_desc_to_group(parent, (None, 1))[0] is None
    with pytest.raises(ValueError, match="parent group 2 but parent layout has only 2 groups"):
        layout_desc_to_group(parent, (0, 2))


def test_group_slot_view_exposes_one_group() -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[4], [2, 2]], [torch.float32, torch.float32]))
    view = GroupSlotView(obj, 1)
    assert view.tensor.shape == torch.Size([2, 2])
    assert view.get_dtypes() == [torch.float32]
