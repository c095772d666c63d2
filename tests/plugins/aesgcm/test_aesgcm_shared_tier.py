"""Two fleets with different keys on one ``fs`` tier (issue 27, item 1): "not mine" is a miss.

Host A and host B share a tier; B holds another master key, or a keyring whose versions differ
from A's (a rotation one fleet has not caught up with). Through ``create_l2_adapter`` and the
serde wrapper, each fleet's load of the other's objects misses and leaves them in place, and
each keeps hitting its own, round after round. Only provable damage (authentication failing
under the key that wrote the object) is deleted.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from aesgcm_objects import kv_object, make_key, write_private
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, key_file_name, load_sync, store_sync

SHAPE = [2, 4, 16, 64]
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
ROUNDS = 4


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


@pytest.fixture
def tier(tmp_path: Path) -> Path:
    return tmp_path / "shared-tier"


@pytest.fixture
def open_adapter(tier: Path, l1: L1Manager) -> Iterator[Any]:
    adapters: list[Any] = []

    def make(serde: dict[str, Any]) -> Any:
        adapter = create_l2_adapter({"type": "fs", "base_path": str(tier), "serde": serde}, l1)
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def _hkdf(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    path = write_private(tmp_path / name, os.urandom(32))
    return {"type": "aesgcm", "master_key_path": str(path), **extra}


def _keyring(tmp_path: Path, name: str, current: int, keys: dict[int, bytes]) -> dict[str, Any]:
    doc = {"lmserde_aesgcm_keyring": 1, "tenants": {"alice": {
        "current": current, "keys": {str(v): base64.b64encode(s).decode() for v, s in keys.items()}}}}
    path = write_private(tmp_path / name, json.dumps(doc).encode())
    return {"type": "aesgcm", "key_provider": "keyring", "keyring_path": str(path)}


def _keys(host: str, round_: int) -> list[ObjectKey]:
    return [make_key(chunk=f"{host}-{round_}-{i}".encode().ljust(32, b"."), salt="alice")
            for i in range(2)]


def _objects(seed: int) -> list[TensorMemoryObj]:
    return [kv_object(SHAPE, torch.bfloat16, seed=seed + i) for i in range(2)]


def _load(adapter: Any, keys: list[ObjectKey]) -> tuple[list[bool], list[TensorMemoryObj]]:
    outs = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in keys]
    bitmap = load_sync(adapter, keys, outs)
    return [bitmap.test(i) for i in range(len(keys))], outs


def _files(tier: Path, keys: list[ObjectKey]) -> list[bytes]:
    return [(tier / key_file_name(k)).read_bytes() for k in keys]


def _no_deletion(adapter: Any) -> None:
    metrics = adapter.metrics()
    assert metrics["repaired"] == 0, metrics
    assert "decode" not in metrics["rejections"], metrics["rejections"]


def _interleave(a: Any, b: Any, tier: Path) -> None:
    """Rounds of: A stores, B stores, each loads its own (hits) and the other's (misses), and
    every object ever stored is still there, byte for byte."""
    stored: dict[ObjectKey, bytes] = {}
    for round_ in range(ROUNDS):
        for host, adapter in (("a", a), ("b", b)):
            keys = _keys(host, round_)
            objs = _objects(100 * round_ + (0 if host == "a" else 50))
            assert store_sync(adapter, keys, objs).is_successful()
            stored.update(zip(keys, _files(tier, keys)))
            hits, outs = _load(adapter, keys)
            assert hits == [True, True]
            assert all(torch.equal(o.raw_data, s.raw_data) for o, s in zip(outs, objs))
        for reader, writer in ((a, "b"), (b, "a")):
            hits, outs = _load(reader, _keys(writer, round_))
            assert hits == [False, False], f"round {round_}: another fleet's object was a hit"
            assert all(int(o.raw_data.count_nonzero()) == 0 for o in outs)
        assert {k: (tier / key_file_name(k)).read_bytes() for k in stored} == stored
    for round_ in range(ROUNDS):  # everything each fleet wrote still hits for that fleet
        for host, adapter in (("a", a), ("b", b)):
            assert _load(adapter, _keys(host, round_))[0] == [True, True]
    _no_deletion(a)
    _no_deletion(b)


@pytest.mark.parametrize("frame_version", [3, 2])
def test_fleets_with_other_master_keys_leave_each_others_objects(
        tmp_path: Path, tier: Path, open_adapter: Any, frame_version: int) -> None:
    a = open_adapter(_hkdf(tmp_path, "a.key", frame_version=frame_version))
    b = open_adapter(_hkdf(tmp_path, "b.key", frame_version=frame_version))
    _interleave(a, b, tier)


def test_fleets_at_different_key_versions_leave_each_others_objects(
        tmp_path: Path, tier: Path, open_adapter: Any) -> None:
    """Blue/green rotation: A holds only version 1, B only version 2 (it retired 1)."""
    a = open_adapter(_keyring(tmp_path, "a.json", 1, {1: os.urandom(32)}))
    b = open_adapter(_keyring(tmp_path, "b.json", 2, {2: os.urandom(32)}))
    _interleave(a, b, tier)


def test_fleets_with_the_same_version_number_but_other_secrets(
        tmp_path: Path, tier: Path, open_adapter: Any) -> None:
    a = open_adapter(_keyring(tmp_path, "a.json", 1, {1: os.urandom(32)}))
    b = open_adapter(_keyring(tmp_path, "b.json", 1, {1: os.urandom(32)}))
    _interleave(a, b, tier)


def test_a_fleet_holding_both_versions_reads_both(tmp_path: Path, tier: Path,
                                                  open_adapter: Any) -> None:
    s1, s2 = os.urandom(32), os.urandom(32)
    old = open_adapter(_keyring(tmp_path, "old.json", 1, {1: s1}))
    new = open_adapter(_keyring(tmp_path, "new.json", 2, {1: s1, 2: s2}))
    keys, objs = _keys("old", 0), _objects(7)
    assert store_sync(old, keys, objs).is_successful()
    hits, outs = _load(new, keys)
    assert hits == [True, True]
    assert all(torch.equal(o.raw_data, s.raw_data) for o, s in zip(outs, objs))


def test_damage_under_the_matching_key_is_still_deleted(tmp_path: Path, tier: Path,
                                                        open_adapter: Any) -> None:
    """The other side of the rule: a v3 object whose key id matches but whose ciphertext was
    changed is provable damage, refused as ``decode`` and deleted (self-repair)."""
    a = open_adapter(_hkdf(tmp_path, "a.key"))
    keys, objs = _keys("a", 0), _objects(3)
    assert store_sync(a, keys, objs).is_successful()
    path = tier / key_file_name(keys[0])
    data = bytearray(path.read_bytes())
    data[FRAME_HEADER_BYTES + 34 + 100] ^= 0x01  # inside the v3 ciphertext
    path.write_bytes(bytes(data))
    assert _load(a, keys)[0] == [False, True]
    assert a.metrics()["rejections"] == {"decode": 1} and a.metrics()["repaired"] == 1
    assert not path.exists()


def test_v1_objects_of_another_master_key_are_left_in_place(tmp_path: Path, tier: Path,
                                                            open_adapter: Any) -> None:
    """Frame version 1 names no key, so its config identity does (``key_id``): another master
    key is another config, refused before any decrypt. Keeping the object (instead of deleting
    it as a config mismatch) is the serde wrapper's part of issue 27: this test needs it."""
    a = open_adapter(_hkdf(tmp_path, "a.key", frame_version=1))
    b = open_adapter(_hkdf(tmp_path, "b.key", frame_version=1))
    _interleave(a, b, tier)
