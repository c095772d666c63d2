"""Hidden object names (``hide_names: true``): no stored name reveals model, chunk hash or tenant.

Objects of several tenants go through a real ``fs`` directory, a real ``redis-server`` and a
moto S3 server on loopback (started here); then every stored name (file names, redis keys, s3
object keys) is checked for each model name, hex chunk hash and tenant string. Key holders still
load, list (also from a fresh process-like adapter that never stored the keys: read back from
the encrypted key records), scrub and delete; the names are the same on every host with the same
frame key, and another key reads nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, objects_for
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter
from lmserde.l2.serde.scrub import scrub_adapter
from lmserde.tenant_keys import write_master_key

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_redis")
pytest.importorskip("lmserde_s3")

KV = MemoryLayoutDesc([[2, 6, 16, 256]], [torch.bfloat16])
MODELS = ("meta-llama/Llama-3-8B", "acme/secret-model")
TENANTS = ("alice-corp", "bob-inc", "")
_buckets = itertools.count()


def _keys() -> list[ObjectKey]:
    return [ObjectKey(bytes([i, t, m]) * 11, model, 0x01010101, 0, tenant)
            for i in range(2) for t, tenant in enumerate(TENANTS)
            for m, model in enumerate(MODELS)]


def _leaks(names: list[str], keys: list[ObjectKey]) -> list[str]:
    """Stored names that contain a model name, a chunk hash in hex or a (non-empty) tenant."""
    secrets = {k.model_name for k in keys} | {k.chunk_hash.hex() for k in keys}
    secrets |= {k.cache_salt for k in keys if k.cache_salt}
    secrets |= {m.replace("/", "%2F") for m in MODELS} | {m.split("/")[1] for m in MODELS}
    return [n for n in names if any(s.lower() in n.lower() for s in secrets)]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from lmserde_redis.local_server import LocalRedisServer

    server = LocalRedisServer(tmp_path_factory.mktemp("redis-hidden"))
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[Any]:
    from lmserde_s3.local_server import LocalS3Server

    server = LocalS3Server().start()
    yield server
    server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lmserde_s3.local_server import TEST_CREDENTIALS

    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def frame_key(tmp_path: Path) -> str:
    return str(write_master_key(tmp_path / "frame.key"))


Backend = tuple[dict[str, Any], Callable[[], list[str]]]


@pytest.fixture(params=["fs", "redis", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """An adapter spec (no serde) and a function listing every name the storage holds."""
    if request.param == "fs":
        base = tmp_path / "l2"
        base.mkdir()
        return ({"type": "fs", "base_path": str(base)},
                lambda: [str(p.relative_to(base)) for p in base.rglob("*")])
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        namespace = f"hidden{next(_buckets)}"
        client = server.client()
        return ({"type": "redis", "url": server.url, "namespace": namespace},
                lambda: [k.decode("utf-8", "replace") for k in client.keys("*")])
    request.getfixturevalue("aws_env")
    server = request.getfixturevalue("s3_server")
    bucket = f"lmserde-hidden-{next(_buckets)}"
    server.create_bucket(bucket)
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=server.endpoint_url,
                          config=Config(s3={"addressing_style": "path"}))

    def names() -> list[str]:
        listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        return [item["Key"] for item in listed]

    return ({"type": "s3", "bucket": bucket, "endpoint_url": server.endpoint_url}, names)


def test_no_stored_name_reveals_model_chunk_or_tenant(backend: Backend, frame_key: str,
                                                      l1: L1Manager, cache: Cache) -> None:
    spec, names = backend
    keys = _keys()
    objs = objects_for(KV, len(keys))
    full = {**spec, "serde": {"type": "fp8"}, "frame_key_path": frame_key, "hide_names": True}
    plain = create_l2_adapter({**spec, "serde": {"type": "fp8"}}, l1)
    try:  # the same objects under plain names do leak (what the option is for)
        assert cache.store(plain, keys[:1], objs[:1]).is_successful()
        assert _leaks(names(), keys)
        plain.delete(keys[:1])
    finally:
        plain.close()
    wrapper = create_l2_adapter(full, l1)
    try:
        assert cache.store(wrapper, keys, objs).is_successful()
        stored = names()
        assert len(stored) >= len(keys)
        assert _leaks(stored, keys) == []
        bitmap, _data = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True] * len(keys)
        assert sorted(wrapper.list_l2_keys(), key=repr) == sorted(keys, key=repr)
        assert wrapper.report_status()["serde_frame_mode"].endswith("hidden names")
    finally:
        wrapper.close()
    other_host = create_l2_adapter(full, l1)  # same key, never stored these: same names
    try:
        assert sorted(other_host.list_l2_keys(), key=repr) == sorted(keys, key=repr)
        assert other_host.list_l2_keys(MODELS[1]) == [k for k in other_host.list_l2_keys()
                                                       if k.model_name == MODELS[1]]
        assert cache.load(other_host, keys, KV)[0].to_list() == [True] * len(keys)
        other_host.delete(keys[:2])
        assert cache.load(other_host, keys[:3], KV)[0].to_list() == [False, False, True]
    finally:
        other_host.close()


def _fs_spec(base: Path, frame_key: str) -> dict[str, Any]:
    return {"type": "fs", "base_path": str(base), "serde": {"type": "identity"},
            "frame_key_path": frame_key, "hide_names": True}


def test_scrub_and_another_key_under_hidden_names(tmp_path: Path, frame_key: str,
                                                  l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    spec = _fs_spec(base, frame_key)
    keys = _keys()[:4]
    wrapper = create_l2_adapter(spec, l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, len(keys))).is_successful()
        report = scrub_adapter(wrapper, decode=True)
        assert report.scanned == len(keys) and report.ok == len(keys)
        victim = next(p for p in base.iterdir() if p.suffix == ".data")
        data = bytearray(victim.read_bytes())
        data[-1] ^= 1
        victim.write_bytes(bytes(data))
        report = scrub_adapter(wrapper, decode=True)
        assert report.verdicts.get("auth") == 1 and report.ok == len(keys) - 1
    finally:
        wrapper.close()
    stranger = create_l2_adapter({**spec, "frame_key_path": str(
        write_master_key(tmp_path / "other.key"))}, l1)
    try:  # another frame key: other names, and the records do not open
        assert stranger.list_l2_keys() == []
        assert cache.load(stranger, keys, KV)[0].to_list() == [False] * len(keys)
    finally:
        stranger.close()


def test_a_huge_planted_name_is_never_read_by_a_listing(tmp_path: Path, frame_key: str,
                                                        l1: L1Manager, cache: Cache) -> None:
    """A storage writer plants a sparse file of 1 TiB under a hidden-looking name: a key
    holder's listing (and scrub, which starts from it) must not allocate a buffer of its size;
    the huge object is left out, kept, and the real keys are listed."""
    import os

    from lmserde.l2 import key_file_name

    base = tmp_path / "l2"
    spec = _fs_spec(base, frame_key)
    keys = _keys()[:2]
    wrapper = create_l2_adapter(spec, l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, len(keys))).is_successful()
    finally:
        wrapper.close()
    planted = base / key_file_name(ObjectKey(b"\x5a" * 32, "lmserde-hidden", 0, 0, ""))
    with open(planted, "wb") as f:
        f.truncate(1 << 40)
    fresh = create_l2_adapter(spec, l1)  # a host that never stored them: records are read
    try:
        assert sorted(fresh.list_l2_keys(), key=repr) == sorted(keys, key=repr)
        report = scrub_adapter(fresh, delete=True)
        assert report.scanned == len(keys) and report.ok == len(keys)
    finally:
        fresh.close()
    assert os.path.getsize(planted) == 1 << 40, "left in place"


@pytest.mark.parametrize("extra, message", [
    ({"hide_names": True}, "needs 'frame_key_path'"),
    ({"hide_names": "yes", "frame_key_path": "k"}, "'hide_names' must be true or false"),
])
def test_hide_names_is_validated(extra: dict[str, Any], message: str, tmp_path: Path,
                                 l1: L1Manager) -> None:
    with pytest.raises(ValueError, match=message):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": {"type": "fp8"},
                           **extra}, l1)


def test_hide_names_refuses_a_keyring(tmp_path: Path, l1: L1Manager) -> None:
    from lmserde.tenant_keys import add_keyring_version

    ring = tmp_path / "ring"
    add_keyring_version(ring, "t")
    with pytest.raises(ValueError, match="needs 'frame_key_path'"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": {"type": "fp8"},
                           "frame_keyring_path": str(ring), "hide_names": True}, l1)


def test_hide_names_refuses_s3_tenant_routes(s3_server: Any, aws_env: None, frame_key: str,
                                             l1: L1Manager) -> None:
    """Hidden keys name no tenant: over s3 with ``tenant_routes`` every tenant's object would
    land in the default bucket, against the routing. Refused; without routes it is accepted."""
    default, routed = f"lmserde-hidden-{next(_buckets)}", f"lmserde-hidden-{next(_buckets)}"
    s3_server.create_bucket(default)
    s3_server.create_bucket(routed)
    spec = {"type": "s3", "bucket": default, "endpoint_url": s3_server.endpoint_url,
            "serde": {"type": "fp8"}, "frame_key_path": frame_key, "hide_names": True}
    with pytest.raises(ValueError, match="tenant_routes"):
        create_l2_adapter({**spec, "tenant_routes": {"alice-corp": {"bucket": routed}}}, l1)
    create_l2_adapter(spec, l1).close()


class _Heard:
    def __init__(self) -> None:
        self.stored: list[ObjectKey] = []
        self.deleted: list[ObjectKey] = []

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        self.stored += keys

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        self.deleted += keys


def test_listeners_hear_real_keys(tmp_path: Path, frame_key: str, l1: L1Manager,
                                  cache: Cache) -> None:
    """Stored and deleted (evicted) keys reach the listeners as the real keys."""
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "l2"),
                                 "serde": {"type": "identity"}, "frame_key_path": frame_key,
                                 "hide_names": True}, l1)
    heard = _Heard()
    try:
        wrapper.register_listener(heard)
        keys = _keys()[:3]
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        assert sorted(heard.stored, key=repr) == sorted(keys, key=repr)
        wrapper.delete(keys[:1])
        assert heard.deleted == keys[:1]
        wrapper.unregister_listener(heard)
        wrapper.delete(keys[1:2])
        assert heard.deleted == keys[:1]
    finally:
        wrapper.close()
