"""Failure behaviour: every corruption raises and leaves the destination zeroed.

What it raises says what the reader can prove: a ``ValueError`` (damage, the serde wrapper
deletes the object) for malformed frames and, where the reader knows it holds the writer's key
(version 3: matching key ids), failed authentication; a ``ForeignObjectError`` (someone else's,
kept) for a key version or key id the reader does not hold, and for a version-1 or -2 frame
that fails authentication (it names no key id, so another key and damage look the same to the
serde; behind the stored-object frame a damaged version-1 payload fails its checksum first).
"""

from __future__ import annotations

import os
import select
from dataclasses import replace

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes
from cryptography.exceptions import InvalidTag
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import AsyncSerdeProcessor, ForeignObjectError, ObjectKey
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    ForeignKeyError,
    FrameAuthenticationError,
    FrameFormatError,
    HkdfKeyProvider,
    KeyMismatchError,
    UnattributedAuthenticationError,
    UnknownKeyVersionError,
)

MASTER = os.urandom(32)
PLAINTEXT = bytes(range(1, 41))
KEY = make_key()
OVERHEAD = {1: 29, 2: 42, 3: 50}
#: What a failed authentication raises per frame version (tampered bytes or another key).
AUTH_FAILURE: dict[int, type[Exception]] = {1: UnattributedAuthenticationError,
                                            2: UnattributedAuthenticationError,
                                            3: FrameAuthenticationError}


def _frame(version: int, key: ObjectKey = KEY, plaintext: bytes = PLAINTEXT) -> bytes:
    ser = AesGcmSerializer(HkdfKeyProvider(MASTER), frame_version=version)
    dst = buffer(len(plaintext) + OVERHEAD[version])
    ser.serialize(byte_obj(plaintext), dst, key)
    return obj_bytes(dst)


FRAMES = {1: _frame(1), 2: _frame(2), 3: _frame(3)}
DE = AesGcmDeserializer(HkdfKeyProvider(MASTER))


def _assert_rejected_and_zeroed(frame: bytes, key: ObjectKey = KEY,
                                expected: type[Exception] | tuple[type[Exception], ...]
                                = ValueError,
                                size: int = len(PLAINTEXT)) -> None:
    out = buffer(size, fill=0xAA)
    with pytest.raises(expected):
        DE.deserialize(byte_obj(frame), out, key)
    assert obj_bytes(out) == bytes(size), "destination not zeroed after a failed deserialize"


def _classes(version: int) -> dict[str, list[int]]:
    """Byte positions of each part of a frame of PLAINTEXT."""
    p = len(PLAINTEXT)
    key_version: list[int] = []
    key_id: list[int] = []
    if version == 1:
        header = [0]
        iv = list(range(1, 13))
        body = list(range(13, 13 + p))
    elif version == 2:
        header = [0, 1, *range(6, 14)]  # version, suite, plaintext length
        key_version = list(range(2, 6))
        iv = list(range(14, 26))
        body = list(range(26, 26 + p))
    else:
        header = [0, 1, *range(14, 22)]
        key_version = list(range(2, 6))
        key_id = list(range(6, 14))
        iv = list(range(22, 34))
        body = list(range(34, 34 + p))
    tag = list(range(body[-1] + 1, body[-1] + 17))
    return {"header": header, "key_version": key_version, "key_id": key_id, "iv": iv,
            "body": body, "tag": tag}


def _expected(version: int, part: str) -> type[Exception]:
    """What a byte of ``part`` changed in a frame of ``version`` raises."""
    if part == "header":
        return FrameFormatError  # malformed: provable damage
    if part == "key_version":
        return ForeignKeyError  # a version the reader does not hold (hkdf: only 0)
    if part == "key_id":
        return KeyMismatchError
    return AUTH_FAILURE[version]


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("part", ["header", "key_version", "key_id", "iv", "body", "tag"])
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_byte_of_every_part(version: int, part: str, mask: int) -> None:
    frame = FRAMES[version]
    positions = _classes(version)[part]
    assert not positions or positions[-1] < len(frame)
    for pos in positions:
        tampered = bytearray(frame)
        tampered[pos] ^= mask
        _assert_rejected_and_zeroed(bytes(tampered), expected=_expected(version, part))


def test_v3_damage_is_a_value_error_except_in_the_key_identity_fields() -> None:
    """Under matching key ids every change but one of the key version or key id is provable
    damage; a changed key version or key id reads as another key's frame (kept, never served)."""
    frame = FRAMES[3]
    identity = set(range(2, 14))
    for pos in range(len(frame)):
        tampered = bytearray(frame)
        tampered[pos] ^= 0x20
        out = buffer(len(PLAINTEXT), fill=0xAA)
        with pytest.raises((ValueError, ForeignObjectError)) as info:
            DE.deserialize(byte_obj(bytes(tampered)), out, KEY)
        assert isinstance(info.value, ForeignObjectError) is (pos in identity), pos
        assert not (isinstance(info.value, ValueError)
                    and isinstance(info.value, ForeignObjectError)), "both verdicts at once"
        assert obj_bytes(out) == bytes(len(PLAINTEXT))


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([1, 2, 3]), data=st.data())
def test_any_single_byte_change_is_rejected(version: int, data: st.DataObject) -> None:
    frame = FRAMES[version]
    pos = data.draw(st.integers(0, len(frame) - 1))
    mask = data.draw(st.integers(1, 255))
    tampered = bytearray(frame)
    tampered[pos] ^= mask
    _assert_rejected_and_zeroed(bytes(tampered), expected=(ValueError, ForeignObjectError))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_truncation_is_rejected(version: int) -> None:
    frame = FRAMES[version]
    for cut in range(len(frame)):
        _assert_rejected_and_zeroed(frame[:cut], expected=FrameFormatError)


def test_empty_frame_names_the_problem() -> None:
    with pytest.raises(FrameFormatError, match="source is empty"):
        DE.deserialize(byte_obj(b""), buffer(8), KEY)


@pytest.mark.parametrize("first", [0x00, 0x04, 0x7F, 0xFF])
def test_unknown_version(first: int) -> None:
    frame = bytes([first]) + FRAMES[3][1:]
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(FrameFormatError, match="unknown version"):
        DE.deserialize(byte_obj(frame), out, KEY)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


@pytest.mark.parametrize(("version", "expected", "match"), [
    # v1 names no key: someone else's, kept (the stored-object frame's checksum catches damage)
    (1, UnattributedAuthenticationError, "version-1 frame .* failed authentication"),
    (2, UnattributedAuthenticationError, "names no key id"),
    (3, KeyMismatchError, "another master key or keyring"),
])
def test_wrong_master_key(version: int, expected: type[Exception], match: str) -> None:
    other = AesGcmDeserializer(HkdfKeyProvider(os.urandom(32)))
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(expected, match=match) as info:
        other.deserialize(byte_obj(FRAMES[version]), out, KEY)
    assert isinstance(info.value, InvalidTag)  # LMCache-style callers still catch it
    assert isinstance(info.value, ForeignObjectError) and not isinstance(info.value, ValueError)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


@pytest.mark.parametrize(("version", "expected"), [
    (1, UnattributedAuthenticationError), (2, UnattributedAuthenticationError),
    (3, KeyMismatchError)])
def test_wrong_tenant(version: int, expected: type[Exception]) -> None:
    _assert_rejected_and_zeroed(FRAMES[version], key=replace(KEY, cache_salt="mallory"),
                                expected=expected)


@pytest.mark.parametrize(
    "moved_to",
    [
        replace(KEY, chunk_hash=b"\x12" + KEY.chunk_hash[1:]),
        replace(KEY, chunk_hash=KEY.chunk_hash + b"\x00"),
        replace(KEY, model_name="org/model-70b"),
        replace(KEY, kv_rank=KEY.kv_rank + 1),
        replace(KEY, object_group_id=1),
        replace(KEY, cache_salt="bob"),
    ],
    ids=["chunk", "chunk-longer", "model", "rank", "group", "tenant"],
)
@pytest.mark.parametrize("version", [2, 3])
def test_frame_moved_to_another_key_fails(moved_to: ObjectKey, version: int) -> None:
    """Same tenant included: only the exact object key authenticates a version-2 or -3 frame.
    (Through the serde wrapper the stored-object frame refuses a moved object first.)"""
    expected: type[Exception] = AUTH_FAILURE[version]
    if version == 3 and moved_to.cache_salt != KEY.cache_salt:
        expected = KeyMismatchError  # the key id is per tenant
    _assert_rejected_and_zeroed(FRAMES[version], key=moved_to, expected=expected)


def test_v1_frame_is_not_bound_to_its_key() -> None:
    """Documented limit of LMCache's format: a v1 frame moved within a tenant still decrypts."""
    out = buffer(len(PLAINTEXT))
    DE.deserialize(byte_obj(FRAMES[1]), out, replace(KEY, chunk_hash=b"\x99" * 16))
    assert obj_bytes(out) == PLAINTEXT


@pytest.mark.parametrize("version", [2, 3])
def test_length_mismatch_is_a_clear_error(version: int) -> None:
    with pytest.raises(FrameFormatError, match="frame holds 40 plaintext bytes but the destinat"):
        DE.deserialize(byte_obj(FRAMES[version]), buffer(48), KEY)


@pytest.mark.parametrize("version", [2, 3])
def test_unknown_key_version_is_foreign(version: int) -> None:
    tampered = bytearray(FRAMES[version])
    tampered[5] = 9  # key_version = 9; the hkdf provider only has version 0
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(ForeignKeyError, match="key version 9") as info:
        DE.deserialize(byte_obj(bytes(tampered)), out, KEY)
    assert isinstance(info.value, ForeignObjectError) and not isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, UnknownKeyVersionError)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


@pytest.mark.parametrize("version", [2, 3])
def test_unknown_suite(version: int) -> None:
    tampered = bytearray(FRAMES[version])
    tampered[1] = 0x09
    with pytest.raises(FrameFormatError, match="unknown suite 0x09"):
        DE.deserialize(byte_obj(bytes(tampered)), buffer(len(PLAINTEXT)), KEY)


def test_failure_is_per_item_in_a_batch() -> None:
    """Through the processor a tampered frame fails alone; its destination is zeroed."""
    keys = [make_key(chunk=bytes([i]) * 16) for i in range(3)]
    frames = [byte_obj(_frame(2, k)) for k in keys]
    data = bytearray(obj_bytes(frames[1]))
    data[30] ^= 0x04
    frames[1] = byte_obj(bytes(data))
    outs = [buffer(len(PLAINTEXT), fill=0xAA) for _ in keys]
    ser = AesGcmSerializer(HkdfKeyProvider(MASTER))
    with AsyncSerdeProcessor(ser, DE) as proc:
        task = proc.submit_deserialize(frames, outs, keys)
        poller = select.poll()
        poller.register(proc.get_deserialize_event_fd(), select.POLLIN)
        assert poller.poll(30_000), "deserialize did not finish"
        outcome = proc.query_deserialize_outcome(task)
    assert outcome is not None
    assert outcome.failed_items == (1,)
    assert obj_bytes(outs[0]) == PLAINTEXT and obj_bytes(outs[2]) == PLAINTEXT
    assert obj_bytes(outs[1]) == bytes(len(PLAINTEXT))
