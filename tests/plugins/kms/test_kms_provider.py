"""The ``aws-kms`` key provider against moto's KMS on loopback, through a real boto3 client.

Envelope encryption: data keys from ``GenerateDataKey`` stored only wrapped, unwrapped with
``Decrypt`` and cached for a TTL; the aesgcm serde through the serde wrapper on fs round-trips
with it; a KMS outage makes stores fail and loads miss and deletes nothing, and everything comes
back when KMS does; a forgotten tenant in the wrapped keyring is a miss (``unkeyed``).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from kms_keys import new_master_key
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.cli.main import main
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.tenant_keys import UnknownTenantError, read_keyring_file
from lmserde.testing import LocalMotoServer, frozen_process
from lmserde_aesgcm import AesGcmDeserializer, AesGcmSerializer, CipherCache, provider_names
from lmserde_kms import (
    AwsKmsKeyProvider,
    KmsDeadlineError,
    KmsUnavailableError,
    build_provider,
    parse_settings,
)

SHAPE = [2, 4, 16, 64]
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
ALICE = [ObjectKey(bytes([i]) * 32, "org/model-7b", 0, 0, "alice") for i in range(2)]
BOB = [ObjectKey(bytes([0x40 + i]) * 32, "org/model-7b", 0, 0, "bob") for i in range(2)]


def _rotate(server: LocalMotoServer, alias: str, path: str, tenant: str) -> None:
    assert main(["kms", "rotate", path, tenant, "--key-id", alias,
                 "--endpoint-url", server.endpoint_url, "--region", "us-east-1"]) == 0


@pytest.fixture
def providers() -> Iterator[list[AwsKmsKeyProvider]]:
    made: list[AwsKmsKeyProvider] = []
    yield made
    for provider in made:
        provider.close()


def _provider(options: dict[str, Any], made: list[AwsKmsKeyProvider]) -> AwsKmsKeyProvider:
    provider = build_provider(options)
    made.append(provider)
    return provider


def _objects(n: int, seed: int = 0) -> list[TensorMemoryObj]:
    gen = torch.Generator().manual_seed(seed)
    return [TensorMemoryObj.from_tensor(torch.randn(SHAPE, generator=gen).to(torch.bfloat16))
            for _ in range(n)]


def _round_trip(provider: AwsKmsKeyProvider, key: ObjectKey) -> bool:
    cache = CipherCache(provider)
    ser, de = AesGcmSerializer(cache), AesGcmDeserializer(cache)
    [src] = _objects(1)
    frame = TensorMemoryObj.allocate(MemoryLayoutDesc([[src.get_size() + 50]], [torch.uint8]))
    n = ser.serialize(src, frame, key)
    frame.set_used_size(n)
    out = TensorMemoryObj.allocate(LAYOUT)
    de.deserialize(frame, out, key)
    return bool(torch.equal(out.raw_data, src.raw_data))


def test_the_provider_is_announced_to_aesgcm() -> None:
    assert "aws-kms" in provider_names()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs the option 'key_id'"):
        parse_settings({"wrapped_keyring_path": "x"})
    with pytest.raises(ValueError, match="unknown aws-kms option"):
        parse_settings({"key_id": "k", "wrapped_keyring_path": "x", "ttl": 3})
    with pytest.raises(ValueError, match="must be > 0"):
        parse_settings({"key_id": "k", "wrapped_keyring_path": "x", "request_deadline_s": 0})
    with pytest.raises(ValueError, match="max_attempts"):
        parse_settings({"key_id": "k", "wrapped_keyring_path": "x", "max_attempts": 0})


def test_only_wrapped_keys_are_stored(kms_server: LocalMotoServer, make_options: Any,
                                      providers: list[AwsKmsKeyProvider]) -> None:
    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias)
    path = options["wrapped_keyring_path"]
    _rotate(kms_server, alias, path, "alice")
    _rotate(kms_server, alias, path, "alice")
    ring = read_keyring_file(path)
    assert ring.wrapped and ring.tenant("alice").current == 2
    provider = _provider(options, providers)
    stored = Path(path).read_bytes()
    for version in (1, 2):
        data_key = provider.root_secret("alice", version)
        assert len(data_key) == 32
        assert data_key not in stored and base64.b64encode(data_key) not in stored
        assert data_key != ring.secret("alice", version)
    assert provider.root_secret("alice", 1) != provider.root_secret("alice", 2)
    with pytest.raises(UnknownTenantError):
        provider.current_version("bob")


def test_round_trip_through_the_serde_wrapper(tmp_path: Path, kms_server: LocalMotoServer,
                                              make_options: Any) -> None:
    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias)
    for tenant in ("alice", "bob"):
        _rotate(kms_server, alias, options["wrapped_keyring_path"], tenant)
    adapter = create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "l2"),
         "serde": {"type": "aesgcm", "key_provider": "aws-kms", "key_provider_options": options}},
        L1Manager(64 << 20))
    try:
        objs = _objects(4)
        assert store_sync(adapter, ALICE + BOB, objs).is_successful()
        outs = [TensorMemoryObj.allocate(LAYOUT) for _ in objs]
        bitmap = load_sync(adapter, ALICE + BOB, outs)
        assert [bitmap.test(i) for i in range(4)] == [True] * 4
        assert all(torch.equal(a.raw_data, b.raw_data) for a, b in zip(objs, outs))
    finally:
        adapter.close()


def test_unwrapped_keys_expire_after_the_ttl(kms_server: LocalMotoServer, make_options: Any,
                                             providers: list[AwsKmsKeyProvider]) -> None:
    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias, cache_ttl_s=0.5)
    _rotate(kms_server, alias, options["wrapped_keyring_path"], "alice")
    provider = _provider(options, providers)
    cache = CipherCache(provider)
    ser = AesGcmSerializer(cache)
    [src] = _objects(1)
    frame = TensorMemoryObj.allocate(MemoryLayoutDesc([[src.get_size() + 50]], [torch.uint8]))
    ser.serialize(src, frame, ALICE[0])
    ser.serialize(src, frame, ALICE[1])
    assert provider.decrypt_calls == 1, "one Decrypt, then the cache"
    time.sleep(0.6)
    ser.serialize(src, frame, ALICE[0])
    assert provider.decrypt_calls == 2, "the derived key did not outlive the TTL"


def test_a_wrapped_key_moved_to_another_tenant_does_not_unwrap(
        kms_server: LocalMotoServer, make_options: Any,
        providers: list[AwsKmsKeyProvider]) -> None:
    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias)
    path = Path(options["wrapped_keyring_path"])
    for tenant in ("alice", "bob"):
        _rotate(kms_server, alias, str(path), tenant)
    doc = json.loads(path.read_bytes())
    doc["tenants"]["bob"]["keys"]["1"] = doc["tenants"]["alice"]["keys"]["1"]
    path.write_text(json.dumps(doc))
    provider = _provider(options, providers)
    assert len(provider.root_secret("alice", 1)) == 32
    with pytest.raises(KmsUnavailableError, match="InvalidCiphertext"):
        provider.root_secret("bob", 1)  # the encryption context names alice


def test_a_key_of_another_master_key_is_refused(
        kms_server: LocalMotoServer, make_options: Any,
        providers: list[AwsKmsKeyProvider]) -> None:
    alias, other = new_master_key(kms_server), new_master_key(kms_server)
    options = make_options(kms_server, other)
    _rotate(kms_server, alias, options["wrapped_keyring_path"], "alice")
    provider = _provider(options, providers)
    with pytest.raises(KmsUnavailableError):
        provider.root_secret("alice", 1)


@pytest.fixture
def outage_setup(tmp_path: Path, own_kms_server: LocalMotoServer, make_options: Any
                 ) -> Iterator[tuple[Any, Callable[[], list[str]]]]:
    alias = new_master_key(own_kms_server)
    options = make_options(own_kms_server, alias, cache_ttl_s=0.5, connect_timeout_s=0.5,
                           read_timeout_s=0.5, max_attempts=1, request_deadline_s=1.0)
    for tenant in ("alice", "bob"):
        _rotate(own_kms_server, alias, options["wrapped_keyring_path"], tenant)
    base = tmp_path / "l2"
    adapter = create_l2_adapter(
        {"type": "fs", "base_path": str(base),
         "serde": {"type": "aesgcm", "key_provider": "aws-kms", "key_provider_options": options}},
        L1Manager(64 << 20))
    files = lambda: sorted(p.name for p in base.rglob("*") if p.is_file())  # noqa: E731
    yield adapter, files
    adapter.close()


def _hits(adapter: Any, keys: list[ObjectKey]) -> list[bool]:
    outs = [TensorMemoryObj.allocate(LAYOUT) for _ in keys]
    bitmap = load_sync(adapter, keys, outs)
    return [bitmap.test(i) for i in range(len(keys))]


def test_a_frozen_kms_fails_stores_and_misses_loads_and_recovers(
        own_kms_server: LocalMotoServer, outage_setup: Any) -> None:
    adapter, files = outage_setup
    assert store_sync(adapter, ALICE, _objects(2)).is_successful()
    stored = files()
    assert len(stored) == 2
    pid = own_kms_server.pid
    assert pid is not None
    with frozen_process(pid):
        time.sleep(0.6)  # past the TTL: the unwrapped keys are gone
        assert _hits(adapter, ALICE) == [False, False]
        assert not store_sync(adapter, BOB, _objects(2, seed=3)).is_successful()
        assert files() == stored, "an outage deletes nothing"
    assert _hits(adapter, ALICE) == [True, True], "back once KMS is"
    assert store_sync(adapter, BOB, _objects(2, seed=3)).is_successful()


def test_a_dead_kms_misses_and_deletes_nothing(own_kms_server: LocalMotoServer,
                                               outage_setup: Any) -> None:
    adapter, files = outage_setup
    assert store_sync(adapter, ALICE, _objects(2)).is_successful()
    stored = files()
    own_kms_server.kill()
    time.sleep(0.6)
    assert _hits(adapter, ALICE) == [False, False]
    assert not store_sync(adapter, BOB, _objects(2, seed=3)).is_successful()
    assert files() == stored


def test_unwrapping_answers_by_its_deadline(own_kms_server: LocalMotoServer, make_options: Any,
                                            providers: list[AwsKmsKeyProvider]) -> None:
    """botocore's read timeout (10 s here) is longer than the deadline (0.5 s): only the deadline
    can end the wait."""
    alias = new_master_key(own_kms_server)
    options = make_options(own_kms_server, alias, read_timeout_s=10.0, max_attempts=1,
                           request_deadline_s=0.5)
    _rotate(own_kms_server, alias, options["wrapped_keyring_path"], "alice")
    provider = _provider(options, providers)
    pid = own_kms_server.pid
    assert pid is not None
    with frozen_process(pid), pytest.raises(KmsUnavailableError) as failure:
        provider.root_secret("alice", 1)
    assert isinstance(failure.value.__cause__, KmsDeadlineError)


def test_forgetting_a_tenant_in_the_wrapped_keyring(
        tmp_path: Path, kms_server: LocalMotoServer, make_options: Any) -> None:
    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias, reload_interval_s=0.05)
    path = options["wrapped_keyring_path"]
    for tenant in ("alice", "bob"):
        _rotate(kms_server, alias, path, tenant)
    adapter = create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "l2"),
         "serde": {"type": "aesgcm", "key_provider": "aws-kms", "key_provider_options": options}},
        L1Manager(64 << 20))
    try:
        assert store_sync(adapter, ALICE + BOB, _objects(4)).is_successful()
        assert main(["tenant", "forget", path, "alice"]) == 0
        deadline = time.monotonic() + 10
        while _hits(adapter, ALICE) != [False, False]:
            assert time.monotonic() < deadline, "the forgotten tenant still hits"
            time.sleep(0.05)
        assert _hits(adapter, BOB) == [True, True]
    finally:
        adapter.close()


def test_rotate_refuses_a_plain_keyring(tmp_path: Path, kms_server: LocalMotoServer) -> None:
    alias = new_master_key(kms_server)
    plain = tmp_path / "plain.json"
    assert main(["keys", "rotate", str(plain), "alice"]) == 0
    assert main(["kms", "rotate", str(plain), "alice", "--key-id", alias,
                 "--endpoint-url", kms_server.endpoint_url]) == 1
    assert not read_keyring_file(plain).wrapped


def test_rotate_with_kms_down_leaves_the_file_alone(tmp_path: Path,
                                                    own_kms_server: LocalMotoServer) -> None:
    alias = new_master_key(own_kms_server)
    path = tmp_path / "wrapped.json"
    _rotate(own_kms_server, alias, str(path), "alice")
    before = path.read_bytes()
    own_kms_server.kill()
    assert main(["kms", "rotate", str(path), "alice", "--key-id", alias,
                 "--endpoint-url", own_kms_server.endpoint_url]) == 1
    assert path.read_bytes() == before


def test_a_forked_child_unwraps_with_its_own_client_and_threads(
        kms_server: LocalMotoServer, make_options: Any,
        providers: list[AwsKmsKeyProvider]) -> None:
    """The parent's pool threads do not exist in a fork, and its connections are the parent's:
    the child's first unwrap builds its own."""
    import multiprocessing

    alias = new_master_key(kms_server)
    options = make_options(kms_server, alias, cache_ttl_s=0.2, request_deadline_s=5.0)
    _rotate(kms_server, alias, options["wrapped_keyring_path"], "alice")
    provider = _provider(options, providers)
    key = provider.root_secret("alice", 1)  # the parent's pool now has an idle thread
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_unwrap_in_child, args=(provider, result))
    child.start()
    try:
        assert result.get(timeout=60) == key
    finally:
        child.join(timeout=30)
    assert child.exitcode == 0


def _unwrap_in_child(provider: AwsKmsKeyProvider, result: Any) -> None:
    time.sleep(0.3)  # past the TTL: the child must ask KMS itself
    try:
        result.put(provider.root_secret("alice", 1))
    except Exception as exc:
        result.put(repr(exc))
