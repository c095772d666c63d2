"""The fast path: AES-GCM reads the source and writes the destination in place, and AEAD objects
are cached per derived key."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pytest
import torch
from aesgcm_objects import buffer, kv_object, make_key, obj_bytes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    CipherCache,
    CipherEntry,
    HkdfKeyProvider,
    KeyProvider,
    KeyProviderError,
)


def _address(view: Any) -> int:
    assert isinstance(view, memoryview), f"expected a zero-copy memoryview, got {type(view)}"
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


class _SpyAead:
    """Delegates to a real AESGCM, records buffer addresses, forbids the copying one-shot API."""

    def __init__(self, real: AESGCM, calls: list[tuple[str, int, int, int]]) -> None:
        self._real, self._calls = real, calls

    def encrypt_into(self, iv: bytes, data: Any, aad: Any, buf: Any) -> int:
        self._calls.append(("encrypt_into", _address(data), _address(buf), len(buf)))
        return self._real.encrypt_into(iv, data, aad, buf)

    def decrypt_into(self, iv: bytes, data: Any, aad: Any, buf: Any) -> int:
        self._calls.append(("decrypt_into", _address(data), _address(buf), len(buf)))
        return self._real.decrypt_into(iv, data, aad, buf)

    def encrypt(self, *args: Any) -> bytes:
        raise AssertionError("the copying AESGCM.encrypt must not be used")

    def decrypt(self, *args: Any) -> bytes:
        raise AssertionError("the copying AESGCM.decrypt must not be used")


class _SpyCache(CipherCache):
    def __init__(self, provider: KeyProvider) -> None:
        super().__init__(provider)
        self.calls: list[tuple[str, int, int, int]] = []

    def entry(self, tenant: str, version: int, key_len: int) -> Any:
        real = super().entry(tenant, version, key_len)
        return CipherEntry(_SpyAead(real.aead, self.calls), real.key_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(("version", "header"), [(1, 13), (2, 26), (3, 34)])
def test_encrypt_and_decrypt_in_place(master_key: bytes, version: int, header: int) -> None:
    cache = _SpyCache(HkdfKeyProvider(master_key))
    ser = AesGcmSerializer(cache, frame_version=version)
    de = AesGcmDeserializer(cache)
    src = kv_object([4, 64], torch.bfloat16)
    size = src.get_size()
    frame = buffer(size + header + 16 + 7)
    ser.serialize(src, frame, make_key())
    out = TensorMemoryObj.allocate(MemoryLayoutDesc([[4, 64]], [torch.bfloat16]), zero=True)
    de.deserialize(frame, out, make_key())
    assert torch.equal(out.raw_data, src.raw_data)
    (enc, dec) = cache.calls
    assert enc == ("encrypt_into", src.raw_data.data_ptr(), frame.raw_data.data_ptr() + header,
                   size + 16)
    assert dec == ("decrypt_into", frame.raw_data.data_ptr() + header, out.raw_data.data_ptr(),
                   size)


class _CountingProvider(KeyProvider):
    def __init__(self) -> None:
        self.fetches = 0

    def current_version(self, tenant: str) -> int:
        return 3

    def root_secret(self, tenant: str, version: int) -> bytes:
        self.fetches += 1
        return b"r" * 32


def test_aead_objects_cached_per_derived_key() -> None:
    provider = _CountingProvider()
    cache = CipherCache(provider)
    a = cache.get("alice", 3, 16)
    assert cache.get("alice", 3, 16) is a
    assert cache.get("alice", 3, 32) is not a
    assert cache.get("bob", 3, 16) is not a
    assert provider.fetches == 3 and len(cache) == 3
    assert "entries=3" in repr(cache)
    # the key id is computed with the AEAD, once: a cached entry costs nothing per frame
    entry = cache.entry("alice", 3, 16)
    assert entry.aead is a and cache.entry("alice", 3, 16) is entry
    assert provider.fetches == 3
    assert repr(entry) == f"CipherEntry(key_id={entry.key_id.hex()})"


def test_cache_evicts_least_recently_used() -> None:
    provider = _CountingProvider()
    cache = CipherCache(provider, capacity=2)
    cache.get("a", 3, 16)
    cache.get("b", 3, 16)
    cache.get("a", 3, 16)  # a is now the most recent
    cache.get("c", 3, 16)  # evicts b
    assert len(cache) == 2
    cache.get("a", 3, 16)
    assert provider.fetches == 3
    cache.get("b", 3, 16)
    assert provider.fetches == 4
    with pytest.raises(ValueError, match="capacity"):
        CipherCache(provider, capacity=0)


def test_serializer_and_deserializer_share_one_cache(master_key: bytes) -> None:
    provider = _CountingProvider()
    cache = CipherCache(provider)
    ser, de = AesGcmSerializer(cache), AesGcmDeserializer(cache)
    src = kv_object([32], torch.float16)
    frame = buffer(64 + 50)
    for _ in range(5):
        ser.serialize(src, frame, make_key())
        out = buffer(64)
        de.deserialize(frame, out, make_key())
        assert obj_bytes(out) == obj_bytes(src)
    assert provider.fetches == 1


def test_concurrent_use_is_consistent(master_key: bytes) -> None:
    cache = CipherCache(HkdfKeyProvider(master_key))
    ser, de = AesGcmSerializer(cache), AesGcmDeserializer(cache)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(40):
                key = make_key(chunk=bytes([seed, i]) * 8, salt=f"t{i % 5}")
                src = kv_object([257], torch.float16, seed=seed * 100 + i)
                frame = buffer(514 + 50)
                ser.serialize(src, frame, key)
                out = buffer(514)
                de.deserialize(frame, out, key)
                assert obj_bytes(out) == obj_bytes(src)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(cache) == 5


class _BadProvider(KeyProvider):
    def __init__(self, version: Any, secret: Any) -> None:
        self.version, self.secret = version, secret

    def current_version(self, tenant: str) -> int:
        return self.version

    def root_secret(self, tenant: str, version: int) -> bytes:
        return self.secret


@pytest.mark.parametrize(("version", "secret", "match"), [
    (-1, b"s" * 32, "returned key version -1"),
    (2**32, b"s" * 32, "returned key version"),
    (True, b"s" * 32, "returned key version True"),
    (1, b"short", "unusable root secret"),
    (1, "a string secret!", "unusable root secret"),
])
def test_misbehaving_provider_is_reported(version: Any, secret: Any, match: str) -> None:
    ser = AesGcmSerializer(_BadProvider(version, secret))
    with pytest.raises(KeyProviderError, match=match):
        ser.serialize(kv_object([8], torch.float16), buffer(16 + 50), make_key())
