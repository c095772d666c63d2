"""The authenticated stored-object frame (version 2) at the codec level: layout, round trips,
every refusal, and fuzzing (random flips, truncations and extensions never open as a valid
frame with other bytes)."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from forked_child import ForkedChild
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l2.serde.authenticated_frame import (
    AUTH_FRAME_VERSION,
    AUTH_HEADER_BYTES,
    KEY_RECORD_REGION,
    TAG_BYTES,
    AuthenticatedFramer,
)
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.hidden_names import NameHider, names_key_from_root, parse_key_bytes
from lmserde.l2.serde.stored_frame import FRAME_MAGIC, FrameRejected, ObjectFramer, key_bytes
from lmserde.memory import MemoryFormat, TensorMemoryObj
from lmserde.tenant_keys import Keyring, KeyringKeyProvider, MasterKeyProvider
from stored_objects import stored_buffer

KEY = ObjectKey(b"\x01" * 8, "m/odel", 7, 0, "tenant")
KV = MemoryLayoutDesc([[2, 4, 16]], [torch.bfloat16])
CONFIG = {"type": "fp8", "format_version": 1, "options": {}}
ROOT = bytes(range(32))


def _keys(root: bytes = ROOT) -> FrameKeys:
    return FrameKeys(MasterKeyProvider(root), "key file")


def _framer(root: bytes = ROOT, config: dict | None = None) -> AuthenticatedFramer:
    return AuthenticatedFramer(config or CONFIG, _keys(root))


def _buffer(payload: bytes, bound: int | None = None, at: int = AUTH_HEADER_BYTES
            ) -> TensorMemoryObj:
    bound = len(payload) if bound is None else bound
    raw = torch.zeros(at + bound, dtype=torch.uint8)
    if payload:
        raw[at:at + len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    return TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                                fmt=MemoryFormat.BINARY_BUFFER)


def _sealed(payload: bytes, framer: AuthenticatedFramer | None = None, key: ObjectKey = KEY,
            deferred: bool = False) -> bytes:
    framer = framer or _framer()
    buf = _buffer(payload)
    if deferred:
        framer.seal_deferred(buf, len(payload), key, KV).finish_head()
    else:
        framer.seal(buf, len(payload), key, KV)
    return bytes(buf.raw_data[:buf.get_size()].tolist())


def _open(stored: bytes, framer: AuthenticatedFramer | None = None, key: ObjectKey = KEY,
          bound: int = 1 << 16) -> bytes:
    framer = framer or _framer()
    buf = stored_buffer(stored)
    view = framer.open(buf, key, KV, bound)
    return bytes(view.raw_data[:view.get_size()].tolist())


def _reason(stored: bytes, **kwargs: object) -> str:
    with pytest.raises(FrameRejected) as info:
        _open(stored, **kwargs)  # type: ignore[arg-type]
    return info.value.reason


PAYLOAD = bytes(range(256)) * 3


@pytest.mark.parametrize("deferred", [False, True])
def test_round_trip_and_layout(deferred: bool) -> None:
    stored = _sealed(PAYLOAD, deferred=deferred)
    assert len(stored) == AUTH_HEADER_BYTES + len(PAYLOAD)
    assert stored[:4] == FRAME_MAGIC and stored[4] == AUTH_FRAME_VERSION
    assert stored[5] & 0x01 == 0  # no plain checksum: the MAC replaces it
    assert struct.unpack_from("<I", stored, 16)[0] == 0  # a key file's only version
    assert stored[6] == 1  # MAC suite: AES-256-GMAC
    assert stored[80:80 + TAG_BYTES] != bytes(TAG_BYTES)  # the tag
    assert stored[96:AUTH_HEADER_BYTES] == bytes(AUTH_HEADER_BYTES - 96)
    assert _open(stored) == PAYLOAD
    again = _sealed(PAYLOAD, deferred=not deferred)
    assert again[64:80] != stored[64:80]  # a fresh salt (so a fresh GCM key) per object
    assert again[:64] == stored[:64] and _open(again) == PAYLOAD


def test_a_large_payload_is_verified_in_the_background() -> None:
    payload = os.urandom(9 << 20)  # over two checksum segments: the MAC runs while one decodes
    stored = _sealed(payload, deferred=True)
    assert _open(stored, bound=len(payload)) == payload
    damaged = bytearray(stored)
    damaged[-1] ^= 1
    framer = _framer()
    raw = torch.frombuffer(damaged, dtype=torch.uint8)
    buf = TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                               fmt=MemoryFormat.BINARY_BUFFER)
    _view, confirm = framer.open_deferred(buf, KEY, KV, len(payload))
    with pytest.raises(FrameRejected, match="auth"):
        confirm()


def test_refusals() -> None:
    stored = _sealed(PAYLOAD)
    other_root = _framer(root=bytes(32))
    assert _reason(stored, framer=other_root) == "auth"  # another frame key
    moved = ObjectKey(KEY.chunk_hash, KEY.model_name, KEY.kv_rank, 0, "other")
    assert _reason(stored, key=moved) == "key"  # fingerprint differs: sorted as another key
    assert _reason(_sealed(PAYLOAD, framer=_framer(config={"type": "x"}))) == "config"
    assert _reason(stored[:100]) == "format"
    assert _reason(stored[:-1]) == "length"
    assert _reason(b"XXXX" + stored[4:]) == "foreign"
    assert _reason(stored, bound=len(PAYLOAD) - 1) == "length"
    tail = bytearray(stored)
    tail[127] = 1  # reserved bytes: another frame revision
    assert _reason(bytes(tail)) == "foreign"
    plain = ObjectFramer(CONFIG, checksum=True)
    buf = _buffer(PAYLOAD, bound=len(PAYLOAD) + 64)
    plain.seal(buf, len(PAYLOAD), KEY, KV)
    v1 = bytes(buf.raw_data[:buf.get_size()].tolist())
    assert v1[4] == 1
    assert _reason(v1) == "auth"  # a plain frame where the key requires a MAC


def test_withdrawn_keys_are_unkeyed_and_a_newer_version_foreign() -> None:
    """A tenant the ring does not hold, or a version older than those it holds (retired), is
    ``unkeyed`` (scrub --delete-unkeyed reclaims it); a version newer than every one held (not
    yet distributed) is ``foreign``."""
    ring = Keyring().with_new_version("tenant", ROOT)
    keyed = AuthenticatedFramer(CONFIG, FrameKeys(KeyringKeyProvider(ring), "keyring"))
    stored = _sealed(PAYLOAD, framer=keyed)
    assert struct.unpack_from("<I", stored, 16)[0] == 1
    assert _open(stored, framer=keyed) == PAYLOAD
    empty = AuthenticatedFramer(CONFIG, FrameKeys(KeyringKeyProvider(
        Keyring().with_new_version("someone-else", ROOT)), "keyring"))
    assert _reason(stored, framer=empty) == "unkeyed"
    rotated = ring.with_new_version("tenant", bytes(range(32, 64)))
    newer = AuthenticatedFramer(CONFIG, FrameKeys(KeyringKeyProvider(rotated), "keyring"))
    stored_v2 = _sealed(PAYLOAD, framer=newer)
    assert struct.unpack_from("<I", stored_v2, 16)[0] == 2
    assert _open(stored, framer=newer) == PAYLOAD  # v1 still reads after the rotation
    assert _reason(stored_v2, framer=keyed) == "foreign"  # v2 not yet here
    retired = AuthenticatedFramer(CONFIG, FrameKeys(KeyringKeyProvider(
        rotated.without_versions("tenant", [1])), "keyring"))
    assert _reason(stored, framer=retired) == "unkeyed"
    assert _open(stored_v2, framer=retired) == PAYLOAD


def test_a_reloaded_ring_leaves_no_withdrawn_secret_in_the_mac_key_cache(tmp_path: Path
                                                                         ) -> None:
    """After ``tenant forget`` reaches a running process, its frame keys keep neither the
    forgotten tenant's root secret nor the MAC key derived from it (the provider contract: drop
    what was derived when ``key_generation()`` changes)."""
    from lmserde.l2.serde.frame_keys import KeyNotHeld
    from lmserde.tenant_keys import forget_tenant

    alice, bob = bytes(range(32)), bytes(range(32, 64))
    path = tmp_path / "frame.keyring"
    path.write_bytes(Keyring().with_new_version("alice", alice).with_new_version("bob", bob)
                     .dumps())
    path.chmod(0o600)
    provider = KeyringKeyProvider.from_file(path, reload_interval_s=0)  # reloaded by hand below
    keys = FrameKeys(provider, "keyring")
    alice_mac, bob_mac = keys.mac_key("alice", 1), keys.mac_key("bob", 1)
    forget_tenant(path, "alice")
    assert provider.watch is not None and provider.watch.check_now()
    with pytest.raises(KeyNotHeld):
        keys.mac_key("alice", 1)
    assert keys.mac_key("bob", 1) == bob_mac
    held = [(entry, derived) for entry, derived in keys._derived.items()]
    assert held and all(alice not in entry and derived != alice_mac for entry, derived in held)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flips=st.lists(st.tuples(st.integers(0, AUTH_HEADER_BYTES + len(PAYLOAD) - 1),
                                st.integers(1, 255)), min_size=1, max_size=6),
       cut=st.integers(0, 8), extra=st.binary(max_size=8))
def test_fuzzed_frames_never_open_with_other_bytes(flips: list[tuple[int, int]], cut: int,
                                                   extra: bytes) -> None:
    good = _sealed(PAYLOAD)
    damaged = bytearray(good)
    for offset, mask in flips:
        damaged[offset] ^= mask
    damaged = damaged[:len(damaged) - cut] + bytearray(extra)
    if bytes(damaged) == good:
        assert _open(bytes(damaged)) == PAYLOAD
        return
    with pytest.raises(FrameRejected):
        _open(bytes(damaged), bound=len(PAYLOAD) + 16)


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=2048), salt=st.text(max_size=8).filter(
    lambda s: not any(c in s for c in "@/\\\x00")))
def test_fuzzed_round_trips(payload: bytes, salt: str) -> None:
    key = ObjectKey(b"\x02" * 16, "m", 1, 0, salt)
    assert _open(_sealed(payload, key=key), key=key) == payload


def test_a_world_readable_key_file_is_refused(tmp_path: Path) -> None:
    from lmserde.l2.serde.frame_keys import FrameKeyOptions

    path = tmp_path / "k"
    path.write_bytes(os.urandom(32))
    path.chmod(0o640)
    with pytest.raises(ValueError, match="option 'frame_key_path'"):
        FrameKeyOptions(key_path=str(path)).open()


def _hider() -> NameHider:
    return NameHider(names_key_from_root(ROOT))


def test_hidden_names_frames_carry_an_encrypted_key_record() -> None:
    hidden_framer = AuthenticatedFramer(CONFIG, _keys(), _hider())
    assert hidden_framer.header_bytes == AUTH_HEADER_BYTES + KEY_RECORD_REGION
    buf = _buffer(PAYLOAD, at=hidden_framer.header_bytes)
    hidden_framer.seal_deferred(buf, len(PAYLOAD), KEY, KV).finish_head()
    stored = bytes(buf.raw_data[:buf.get_size()].tolist())
    assert len(stored) == hidden_framer.header_bytes + len(PAYLOAD)
    assert stored[5] & 0x04 and b"m/odel" not in stored and b"tenant" not in stored
    assert _open(stored, framer=hidden_framer) == PAYLOAD
    head = stored[:hidden_framer.header_bytes]
    hidden = _hider().hidden(KEY)
    assert hidden_framer.read_key_record(head, hidden) == KEY
    assert hidden.model_name == "lmserde-hidden" and hidden.cache_salt == ""
    with pytest.raises(ValueError):  # a record copied under another name does not list
        hidden_framer.read_key_record(head, _hider().hidden(ObjectKey(b"x", "m", 0)))
    other = AuthenticatedFramer(CONFIG, _keys(), NameHider(names_key_from_root(bytes(32))))
    with pytest.raises(ValueError):  # another names key cannot read the record
        other.read_key_record(head, hidden)
    assert _reason(stored) == "foreign"  # a reader that does not hide names
    assert _reason(_sealed(PAYLOAD), framer=hidden_framer) == "auth"  # no record: required
    record = bytearray(stored)
    record[AUTH_HEADER_BYTES + 3] ^= 1  # the record is under the MAC too
    assert _reason(bytes(record), framer=hidden_framer) == "auth"


def test_key_bytes_parse_back() -> None:
    for key in (KEY, ObjectKey(b"", "", -5, 3, ""), ObjectKey(b"\xff" * 40, "m\udc80", 1, 0, "t")):
        assert parse_key_bytes(key_bytes(key)) == key
    with pytest.raises(ValueError):
        parse_key_bytes(key_bytes(KEY) + b"\0")


@pytest.mark.parametrize("payload_len", [(4 << 20) - AUTH_HEADER_BYTES,
                                         (4 << 20) - AUTH_HEADER_BYTES + 1, 8 << 20])
def test_segment_boundaries_and_swapped_segments(payload_len: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The MAC is one GMAC per segment of the object (64 MiB; 4 MiB here) under a final one:
    every size round-trips, and segments swapped, dropped or duplicated do not verify."""
    from lmserde.l2.serde import frame_mac

    monkeypatch.setattr(frame_mac, "MAC_SEGMENT_BYTES", 4 << 20)
    payload = os.urandom(payload_len)
    stored = _sealed(payload, deferred=True)
    assert _open(stored, bound=payload_len) == payload
    seg = 4 << 20
    if len(stored) > 2 * seg:
        swapped = stored[:seg] + stored[2 * seg:3 * seg] + stored[seg:2 * seg] + stored[3 * seg:]
        assert len(swapped) == len(stored)
        with pytest.raises(FrameRejected, match="auth"):
            _open(swapped, bound=payload_len)
    if len(stored) > seg:
        dropped = stored[:seg]  # the first segment alone: its header says longer
        with pytest.raises(FrameRejected):
            _open(dropped, bound=payload_len)


def test_a_forked_child_verifies_large_frames() -> None:
    """The MAC of an object over one segment runs on the checksum threads; a child forked after
    the parent used them has none of those threads, and must not wait for them forever. (The
    buffers are made before the fork: torch's own OpenMP pool is not the subject here.)"""
    payload = os.urandom(5 << 20)
    stored = _sealed(payload, deferred=True)  # the parent's checksum threads now exist
    assert _open(stored, bound=len(payload)) == payload
    opened, fresh = stored_buffer(stored), _buffer(b"\x07" * len(payload))
    child = ForkedChild(_verify_in_child, opened, fresh, len(payload))
    assert child.answer(timeout=30) == "verified and sealed"
    assert child.exitcode == 0


def _verify_in_child(opened: TensorMemoryObj, fresh: TensorMemoryObj, payload_len: int,
                     result: Any) -> None:
    framer = _framer()
    view, confirm = framer.open_deferred(opened, KEY, KV, payload_len)
    confirm()
    framer.seal_deferred(fresh, payload_len, KEY, KV).finish_head()
    result.put("verified and sealed" if view.get_size() == payload_len else "wrong size")
