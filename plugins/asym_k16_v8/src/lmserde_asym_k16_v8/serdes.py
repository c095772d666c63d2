"""The ``asym_k16_v8`` and ``asym_k16_v8_v_only`` multi serdes (group size 2: slot 0 = K, 1 = V).

* Storage-only (``asym_k16_v8``, slot mapping ``(0, 1)``): K is stored bit-exact in its own dtype,
  V as fp8 codes with one per-tensor scale. Both slots are required on serialize; on deserialize a
  ``None`` slot is skipped and never touched.
* V-only (``asym_k16_v8_v_only``, slot mapping ``(None, 1)``): the K slot must be ``None``, V is
  required; the blob carries no K bytes (``k_payload_len = 0``). Its deserializer ignores the K
  destination slot.

Each deserializer refuses the other mode's blobs. Wire format: ``docs/formats/encoded_kv.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from lmserde import (
    LayoutDescGroup,
    MemoryLayoutDesc,
    MemoryObj,
    MemoryObjGroup,
    MultiDeserializer,
    MultiSerializer,
    ObjectKey,
    as_byte_tensor,
    validate_group_size,
)

from lmserde_asym_k16_v8.codec import AsymCodec
from lmserde_asym_k16_v8.slots import input_tensor, output_tensor

__all__ = [
    "AsymK16V8MultiDeserializer",
    "AsymK16V8MultiSerializer",
    "AsymK16V8VOnlyMultiDeserializer",
    "AsymK16V8VOnlyMultiSerializer",
]

GROUP_SIZE = 2
STORAGE_ONLY_MAPPING: tuple[int | None, ...] = (0, 1)
V_ONLY_MAPPING: tuple[int | None, ...] = (None, 1)


def _single_group(layout: MemoryLayoutDesc, slot: str, serde: str) -> MemoryLayoutDesc:
    if layout.num_groups != 1:
        raise ValueError(
            f"{serde}: the {slot} layout must describe one object group, got {layout.num_groups}"
        )
    return layout


def _src_tensor(obj: Any, serde: str, missing: str) -> torch.Tensor:
    tensor = input_tensor(obj) if obj is not None else None
    if tensor is None:
        raise ValueError(f"{serde}: {missing}")
    return tensor


def _decode(codec: AsymCodec, serde: str, src: MemoryObj, k_obj: Any, v_obj: Any,
            check: Any) -> None:
    """Locate the blob, let ``check(header, k_out, v_out)`` refuse it, then decode into the slots.

    ``None`` slot objects are skipped; a slot object without a tensor is an error.
    """
    k_out, k_commit = output_tensor(k_obj) if k_obj is not None else (None, None)
    v_out, v_commit = output_tensor(v_obj) if v_obj is not None else (None, None)
    if k_obj is not None and k_out is None:
        raise ValueError(f"{serde}: the K destination has no tensor")
    if v_obj is not None and v_out is None:
        raise ValueError(f"{serde}: V slot is required (the V destination has no tensor)")
    blob = as_byte_tensor(src)
    loc = codec.locate(blob)
    check(loc.header, k_out, v_out)
    codec.decode_into(blob, loc, k_out, v_out)
    for commit in (k_commit, v_commit):
        if commit is not None:
            commit()


class _AsymStage:
    """What the four classes share: the codec (a default one when none is given) and the group
    size (2: slot 0 = K, slot 1 = V). ``name`` is the serde type named in errors."""

    name: str

    def __init__(self, codec: AsymCodec | None = None) -> None:
        self.codec = codec or AsymCodec()

    @property
    def group_size(self) -> int:
        return GROUP_SIZE


class AsymK16V8MultiSerializer(_AsymStage, MultiSerializer):
    """Storage-only serializer: K (slot 0) bit-exact, V (slot 1) fp8 + per-tensor scale."""

    name = "asym_k16_v8"

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return STORAGE_ONLY_MAPPING

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        validate_group_size(src, GROUP_SIZE, role="src")
        k_obj, v_obj = src
        if k_obj is None or v_obj is None:
            absent = " and ".join(n for n, o in (("K", k_obj), ("V", v_obj)) if o is None)
            raise ValueError(
                f"{self.name}: both K and V must be provided (storage-only mode); {absent} "
                "missing. For V-only storage use asym_k16_v8_v_only."
            )
        k = _src_tensor(k_obj, self.name, "both K and V must be provided (K has no tensor)")
        v = _src_tensor(v_obj, self.name, "both K and V must be provided (V has no tensor)")
        return self.codec.encode_into(as_byte_tensor(dst), k, v)

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        validate_group_size(layout_descs, GROUP_SIZE, role="layout")
        k_layout, v_layout = layout_descs
        if k_layout is None or v_layout is None:
            raise ValueError(f"{self.name}: both K and V layouts must be provided")
        k = _single_group(k_layout, "K", self.name)
        v = _single_group(v_layout, "V", self.name)
        return self.codec.estimate(k.nbytes, v.numel)


class AsymK16V8MultiDeserializer(_AsymStage, MultiDeserializer):
    """Storage-only deserializer; a ``None`` destination slot is skipped and never touched."""

    name = "asym_k16_v8"

    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return STORAGE_ONLY_MAPPING

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        validate_group_size(dst, GROUP_SIZE, role="dst")
        _decode(self.codec, self.name, src, dst[0], dst[1], self._check)

    def _check(self, header: Any, k_out: torch.Tensor | None, v_out: torch.Tensor | None) -> None:
        k_is_empty = k_out is not None and k_out.numel() == 0
        if header.k_payload_len == 0 and not k_is_empty:
            raise ValueError(
                f"{self.name}: the blob carries no K bytes: it is a V-only blob written by "
                "asym_k16_v8_v_only; read it with asym_k16_v8_v_only"
            )


class AsymK16V8VOnlyMultiSerializer(_AsymStage, MultiSerializer):
    """V-only serializer: slot 0 (K) must be ``None``; slot 1 (V) is quantized as in storage-only."""

    name = "asym_k16_v8_v_only"

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return V_ONLY_MAPPING

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        validate_group_size(src, GROUP_SIZE, role="src")
        k_obj, v_obj = src
        if k_obj is not None:
            raise ValueError(
                f"{self.name}: K slot must be None (V-only mode stores V alone; K stays in L1). "
                "To store K and V together use asym_k16_v8."
            )
        v = _src_tensor(v_obj, self.name, "V slot is required")
        return self.codec.encode_into(as_byte_tensor(dst), None, v)

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        validate_group_size(layout_descs, GROUP_SIZE, role="layout")
        k_layout, v_layout = layout_descs
        if k_layout is not None:
            raise ValueError(f"{self.name}: K layout must be None (V-only mode)")
        if v_layout is None:
            raise ValueError(f"{self.name}: V layout is required")
        return self.codec.estimate(0, _single_group(v_layout, "V", self.name).numel)


class AsymK16V8VOnlyMultiDeserializer(_AsymStage, MultiDeserializer):
    """V-only deserializer: restores V; the K destination slot is ignored and never touched."""

    name = "asym_k16_v8_v_only"

    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return V_ONLY_MAPPING

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        validate_group_size(dst, GROUP_SIZE, role="dst")
        if dst[1] is None:
            raise ValueError(f"{self.name}: V slot is required in the destination")
        _decode(self.codec, self.name, src, None, dst[1], self._check)

    def _check(self, header: Any, k_out: torch.Tensor | None, v_out: torch.Tensor | None) -> None:
        if header.k_payload_len > 0:
            raise ValueError(
                f"{self.name}: the blob carries {header.k_payload_len} K bytes: it is a "
                "storage-only-dequant blob written by asym_k16_v8; read it with asym_k16_v8"
            )
