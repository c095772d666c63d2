"""A key that cannot be had is not a verdict on the bytes.

Behind the stored-object frame, the serde wrapper deletes an object whose decode raises a
``ValueError`` (the deserializer contract's "these bytes are bad") and keeps it on any other
failure. A key provider that fails while decoding — a KMS that cannot be reached, a provider
without the object's tenant, one that returns an unusable secret — says nothing about the stored
bytes: the deserializer raises ``KeyUnavailableError`` (a ``RuntimeError``), the load misses,
and the object is still there, and a hit again, once the provider is back. A provider that says
it does not hold the tenant, or the key version a frame names (retired here, or never held: a
host with an older keyring), says the object is someone else's: ``ForeignKeyError`` (an
``lmserde.ForeignObjectError``), also kept, so another fleet that holds the key still reads it.
Other ``ValueError``s from the provider (a garbled KMS answer failing ``json.loads``) are not
trusted to mean anything about the bytes, and keep the object.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from aesgcm_objects import kv_object, make_key
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, SerdeL2AdapterWrapper, load_sync, store_sync
from lmserde.spec import SerdeSizeContract
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    ForeignKeyError,
    KeyProvider,
    KeyProviderError,
    KeyUnavailableError,
    UnknownKeyVersionError,
    UnknownTenantError,
)

SHAPE = [2, 4, 16, 64]
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
KEYS = [make_key(chunk=bytes([i]) * 32, salt="alice") for i in range(2)]
SECRET = bytes(range(32))


class SwitchableKms(KeyProvider):
    """One tenant (``alice``) at version ``version``; ``failure`` names how it fails while set."""

    def __init__(self) -> None:
        self.version = 1
        self.failure: str | None = None

    def _fail(self) -> None:
        if self.failure == "unreachable":
            raise ConnectionError("KMS endpoint unreachable")
        if self.failure == "no tenant":
            raise UnknownTenantError("the KMS lost tenant 'alice'")
        if self.failure == "provider error":
            raise KeyProviderError("the KMS answered with a malformed key record")
        if self.failure == "garbled answer":
            json.loads("<html>502 Bad Gateway</html>")  # json.JSONDecodeError, a ValueError

    def current_version(self, tenant: str) -> int:
        self._fail()
        return self.version

    def root_secret(self, tenant: str, version: int) -> bytes:
        self._fail()
        if self.failure == "unusable secret":
            return b"short"
        if version != self.version:
            raise UnknownKeyVersionError(f"version {version} was destroyed")
        return SECRET


def _wrapper(tmp_path: Path, l1: L1Manager, kms: SwitchableKms,
             frame_version: int) -> tuple[SerdeL2AdapterWrapper, FSL2Adapter]:
    inner = FSL2Adapter(tmp_path / "l2")
    # The deserializer gets its own cipher cache, so that every load asks the provider again
    # until it has succeeded once (a shared cache would hold the key the store derived).
    processor = AsyncSerdeProcessor(AesGcmSerializer(kms, frame_version=frame_version),
                                    AesGcmDeserializer(kms))
    wrapper = SerdeL2AdapterWrapper(inner, processor, l1, serde_type="aesgcm",
                                    size_contract=SerdeSizeContract.EXACT)
    return wrapper, inner


def _load(wrapper: SerdeL2AdapterWrapper) -> tuple[list[bool], list[TensorMemoryObj]]:
    outs = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in KEYS]
    bitmap = load_sync(wrapper, KEYS, outs)
    return [bitmap.test(i) for i in range(len(KEYS))], outs


@pytest.mark.parametrize("frame_version", [1, 2, 3])
@pytest.mark.parametrize("failure", ["unreachable", "no tenant", "provider error",
                                     "garbled answer", "unusable secret"])
def test_a_provider_failure_while_decoding_keeps_the_objects(
        failure: str, frame_version: int, tmp_path: Path) -> None:
    l1 = L1Manager(64 << 20)
    kms = SwitchableKms()
    wrapper, inner = _wrapper(tmp_path, l1, kms, frame_version)
    with wrapper:
        sources = [kv_object(SHAPE, torch.bfloat16, seed=i) for i in range(len(KEYS))]
        assert store_sync(wrapper, KEYS, sources).is_successful()
        kms.failure = failure
        hits, outs = _load(wrapper)
        assert hits == [False, False]
        assert all(int(out.raw_data.count_nonzero()) == 0 for out in outs)  # nothing decoded
        metrics = wrapper.metrics()
        # nothing refused as damaged ("no tenant" is a not-mine miss: "unkeyed")
        assert set(metrics["rejections"]) <= {"foreign", "unkeyed"} and metrics["repaired"] == 0
        assert inner.get_object_sizes(KEYS).keys() == set(KEYS)  # kept through the outage
        kms.failure = None
        hits, outs = _load(wrapper)
        assert hits == [True, True]
        assert all(torch.equal(out.raw_data, src.raw_data) for out, src in zip(outs, sources))


@pytest.mark.parametrize("frame_version", [2, 3])
def test_a_key_version_the_reader_lacks_is_a_miss_that_keeps_the_objects(
        tmp_path: Path, frame_version: int) -> None:
    """Issue 27: a reader without the key version a frame names (a host whose keyring lags, or
    one that retired it) must not delete the object: a fleet that holds the version reads it."""
    l1 = L1Manager(64 << 20)
    kms = SwitchableKms()
    wrapper, inner = _wrapper(tmp_path, l1, kms, frame_version=frame_version)
    with wrapper:
        sources = [kv_object(SHAPE, torch.bfloat16, seed=i) for i in range(len(KEYS))]
        assert store_sync(wrapper, KEYS, sources).is_successful()
        kms.version = 2  # this host no longer holds version 1, which the frames name
        hits, outs = _load(wrapper)
        assert hits == [False, False]
        assert all(int(out.raw_data.count_nonzero()) == 0 for out in outs)
        metrics = wrapper.metrics()
        assert "decode" not in metrics["rejections"] and metrics["repaired"] == 0
        assert inner.get_object_sizes(KEYS).keys() == set(KEYS)  # left in place
        kms.version = 1  # a host that holds version 1 (the writer) still reads them
        hits, outs = _load(wrapper)
        assert hits == [True, True]
        assert all(torch.equal(out.raw_data, src.raw_data) for out, src in zip(outs, sources))


@pytest.mark.parametrize("frame_version", [2, 3])
def test_the_deserializer_calls_a_version_it_lacks_foreign(frame_version: int) -> None:
    kms = SwitchableKms()
    src = kv_object(SHAPE, torch.bfloat16, seed=4)
    serializer = AesGcmSerializer(kms, frame_version=frame_version)
    frame = TensorMemoryObj.from_tensor(
        torch.empty(serializer.estimate_serialized_size(src.get_layout()), dtype=torch.uint8))
    frame.set_used_size(serializer.serialize(src, frame, KEYS[0]))
    kms.version = 2
    dst = TensorMemoryObj.allocate(LAYOUT)
    dst.raw_data.fill_(0xAA)
    with pytest.raises(ForeignKeyError, match="key version 1 of tenant 'alice'") as info:
        AesGcmDeserializer(kms).deserialize(frame, dst, KEYS[0])
    assert not isinstance(info.value, ValueError | KeyUnavailableError)
    assert isinstance(info.value.__cause__, UnknownKeyVersionError)
    assert int(dst.raw_data.count_nonzero()) == 0


@pytest.mark.parametrize("frame_version", [1, 2, 3])
def test_the_deserializer_names_the_provider_failure_and_wipes_the_destination(
        frame_version: int) -> None:
    kms = SwitchableKms()
    src = kv_object(SHAPE, torch.bfloat16, seed=3)
    serializer = AesGcmSerializer(kms, frame_version=frame_version)
    frame = TensorMemoryObj.from_tensor(
        torch.empty(serializer.estimate_serialized_size(src.get_layout()), dtype=torch.uint8))
    frame.set_used_size(serializer.serialize(src, frame, KEYS[0]))
    kms.failure = "unreachable"
    dst = TensorMemoryObj.allocate(LAYOUT)
    dst.raw_data.fill_(0xAA)
    with pytest.raises(KeyUnavailableError, match="tenant 'alice'.*ConnectionError") as info:
        AesGcmDeserializer(kms).deserialize(frame, dst, KEYS[0])
    assert not isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert int(dst.raw_data.count_nonzero()) == 0
