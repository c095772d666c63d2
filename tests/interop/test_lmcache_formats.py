"""Wire formats against the real LMCache package: fp8, aesgcm (frame v1) and asym_k16_v8.

Each direction is checked: LMCache's serializer output decodes with the lmserde plugin, and the
plugin's output decodes with LMCache's deserializer; where the format is deterministic the bytes
are compared directly. Sources and destinations are LMCache's own memory objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lmcache", reason="the interop session installs lmcache==0.5.6")

import torch
from lmcache_objects import (
    fill_seeded,
    lmcache_key,
    lmcache_layout,
    release,
    reserve_objects,
)
from lmserde import MemoryLayoutDesc, SerdeConfig, TensorMemoryObj, create_serde_processor
from lmserde.lmcache import as_lmserde_key
from lmserde.multi import GroupSlotView

SHAPE = [2, 4, 16, 32]
#: HKDF info prefix of LMCache's aesgcm keys (the documented frame-v1 key schedule).
AESGCM_V1_INFO_PREFIX = b"lmcache-l2-aesgcm-v1"


def byte_buffer(n: int) -> TensorMemoryObj:
    return TensorMemoryObj.allocate(MemoryLayoutDesc([[n]], [torch.uint8]), zero=True)


def blob(buf: Any, n: int) -> bytes:
    return bytes(buf.raw_data[:n].numpy())


@pytest.fixture
def kv(lmcache_l1: Any) -> Iterator[Any]:
    """``kv(groups, dtype, seed)``: a seeded LMCache memory object (released after the test)."""
    made: list[Any] = []
    counter = iter(range(10_000))

    def make(groups: int = 1, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> Any:
        key = lmcache_key(1000 + next(counter))
        obj = reserve_objects(lmcache_l1, [key], lmcache_layout([SHAPE] * groups,
                                                                [dtype] * groups))[0]
        fill_seeded(obj, seed)
        made.append(key)
        return obj

    yield make
    release(lmcache_l1, made)


def ours(serde_type: str, **kwargs: Any) -> Any:
    return create_serde_processor(SerdeConfig(serde_type, kwargs))


# -- fp8 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8_dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_bytes_are_identical_and_cross_decode(kv: Any, dtype: torch.dtype,
                                                  fp8_dtype: str) -> None:
    pytest.importorskip("lmserde_fp8")
    from lmcache.v1.distributed.serde import (
        Fp8QuantizationDeserializer,
        Fp8QuantizationSerializer,
    )

    their_ser = Fp8QuantizationSerializer(getattr(torch, fp8_dtype))
    their_de = Fp8QuantizationDeserializer(getattr(torch, fp8_dtype))
    processor = ours("fp8", fp8_dtype=fp8_dtype)
    try:
        src = kv(1, dtype, seed=3)
        src.tensor.view(-1)[:4] = torch.tensor([1000.0, -1e5, 0.5, 3.0]).to(dtype)  # saturation
        key = lmcache_key(1)
        n = their_ser.estimate_serialized_size(lmcache_layout([SHAPE], [dtype]))
        assert processor.estimate_serialized_size(MemoryLayoutDesc([SHAPE], [dtype])) == n
        theirs_buf, ours_buf = byte_buffer(n), byte_buffer(n)
        assert their_ser.serialize(src, theirs_buf, key) == n
        assert processor.serializer.serialize(src, ours_buf, as_lmserde_key(key)) == n
        assert blob(theirs_buf, n) == blob(ours_buf, n)

        decoded_by_ours, decoded_by_theirs = kv(1, dtype, seed=99), kv(1, dtype, seed=98)
        processor.deserializer.deserialize(theirs_buf, decoded_by_ours, as_lmserde_key(key))
        their_de.deserialize(ours_buf, decoded_by_theirs, key)
        expected = src.tensor.to(getattr(torch, fp8_dtype)).to(dtype)
        assert torch.equal(decoded_by_ours.tensor, expected)
        assert torch.equal(decoded_by_theirs.tensor, expected)
    finally:
        processor.close()


# -- aesgcm frame v1 ------------------------------------------------------------------------------


def _their_aesgcm(master_key: bytes, bits: int) -> tuple[Any, Any]:
    from lmcache.v1.distributed.serde import AesGcmDeserializer, AesGcmSerializer, HkdfKeyProvider

    provider = HkdfKeyProvider(master_key, bits // 8, info_prefix=AESGCM_V1_INFO_PREFIX)
    return AesGcmSerializer(provider), AesGcmDeserializer(provider)


@pytest.mark.parametrize("aes_bits", [128, 256])
def test_aesgcm_v1_frames_cross_decrypt(kv: Any, master_key_file: Path, aes_bits: int) -> None:
    pytest.importorskip("lmserde_aesgcm")
    their_ser, their_de = _their_aesgcm(master_key_file.read_bytes(), aes_bits)
    processor = ours("aesgcm", master_key_path=str(master_key_file), frame_version=1,
                     aes_bits=aes_bits)
    try:
        src = kv(1, torch.bfloat16, seed=5)
        key = lmcache_key(7, salt="tenant-a")
        n = src.get_size() + 29
        theirs_buf, ours_buf = byte_buffer(n), byte_buffer(n)
        assert their_ser.serialize(src, theirs_buf, key) == n
        assert processor.serializer.serialize(src, ours_buf, as_lmserde_key(key)) == n
        assert blob(ours_buf, n)[0] == 1  # frame version 1

        decoded_by_ours, decoded_by_theirs = kv(1, seed=1), kv(1, seed=2)
        processor.deserializer.deserialize(theirs_buf, decoded_by_ours, as_lmserde_key(key))
        their_de.deserialize(ours_buf, decoded_by_theirs, key)
        assert torch.equal(decoded_by_ours.tensor, src.tensor)
        assert torch.equal(decoded_by_theirs.tensor, src.tensor)
    finally:
        processor.close()


def test_aesgcm_v1_another_tenant_cannot_decrypt_either_way(kv: Any,
                                                            master_key_file: Path) -> None:
    pytest.importorskip("lmserde_aesgcm")
    their_ser, their_de = _their_aesgcm(master_key_file.read_bytes(), 128)
    processor = ours("aesgcm", master_key_path=str(master_key_file), frame_version=1)
    try:
        src = kv(1, seed=5)
        n = src.get_size() + 29
        theirs_buf, ours_buf = byte_buffer(n), byte_buffer(n)
        their_ser.serialize(src, theirs_buf, lmcache_key(7, salt="tenant-a"))
        processor.serializer.serialize(src, ours_buf, as_lmserde_key(lmcache_key(7, "tenant-a")))
        other = lmcache_key(7, salt="tenant-b")
        with pytest.raises(Exception):
            processor.deserializer.deserialize(theirs_buf, kv(1), as_lmserde_key(other))
        with pytest.raises(Exception):
            their_de.deserialize(ours_buf, kv(1), other)
    finally:
        processor.close()


def test_aesgcm_v2_frames_are_not_readable_by_lmcache(kv: Any, master_key_file: Path) -> None:
    """lmserde's default frame v2 is its own format: LMCache rejects it (use v1 to share data)."""
    pytest.importorskip("lmserde_aesgcm")
    _, their_de = _their_aesgcm(master_key_file.read_bytes(), 128)
    processor = ours("aesgcm", master_key_path=str(master_key_file))
    try:
        src = kv(1, seed=5)
        buf = byte_buffer(processor.estimate_serialized_size(MemoryLayoutDesc([SHAPE],
                                                                              [torch.bfloat16])))
        processor.serializer.serialize(src, buf, as_lmserde_key(lmcache_key(1)))
        with pytest.raises(ValueError, match="malformed frame or unknown version"):
            their_de.deserialize(buf, kv(1), lmcache_key(1))
    finally:
        processor.close()


# -- asym_k16_v8 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_asym_k16_v8_blobs_are_identical_and_cross_decode(kv: Any, dtype: torch.dtype) -> None:
    pytest.importorskip("lmserde_asym_k16_v8")
    from lmcache.v1.distributed.serde.asym_k16_v8 import (
        AsymK16V8MultiDeserializer,
        AsymK16V8MultiSerializer,
    )

    their_ser, their_de = AsymK16V8MultiSerializer(), AsymK16V8MultiDeserializer()
    processor = ours("asym_k16_v8")
    try:
        src = kv(2, dtype, seed=11)
        key = lmcache_key(3)
        slots = (GroupSlotView(src, 0), GroupSlotView(src, 1))
        layouts = (lmcache_layout([SHAPE], [dtype]),) * 2
        capacity = their_ser.estimate_serialized_size(layouts)
        theirs_buf, ours_buf = byte_buffer(capacity), byte_buffer(capacity)
        n_theirs = their_ser.serialize(slots, theirs_buf, key)
        n_ours = processor.serializer.serialize(slots, ours_buf, as_lmserde_key(key))
        assert n_theirs == n_ours
        assert blob(theirs_buf, n_theirs) == blob(ours_buf, n_ours)

        by_ours, by_theirs = kv(2, dtype, seed=1), kv(2, dtype, seed=2)
        processor.deserializer.deserialize(
            theirs_buf, (GroupSlotView(by_ours, 0), GroupSlotView(by_ours, 1)),
            as_lmserde_key(key))
        their_de.deserialize(ours_buf, (GroupSlotView(by_theirs, 0), GroupSlotView(by_theirs, 1)),
                             key)
        for out in (by_ours, by_theirs):
            assert torch.equal(out.get_tensor(0), src.get_tensor(0))  # K bit-exact
        assert torch.equal(by_ours.get_tensor(1), by_theirs.get_tensor(1))
    finally:
        processor.close()
