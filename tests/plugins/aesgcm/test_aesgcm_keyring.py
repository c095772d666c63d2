"""The keyring provider: per-tenant versioned keys, rotation without re-encrypting."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes, write_private
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import create_serde_processor
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    CipherCache,
    ForeignKeyError,
    HkdfKeyProvider,
    KeyMismatchError,
    Keyring,
    KeyringError,
    KeyringKeyProvider,
    TenantKeys,
    UnattributedAuthenticationError,
    UnknownKeyVersionError,
    UnknownTenantError,
    add_keyring_version,
    parse_keyring,
    set_keyring_current,
)

S1, S2, S3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 16


def _doc(tenants: object) -> bytes:
    return json.dumps({"lmserde_aesgcm_keyring": 1, "tenants": tenants}).encode()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _serde(keyring: Keyring, version: int = 3) -> tuple[AesGcmSerializer, AesGcmDeserializer]:
    cache = CipherCache(KeyringKeyProvider(keyring))
    return AesGcmSerializer(cache, frame_version=version), AesGcmDeserializer(cache)


def _encrypt(ser: AesGcmSerializer, data: bytes, salt: str = "alice") -> bytes:
    dst = buffer(len(data) + 50)  # the largest overhead (frame version 3)
    n = ser.serialize(byte_obj(data), dst, make_key(salt=salt))
    return obj_bytes(dst)[:n]


def _decrypt(de: AesGcmDeserializer, frame: bytes, size: int, salt: str = "alice") -> bytes:
    out = buffer(size)
    de.deserialize(byte_obj(frame), out, make_key(salt=salt))
    return obj_bytes(out)


def test_parse_valid_keyring() -> None:
    ring = parse_keyring(_doc({"": {"current": 1, "keys": {"1": _b64(S1)}},
                               "alice": {"current": 2, "keys": {"1": _b64(S1), "2": _b64(S2)}}}))
    assert ring.tenant("alice").current == 2
    assert ring.secret("alice", 1) == S1 and ring.secret("", 1) == S1
    assert repr(ring) == "Keyring(tenants=2)"
    assert _b64(S2) not in repr(ring.tenant("alice"))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"{", "not UTF-8 JSON"),
        (b"[]", "lmserde_aesgcm_keyring"),
        (json.dumps({"lmserde_aesgcm_keyring": 2, "tenants": {}}).encode(), "keyring\": 1"),
        (json.dumps({"lmserde_aesgcm_keyring": 1}).encode(), "exactly the members"),
        (json.dumps({"lmserde_aesgcm_keyring": 1, "tenants": {}, "x": 1}).encode(),
         "exactly the members"),
        (_doc({"a": {"current": 1}}), "exactly 'current' and 'keys'"),
        (_doc({"a": {"current": 1, "keys": {}}}), "non-empty"),
        (_doc({"a": {"current": 1, "keys": {"one": _b64(S1)}}}), "decimal"),
        (_doc({"a": {"current": 1, "keys": {"-1": _b64(S1)}}}), "decimal"),
        (_doc({"a": {"current": 1, "keys": {"01": _b64(S1)}}}), "canonical"),
        (_doc({"a": {"current": 1, "keys": {"4294967296": _b64(S1)}}}), "canonical"),
        (_doc({"a": {"current": 1, "keys": {"1": "not base64!"}}}), "not valid base64"),
        (_doc({"a": {"current": 1, "keys": {"1": _b64(b"short")}}}), "at least 16 bytes"),
        (_doc({"a": {"current": 1, "keys": {"1": 5}}}), "base64 string"),
        (_doc({"a": {"current": 3, "keys": {"1": _b64(S1)}}}), "'current' must be one of"),
        (_doc({"a": {"current": True, "keys": {"1": _b64(S1)}}}), "'current' must be one of"),
        (_doc({"a/b": {"current": 1, "keys": {"1": _b64(S1)}}}), "can never match"),
        (_doc({"x" * 129: {"current": 1, "keys": {"1": _b64(S1)}}}), "can never match"),
        (b'{"lmserde_aesgcm_keyring": 1, "tenants": {"a": {"current": 1, "keys": {"1": "'
         + _b64(S1).encode() + b'", "1": "' + _b64(S2).encode() + b'"}}}}', "duplicate"),
    ],
)
def test_malformed_keyrings_rejected(data: bytes, match: str) -> None:
    with pytest.raises(KeyringError, match=match) as info:
        parse_keyring(data, source="ring.json")
    assert "ring.json" in str(info.value)
    assert _b64(S1) not in str(info.value) and _b64(S2) not in str(info.value)


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(
    st.text(alphabet=st.characters(blacklist_characters="@/\\\x00"), max_size=20),
    st.lists(st.binary(min_size=16, max_size=48), min_size=1, max_size=4),
    max_size=4,
))
def test_dumps_parse_round_trip(tenants: dict[str, list[bytes]]) -> None:
    ring = Keyring()
    for name, secrets in tenants.items():
        for secret in secrets:
            ring = ring.with_new_version(name, secret)
    again = parse_keyring(ring.dumps())
    assert {n: (k.current, dict(k.secrets)) for n, k in again.tenants.items()} == {
        n: (k.current, dict(k.secrets)) for n, k in ring.tenants.items()
    }


def test_rotation_old_frames_still_decrypt_new_frames_use_new_version() -> None:
    ring1 = Keyring({"alice": TenantKeys(current=1, secrets={1: S1})})
    ser1, _ = _serde(ring1)
    old = _encrypt(ser1, b"old data" * 4)
    assert old[2:6] == (1).to_bytes(4, "big")

    ring2 = ring1.with_new_version("alice", S2)
    ser2, de2 = _serde(ring2)
    new = _encrypt(ser2, b"new data" * 4)
    assert new[2:6] == (2).to_bytes(4, "big"), "new frames must use the current version"
    assert _decrypt(de2, old, 32) == b"old data" * 4, "rotation must not orphan old frames"
    assert _decrypt(de2, new, 32) == b"new data" * 4


def test_retired_version_no_longer_decrypts() -> None:
    ser, _ = _serde(Keyring({"alice": TenantKeys(current=1, secrets={1: S1})}))
    frame = _encrypt(ser, b"x" * 16)
    _, de = _serde(Keyring({"alice": TenantKeys(current=2, secrets={2: S2})}))
    out = buffer(16, fill=0xAA)
    # someone else's object (a reader that still holds version 1 reads it): not a ValueError,
    # so the serde wrapper keeps it
    with pytest.raises(ForeignKeyError, match="key version 1 of tenant 'alice'") as info:
        de.deserialize(byte_obj(frame), out, make_key(salt="alice"))
    assert not isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, UnknownKeyVersionError)
    assert "known versions: 2" in str(info.value)
    assert obj_bytes(out) == bytes(16)


def test_staged_version_decrypts_but_is_not_used_for_writing() -> None:
    ring = Keyring({"alice": TenantKeys(current=1, secrets={1: S1})})
    staged = ring.with_new_version("alice", S2, activate=False)
    assert staged.tenant("alice").current == 1
    ser, de = _serde(staged)
    assert _encrypt(ser, b"y" * 16)[2:6] == (1).to_bytes(4, "big")
    writer_after_switch, _ = _serde(staged.with_current("alice", 2))
    assert _decrypt(de, _encrypt(writer_after_switch, b"z" * 16), 16) == b"z" * 16


def test_tenants_are_isolated() -> None:
    ring = Keyring({"alice": TenantKeys(current=1, secrets={1: S1}),
                    "bob": TenantKeys(current=1, secrets={1: S2})})
    ser, de = _serde(ring)
    frame = _encrypt(ser, b"secret" * 3, salt="alice")
    with pytest.raises(KeyMismatchError):  # bob's key at version 1 has another key id
        _decrypt(de, frame, 18, salt="bob")


def test_unknown_tenant_is_a_clear_error() -> None:
    ser, de = _serde(Keyring({"alice": TenantKeys(current=1, secrets={1: S1})}))
    with pytest.raises(UnknownTenantError, match=r"no key for tenant 'carol'.*--tenant 'carol'"):
        _encrypt(ser, b"q" * 16, salt="carol")
    frame = _encrypt(ser, b"q" * 16)
    out = buffer(16, fill=0xAA)
    # decoding, a tenant the provider lacks is key material this reader does not hold: someone
    # else's object, not a ValueError, so a serde wrapper keeps it
    with pytest.raises(ForeignKeyError, match="carol") as info:
        de.deserialize(byte_obj(frame), out, make_key(salt="carol"))
    assert not isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, UnknownTenantError)
    assert obj_bytes(out) == bytes(16)


def test_v1_frames_use_the_current_version() -> None:
    ring = Keyring({"alice": TenantKeys(current=1, secrets={1: S1})})
    ser, de = _serde(ring, version=1)
    frame = _encrypt(ser, b"v1" * 8)
    assert _decrypt(de, frame, 16) == b"v1" * 8
    _, de_rotated = _serde(ring.with_new_version("alice", S2))
    # a version-1 frame names no key version: read with the current one (2 now), it fails
    # authentication, which is someone else's (kept, a miss), not damage
    with pytest.raises(UnattributedAuthenticationError) as info:
        _decrypt(de_rotated, frame, 16)
    assert not isinstance(info.value, ValueError)


def test_master_key_as_version_0_reads_what_hkdf_wrote() -> None:
    """Migration from the hkdf provider: its frames name key version 0."""
    master = b"\x42" * 32
    hkdf_writer = AesGcmSerializer(HkdfKeyProvider(master))
    frame = _encrypt(hkdf_writer, b"written by hkdf!")
    ring = Keyring({"alice": TenantKeys(current=0, secrets={0: master})})
    _, de = _serde(ring.with_new_version("alice", S2))
    assert _decrypt(de, frame, 16) == b"written by hkdf!"
    assert parse_keyring(ring.dumps()).secret("alice", 0) == master


def test_keyring_file_through_config(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    assert add_keyring_version(path, "alice") == 1
    assert add_keyring_version(path, "") == 1
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    proc = create_serde_processor({"type": "aesgcm", "key_provider": "keyring",
                                   "keyring_path": str(path)})
    proc.close()
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        create_serde_processor({"type": "aesgcm", "key_provider": "keyring",
                                "keyring_path": str(path)})


def test_add_and_activate_versions_in_file(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    add_keyring_version(path, "alice")
    assert add_keyring_version(path, "alice", activate=False) == 2
    provider = KeyringKeyProvider.from_file(path)
    assert provider.current_version("alice") == 1
    set_keyring_current(path, "alice", 2)
    assert KeyringKeyProvider.from_file(path).current_version("alice") == 2
    with pytest.raises(UnknownKeyVersionError):
        set_keyring_current(path, "alice", 5)
    assert repr(provider) == f"<KeyringKeyProvider source={str(path)!r} tenants=1>"


def test_malformed_file_names_the_file(tmp_path: Path) -> None:
    path = write_private(tmp_path / "ring.json", b"{}")
    with pytest.raises(KeyringError, match="ring.json"):
        KeyringKeyProvider.from_file(path)
