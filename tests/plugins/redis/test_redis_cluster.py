"""Redis Cluster: keys spread over the shards, pipelines span nodes, and a master failover or
restart turns into failures/misses while it lasts and into normal service afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, load_sync, lookup_sync, store_sync
from lmserde_redis.local_server import LocalRedisCluster
from redis_collect import TaskCollector
from redis_kv import NBYTES, eventually, kv_object, make_key, same_bytes, sentinel

MakeAdapter = Callable[..., Any]
N = 24


def test_round_trip_over_every_shard(redis_cluster: LocalRedisCluster,
                                     make_redis_adapter: MakeAdapter) -> None:
    l1 = L1Manager(64 << 20)
    adapter = make_redis_adapter(l1=l1, cluster_nodes=redis_cluster.startup_nodes[:1],
                                 serde={"type": "identity"}, batch_keys=5)
    keys = [make_key(i, salt="t") for i in range(N)]
    objs = [kv_object(i) for i in range(N)]
    stored = FRAME_HEADER_BYTES + NBYTES  # the stored-object frame header, then the KV bytes
    assert store_sync(adapter, keys, objs).bytes_transferred() == N * stored
    inner = adapter.inner_adapter
    owners = {redis_cluster.node_for(inner.redis_key(k)).port for k in keys}
    assert len(owners) == 3, "keys should spread over all three shards"
    assert adapter.get_object_sizes(keys) == dict.fromkeys(keys, stored)
    assert lookup_sync(adapter, keys).count() == N
    assert set(inner.list_l2_keys()) == set(keys)
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).count() == N
    assert all(same_bytes(o, s) for o, s in zip(outs, objs))
    assert inner.report_status()["mode"] == "cluster"


def test_master_failover_and_restart(redis_cluster: LocalRedisCluster,
                                     make_redis_adapter: MakeAdapter) -> None:
    adapter = make_redis_adapter(cluster_nodes=redis_cluster.startup_nodes, socket_timeout=1,
                                 connect_timeout=0.5)
    keys = [make_key(100 + i) for i in range(N)]
    objs = [kv_object(100 + i) for i in range(N)]
    assert store_sync(adapter, keys, objs).is_successful()
    victim = redis_cluster.node_for(adapter.redis_key(keys[0]))
    with victim.client() as c:  # make sure the replica has the data before the crash
        assert c.execute_command("WAIT", 1, 5000) >= 1

    victim.kill()
    collector = TaskCollector(adapter)
    for _ in range(6):  # traffic while the shard has no reachable master
        collector.store(keys[:4], objs[:4])
        collector.load(keys[:4], [sentinel() for _ in range(4)])
        collector.lookup(keys[:4])
    collector.wait_all(timeout=30)  # every task completes, as success, failure or miss

    def serves_all() -> bool:
        outs = [sentinel() for _ in keys]
        return load_sync(adapter, keys, outs).count() == N and all(
            same_bytes(o, s) for o, s in zip(outs, objs))

    assert eventually(serves_all, timeout=30), "the promoted replica never served the data"
    assert store_sync(adapter, [make_key(999)], [kv_object(999)]).is_successful()

    victim.start()  # the old master comes back and rejoins as a replica
    redis_cluster.wait_until_healthy(timeout=30)
    assert victim not in redis_cluster.masters_now()
    assert serves_all()
    assert store_sync(adapter, keys, objs).is_successful()


def test_cluster_unreachable_everywhere_fails_fast(make_redis_adapter: MakeAdapter) -> None:
    from lmserde_redis.local_server import free_loopback_port

    adapter = make_redis_adapter(cluster_nodes=[f"127.0.0.1:{free_loopback_port()}"],
                                 connect_timeout=0.5)
    collector = TaskCollector(adapter)
    collector.store([make_key(1)], [kv_object(1)])
    collector.load([make_key(1)], [sentinel()])
    collector.lookup([make_key(1)])
    collector.wait_all(timeout=30)
    assert not next(iter(collector.stores.values())).is_successful()
    assert next(iter(collector.loads.values())).count() == 0
    assert adapter.get_object_sizes([make_key(1)]) == {}


@pytest.fixture(autouse=True)
def _cluster_is_healthy_after_each_test(request: pytest.FixtureRequest) -> Any:
    yield
    if "redis_cluster" in request.fixturenames:
        request.getfixturevalue("redis_cluster").wait_until_healthy(timeout=30)
