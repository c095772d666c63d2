"""Frame codecs: properties of every version, exact estimates, header fields, bad arguments."""

from __future__ import annotations

import os

import lmserde_aesgcm
import pytest
import torch
from aesgcm_objects import buffer, byte_obj, obj_bytes
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    FrameFormatError,
    HkdfKeyProvider,
    frame_overhead,
)
from lmserde_aesgcm.frame_v2 import FrameV2Header, associated_data
from lmserde_aesgcm.frame_v3 import FrameV3Header

MASTER = os.urandom(32)
PROVIDER = HkdfKeyProvider(MASTER)


def ser_key_id(key: ObjectKey) -> bytes:
    """The key id PROVIDER's key of ``key``'s tenant at version 0 has."""
    return lmserde_aesgcm.key_id(MASTER, key.cache_salt, 0)

SALT_TEXT = st.text(alphabet=st.characters(blacklist_characters="@/\\\x00"), max_size=128)

object_keys = st.builds(
    ObjectKey,
    chunk_hash=st.binary(max_size=48),
    model_name=st.text(alphabet=st.characters(blacklist_characters="@"), max_size=40),
    kv_rank=st.integers(0, 2**32 - 1),
    object_group_id=st.integers(0, 2**63),
    cache_salt=SALT_TEXT,
)


@settings(max_examples=120, deadline=None)
@given(plaintext=st.binary(max_size=700), key=object_keys, version=st.sampled_from([1, 2, 3]),
       bits=st.sampled_from([128, 256]), slack=st.integers(0, 40))
def test_round_trip_and_exact_size(plaintext: bytes, key: ObjectKey, version: int, bits: int,
                                   slack: int) -> None:
    ser = AesGcmSerializer(PROVIDER, aes_bits=bits, frame_version=version)
    de = AesGcmDeserializer(PROVIDER, aes_bits=bits)
    layout = MemoryLayoutDesc([[len(plaintext)]], [torch.uint8])
    estimate = ser.estimate_serialized_size(layout)
    assert estimate == len(plaintext) + frame_overhead(version)
    frame = buffer(estimate + slack, fill=0x77)
    assert ser.serialize(byte_obj(plaintext), frame, key) == estimate
    assert obj_bytes(frame)[estimate:] == b"\x77" * slack, "wrote past the frame"
    data = obj_bytes(frame)
    assert data[0] == version
    if version == 2:
        header = FrameV2Header.unpack(memoryview(data))
        assert (header.suite, header.key_version, header.plaintext_length) == (
            bits // 128, 0, len(plaintext))
        assert header.iv == data[14:26]
    if version == 3:
        header3 = FrameV3Header.unpack(memoryview(data))
        assert (header3.suite, header3.key_version, header3.plaintext_length) == (
            bits // 128, 0, len(plaintext))
        assert header3.key_id == ser_key_id(key) and header3.iv == data[22:34]
    out = buffer(len(plaintext), fill=0x55)
    de.deserialize(frame, out, key)
    assert obj_bytes(out) == plaintext


@settings(max_examples=200, deadline=None)
@given(a=object_keys, b=object_keys)
def test_associated_data_is_injective(a: ObjectKey, b: ObjectKey) -> None:
    header = bytes(26)
    if a != b:
        assert associated_data(header, a) != associated_data(header, b)
    else:
        assert associated_data(header, a) == associated_data(header, b)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_multi_group_object_with_misaligned_and_empty_groups(version: int) -> None:
    layout = MemoryLayoutDesc([[3], [0], [4, 5]], [torch.uint8, torch.float16, torch.float32])
    src = TensorMemoryObj.allocate(layout, padding=13)
    src.raw_data.copy_(torch.randint(0, 256, (src.raw_data.numel(),), dtype=torch.uint8))
    ser = AesGcmSerializer(PROVIDER, frame_version=version)
    de = AesGcmDeserializer(PROVIDER)
    key = ObjectKey(b"h", "m", 0)
    frame = buffer(ser.estimate_serialized_size(layout))
    assert ser.serialize(src, frame, key) == layout.nbytes + frame_overhead(version)
    out = TensorMemoryObj.allocate(layout, padding=13, zero=True)
    out.raw_data[layout.nbytes:] = 0xCD
    de.deserialize(frame, out, key)
    assert torch.equal(out.raw_data[: layout.nbytes], src.raw_data[: layout.nbytes])
    assert bool((out.raw_data[layout.nbytes:] == 0xCD).all()), "allocator padding was touched"


def test_narrowed_source_encrypts_its_used_bytes() -> None:
    src = byte_obj(bytes(range(100)))
    src.set_used_size(37)
    ser, de = AesGcmSerializer(PROVIDER), AesGcmDeserializer(PROVIDER)
    key = ObjectKey(b"h", "m", 0)
    frame = buffer(37 + 50)
    assert ser.serialize(src, frame, key) == 87
    out = buffer(37)
    de.deserialize(frame, out, key)
    assert obj_bytes(out) == bytes(range(37))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_destination_too_small(version: int) -> None:
    ser = AesGcmSerializer(PROVIDER, frame_version=version)
    need = 50 + frame_overhead(version)
    with pytest.raises(FrameFormatError, match=f"needs {need}"):
        ser.serialize(byte_obj(bytes(50)), buffer(need - 1), ObjectKey(b"h", "m", 0))


def test_ivs_are_unique() -> None:
    ser = AesGcmSerializer(PROVIDER)
    key = ObjectKey(b"h", "m", 0)
    frame = buffer(50)
    ivs = set()
    for _ in range(2000):
        ser.serialize(byte_obj(b""), frame, key)
        ivs.add(obj_bytes(frame)[22:34])
    assert len(ivs) == 2000


def test_header_pack_unpack_and_range_checks() -> None:
    header = FrameV2Header(2, 4_000_000_000, 2**35, b"\x01" * 12)
    packed = header.pack()
    assert len(packed) == 26 and FrameV2Header.unpack(memoryview(packed)) == header
    for bad, match in [
        (FrameV2Header(3, 0, 0, bytes(12)), "unknown suite"),
        (FrameV2Header(1, -1, 0, bytes(12)), "key version"),
        (FrameV2Header(1, 2**32, 0, bytes(12)), "key version"),
        (FrameV2Header(1, 0, 2**36, bytes(12)), "limit"),
        (FrameV2Header(1, 0, 0, bytes(11)), "IV must be 12"),
    ]:
        with pytest.raises(ValueError, match=match):
            bad.pack()


def test_v3_header_pack_unpack_and_range_checks() -> None:
    header = FrameV3Header(2, 4_000_000_000, b"\x07" * 8, 2**35, b"\x01" * 12)
    packed = header.pack()
    assert len(packed) == 34 and FrameV3Header.unpack(memoryview(packed)) == header
    assert packed[6:14] == b"\x07" * 8 and packed[22:34] == b"\x01" * 12
    for bad, match in [
        (FrameV3Header(3, 0, bytes(8), 0, bytes(12)), "unknown suite"),
        (FrameV3Header(1, 2**32, bytes(8), 0, bytes(12)), "key version"),
        (FrameV3Header(1, 0, bytes(7), 0, bytes(12)), "key id must be 8"),
        (FrameV3Header(1, 0, bytes(8), 2**36, bytes(12)), "limit"),
        (FrameV3Header(1, 0, bytes(8), 0, bytes(13)), "IV must be 12"),
    ]:
        with pytest.raises(ValueError, match=match):
            bad.pack()


def test_out_of_range_rank_is_a_value_error() -> None:
    ser = AesGcmSerializer(PROVIDER)
    with pytest.raises(ValueError, match="do not fit"):
        ser.serialize(byte_obj(b"x"), buffer(51), ObjectKey(b"h", "m", 2**63))


def test_constructor_arguments_checked() -> None:
    with pytest.raises(ValueError, match="aes_bits"):
        AesGcmSerializer(PROVIDER, aes_bits=192)
    with pytest.raises(ValueError, match="frame_version must be 1, 2 or 3"):
        AesGcmSerializer(PROVIDER, frame_version=4)
    with pytest.raises(ValueError, match="aes_bits"):
        AesGcmDeserializer(PROVIDER, aes_bits=64)
