"""Two fleets with different keys on one tier (issue 27, item 1): "not mine" is a miss.

Host A and host B share a tier; B holds another master key, or a keyring whose versions differ
from A's (a rotation one fleet has not caught up with). Through ``create_l2_adapter`` and the
serde wrapper, each fleet's load of the other's objects misses and leaves them in place, and
each keeps hitting its own, round after round. Only provable damage is deleted: a version-3
frame failing authentication under the key id that wrote it, or (version 1, which names no key)
a payload failing the stored-object frame's checksum.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
ROUNDS = 8
_names = itertools.count()


@dataclass
class Tier:
    """One shared L2 tier: ``make(serde)`` opens a host's adapter on it; ``read(adapter, key)``
    is the stored object's bytes, read past lmserde (``None`` when it is gone);
    ``write(adapter, key, data)`` replaces them, past lmserde."""

    make: Callable[[dict[str, Any]], Any]
    read: Callable[[Any, ObjectKey], bytes | None]
    write: Callable[[Any, ObjectKey, bytes], None]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    local_server = pytest.importorskip("lmserde_redis.local_server")
    server = local_server.LocalRedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[Any]:
    local_server = pytest.importorskip("lmserde_s3.local_server")
    server = local_server.LocalS3Server().start()
    yield server
    server.stop()


@pytest.fixture(params=["fs", "redis", "s3"])
def shared_tier(request: pytest.FixtureRequest, tmp_path: Path, l1: L1Manager,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Tier]:
    adapters: list[Any] = []
    backend = request.param
    if backend == "fs":
        base = tmp_path / "shared-tier"
        spec: dict[str, Any] = {"type": "fs", "base_path": str(base)}

        def read(adapter: Any, key: ObjectKey) -> bytes | None:
            path = base / key_file_name(key)
            return path.read_bytes() if path.exists() else None

        def write(adapter: Any, key: ObjectKey, data: bytes) -> None:
            (base / key_file_name(key)).write_bytes(data)
    elif backend == "redis":
        server = request.getfixturevalue("redis_server")
        spec = {"type": "redis", "url": server.url, "namespace": f"aesgcm{next(_names)}"}

        def read(adapter: Any, key: ObjectKey) -> bytes | None:
            with server.client() as client:
                value = client.get(adapter.inner_adapter.redis_key(key))
            return None if value is None else bytes(value)

        def write(adapter: Any, key: ObjectKey, data: bytes) -> None:
            with server.client() as client:
                client.set(adapter.inner_adapter.redis_key(key), data)
    else:
        from lmserde_s3.local_server import TEST_CREDENTIALS

        for name, value in TEST_CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = request.getfixturevalue("s3_server")
        bucket = f"aesgcm-tier-{next(_names)}"
        server.create_bucket(bucket)
        spec = {"type": "s3", "bucket": bucket, "endpoint_url": server.endpoint_url}
        import boto3
        from botocore.config import Config

        client = boto3.client("s3", endpoint_url=server.endpoint_url,
                              config=Config(s3={"addressing_style": "path"}))

        def read(adapter: Any, key: ObjectKey) -> bytes | None:
            location, name = adapter.inner_adapter.location_of(key)
            try:
                return bytes(client.get_object(Bucket=location.bucket, Key=name)["Body"].read())
            except client.exceptions.NoSuchKey:
                return None

        def write(adapter: Any, key: ObjectKey, data: bytes) -> None:
            location, name = adapter.inner_adapter.location_of(key)
            client.put_object(Bucket=location.bucket, Key=name, Body=data)

    def make(serde: dict[str, Any]) -> Any:
        adapter = create_l2_adapter({**spec, "serde": serde}, l1)
        adapters.append(adapter)
        return adapter

    yield Tier(make, read, write)
    for adapter in adapters:
        adapter.close()


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


def _no_deletion(adapter: Any) -> None:
    metrics = adapter.metrics()
    assert metrics["repaired"] == 0, metrics
    assert "decode" not in metrics["rejections"], metrics["rejections"]


def _interleave(a: Any, b: Any, tier: Tier) -> None:
    """Rounds of: A stores, B stores, each loads its own (hits) and the other's (misses), and
    every object ever stored is still there, byte for byte."""
    stored: dict[ObjectKey, bytes | None] = {}
    for round_ in range(ROUNDS):
        for host, adapter in (("a", a), ("b", b)):
            keys = _keys(host, round_)
            objs = _objects(100 * round_ + (0 if host == "a" else 50))
            assert store_sync(adapter, keys, objs).is_successful()
            stored.update((k, tier.read(adapter, k)) for k in keys)
            assert None not in stored.values()
            hits, outs = _load(adapter, keys)
            assert hits == [True, True]
            assert all(torch.equal(o.raw_data, s.raw_data) for o, s in zip(outs, objs))
        for reader, writer in ((a, "b"), (b, "a")):
            hits, outs = _load(reader, _keys(writer, round_))
            assert hits == [False, False], f"round {round_}: another fleet's object was a hit"
            assert all(int(o.raw_data.count_nonzero()) == 0 for o in outs)
        assert {k: tier.read(a, k) for k in stored} == stored, "an object was deleted or changed"
    for round_ in range(ROUNDS):  # everything each fleet wrote still hits for that fleet
        for host, adapter in (("a", a), ("b", b)):
            assert _load(adapter, _keys(host, round_))[0] == [True, True]
    _no_deletion(a)
    _no_deletion(b)


@pytest.mark.parametrize("frame_version", [3, 2])
def test_fleets_with_other_master_keys_leave_each_others_objects(
        tmp_path: Path, shared_tier: Tier, frame_version: int) -> None:
    a = shared_tier.make(_hkdf(tmp_path, "a.key", frame_version=frame_version))
    b = shared_tier.make(_hkdf(tmp_path, "b.key", frame_version=frame_version))
    _interleave(a, b, shared_tier)


def test_fleets_at_different_key_versions_leave_each_others_objects(
        tmp_path: Path, shared_tier: Tier) -> None:
    """Blue/green rotation: A holds only version 1, B only version 2 (it retired 1)."""
    a = shared_tier.make(_keyring(tmp_path, "a.json", 1, {1: os.urandom(32)}))
    b = shared_tier.make(_keyring(tmp_path, "b.json", 2, {2: os.urandom(32)}))
    _interleave(a, b, shared_tier)


def test_fleets_with_the_same_version_number_but_other_secrets(
        tmp_path: Path, shared_tier: Tier) -> None:
    a = shared_tier.make(_keyring(tmp_path, "a.json", 1, {1: os.urandom(32)}))
    b = shared_tier.make(_keyring(tmp_path, "b.json", 1, {1: os.urandom(32)}))
    _interleave(a, b, shared_tier)


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


def test_v1_objects_of_another_master_key_are_foreign_and_left_in_place(
        tmp_path: Path, shared_tier: Tier) -> None:
    """Frame version 1 names no key and its config identity names none either (objects of
    earlier releases keep their config). The stored-object frame's payload checksum confirms the
    bytes are the writer's; the tag still failing then means another key: ``foreign``, kept."""
    a = shared_tier.make(_hkdf(tmp_path, "a.key", frame_version=1))
    b = shared_tier.make(_hkdf(tmp_path, "b.key", frame_version=1))
    _interleave(a, b, shared_tier)
    for adapter in (a, b):  # each load of the other's 2 objects per round: refused as foreign
        assert adapter.metrics()["rejections"] == {"foreign": 2 * ROUNDS}


def test_v1_object_with_a_flipped_payload_byte_is_checksum_damage_and_deleted(
        tmp_path: Path, shared_tier: Tier) -> None:
    a = shared_tier.make(_hkdf(tmp_path, "a.key", frame_version=1))
    keys, objs = _keys("a", 0), _objects(11)
    assert store_sync(a, keys, objs).is_successful()
    data = bytearray(shared_tier.read(a, keys[0]) or b"")
    data[FRAME_HEADER_BYTES + 13 + 100] ^= 0x01  # inside the v1 ciphertext (13-byte v1 header)
    shared_tier.write(a, keys[0], bytes(data))
    hits, outs = _load(a, keys)
    assert hits == [False, True]
    assert int(outs[0].raw_data.count_nonzero()) == 0
    assert torch.equal(outs[1].raw_data, objs[1].raw_data)
    assert a.metrics()["rejections"] == {"checksum": 1} and a.metrics()["repaired"] == 1
    assert shared_tier.read(a, keys[0]) is None and shared_tier.read(a, keys[1]) is not None


#: Bytes each aesgcm frame version adds to the plaintext.
_OVERHEAD = {1: 29, 2: 42, 3: 50}


@pytest.mark.parametrize(("written", "read"), [(3, 1), (1, 3), (2, 3), (3, 2), (1, 2), (2, 1)])
def test_switching_frame_version_keeps_the_stored_objects_readable(
        tmp_path: Path, shared_tier: Tier, written: int, read: int) -> None:
    """The deserializer reads every frame version. Through the serde wrapper an object of another
    frame version has another size than the reader's serde writes: the wrapper narrows the load
    to the stored size, so an object no larger than the reader's bound (an older, shorter frame
    version: the upgrade from the default 2 to 3) hits; a larger one (a newer version read by a
    config that writes an older one) is more than this config can have written: a ``foreign``
    miss, kept. Nothing is deleted either way, and the writer's config still hits."""
    path = write_private(tmp_path / "m.key", os.urandom(32))
    serde = {"type": "aesgcm", "master_key_path": str(path)}
    writer = shared_tier.make({**serde, "frame_version": written})
    reader = shared_tier.make({**serde, "frame_version": read})
    keys, objs = _keys("w", 0), _objects(21)
    assert store_sync(writer, keys, objs).is_successful()
    before = {k: shared_tier.read(writer, k) for k in keys}
    hits, outs = _load(reader, keys)
    metrics = reader.metrics()
    if _OVERHEAD[written] <= _OVERHEAD[read]:
        assert hits == [True, True]
        assert all(torch.equal(o.raw_data, s.raw_data) for o, s in zip(outs, objs))
        assert metrics["rejections"] == {}, metrics
    else:
        assert hits == [False, False]
        assert metrics["rejections"] == {"foreign": len(keys)}, metrics
    assert metrics["repaired"] == 0, metrics
    assert {k: shared_tier.read(writer, k) for k in keys} == before
    hits, outs = _load(shared_tier.make({**serde, "frame_version": written}), keys)
    assert hits == [True, True]
    assert all(torch.equal(o.raw_data, s.raw_data) for o, s in zip(outs, objs))
