"""Small serdes the bench tests register programmatically (no plugin needed).

* ``bench_kvgroups``: a two-slot multi serde (K group, V group) storing both bit-exactly;
* ``bench_vonly``: a split-tier serde: its K slot is absent (slot mapping ``(None, 1)``), V exact;
* ``bench_halfbyte``: lossy, stores the high byte of each 2-byte element (ratio 2);
* ``bench_halfbyte2``: ``bench_halfbyte`` under another name (two serdes that store alike);
* ``bench_upper``: exact values, UPPER_BOUND size contract (4-byte length header, generous estimate);
* ``bench_warns``: identity whose serialize emits a ``UserWarning``;
* ``bench_broken``: serialize always raises;
* ``bench_options``: identity with declared options the bench fills in (records what it got).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    LayoutDescGroup,
    MemoryLayoutDesc,
    MemoryObj,
    MemoryObjGroup,
    MultiDeserializer,
    MultiSerializer,
    ObjectKey,
    SerdeOption,
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    Serializer,
    StoragePlacementMode,
    as_byte_tensor,
    max_workers_option,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer


def _group_bytes(slot: Any) -> torch.Tensor:
    return slot.tensor.reshape(-1).view(torch.uint8)


class KVGroupsSerializer(MultiSerializer):
    @property
    def group_size(self) -> int:
        return 2

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        k, v = _group_bytes(src[0]), _group_bytes(src[1])
        out = as_byte_tensor(dst)
        out[: k.numel()].copy_(k)
        out[k.numel(): k.numel() + v.numel()].copy_(v)
        return k.numel() + v.numel()

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        return sum(d.nbytes for d in layout_descs if d is not None)


class KVGroupsDeserializer(MultiDeserializer):
    @property
    def group_size(self) -> int:
        return 2

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        k, v = _group_bytes(dst[0]), _group_bytes(dst[1])
        k.copy_(data[: k.numel()])
        v.copy_(data[k.numel(): k.numel() + v.numel()])


class VOnlySerializer(KVGroupsSerializer):
    """A split-tier serde: the K slot is absent; V is stored bit-exactly."""

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return (None, 1)

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        v = _group_bytes(src[1])
        as_byte_tensor(dst)[: v.numel()].copy_(v)
        return v.numel()


class VOnlyDeserializer(KVGroupsDeserializer):
    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return (None, 1)

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        v = _group_bytes(dst[1])
        v.copy_(as_byte_tensor(src)[: v.numel()])


class HalfByteSerializer(Serializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        high = src.tensor.reshape(-1).view(torch.int16) >> 8
        out = as_byte_tensor(dst)
        out[: high.numel()].copy_(high.to(torch.uint8))
        return high.numel()

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.numel


class HalfByteDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        target = dst.tensor.reshape(-1).view(torch.int16)
        high = as_byte_tensor(src)[: target.numel()].to(torch.int16)
        target.copy_(high << 8)


class UpperSerializer(Serializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        out = as_byte_tensor(dst)
        out[:4].copy_(torch.tensor(list(data.numel().to_bytes(4, "little")), dtype=torch.uint8))
        out[4: 4 + data.numel()].copy_(data)
        return 4 + data.numel()

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes + 64


class UpperDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        n = int.from_bytes(bytes(data[:4].tolist()), "little")
        as_byte_tensor(dst)[:n].copy_(data[4: 4 + n])


class WarningSerializer(IdentitySerializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        warnings.warn("bench_warns: this layout is stored raw", UserWarning, stacklevel=1)
        return super().serialize(src, dst, key)


class BrokenSerializer(IdentitySerializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        raise ValueError("bench_broken always fails")


def _processor(ser: Any, de: Any, name: str, kwargs: dict[str, Any]) -> SerdeProcessor:
    return AsyncSerdeProcessor(ser, de, kwargs.get("max_workers", 1), serde_type=name)


#: What ``bench_options``' factory received, most recent last.
OPTIONS_SEEN: list[dict[str, Any]] = []


def _options_factory(kwargs: dict[str, Any]) -> SerdeProcessor:
    OPTIONS_SEEN.append(dict(kwargs))
    with open(kwargs["master_key_path"], "rb") as f:
        if len(f.read()) < 16:
            raise ValueError("key too short")
    return _processor(IdentitySerializer(), IdentityDeserializer(), "bench_options", kwargs)


SPECS: dict[str, SerdeSpec] = {
    "bench_kvgroups": SerdeSpec(
        lambda kw: _processor(KVGroupsSerializer(), KVGroupsDeserializer(), "bench_kvgroups", kw),
        "two-slot exact copy", (max_workers_option(1),), SerdeSizeContract.EXACT, lossy=False),
    "bench_vonly": SerdeSpec(
        lambda kw: _processor(VOnlySerializer(), VOnlyDeserializer(), "bench_vonly", kw),
        "K slot absent (split tier)", (max_workers_option(1),), SerdeSizeContract.EXACT,
        placement=StoragePlacementMode.KV_SPLIT_TIER),
    "bench_halfbyte": SerdeSpec(
        lambda kw: _processor(HalfByteSerializer(), HalfByteDeserializer(), "bench_halfbyte", kw),
        "high byte of each 2-byte element", (max_workers_option(1),), SerdeSizeContract.EXACT,
        lossy=True),
    "bench_halfbyte2": SerdeSpec(
        lambda kw: _processor(HalfByteSerializer(), HalfByteDeserializer(), "bench_halfbyte2", kw),
        "high byte of each 2-byte element", (max_workers_option(1),), SerdeSizeContract.EXACT,
        lossy=True),
    "bench_upper": SerdeSpec(
        lambda kw: _processor(UpperSerializer(), UpperDeserializer(), "bench_upper", kw),
        "length-prefixed copy", (max_workers_option(1),), SerdeSizeContract.UPPER_BOUND),
    "bench_warns": SerdeSpec(
        lambda kw: _processor(WarningSerializer(), IdentityDeserializer(), "bench_warns", kw),
        "identity that warns", (max_workers_option(1),), SerdeSizeContract.EXACT),
    "bench_broken": SerdeSpec(
        lambda kw: _processor(BrokenSerializer(), IdentityDeserializer(), "bench_broken", kw),
        "always fails", (max_workers_option(1),), SerdeSizeContract.EXACT),
    "bench_options": SerdeSpec(
        _options_factory, "identity with options the bench completes",
        (
            SerdeOption("key_provider", str, "hkdf"),
            SerdeOption("master_key_path", str, ""),
            SerdeOption("head_dim", int, 128),
            SerdeOption("skip_first_layers", int, 2),
            SerdeOption("skip_last_layers", int, 2),
            max_workers_option(1),
        ),
        SerdeSizeContract.EXACT),
}
