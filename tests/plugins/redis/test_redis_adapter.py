"""The ``redis`` adapter against a real server: the L2 adapter contract, pipelining, sizes, locks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.l2 import (
    L2StoreResult,
    load_sync,
    lookup_sync,
    store_sync,
    wait_for_lookup,
    wait_for_store,
)
from lmserde.testing import L2AdapterConformance
from lmserde_redis.local_server import LocalRedisServer
from redis_kv import (
    LAYOUT,
    NBYTES,
    byte_object,
    eventually,
    kv_object,
    make_key,
    same_bytes,
    sentinel,
)

MakeAdapter = Callable[..., Any]


@pytest.fixture
def adapter(redis_server: LocalRedisServer, make_redis_adapter: MakeAdapter) -> Any:
    return make_redis_adapter(url=redis_server.url)


class TestRedisAdapterConformance(L2AdapterConformance):
    """The public L2 adapter kit against a real server (a fresh namespace per check)."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: LocalRedisServer, make_redis_adapter: MakeAdapter) -> None:
        self._make = lambda: make_redis_adapter(url=redis_server.url)

    def make_adapter(self, tmp_path: Path) -> Any:
        return self._make()


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


def test_values_are_the_objects_logical_bytes(adapter: Any, redis_server: LocalRedisServer
                                              ) -> None:
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([[100]], [torch.uint8]), padding=28)
    obj.raw_data.copy_(torch.arange(128, dtype=torch.uint8))
    obj.set_used_size(37)
    key = make_key(1)
    assert store_sync(adapter, [key], [obj]).bytes_transferred() == 37
    with redis_server.client() as c:
        assert c.get(adapter.redis_key(key)) == bytes(range(37))
    assert adapter.get_object_sizes([key, make_key(2)]) == {key: 37}


def test_load_hits_only_on_exact_length(adapter: Any) -> None:
    key = make_key(1)
    assert store_sync(adapter, [key], [byte_object(b"abcdef")]).is_successful()
    short, long_, exact = byte_object(b"....."), byte_object(b"......."), byte_object(b"......")
    assert load_sync(adapter, [key, key, key], [short, long_, exact]).to_list() == [
        False, False, True]
    assert bytes(short.byte_array) == b"....." and bytes(exact.byte_array) == b"abcdef"
    assert adapter.report_status()["size_mismatches"] == 2


def test_empty_values_exist_and_load(adapter: Any) -> None:
    key = make_key(1)
    assert store_sync(adapter, [key], [byte_object(b"")]).is_successful()
    assert adapter.get_object_sizes([key, make_key(2)]) == {key: 0}
    assert lookup_sync(adapter, [key]).to_list() == [True]
    assert load_sync(adapter, [key], [byte_object(b"")]).to_list() == [True]


@pytest.mark.parametrize(("batch_keys", "batch_bytes"), [(1, 1 << 30), (3, 1 << 30), (64, 1)])
def test_batching_splits_round_trips_without_changing_results(
    redis_server: LocalRedisServer, make_redis_adapter: MakeAdapter, batch_keys: int,
    batch_bytes: int,
) -> None:
    adapter = make_redis_adapter(url=redis_server.url, batch_keys=batch_keys,
                                 batch_bytes=batch_bytes)
    keys = [make_key(i) for i in range(10)]
    objs = [kv_object(i) for i in range(10)]
    assert store_sync(adapter, keys, objs).bytes_transferred() == 10 * NBYTES
    assert lookup_sync(adapter, keys).count() == 10
    assert len(adapter.get_object_sizes(keys)) == 10
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 10
    assert all(same_bytes(o, s) for o, s in zip(outs, objs))


def test_namespaces_isolate_deployments(redis_server: LocalRedisServer,
                                        make_redis_adapter: MakeAdapter) -> None:
    a = make_redis_adapter(url=redis_server.url, namespace="iso-a")
    b = make_redis_adapter(url=redis_server.url, namespace="iso-b")
    key = make_key(7)
    assert store_sync(a, [key], [kv_object(7)]).is_successful()
    assert lookup_sync(b, [key]).to_list() == [False]
    assert b.get_object_sizes([key]) == {}
    assert load_sync(b, [key], [sentinel()]).to_list() == [False]
    assert a.list_l2_keys() == [key] and b.list_l2_keys() == []


def test_the_empty_namespace_is_a_namespace_of_its_own(own_redis_server: LocalRedisServer,
                                                      make_redis_adapter: MakeAdapter) -> None:
    """Issue 27 item 7: ``namespace: ""`` listed every other namespace's keys as phantom keys
    (``lmserde:m@...`` read as model ``lmserde:m``); now neither side sees the other's keys, and
    a scrub of either (which walks the listing) finds only its own objects."""
    empty = make_redis_adapter(url=own_redis_server.url, namespace="")
    named = make_redis_adapter(url=own_redis_server.url, namespace="lmserde")
    mine, theirs = make_key(1, model="m"), make_key(2, model="m", salt="t")
    assert store_sync(empty, [mine], [kv_object(1)]).is_successful()
    assert store_sync(named, [theirs], [kv_object(2)]).is_successful()
    assert empty.list_l2_keys() == [mine]
    assert empty.list_l2_keys(model_name="lmserde:m") == []
    assert named.list_l2_keys() == [theirs]
    assert lookup_sync(empty, [theirs]).to_list() == [False]
    # the names stored are the ones the empty namespace always used (no prefix, no separator)
    client = own_redis_server.client()
    assert sorted(client.keys()) == sorted([empty._names.name_of(mine),
                                            b"lmserde:" + empty._names.name_of(theirs)])


def test_list_keys_by_model(adapter: Any) -> None:
    keys = [make_key(1, model="m1"), make_key(2, model="m2", salt="s"), make_key(3, model="m1")]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(3)]).is_successful()
    assert set(adapter.list_l2_keys()) == set(keys)
    assert set(adapter.list_l2_keys(model_name="m1")) == {keys[0], keys[2]}


def test_store_overwrites_and_accounts_per_salt(adapter: Any) -> None:
    key = make_key(1, salt="tenant-a")
    assert store_sync(adapter, [key], [byte_object(b"x" * 10)]).is_successful()
    assert store_sync(adapter, [key], [byte_object(b"y" * 4)]).is_successful()
    assert adapter.get_object_sizes([key]) == {key: 4}
    usage = adapter.get_usage()
    assert usage.total_bytes_used == 4
    assert dict(usage.bytes_by_cache_salt) == {"tenant-a": 4}


def test_delete_waits_for_the_last_unlock(adapter: Any) -> None:
    locked, free = make_key(1), make_key(2)
    assert store_sync(adapter, [locked, free], [kv_object(1), kv_object(2)]).is_successful()
    assert lookup_sync(adapter, [locked]).to_list() == [True]
    assert lookup_sync(adapter, [locked]).to_list() == [True]  # locked twice
    adapter.delete([locked, free])
    assert adapter.get_object_sizes([locked, free]) == {locked: NBYTES}
    adapter.submit_unlock([locked])
    assert adapter.get_object_sizes([locked]) == {locked: NBYTES}
    adapter.submit_unlock([locked])  # last unlock: the deferred delete runs on the I/O pool

    # The deferred delete is asynchronous: the object goes first, then listeners and usage
    # hear of it, so wait for both rather than reading usage in between.
    assert eventually(lambda: adapter.get_object_sizes([locked]) == {}
                      and adapter.get_usage().total_bytes_used == 0)
    assert adapter.report_status()["locked_keys"] == 0


def test_ttl_is_set_and_renewed_by_lookups(redis_server: LocalRedisServer,
                                           make_redis_adapter: MakeAdapter) -> None:
    adapter = make_redis_adapter(url=redis_server.url, ttl_seconds=100)
    key = make_key(1)
    assert store_sync(adapter, [key], [kv_object(1)]).is_successful()
    name = adapter.redis_key(key)
    with redis_server.client() as c:
        assert 0 < c.pttl(name) <= 100_000
        c.pexpire(name, 5_000)
        assert lookup_sync(adapter, [key, make_key(2)]).to_list() == [True, False]
        assert c.pttl(name) > 5_000
        assert c.exists(adapter.redis_key(make_key(2))) == 0


def test_without_ttl_keys_never_expire(adapter: Any, redis_server: LocalRedisServer) -> None:
    key = make_key(1)
    assert store_sync(adapter, [key], [kv_object(1)]).is_successful()
    with redis_server.client() as c:
        assert c.pttl(adapter.redis_key(key)) == -1


def test_fds_are_distinct_and_results_are_taken_once(adapter: Any) -> None:
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
           adapter.get_load_event_fd()}
    assert len(fds) == 3
    key = make_key(1)
    task = adapter.submit_store_task([key], [kv_object(1)])
    others: dict[int, L2StoreResult] = {}
    assert wait_for_store(adapter, task, others=others).is_successful()
    assert adapter.pop_completed_store_tasks() == {}
    lookup_task = adapter.submit_lookup_and_lock_task([key])
    assert lookup_sync(adapter, [key]).to_list() == [True]
    # the first lookup may finish after the second (several workers): wait for it, on its fd
    assert wait_for_lookup(adapter, lookup_task).to_list() == [True]
    assert adapter.query_lookup_and_lock_result(lookup_task) is None
    assert adapter.query_load_result(12345) is None


def test_mismatched_lists_are_rejected(adapter: Any) -> None:
    with pytest.raises(ValueError, match="2 keys but 1 objects"):
        adapter.submit_store_task([make_key(1), make_key(2)], [kv_object(1)])
    with pytest.raises(ValueError, match="1 keys but 0 objects"):
        adapter.submit_load_task([make_key(1)], [])


def test_close_is_idempotent_and_final(redis_server: LocalRedisServer,
                                       make_redis_adapter: MakeAdapter) -> None:
    adapter = make_redis_adapter(url=redis_server.url)
    adapter.close()
    adapter.close()
    with pytest.raises(RuntimeError, match="closed"):
        adapter.submit_store_task([make_key(1)], [kv_object(1)])
    assert adapter.report_status()["is_healthy"] is False


def test_status_counts_operations(adapter: Any) -> None:
    keys = [make_key(i) for i in range(3)]
    store_sync(adapter, keys, [kv_object(i) for i in range(3)])
    lookup_sync(adapter, [*keys, make_key(9)])
    load_sync(adapter, [keys[0], make_key(9)], [sentinel(LAYOUT), sentinel(LAYOUT)])
    status = adapter.report_status()
    assert status["is_healthy"] is True
    assert (status["stores"], status["objects_stored"], status["lookups"], status["lookup_hits"],
            status["load_hits"], status["load_misses"]) == (1, 3, 4, 3, 1, 1)
