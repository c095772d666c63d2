"""A V-only serde the split-tier core tests register programmatically (no plugin needed).

``split_test_v_only`` declares split-tier placement on its spec, leaves the K slot absent (slot
mapping ``(None, 1)``) and stores the V group's bytes unchanged (EXACT size contract), so a round
trip through split-tier placement must give back both groups bit-exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from lmserde import (
    AsyncSerdeProcessor,
    LayoutDescGroup,
    MemoryLayoutDesc,
    MemoryObj,
    MemoryObjGroup,
    MultiDeserializer,
    MultiSerializer,
    ObjectKey,
    SerdeSizeContract,
    SerdeSpec,
    StoragePlacementMode,
    TensorMemoryObj,
    as_byte_tensor,
)
from lmserde.registry import register_serde_factory, unregister_serde_factory

V_ONLY = "split_test_v_only"
SHAPE = [4, 8, 16]  # 512 elements per group
LAYOUT = MemoryLayoutDesc([SHAPE, SHAPE], [torch.bfloat16, torch.bfloat16])
GROUP_BYTES = 2 * 512


class _VOnlySerializer(MultiSerializer):
    def __init__(self, mapping: tuple[int | None, ...] = (None, 1)) -> None:
        self._mapping = mapping

    @property
    def group_size(self) -> int:
        return 2

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return self._mapping

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        if src[0] is not None:
            raise ValueError("K slot must be None")
        v = src[1].tensor.reshape(-1).view(torch.uint8)
        as_byte_tensor(dst)[: v.numel()].copy_(v)
        return v.numel()

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        if layout_descs[0] is not None:
            raise ValueError("K layout must be None")
        return layout_descs[1].nbytes


class _VOnlyDeserializer(MultiDeserializer):
    def __init__(self, mapping: tuple[int | None, ...] = (None, 1)) -> None:
        self._mapping = mapping

    @property
    def group_size(self) -> int:
        return 2

    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return self._mapping

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        v = dst[1].tensor.reshape(-1).view(torch.uint8)
        v.copy_(as_byte_tensor(src)[: v.numel()])


@contextmanager
def v_only_serde_registered(
    name: str = V_ONLY, *,
    placement: StoragePlacementMode = StoragePlacementMode.KV_SPLIT_TIER,
    mapping: tuple[int | None, ...] = (None, 1),
) -> Iterator[str]:
    """Register the V-bytes serde as ``name`` with ``placement`` declared on its spec and the
    slot ``mapping`` (both directions), for the duration of the block."""
    register_serde_factory(name, SerdeSpec(
        factory=lambda kwargs: AsyncSerdeProcessor(_VOnlySerializer(mapping),
                                                   _VOnlyDeserializer(mapping)),
        description="test: V bytes only", options=None, size_contract=SerdeSizeContract.EXACT,
        placement=placement))
    try:
        yield name
    finally:
        unregister_serde_factory(name)


def key(i: int, *, group: int = 0, salt: str = "tenant-a") -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "acme/llm", 0x01010000, group, salt)


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


def same(a: TensorMemoryObj, b: TensorMemoryObj) -> bool:
    return all(torch.equal(a.get_tensor(g), b.get_tensor(g)) for g in range(2))
