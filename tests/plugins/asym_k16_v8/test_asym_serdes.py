"""The multi serdes themselves: the upstream asym checklists (I.4, I.7) and cross-mode refusal."""

from __future__ import annotations

import struct
import zlib

import pytest
import torch
from lmserde import GroupSlotView, MemoryLayoutDesc, ObjectKey, TensorMemoryObj, as_byte_tensor
from lmserde.testing import random_object
from lmserde_asym_k16_v8 import (
    AsymK16V8MultiDeserializer,
    AsymK16V8MultiSerializer,
    AsymK16V8VOnlyMultiDeserializer,
    AsymK16V8VOnlyMultiSerializer,
    CorruptEncodedKVError,
)

KEY = ObjectKey(b"\x01" * 32, "test/model", 0x01010000, 0, "")
SHAPE = (32, 64, 8, 128)


class Slot:
    """A bare slot object: only ``tensor`` (as upstream's test doubles)."""

    def __init__(self, tensor: torch.Tensor | None) -> None:
        self.tensor = tensor


def kv(shape: tuple[int, ...] = (2, 3, 4, 8), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen).to(torch.bfloat16),
            torch.randn(shape, generator=gen).to(torch.bfloat16))


def buffer(size: int, fill: int = 0) -> TensorMemoryObj:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]))
    obj.raw_data.fill_(fill)
    return obj


def layout_of(t: torch.Tensor | None) -> MemoryLayoutDesc | None:
    return None if t is None else MemoryLayoutDesc([t.shape], [t.dtype])


def serialize(ser, k: torch.Tensor | None, v: torch.Tensor | None) -> TensorMemoryObj:
    dst = buffer(ser.estimate_serialized_size((layout_of(k), layout_of(v))))
    n = ser.serialize((None if k is None else Slot(k), None if v is None else Slot(v)), dst, KEY)
    dst.set_used_size(n)
    return dst


def median_rel_error(restored: torch.Tensor, original: torch.Tensor) -> float:
    x, y = original.float(), restored.float()
    return ((y - x).abs() / x.abs().clamp_min(1e-6)).median().item()


# -- group sizes and slot mappings --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "mapping"),
    [
        (AsymK16V8MultiSerializer, (0, 1)),
        (AsymK16V8MultiDeserializer, (0, 1)),
        (AsymK16V8VOnlyMultiSerializer, (None, 1)),
        (AsymK16V8VOnlyMultiDeserializer, (None, 1)),
    ],
)
def test_group_size_and_mapping(cls, mapping) -> None:
    serde = cls()
    assert serde.group_size == 2
    attr = "input_slot_mapping" if "Serializer" in cls.__name__ else "output_slot_mapping"
    assert getattr(serde, attr) == mapping


@pytest.mark.parametrize("ser_cls", [AsymK16V8MultiSerializer, AsymK16V8VOnlyMultiSerializer])
def test_wrong_group_lengths_rejected(ser_cls) -> None:
    _, v = kv()
    with pytest.raises(ValueError, match="MultiSerde src group length 1 does not match expected 2"):
        ser_cls().serialize((Slot(v),), buffer(4096), KEY)
    with pytest.raises(ValueError, match="MultiSerde layout group length 3 does not match expected 2"):
        ser_cls().estimate_serialized_size((None, layout_of(v), None))


@pytest.mark.parametrize("de_cls", [AsymK16V8MultiDeserializer, AsymK16V8VOnlyMultiDeserializer])
def test_wrong_dst_group_length_rejected(de_cls) -> None:
    k, v = kv()
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    with pytest.raises(ValueError, match="MultiSerde dst group length 3 does not match expected 2"):
        de_cls().deserialize(blob, (None, Slot(torch.empty_like(v)), None), KEY)


# -- storage-only -----------------------------------------------------------------------------


def test_storage_only_requires_both_slots() -> None:
    k, v = kv()
    ser = AsymK16V8MultiSerializer()
    for group in ((None, Slot(v)), (Slot(k), None), (Slot(k), Slot(None))):
        with pytest.raises(ValueError, match="both K and V must be provided"):
            ser.serialize(group, buffer(4096), KEY)
    with pytest.raises(ValueError, match="both K and V layouts must be provided"):
        ser.estimate_serialized_size((None, layout_of(v)))


def test_storage_only_round_trip_upstream_shape() -> None:
    k, v = kv(SHAPE)
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    k_out, v_out = torch.empty_like(k), torch.empty_like(v)
    AsymK16V8MultiDeserializer().deserialize(blob, (Slot(k_out), Slot(v_out)), KEY)
    assert torch.equal(k_out.view(torch.int16), k.view(torch.int16))
    assert median_rel_error(v_out, v) < 0.075


def test_none_destination_slots_are_never_touched() -> None:
    k, v = kv()
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    k_out, v_sentinel = torch.empty_like(k), torch.full_like(v, 7.0)
    AsymK16V8MultiDeserializer().deserialize(blob, (Slot(k_out), None), KEY)
    assert torch.equal(k_out, k)
    assert bool((v_sentinel == 7.0).all())
    k_sentinel, v_out = torch.full_like(k, 7.0), torch.empty_like(v)
    AsymK16V8MultiDeserializer().deserialize(blob, (None, Slot(v_out)), KEY)
    assert median_rel_error(v_out, v) < 0.075
    assert bool((k_sentinel == 7.0).all())


def test_estimate_is_monotonic_and_bounds_the_blob() -> None:
    ser = AsymK16V8MultiSerializer()
    previous = 0
    for tokens in (1, 2, 16, 17, 256, 1000):
        k, v = kv((2, tokens, 4, 8), seed=tokens)
        estimate = ser.estimate_serialized_size((layout_of(k), layout_of(v)))
        assert estimate >= previous
        previous = estimate
        assert serialize(ser, k, v).get_size() <= estimate


def test_destination_too_small_is_refused() -> None:
    k, v = kv()
    with pytest.raises(ValueError, match="destination buffer too small"):
        AsymK16V8MultiSerializer().serialize((Slot(k), Slot(v)), buffer(792), KEY)


# -- V-only -----------------------------------------------------------------------------------


def test_v_only_slot_rules() -> None:
    k, v = kv()
    ser = AsymK16V8VOnlyMultiSerializer()
    with pytest.raises(ValueError, match="K slot must be None"):
        ser.serialize((Slot(k), Slot(v)), buffer(4096), KEY)
    with pytest.raises(ValueError, match="V slot is required"):
        ser.serialize((None, None), buffer(4096), KEY)
    with pytest.raises(ValueError, match="V slot is required"):
        ser.serialize((None, Slot(None)), buffer(4096), KEY)
    with pytest.raises(ValueError, match="K layout must be None"):
        ser.estimate_serialized_size((layout_of(k), layout_of(v)))
    with pytest.raises(ValueError, match="V layout is required"):
        ser.estimate_serialized_size((None, None))
    blob = serialize(ser, None, v)
    de = AsymK16V8VOnlyMultiDeserializer()
    with pytest.raises(ValueError, match="V slot is required"):
        de.deserialize(blob, (None, None), KEY)
    with pytest.raises(ValueError, match="V slot is required"):
        de.deserialize(blob, (None, Slot(None)), KEY)


def test_v_only_round_trip_leaves_k_destination_untouched() -> None:
    k, v = kv(SHAPE)
    blob = serialize(AsymK16V8VOnlyMultiSerializer(), None, v)
    k_sentinel, v_out = torch.full_like(k, 7.0), torch.empty_like(v)
    AsymK16V8VOnlyMultiDeserializer().deserialize(blob, (Slot(k_sentinel), Slot(v_out)), KEY)
    assert bool((k_sentinel == 7.0).all())
    assert median_rel_error(v_out, v) < 0.075


def test_v_only_blob_is_one_third_of_storage_only() -> None:
    k, v = kv(SHAPE)
    full = serialize(AsymK16V8MultiSerializer(), k, v).get_size()
    v_only = serialize(AsymK16V8VOnlyMultiSerializer(), None, v).get_size()
    assert abs(v_only / full - 1 / 3) <= 0.005


# -- cross-mode refusal -------------------------------------------------------------------------


def test_v_only_refuses_storage_only_blob() -> None:
    k, v = kv()
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    v_out = torch.full_like(v, 7.0)
    with pytest.raises(ValueError, match="storage-only-dequant"):
        AsymK16V8VOnlyMultiDeserializer().deserialize(blob, (None, Slot(v_out)), KEY)
    assert bool((v_out == 7.0).all())


def test_storage_only_refuses_v_only_blob() -> None:
    k, v = kv()
    blob = serialize(AsymK16V8VOnlyMultiSerializer(), None, v)
    de = AsymK16V8MultiDeserializer()
    for dst in ((Slot(torch.empty_like(k)), Slot(torch.empty_like(v))), (None, Slot(v.clone()))):
        with pytest.raises(ValueError, match="V-only blob written by asym_k16_v8_v_only"):
            de.deserialize(blob, dst, KEY)


def test_storage_only_accepts_empty_k() -> None:
    k, v = torch.empty(0, 8, dtype=torch.bfloat16), kv()[1]
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    v_out = torch.empty_like(v)
    AsymK16V8MultiDeserializer().deserialize(blob, (Slot(torch.empty_like(k)), Slot(v_out)), KEY)
    assert median_rel_error(v_out, v) < 0.075


# -- integrity through the serde --------------------------------------------------------------


def test_crc_failure_and_truncation_raise() -> None:
    k, v = kv()
    blob = serialize(AsymK16V8MultiSerializer(), k, v)
    data = as_byte_tensor(blob).clone()
    de = AsymK16V8MultiDeserializer()
    bad = data.clone()
    bad[500] ^= 0x10
    with pytest.raises(CorruptEncodedKVError, match="CRC-32 mismatch"):
        de.deserialize(TensorMemoryObj.from_tensor(bad), (Slot(k.clone()), Slot(v.clone())), KEY)
    with pytest.raises(CorruptEncodedKVError, match="truncated blob"):
        de.deserialize(TensorMemoryObj.from_tensor(data[:700].clone()),
                       (Slot(k.clone()), Slot(v.clone())), KEY)
    narrowed = buffer(data.numel())
    as_byte_tensor(narrowed).copy_(data)
    narrowed.set_used_size(data.numel() - 1)  # logical size, not capacity, bounds the blob
    with pytest.raises(CorruptEncodedKVError, match="truncated blob"):
        de.deserialize(narrowed, (Slot(k.clone()), Slot(v.clone())), KEY)


def test_decodes_a_blob_built_by_hand_with_provenance() -> None:
    """A blob as LMCache writes it with provenance values, assembled from the spec with struct."""
    k = torch.arange(-8, 8, dtype=torch.float32).to(torch.float16).reshape(2, 8)
    v = torch.tensor([0.0, 1.0, -2.0, 3.5, 0.5, -0.25], dtype=torch.bfloat16)
    scale = 3.5 / 448.0  # 2**-7, exact in float32
    codes = torch.clamp(v.float() / scale, -448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    payload = (bytes(k.reshape(-1).view(torch.uint8).numpy()) + bytes(codes.numpy())
               + struct.pack("<f", scale))
    provenance = [("model_id", "acme/llm-7b"), ("model_revision_hash", "abc123"),
                  ("tokenizer_hash", ""), ("rope_config_hash", ""), ("attention_backend", "flash"),
                  ("kv_layout", "NHD")]
    head = b"LMCKV\x01\x00\x01" + struct.pack("<6H", 1, 0, 2, 7, 4, 0)
    head += struct.pack("<7q", 3, 5, 16, 16, 8, 128, 0) + struct.pack("<3q", 32, 6, 4)
    head += struct.pack("<H", len(provenance))
    for name, value in provenance:
        for text in (name.encode(), value.encode()):
            head += struct.pack("<H", len(text)) + text
    blob = head + struct.pack("<I", zlib.crc32(payload)) + payload + b"\xab" * 9
    k_out, v_out = torch.empty_like(k), torch.empty_like(v)
    src = TensorMemoryObj.from_tensor(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
    AsymK16V8MultiDeserializer().deserialize(src, (Slot(k_out), Slot(v_out)), KEY)
    assert torch.equal(k_out, k)
    assert torch.equal(v_out, v)  # every value is exactly representable after scaling


# -- slot views of real two-group objects -------------------------------------------------------


def test_misaligned_v_group_round_trips_through_group_views() -> None:
    layout = MemoryLayoutDesc([[3, 5, 7], [2, 9]], [torch.float16, torch.float32])
    src = random_object(layout, 5)
    ser, de = AsymK16V8MultiSerializer(), AsymK16V8MultiDeserializer()
    groups = (MemoryLayoutDesc([layout.shapes[0]], [layout.dtypes[0]]),
              MemoryLayoutDesc([layout.shapes[1]], [layout.dtypes[1]]))
    dst = buffer(ser.estimate_serialized_size(groups))
    dst.set_used_size(ser.serialize((GroupSlotView(src, 0), GroupSlotView(src, 1)), dst, KEY))
    out = TensorMemoryObj.allocate(layout, padding=16, zero=True)
    out.raw_data[layout.nbytes:] = 0xEE
    de.deserialize(dst, (GroupSlotView(out, 0), GroupSlotView(out, 1)), KEY)
    assert torch.equal(out.group_bytes(0), src.group_bytes(0))
    v_src = src.group_bytes(1).clone().view(torch.float32)
    v_out = out.group_bytes(1).clone().view(torch.float32)
    assert median_rel_error(v_out, v_src) < 0.075
    assert bool((out.raw_data[layout.nbytes:] == 0xEE).all()), "allocator padding was written"
