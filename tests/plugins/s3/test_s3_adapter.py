"""The ``s3`` adapter against a real S3-compatible server: the L2 adapter contract."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import new_bucket, raw_client
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l2 import L2StoreResult, load_sync, lookup_sync, store_sync, wait_for_store
from lmserde_s3 import salt_tag
from lmserde_s3.local_server import LocalS3Server
from s3_kv import (
    LAYOUT,
    NBYTES,
    TaskCollector,
    byte_object,
    eventually,
    kv_object,
    make_key,
    same_bytes,
    sentinel,
)

MakeAdapter = Callable[..., Any]


@pytest.fixture
def adapter(make_s3_adapter: MakeAdapter) -> Any:
    return make_s3_adapter(max_in_flight=4)


def _get(server: LocalS3Server, bucket: str, name: str) -> bytes:
    return bytes(raw_client(server).get_object(Bucket=bucket, Key=name)["Body"].read())


def _list(server: LocalS3Server, bucket: str) -> str:
    return repr(raw_client(server).list_objects_v2(Bucket=bucket).get("Contents", []))


def test_store_lookup_load_round_trip(adapter: Any) -> None:
    keys = [make_key(i, salt="t1") for i in range(5)]
    objs = [kv_object(i) for i in range(5)]
    result = store_sync(adapter, keys, objs)
    assert isinstance(result, L2StoreResult)
    assert result.is_successful() and result.bytes_transferred() == 5 * NBYTES
    missing = make_key(99, salt="t1")
    assert lookup_sync(adapter, [*keys, missing]).to_list() == [True] * 5 + [False]
    outs = [sentinel() for _ in keys]
    bitmap = load_sync(adapter, [keys[0], missing, *keys[1:]], [outs[0], sentinel(), *outs[1:]])
    assert bitmap.to_list() == [True, False, True, True, True, True]
    assert all(same_bytes(o, s) for o, s in zip(outs, objs))


def test_objects_hold_the_logical_bytes_under_safe_names(
    adapter: Any, s3_server: LocalS3Server, bucket: str,
) -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[100]], [torch.uint8]), padding=28)
    obj.raw_data.copy_(torch.arange(128, dtype=torch.uint8))
    obj.set_used_size(37)
    key = ObjectKey(b"\x01\x02", "../../etc/passwd?x=1#y", 5, 2, "tenant secret")
    assert store_sync(adapter, [key], [obj]).bytes_transferred() == 37
    _, name = adapter.location_of(key)
    assert name.startswith("lmserde/" + salt_tag("tenant secret") + "/")
    assert "tenant" not in name and "/../" not in name and "?" not in name
    assert _get(s3_server, bucket, name) == bytes(range(37))
    assert "tenant secret" not in _list(s3_server, bucket)
    assert adapter.get_object_sizes([key, make_key(2)]) == {key: 37}


def test_load_hits_only_on_exact_length(adapter: Any) -> None:
    key = make_key(1)
    assert store_sync(adapter, [key], [byte_object(b"abcdef")]).is_successful()
    short, long_, exact = byte_object(b"....."), byte_object(b"......."), byte_object(b"......")
    assert load_sync(adapter, [key, key, key], [short, long_, exact]).to_list() == [
        False, False, True]
    assert bytes(short.byte_array) == b"....." and bytes(exact.byte_array) == b"abcdef"
    assert adapter.report_status()["size_mismatches"] == 2


def test_empty_objects_exist_and_load(adapter: Any) -> None:
    key = make_key(1)
    assert store_sync(adapter, [key], [byte_object(b"")]).is_successful()
    assert adapter.get_object_sizes([key, make_key(2)]) == {key: 0}
    assert lookup_sync(adapter, [key]).to_list() == [True]
    assert load_sync(adapter, [key], [byte_object(b"")]).to_list() == [True]


@pytest.mark.parametrize("conditional", [True, False], ids=["if-none-match", "head-then-put"])
def test_an_existing_key_is_skipped(make_s3_adapter: MakeAdapter, conditional: bool) -> None:
    adapter = make_s3_adapter(conditional_writes=conditional)
    other = make_s3_adapter(conditional_writes=conditional)  # another writer, same bucket
    key = make_key(1, salt="a")
    assert store_sync(adapter, [key], [byte_object(b"first")]).bytes_transferred() == 5
    result = store_sync(other, [key, make_key(2)], [byte_object(b"second!"), byte_object(b"x")])
    assert result.is_successful() and result.bytes_transferred() == 1
    out = byte_object(b".....")
    assert load_sync(other, [key], [out]).to_list() == [True]
    assert bytes(out.byte_array) == b"first"
    assert other.report_status()["stores_skipped"] == 1
    assert other.get_usage().total_bytes_used == 1  # only what it wrote


def test_conditional_writes_are_atomic_across_racing_writers(make_s3_adapter: MakeAdapter) -> None:
    writers = [make_s3_adapter(max_in_flight=8) for _ in range(3)]
    keys = [make_key(i) for i in range(8)]
    tasks = [(w, w.submit_store_task(keys, [byte_object(bytes([n]) * 64) for _ in keys]))
             for n, w in enumerate(writers)]
    results = [wait_for_store(w, t) for w, t in tasks]
    assert all(r.is_successful() for r in results)
    written = sum(r.bytes_transferred() for r in results) // 64
    skipped = sum(w.report_status()["stores_skipped"] for w in writers)
    # every (writer, key) either wrote or was refused by the condition. The test server (moto)
    # checks If-None-Match and writes in two steps, so two racing writers can both win a key now
    # and then; a service with atomic conditional writes (S3, MinIO) lets exactly one win.
    assert written + skipped == len(writers) * len(keys)
    assert len(keys) <= written < len(writers) * len(keys)
    outs = [byte_object(bytes(64)) for _ in keys]
    assert load_sync(writers[0], keys, outs).to_list() == [True] * len(keys)
    for out in outs:  # each key holds one writer's whole object, never a mix
        assert len(set(bytes(out.byte_array))) == 1 and bytes(out.byte_array)[0] < len(writers)


def test_list_keys_maps_names_back_even_in_a_new_process(
    adapter: Any, make_s3_adapter: MakeAdapter,
) -> None:
    keys = [make_key(1, model="m1"), make_key(2, model="m/2", salt="s%é ü"),
            make_key(3, model="m1", salt="tenant b"), ObjectKey(b"", "", -1, 7)]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(4)]).is_successful()
    assert set(adapter.list_l2_keys()) == set(keys)
    assert set(adapter.list_l2_keys(model_name="m1")) == {keys[0], keys[2]}
    fresh = make_s3_adapter()  # knows no salt: reads it from the objects' metadata
    assert set(fresh.list_l2_keys()) == set(keys)


def test_prefixes_isolate_deployments(make_s3_adapter: MakeAdapter) -> None:
    a = make_s3_adapter(prefix="iso-a")
    b = make_s3_adapter(prefix="iso-b/")
    key = make_key(7)
    assert store_sync(a, [key], [kv_object(7)]).is_successful()
    assert lookup_sync(b, [key]).to_list() == [False]
    assert b.get_object_sizes([key]) == {}
    assert load_sync(b, [key], [sentinel()]).to_list() == [False]
    assert a.list_l2_keys() == [key] and b.list_l2_keys() == []


def test_the_empty_prefix_is_isolated_from_prefixed_deployments(
        make_s3_adapter: MakeAdapter) -> None:
    """Issue 27 item 7: a deployment with prefix "" lists (and so scrubs and evicts) only its own
    objects, though a listing of the whole bucket returns every other prefix's objects too."""
    empty = make_s3_adapter(prefix="")
    named = [make_s3_adapter(prefix=p) for p in ("lmserde/", "shared/", "t-" + "0" * 32)]
    mine = make_key(1, model="m", salt="s")
    theirs = [make_key(2 + i, model="m", salt=salt) for i, salt in enumerate(["", "s", "u"])]
    assert store_sync(empty, [mine], [kv_object(1)]).is_successful()
    for adapter, key in zip(named, theirs):
        assert store_sync(adapter, [key], [kv_object(2)]).is_successful()
    assert empty.list_l2_keys() == [mine]
    assert [a.list_l2_keys() for a in named] == [[k] for k in theirs]


def test_tenant_routes_put_tenants_in_their_own_buckets_and_prefixes(
    s3_server: LocalS3Server, make_s3_adapter: MakeAdapter, bucket: str,
) -> None:
    tenant_bucket = new_bucket(s3_server)
    adapter = make_s3_adapter(tenant_routes={"alpha": {"bucket": tenant_bucket},
                                             "beta": {"prefix": "tenants/beta"}})
    keys = [make_key(1, salt="alpha"), make_key(2, salt="beta"), make_key(3, salt="gamma"),
            make_key(4)]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(4)]).is_successful()
    names = [adapter.location_of(k) for k in keys]
    assert [(loc.bucket, n.split("/")[0]) for loc, n in names] == [
        (tenant_bucket, "lmserde"), (bucket, "tenants"), (bucket, "lmserde"), (bucket, "lmserde")]
    assert _get(s3_server, tenant_bucket, names[0][1]) == bytes(kv_object(0).byte_array)
    assert set(adapter.list_l2_keys()) == set(keys)
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 4
    unrouted = make_s3_adapter()  # the same bucket without routes: only the default location
    assert set(unrouted.list_l2_keys()) == {keys[2], keys[3]}


def test_store_accounts_usage_per_salt(adapter: Any) -> None:
    keys = [make_key(1, salt="tenant-a"), make_key(2, salt="tenant-b"), make_key(3)]
    sizes = [10, 4, 3]
    assert store_sync(adapter, keys, [byte_object(b"x" * n) for n in sizes]).is_successful()
    usage = adapter.get_usage()
    assert usage.total_bytes_used == 17
    assert dict(usage.bytes_by_cache_salt) == {"tenant-a": 10, "tenant-b": 4, "": 3}
    adapter.delete([keys[0]])
    assert adapter.get_usage().total_bytes_used == 7
    assert adapter.get_object_sizes(keys) == {keys[1]: 4, keys[2]: 3}


def test_delete_waits_for_the_last_unlock(adapter: Any) -> None:
    locked, free = make_key(1), make_key(2)
    assert store_sync(adapter, [locked, free], [kv_object(1), kv_object(2)]).is_successful()
    assert lookup_sync(adapter, [locked]).to_list() == [True]
    assert lookup_sync(adapter, [locked]).to_list() == [True]  # locked twice
    adapter.delete([locked, free])
    assert adapter.get_object_sizes([locked, free]) == {locked: NBYTES}
    adapter.submit_unlock([locked])
    assert adapter.get_object_sizes([locked]) == {locked: NBYTES}
    adapter.submit_unlock([locked])  # last unlock: the deferred delete runs on the I/O threads
    # The deferred delete is asynchronous: the object goes first, then listeners and usage
    # hear of it, so wait for both rather than reading usage in between.
    assert eventually(lambda: adapter.get_object_sizes([locked]) == {}
                      and adapter.get_usage().total_bytes_used == 0)
    assert adapter.report_status()["locked_keys"] == 0


def test_a_name_too_long_fails_that_key_only(adapter: Any) -> None:
    long_key = make_key(1, model="m" * 1100)
    good = make_key(2)
    result = store_sync(adapter, [long_key, good], [kv_object(1), kv_object(2)])
    assert not result.is_successful()
    assert adapter.get_object_sizes([long_key, good]) == {good: NBYTES}
    assert lookup_sync(adapter, [long_key, good]).to_list() == [False, True]
    assert load_sync(adapter, [long_key, good], [sentinel(), sentinel()]).to_list() == [False, True]
    assert adapter.report_status()["key_store_errors"] == 1


def test_a_missing_bucket_fails_stores_and_misses_loads(make_s3_adapter: MakeAdapter) -> None:
    adapter = make_s3_adapter(bucket="no-such-bucket-here", max_attempts=1)
    key = make_key(1)
    assert not store_sync(adapter, [key], [kv_object(1)]).is_successful()
    assert lookup_sync(adapter, [key]).count() == 0
    assert load_sync(adapter, [key], [sentinel()]).count() == 0
    assert adapter.report_status()["is_healthy"] is False


def test_many_tasks_in_flight_complete_on_the_shared_queues(adapter: Any) -> None:
    collector = TaskCollector(adapter)
    objs = {i: kv_object(i) for i in range(24)}
    for i in range(0, 24, 3):
        collector.store([make_key(j) for j in range(i, i + 3)], [objs[j] for j in range(i, i + 3)])
    collector.store([], [])
    collector.wait()
    assert all(r is not None and r.is_successful() for r in collector.stores.values())
    outs = {i: sentinel() for i in range(24)}
    for i in range(0, 24, 4):
        collector.load([make_key(j) for j in range(i, i + 4)], [outs[j] for j in range(i, i + 4)])
        collector.lookup([make_key(j) for j in range(i, i + 4)])
    collector.wait()
    assert all(b is not None and b.count() == 4 for b in collector.loads.values())
    assert all(b is not None and b.count() == 4 for b in collector.lookups.values())
    assert all(same_bytes(outs[i], objs[i]) for i in range(24))


def test_fds_are_distinct_and_results_are_taken_once(adapter: Any) -> None:
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
           adapter.get_load_event_fd()}
    assert len(fds) == 3
    key = make_key(1)
    task = adapter.submit_store_task([key], [kv_object(1)])
    assert wait_for_store(adapter, task).is_successful()
    assert adapter.pop_completed_store_tasks() == {}
    lookup_task = adapter.submit_lookup_and_lock_task([key])
    assert lookup_sync(adapter, [key]).to_list() == [True]
    assert eventually(lambda: adapter.query_lookup_and_lock_result(lookup_task) is not None)
    assert adapter.query_lookup_and_lock_result(lookup_task) is None
    assert adapter.query_load_result(12345) is None


def test_mismatched_lists_are_rejected(adapter: Any) -> None:
    with pytest.raises(ValueError, match="2 keys but 1 objects"):
        adapter.submit_store_task([make_key(1), make_key(2)], [kv_object(1)])
    with pytest.raises(ValueError, match="1 keys but 0 objects"):
        adapter.submit_load_task([make_key(1)], [])


def test_close_joins_every_thread_and_is_final(make_s3_adapter: MakeAdapter) -> None:
    baseline = {t.ident for t in threading.enumerate()}
    adapter = make_s3_adapter(max_in_flight=6)
    keys = [make_key(i) for i in range(12)]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(12)]).is_successful()
    assert load_sync(adapter, keys, [sentinel() for _ in keys]).count() == 12
    assert len({t.ident for t in threading.enumerate()} - baseline) >= 1  # I/O threads ran
    adapter.close()
    adapter.close()
    assert {t.ident for t in threading.enumerate()} - baseline == set()
    with pytest.raises(RuntimeError, match="closed"):
        adapter.submit_store_task([make_key(1)], [kv_object(1)])
    with pytest.raises(RuntimeError, match="closed"):
        adapter.submit_lookup_and_lock_task([make_key(1)])
    assert adapter.report_status()["is_healthy"] is False


def test_status_counts_operations(adapter: Any) -> None:
    keys = [make_key(i) for i in range(3)]
    store_sync(adapter, keys, [kv_object(i) for i in range(3)])
    lookup_sync(adapter, [*keys, make_key(9)])
    load_sync(adapter, [keys[0], make_key(9)], [sentinel(LAYOUT), sentinel(LAYOUT)])
    status = adapter.report_status()
    assert status["is_healthy"] is True and status["type"] == "s3"
    assert (status["stores"], status["objects_stored"], status["lookups"], status["lookup_hits"],
            status["load_hits"], status["load_misses"]) == (1, 3, 4, 3, 1, 1)
    assert status["credential_source"] == "env"
