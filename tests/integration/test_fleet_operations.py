"""Two fleets on one shared tier, as in a blue/green rollout or a key rotation.

Fleet A and fleet B share one ``fs`` directory, one redis server (one namespace) and one S3
bucket, each through ``create_l2_adapter`` with ``aesgcm``; B holds other key material than A
(another master key, or a keyring whose tenant key was rotated to a version A does not hold).
Round after round, interleaved, each fleet stores new objects, loads all of its own objects and
tries all of the other fleet's. Each must hit its own objects every time, bit-exact, and a try of
an object whose key material it does not hold must be a not-mine miss that leaves the object in
place (after a rotation the fleet holding both versions reads the old objects: a hit).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import L2AdapterInterface, create_l2_adapter
from lmserde.l2.serde.stored_frame import NOT_MINE_REASONS

pytest.importorskip("lmserde_aesgcm")
redis_local = pytest.importorskip("lmserde_redis.local_server")
s3_local = pytest.importorskip("lmserde_s3.local_server")

KV = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])
ROUNDS = 4
PER_ROUND = 2
TENANT = "tenant-a"


def _secret_file(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def _keyring(path: Path, versions: dict[int, bytes], current: int) -> str:
    from lmserde_aesgcm.keyring import Keyring, TenantKeys

    ring = Keyring({TENANT: TenantKeys(current, dict(versions))})
    return _secret_file(path, ring.dumps())


#: Per key scheme: whether B holds the key material of A's objects (A never holds B's).
B_READS_A = {"other-master-key": False, "rotated-key-version": True}


def _serde_pairs(tmp_path: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per key scheme: fleet A's and fleet B's aesgcm config."""
    shared_v1 = os.urandom(32)
    return {
        "other-master-key": (
            {"type": "aesgcm", "master_key_path": _secret_file(tmp_path / "a.key", os.urandom(32))},
            {"type": "aesgcm", "master_key_path": _secret_file(tmp_path / "b.key", os.urandom(32))},
        ),
        "rotated-key-version": (  # B rotated the tenant to version 2; A still writes version 1
            {"type": "aesgcm", "keyring_path": _keyring(tmp_path / "a.ring", {1: shared_v1}, 1)},
            {"type": "aesgcm", "keyring_path": _keyring(
                tmp_path / "b.ring", {1: shared_v1, 2: os.urandom(32)}, 2)},
        ),
    }


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server = redis_local.LocalRedisServer(tmp_path_factory.mktemp("fleet-redis"))
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[Any]:
    server = s3_local.LocalS3Server().start()
    yield server
    server.stop()


@pytest.fixture
def tier_spec(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> Callable[[], dict[str, Any]]:
    """The shared tier's adapter spec (without the serde), for the parametrized backend."""
    backend = request.param
    if backend == "fs":
        return lambda: {"type": "fs", "base_path": str(tmp_path / "tier")}
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        namespace = f"fleet-{request.node.name}"
        return lambda: {"type": "redis", "url": server.url, "namespace": namespace}
    server = request.getfixturevalue("s3_server")
    for name, value in s3_local.TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = f"fleet-{abs(hash(request.node.name)) % 10**8}"
    server.create_bucket(bucket)
    return lambda: {"type": "s3", "bucket": bucket, "endpoint_url": server.endpoint_url}


def _keys(fleet: str, round_: int) -> list[ObjectKey]:
    return [key_of(round_ * PER_ROUND + i, salt=TENANT, tag=fleet.encode())
            for i in range(PER_ROUND)]


@pytest.mark.parametrize("tier_spec", ["fs", "redis", "s3"], indirect=True)
@pytest.mark.parametrize("scheme", ["other-master-key", "rotated-key-version"])
def test_two_fleets_never_delete_each_others_objects(
        tier_spec: Callable[[], dict[str, Any]], scheme: str, tmp_path: Path, l1: L1Manager,
        cache: Cache) -> None:
    serde_a, serde_b = _serde_pairs(tmp_path)[scheme]
    fleets: dict[str, L2AdapterInterface] = {
        "A": create_l2_adapter({**tier_spec(), "serde": serde_a}, l1),
        "B": create_l2_adapter({**tier_spec(), "serde": serde_b}, l1),
    }
    written: dict[str, list[tuple[ObjectKey, torch.Tensor]]] = {"A": [], "B": []}
    try:
        for round_ in range(ROUNDS):
            for name, other in (("A", "B"), ("B", "A")):
                adapter = fleets[name]
                keys = _keys(name, round_)
                objs = objects_for(KV, len(keys), seed=round_ * 7 + ord(name))
                assert cache.store(adapter, keys, objs).is_successful()
                written[name] += [(k, layout_bytes(o)) for k, o in zip(keys, objs)]
                own = [k for k, _ in written[name]]
                bitmap, data = cache.load(adapter, own, KV)
                assert bitmap.to_list() == [True] * len(own), f"round {round_}: {name} missed"
                for (_, expected), got in zip(written[name], data):
                    assert torch.equal(got, expected)
                theirs = [k for k, _ in written[other]]
                if not theirs:
                    continue
                bitmap, data = cache.load(adapter, theirs, KV)
                if name == "B" and B_READS_A[scheme]:
                    assert bitmap.to_list() == [True] * len(theirs)
                    for (_, expected), got in zip(written[other], data):
                        assert torch.equal(got, expected)
                    continue
                assert bitmap.to_list() == [False] * len(theirs)
                for got in data:  # never handed back: untouched or zeroed
                    assert int(((got != 0xA5) & (got != 0)).sum()) == 0
        for name, adapter in fleets.items():
            rejections = adapter.report_status()["serde_wrapper"]["rejections"]
            if name == "A" or not B_READS_A[scheme]:
                assert rejections, f"{name} never refused the other fleet's objects"
            assert set(rejections) <= NOT_MINE_REASONS, rejections
            assert adapter.report_status()["serde_wrapper"]["repaired"] == 0
            assert adapter.report_status()["is_healthy"] is True
    finally:
        for adapter in fleets.values():
            adapter.close()
