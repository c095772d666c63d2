"""Key identity (issue 27, item 1): a reader holding other keys calls an object someone else's.

Frame version 3 names the key id of the (tenant, key version) that wrote it. Key ids are one-way
fingerprints: stable, distinct per secret, tenant and version, and never the key. Versions 1
and 2 name no key: their authentication failures are someone else's (kept), and their config
identity names no key either, so objects written by earlier releases keep their config.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes, write_private
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import ForeignObjectError, create_serde_processor
from lmserde.l2 import create_serde_chain
from lmserde_aesgcm import (
    KEY_ID_LEN,
    AesGcmDeserializer,
    AesGcmSerializer,
    CipherCache,
    FrameAuthenticationError,
    HkdfKeyProvider,
    KeyMismatchError,
    KeyProvider,
    Keyring,
    KeyringKeyProvider,
    TenantKeys,
    UnattributedAuthenticationError,
    key_id,
)

SECRETS = st.binary(min_size=16, max_size=64)
TENANTS = st.text(alphabet=st.characters(blacklist_characters="@/\\\x00"), max_size=24)
VERSIONS = st.integers(0, 2**32 - 1)
DATA = bytes(range(200)) * 3


@settings(max_examples=200, deadline=None)
@given(secret=SECRETS, tenant=TENANTS, version=VERSIONS)
def test_key_id_is_stable_short_and_not_the_key(secret: bytes, tenant: str, version: int) -> None:
    kid = key_id(secret, tenant, version)
    assert len(kid) == KEY_ID_LEN and key_id(bytes(secret), tenant, version) == kid
    assert kid not in secret and secret[:KEY_ID_LEN] != kid


@settings(max_examples=200, deadline=None)
@given(a=st.tuples(SECRETS, TENANTS, VERSIONS), b=st.tuples(SECRETS, TENANTS, VERSIONS))
def test_key_ids_differ_per_secret_tenant_and_version(a: tuple[bytes, str, int],
                                                      b: tuple[bytes, str, int]) -> None:
    # 2**-64 per pair: a collision here would be a construction bug, not bad luck
    assert (key_id(*a) == key_id(*b)) is (a == b)


def test_key_id_separates_each_field() -> None:
    base = key_id(b"s" * 32, "alice", 1)
    assert len({base, key_id(b"t" * 32, "alice", 1), key_id(b"s" * 32, "bob", 1),
                key_id(b"s" * 32, "alice", 2), key_id(b"s" * 32, "alice1", 0)}) == 5


def _frame(ser: AesGcmSerializer, salt: str = "alice") -> bytes:
    dst = buffer(len(DATA) + 50)
    n = ser.serialize(byte_obj(DATA), dst, make_key(salt=salt))
    return obj_bytes(dst)[:n]


def test_v3_header_carries_the_key_id_of_the_writing_key() -> None:
    master = os.urandom(32)
    frame = _frame(AesGcmSerializer(HkdfKeyProvider(master)))
    assert frame[0] == 3 and frame[6:14] == key_id(master, "alice", 0)
    out = buffer(len(DATA))
    AesGcmDeserializer(HkdfKeyProvider(master)).deserialize(byte_obj(frame), out, make_key())
    assert obj_bytes(out) == DATA


def test_other_master_key_is_foreign_before_any_decryption() -> None:
    frame = _frame(AesGcmSerializer(HkdfKeyProvider(os.urandom(32))))
    out = buffer(len(DATA), fill=0xAA)
    with pytest.raises(KeyMismatchError, match="another master key or keyring") as info:
        AesGcmDeserializer(HkdfKeyProvider(os.urandom(32))).deserialize(
            byte_obj(frame), out, make_key())
    assert isinstance(info.value, ForeignObjectError) and not isinstance(info.value, ValueError)
    assert frame[6:14].hex() in str(info.value)  # names the writer's key id, never a key
    assert obj_bytes(out) == bytes(len(DATA))


def test_tampered_ciphertext_under_the_matching_key_is_damage() -> None:
    provider = HkdfKeyProvider(os.urandom(32))
    tampered = bytearray(_frame(AesGcmSerializer(provider)))
    tampered[100] ^= 0x01
    out = buffer(len(DATA), fill=0xAA)
    with pytest.raises(FrameAuthenticationError, match="under the key that wrote it") as info:
        AesGcmDeserializer(provider).deserialize(byte_obj(bytes(tampered)), out, make_key())
    assert isinstance(info.value, ValueError) and not isinstance(info.value, ForeignObjectError)
    assert obj_bytes(out) == bytes(len(DATA))


def test_same_version_number_with_another_secret_is_foreign() -> None:
    """Two keyrings that both call their key "version 1" (another fleet's): the key id, not the
    version number, tells them apart."""
    mine = KeyringKeyProvider(Keyring({"alice": TenantKeys(1, {1: b"\x01" * 32})}))
    theirs = KeyringKeyProvider(Keyring({"alice": TenantKeys(1, {1: b"\x02" * 32})}))
    with pytest.raises(KeyMismatchError):
        AesGcmDeserializer(mine).deserialize(
            byte_obj(_frame(AesGcmSerializer(theirs))), buffer(len(DATA)), make_key())


def test_v2_auth_failure_is_unattributed_not_damage() -> None:
    """A version-2 frame names no key id: a failed authentication cannot prove damage."""
    frame = _frame(AesGcmSerializer(HkdfKeyProvider(os.urandom(32)), frame_version=2))
    with pytest.raises(UnattributedAuthenticationError) as info:
        AesGcmDeserializer(HkdfKeyProvider(os.urandom(32))).deserialize(
            byte_obj(frame), buffer(len(DATA)), make_key())
    assert isinstance(info.value, ForeignObjectError) and not isinstance(info.value, ValueError)


class _OpaqueProvider(KeyProvider):
    """A provider that lists nothing (like a KMS): one secret for every tenant, version 1."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def current_version(self, tenant: str) -> int:
        return 1

    def root_secret(self, tenant: str, version: int) -> bytes:
        return self._secret


@pytest.mark.parametrize("reader", [HkdfKeyProvider, _OpaqueProvider])
def test_v1_auth_failure_is_always_unattributed(reader: type) -> None:
    """Version 1 names no key: another key and damaged bytes look alike to the serde, under
    every provider. (Through the serde wrapper a framed v1 object's payload checksum catches
    damage first: tests/plugins/aesgcm/test_aesgcm_shared_tier.py.)"""
    frame = _frame(AesGcmSerializer(HkdfKeyProvider(os.urandom(32)), frame_version=1))
    out = buffer(len(DATA), fill=0xAA)
    with pytest.raises(UnattributedAuthenticationError, match="version-1 frame") as info:
        AesGcmDeserializer(reader(os.urandom(32))).deserialize(byte_obj(frame), out, make_key())
    assert isinstance(info.value, ForeignObjectError) and not isinstance(info.value, ValueError)
    assert obj_bytes(out) == bytes(len(DATA))


def test_tampered_v1_frame_under_its_own_key_is_unattributed_too() -> None:
    provider = HkdfKeyProvider(os.urandom(32))
    tampered = bytearray(_frame(AesGcmSerializer(provider, frame_version=1)))
    tampered[40] ^= 0x01
    with pytest.raises(UnattributedAuthenticationError):
        AesGcmDeserializer(provider).deserialize(byte_obj(bytes(tampered)), buffer(len(DATA)),
                                                 make_key())


def test_cipher_cache_computes_the_key_id_once() -> None:
    calls: list[tuple[str, int]] = []

    class Counting(_OpaqueProvider):
        def root_secret(self, tenant: str, version: int) -> bytes:
            calls.append((tenant, version))
            return super().root_secret(tenant, version)

    cache = CipherCache(Counting(b"k" * 32))
    ser = AesGcmSerializer(cache)
    frames = [_frame(ser) for _ in range(20)]
    assert calls == [("alice", 1)]
    assert {f[6:14] for f in frames} == {key_id(b"k" * 32, "alice", 1)}


def _master(tmp_path: Path, name: str, secret: bytes) -> Path:
    return write_private(tmp_path / name, secret)


def _config(path: Path, version: int, **extra: object) -> dict[str, object]:
    proc = create_serde_processor({"type": "aesgcm", "master_key_path": str(path),
                                   "frame_version": version, **extra})
    try:
        return proc.get_config()
    finally:
        proc.close()


#: The config identity every aesgcm config has had since frame version 1 shipped: a golden v1
#: object (tests/golden) is framed under exactly this, so it must never change.
STABLE_IDENTITY = {"type": "aesgcm", "format_version": 1, "options": {}}


def test_config_identity_names_no_key_for_any_frame_version(tmp_path: Path) -> None:
    here = _master(tmp_path, "here.key", os.urandom(32))
    other = _master(tmp_path, "other.key", os.urandom(32))
    for version in (1, 2, 3):
        assert _config(here, version) == _config(other, version, max_workers=3, aes_bits=256) \
            == STABLE_IDENTITY


def test_chain_stage_identity_names_no_key(tmp_path: Path) -> None:
    path = _master(tmp_path, "m.key", os.urandom(32))
    for version in (1, 3):
        chain = create_serde_chain([{"type": "identity"},
                                    {"type": "aesgcm", "master_key_path": str(path),
                                     "frame_version": version}])
        try:
            assert chain.get_config()["stages"][1] == STABLE_IDENTITY
        finally:
            chain.close()
