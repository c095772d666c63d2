"""The upstream aesgcm checklist (upstream-contract.md I.5), for every frame version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes, write_private
from cryptography.exceptions import InvalidTag
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    SerdeSizeContract,
    create_serde_processor,
    get_registered_serde_types,
    get_serde_size_contract,
)
from lmserde_aesgcm import AesGcmDeserializer, AesGcmSerializer, HkdfKeyProvider

VERSIONS = pytest.mark.parametrize("version", [1, 2, 3])
OVERHEAD = {1: 29, 2: 42, 3: 50}


def _pair(master: bytes, version: int, bits: int = 128) -> tuple[AesGcmSerializer,
                                                                  AesGcmDeserializer]:
    provider = HkdfKeyProvider(master)
    return (AesGcmSerializer(provider, aes_bits=bits, frame_version=version),
            AesGcmDeserializer(provider, aes_bits=bits))


@VERSIONS
def test_estimate_is_plaintext_plus_overhead(master_key: bytes, version: int) -> None:
    ser, _ = _pair(master_key, version)
    single = MemoryLayoutDesc([[2, 4, 256, 128]], [torch.bfloat16])
    multi = MemoryLayoutDesc([[4, 8], [16]], [torch.float16, torch.uint8])
    assert ser.estimate_serialized_size(single) == 524288 + OVERHEAD[version]
    assert ser.estimate_serialized_size(multi) == 80 + OVERHEAD[version]


@VERSIONS
def test_2048_bytes_round_trip(master_key: bytes, version: int) -> None:
    ser, de = _pair(master_key, version)
    data = os.urandom(2048)
    frame = buffer(2048 + OVERHEAD[version])
    assert ser.serialize(byte_obj(data), frame, make_key()) == 2048 + OVERHEAD[version]
    out = buffer(2048)
    de.deserialize(frame, out, make_key())
    assert obj_bytes(out) == data


@VERSIONS
def test_trailing_garbage_is_ignored(master_key: bytes, version: int) -> None:
    ser, de = _pair(master_key, version)
    data = os.urandom(300)
    frame = buffer(300 + OVERHEAD[version])
    ser.serialize(byte_obj(data), frame, make_key())
    padded = byte_obj(obj_bytes(frame) + os.urandom(64))
    out = buffer(300)
    de.deserialize(padded, out, make_key())
    assert obj_bytes(out) == data


@VERSIONS
def test_same_input_twice_gives_different_frames(master_key: bytes, version: int) -> None:
    ser, _ = _pair(master_key, version)
    src = byte_obj(b"\x00" * 128)
    a, b = buffer(128 + OVERHEAD[version]), buffer(128 + OVERHEAD[version])
    ser.serialize(src, a, make_key())
    ser.serialize(src, b, make_key())
    assert obj_bytes(a) != obj_bytes(b)


@VERSIONS
def test_other_tenant_raises_invalid_tag(master_key: bytes, version: int) -> None:
    ser, de = _pair(master_key, version)
    frame = buffer(64 + OVERHEAD[version])
    ser.serialize(byte_obj(os.urandom(64)), frame, make_key(salt="alice"))
    with pytest.raises(InvalidTag):
        de.deserialize(frame, buffer(64), make_key(salt="bob"))


@VERSIONS
def test_flipped_tag_byte_raises_invalid_tag(master_key: bytes, version: int) -> None:
    ser, de = _pair(master_key, version)
    frame = buffer(64 + OVERHEAD[version])
    ser.serialize(byte_obj(os.urandom(64)), frame, make_key())
    data = bytearray(obj_bytes(frame))
    data[-1] ^= 0x01
    with pytest.raises(InvalidTag):
        de.deserialize(byte_obj(bytes(data)), buffer(64), make_key())


def test_four_byte_source_raises_value_error(master_key: bytes) -> None:
    _, de = _pair(master_key, 2)
    for first in (1, 2):
        with pytest.raises(ValueError, match="malformed frame|truncated"):
            de.deserialize(byte_obj(bytes([first, 0, 0, 0])), buffer(16), make_key())


@VERSIONS
@pytest.mark.parametrize("bits", [128, 256])
def test_empty_salt_and_aes256_round_trip(master_key: bytes, version: int, bits: int) -> None:
    ser, de = _pair(master_key, version, bits)
    data = os.urandom(100)
    frame = buffer(100 + OVERHEAD[version])
    ser.serialize(byte_obj(data), frame, make_key(salt=""))
    out = buffer(100)
    de.deserialize(frame, out, make_key(salt=""))
    assert obj_bytes(out) == data


def test_registered_and_built_from_hkdf_key_file(tmp_path: Path) -> None:
    assert "aesgcm" in get_registered_serde_types()
    assert get_serde_size_contract("aesgcm") is SerdeSizeContract.EXACT
    path = write_private(tmp_path / "k", os.urandom(32))
    proc = create_serde_processor({"type": "aesgcm", "key_provider": "hkdf",
                                   "master_key_path": str(path)})
    try:
        assert isinstance(proc, AsyncSerdeProcessor)
    finally:
        proc.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "requires 'master_key_path'"),
        ({"aes_bits": 192}, r"aes_bits must be one of \(128, 256\), got 192"),
        ({"key_provider": "keyring"}, "requires 'keyring_path'"),
    ],
)
def test_factory_rejects(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    if "aes_bits" in kwargs:
        kwargs = {**kwargs, "master_key_path": str(write_private(tmp_path / "k", os.urandom(32)))}
    with pytest.raises(ValueError, match=match):
        create_serde_processor({"type": "aesgcm", **kwargs})
