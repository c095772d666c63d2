"""Round trips through ``SerdeL2AdapterWrapper`` on Redis with every shipped serde.

Each case stores KV objects through ``create_l2_adapter({"type": "redis", ..., "serde": ...})``,
checks what Redis holds (the stored-object frame header, ``FRAME_HEADER_BYTES``, followed by the
serialized bytes; sizes reported for the wrapper), reloads them into fresh objects and checks the
values with the serde's own accuracy contract.
``asym_k16_v8_v_only`` is not in the list: it is a split-tier serde (K stays in L1), which the
KV-together wrapper refuses by design.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, load_sync, lookup_sync, store_sync
from lmserde.l2.serde.stored_frame import parse_header
from lmserde_redis.local_server import LocalRedisServer
from redis_kv import KV_LAYOUT, LAYOUT, NBYTES, kv_object, make_key, sentinel

Check = Callable[[TensorMemoryObj, TensorMemoryObj], bool]


def exact(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    return bytes(out.byte_array) == bytes(src.byte_array)


def fp8_cast(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    expected = src.tensor.to(torch.float8_e4m3fn).to(src.tensor.dtype)
    return torch.equal(out.tensor, expected)


def close_to(limit: float) -> Check:
    def check(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
        x, y = src.tensor.float(), out.tensor.float()
        return (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < limit
    return check


def k_exact_v_close(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    x, y = src.get_tensor(1).float(), out.get_tensor(1).float()
    v_ok = (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < 0.05
    return torch.equal(out.get_tensor(0), src.get_tensor(0)) and v_ok


@dataclass
class Case:
    name: str
    plugin: str | None  # import name of the plugin, None for core
    serde: dict[str, Any]
    check: Check
    layout: MemoryLayoutDesc = LAYOUT
    payload_size: int | None = None  # exact serde bytes (after the frame header), when fixed
    needs_key_file: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("identity", None, {"type": "identity"}, exact, payload_size=NBYTES),
    Case("fp8", "lmserde_fp8", {"type": "fp8"}, fp8_cast, payload_size=NBYTES // 2),
    Case("aesgcm-v2", "lmserde_aesgcm", {"type": "aesgcm"}, exact, needs_key_file=True),
    Case("aesgcm-v1", "lmserde_aesgcm", {"type": "aesgcm", "frame_version": 1}, exact,
         payload_size=NBYTES + 29, needs_key_file=True),
    Case("asym_k16_v8", "lmserde_asym_k16_v8", {"type": "asym_k16_v8"}, k_exact_v_close,
         layout=KV_LAYOUT, payload_size=213 + NBYTES + NBYTES // 2 + 4),
    Case("turboquant", "lmserde_turboquant",
         {"type": "turboquant", "head_dim": 32, "skip_first_layers": 1, "skip_last_layers": 1},
         close_to(0.1)),
    Case("zstd", "lmserde_zstd", {"type": "zstd"}, exact),
]


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "master.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_round_trip_through_the_wrapper(
    case: Case, redis_server: LocalRedisServer, make_redis_adapter: Callable[..., Any],
    l1: L1Manager, key_file: Path,
) -> None:
    if case.plugin is not None:
        pytest.importorskip(case.plugin, reason=f"serde plugin {case.plugin} is not installed")
    serde = dict(case.serde)
    if case.needs_key_file:
        serde["master_key_path"] = str(key_file)
    adapter = make_redis_adapter(l1=l1, url=redis_server.url, serde=serde)
    keys = [make_key(i, salt="tenant-a") for i in range(4)]
    objs = [kv_object(i, case.layout) for i in range(4)]
    result = store_sync(adapter, keys, objs)
    assert result.is_successful()
    sizes = adapter.get_object_sizes(keys)
    assert set(sizes) == set(keys)
    assert result.bytes_transferred() == sum(sizes.values())
    if case.payload_size is not None:
        assert set(sizes.values()) == {FRAME_HEADER_BYTES + case.payload_size}
    with redis_server.client() as c:
        stored = c.get(adapter.inner_adapter.redis_key(keys[0]))
    assert stored is not None and len(stored) == sizes[keys[0]]
    payload = stored[FRAME_HEADER_BYTES:]
    assert parse_header(stored).payload_length == len(payload)
    if case.name != "identity":
        assert payload != bytes(objs[0].byte_array)[: len(payload)]  # transformed, not raw KV
    else:
        assert payload == bytes(objs[0].byte_array)  # identity: the KV bytes behind the header
    assert lookup_sync(adapter, keys).count() == 4
    outs = [sentinel(case.layout) for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 4
    for out, src in zip(outs, objs):
        assert case.check(out, src)
    assert adapter.metrics()["rejections"] == {}
    assert l1.memory_used_bytes() == 0, "serde temporaries leaked"


def test_a_chain_quantizes_then_encrypts(redis_server: LocalRedisServer,
                                         make_redis_adapter: Callable[..., Any], l1: L1Manager,
                                         key_file: Path) -> None:
    pytest.importorskip("lmserde_fp8")
    pytest.importorskip("lmserde_aesgcm")
    adapter = make_redis_adapter(
        l1=l1, url=redis_server.url,
        serde=[{"type": "fp8"}, {"type": "aesgcm", "master_key_path": str(key_file),
                                 "frame_version": 1}])
    keys = [make_key(i) for i in range(3)]
    objs = [kv_object(i) for i in range(3)]
    assert store_sync(adapter, keys, objs).is_successful()
    # one frame header around the chain's output (fp8 codes in an aesgcm v1 frame)
    assert set(adapter.get_object_sizes(keys).values()) == {FRAME_HEADER_BYTES + NBYTES // 2 + 29}
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 3
    assert all(fp8_cast(o, s) for o, s in zip(outs, objs))


def test_zstd_stores_its_compressed_length(redis_server: LocalRedisServer,
                                           make_redis_adapter: Callable[..., Any],
                                           l1: L1Manager) -> None:
    pytest.importorskip("lmserde_zstd")
    adapter = make_redis_adapter(l1=l1, url=redis_server.url, serde={"type": "zstd"})
    keys = [make_key(i) for i in range(3)]
    objs = [kv_object(i) for i in range(3)]
    assert store_sync(adapter, keys, objs).is_successful()
    sizes = adapter.get_object_sizes(keys)
    assert all(size < 0.85 * NBYTES for size in sizes.values()), sizes  # bf16 KV: ~1.3-1.45x
    with redis_server.client() as c:
        assert len(c.get(adapter.inner_adapter.redis_key(keys[0]))) == sizes[keys[0]]
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 3
    assert all(exact(o, s) for o, s in zip(outs, objs))


def test_a_payload_that_does_not_decode_is_a_miss_for_that_key(
    redis_server: LocalRedisServer, make_redis_adapter: Callable[..., Any], l1: L1Manager,
    key_file: Path,
) -> None:
    pytest.importorskip("lmserde_aesgcm")
    adapter = make_redis_adapter(l1=l1, url=redis_server.url,
                                 serde={"type": "aesgcm", "master_key_path": str(key_file)})
    keys = [make_key(i) for i in range(3)]
    objs = [kv_object(i) for i in range(3)]
    assert store_sync(adapter, keys, objs).is_successful()
    name = adapter.inner_adapter.redis_key(keys[1])
    with redis_server.client() as c:
        blob = bytearray(c.get(name))
        blob[-1] ^= 0x01
        c.set(name, bytes(blob))
    outs = [sentinel() for _ in keys]
    bitmap = load_sync(adapter, keys, outs)
    assert not bitmap.test(1)
    assert exact(outs[0], objs[0])
    assert l1.memory_used_bytes() == 0


def test_a_scrub_of_the_empty_namespace_sees_only_its_own_objects(
        own_redis_server: LocalRedisServer, make_redis_adapter: Callable[..., Any],
        l1: L1Manager) -> None:
    """Issue 27 item 7: scrub walks the listing, which for ``namespace: ""`` held every other
    namespace's keys as phantom keys (reported as missing objects)."""
    from lmserde.l2 import scrub_adapter

    spec = {"url": own_redis_server.url, "serde": {"type": "identity"}}
    empty = make_redis_adapter(l1=l1, namespace="", **spec)
    named = make_redis_adapter(l1=l1, namespace="kv-prod", **spec)
    assert store_sync(empty, [make_key(1)], [kv_object(1)]).is_successful()
    assert store_sync(named, [make_key(2), make_key(3)], [kv_object(2), kv_object(3)]
                      ).is_successful()
    report = scrub_adapter(empty)
    assert report.scanned == 1 and report.verdicts == {"ok": 1}
    report = scrub_adapter(named)
    assert report.scanned == 2 and report.verdicts == {"ok": 2}


def test_read_also_reads_the_old_config_over_the_network(
        redis_server: LocalRedisServer, make_redis_adapter: Callable[..., Any]) -> None:
    """redis's stored sizes are asked on the wrapper's worker: an fp8 object loads through a
    tier switched to fp8 + zstd (read_also), identical to fp8's own decode, and after a
    migration it is in the new config."""
    pytest.importorskip("lmserde_fp8")
    pytest.importorskip("lmserde_zstd")
    from lmserde.l2 import migrate_adapter

    l1 = L1Manager(64 << 20)
    keys = [make_key(i, salt="read-also") for i in range(3)]
    fp8 = make_redis_adapter(l1=l1, url=redis_server.url, serde={"type": "fp8"})
    assert store_sync(fp8, keys, [kv_object(i) for i in range(3)]).is_successful()
    expected = [sentinel() for _ in keys]
    assert load_sync(fp8, keys, expected).to_list() == [True] * 3
    chain = [{"type": "fp8"}, {"type": "zstd"}]
    switched = make_redis_adapter(l1=l1, url=redis_server.url, serde=chain,
                                  read_also=[{"type": "fp8"}])
    got = [sentinel() for _ in keys]
    assert load_sync(switched, keys, got).to_list() == [True] * 3
    assert all(exact(g, e) for g, e in zip(got, expected))
    assert switched.metrics()["read_also_hits"] == {"fp8": 3}
    report = migrate_adapter(switched)
    assert len(report.migrated) == 3 and not report.failed
    new_only = make_redis_adapter(l1=l1, url=redis_server.url, serde=chain)
    got = [sentinel() for _ in keys]
    assert load_sync(new_only, keys, got).to_list() == [True] * 3
    assert all(exact(g, e) for g, e in zip(got, expected))
