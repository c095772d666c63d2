"""Failure behaviour: every corruption raises and leaves the destination zeroed."""

from __future__ import annotations

import os
import select
from dataclasses import replace

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes
from cryptography.exceptions import InvalidTag
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import AsyncSerdeProcessor, ObjectKey
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    FrameAuthenticationError,
    FrameFormatError,
    HkdfKeyProvider,
    UnknownKeyVersionError,
)

MASTER = os.urandom(32)
PLAINTEXT = bytes(range(1, 41))
KEY = make_key()
OVERHEAD = {1: 29, 2: 42}


def _frame(version: int, key: ObjectKey = KEY, plaintext: bytes = PLAINTEXT) -> bytes:
    ser = AesGcmSerializer(HkdfKeyProvider(MASTER), frame_version=version)
    dst = buffer(len(plaintext) + OVERHEAD[version])
    ser.serialize(byte_obj(plaintext), dst, key)
    return obj_bytes(dst)


FRAMES = {1: _frame(1), 2: _frame(2)}
DE = AesGcmDeserializer(HkdfKeyProvider(MASTER))


def _assert_rejected_and_zeroed(frame: bytes, key: ObjectKey = KEY,
                                expected: type[Exception] = ValueError,
                                size: int = len(PLAINTEXT)) -> None:
    out = buffer(size, fill=0xAA)
    with pytest.raises(expected):
        DE.deserialize(byte_obj(frame), out, key)
    assert obj_bytes(out) == bytes(size), "destination not zeroed after a failed deserialize"


def _classes(version: int) -> dict[str, list[int]]:
    """Byte positions of each part of a frame of PLAINTEXT."""
    p = len(PLAINTEXT)
    if version == 1:
        header = [0]
        iv = list(range(1, 13))
        body = list(range(13, 13 + p))
    else:
        header = list(range(0, 14))
        iv = list(range(14, 26))
        body = list(range(26, 26 + p))
    tag = list(range(body[-1] + 1, body[-1] + 17))
    return {"header": header, "iv": iv, "body": body, "tag": tag}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("part", ["header", "iv", "body", "tag"])
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_byte_of_every_part(version: int, part: str, mask: int) -> None:
    frame = FRAMES[version]
    positions = _classes(version)[part]
    assert positions[-1] < len(frame)
    for pos in positions:
        tampered = bytearray(frame)
        tampered[pos] ^= mask
        expected: type[Exception] = InvalidTag if part in ("iv", "body", "tag") else ValueError
        _assert_rejected_and_zeroed(bytes(tampered), expected=expected)


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([1, 2]), data=st.data())
def test_any_single_byte_change_is_rejected(version: int, data: st.DataObject) -> None:
    frame = FRAMES[version]
    pos = data.draw(st.integers(0, len(frame) - 1))
    mask = data.draw(st.integers(1, 255))
    tampered = bytearray(frame)
    tampered[pos] ^= mask
    _assert_rejected_and_zeroed(bytes(tampered))


@pytest.mark.parametrize("version", [1, 2])
def test_every_truncation_is_rejected(version: int) -> None:
    frame = FRAMES[version]
    for cut in range(len(frame)):
        _assert_rejected_and_zeroed(frame[:cut], expected=FrameFormatError)


def test_empty_frame_names_the_problem() -> None:
    with pytest.raises(FrameFormatError, match="source is empty"):
        DE.deserialize(byte_obj(b""), buffer(8), KEY)


@pytest.mark.parametrize("first", [0x00, 0x03, 0x7F, 0xFF])
def test_unknown_version(first: int) -> None:
    frame = bytes([first]) + FRAMES[2][1:]
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(FrameFormatError, match="unknown version"):
        DE.deserialize(byte_obj(frame), out, KEY)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


@pytest.mark.parametrize("version", [1, 2])
def test_wrong_master_key(version: int) -> None:
    other = AesGcmDeserializer(HkdfKeyProvider(os.urandom(32)))
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(FrameAuthenticationError, match="failed authentication"):
        other.deserialize(byte_obj(FRAMES[version]), out, KEY)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


@pytest.mark.parametrize("version", [1, 2])
def test_wrong_tenant(version: int) -> None:
    _assert_rejected_and_zeroed(FRAMES[version], key=replace(KEY, cache_salt="mallory"),
                                expected=FrameAuthenticationError)


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
def test_v2_frame_moved_to_another_key_fails(moved_to: ObjectKey) -> None:
    """Same tenant included: only the exact object key authenticates a version-2 frame."""
    _assert_rejected_and_zeroed(FRAMES[2], key=moved_to, expected=FrameAuthenticationError)


def test_v1_frame_is_not_bound_to_its_key() -> None:
    """Documented limit of LMCache's format: a v1 frame moved within a tenant still decrypts."""
    out = buffer(len(PLAINTEXT))
    DE.deserialize(byte_obj(FRAMES[1]), out, replace(KEY, chunk_hash=b"\x99" * 16))
    assert obj_bytes(out) == PLAINTEXT


def test_v2_length_mismatch_is_a_clear_error() -> None:
    with pytest.raises(FrameFormatError, match="frame holds 40 plaintext bytes but the destinat"):
        DE.deserialize(byte_obj(FRAMES[2]), buffer(48), KEY)


def test_v2_unknown_key_version() -> None:
    tampered = bytearray(FRAMES[2])
    tampered[5] = 9  # key_version = 9; the hkdf provider only has version 0
    out = buffer(len(PLAINTEXT), fill=0xAA)
    with pytest.raises(UnknownKeyVersionError, match="version 9"):
        DE.deserialize(byte_obj(bytes(tampered)), out, KEY)
    assert obj_bytes(out) == bytes(len(PLAINTEXT))


def test_v2_unknown_suite() -> None:
    tampered = bytearray(FRAMES[2])
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
