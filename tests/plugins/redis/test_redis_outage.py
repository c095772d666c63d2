"""Outages: a killed, paused or absent server fails or misses every task, and nothing hangs.

After the server is back on the same port the same adapter works again (it reconnects).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lmserde.l1 import L1Manager
from lmserde.l2 import load_sync, lookup_sync, store_sync
from lmserde_redis.local_server import LocalRedisServer
from redis_collect import TaskCollector
from redis_kv import kv_object, make_key, same_bytes, sentinel

MakeAdapter = Callable[..., Any]


def _stream(collector: TaskCollector, base: int, n: int) -> None:
    """Submit ``n`` store tasks and ``n`` load tasks of two keys each."""
    for i in range(base, base + n):
        keys = [make_key(2 * i), make_key(2 * i + 1)]
        collector.store(keys, [kv_object(2 * i), kv_object(2 * i + 1)])
        collector.load(keys, [sentinel(), sentinel()])


def _assert_every_task_completed_as_failure_or_success(collector: TaskCollector) -> tuple[int, int]:
    """(failed stores, missed load keys) once every task completed."""
    collector.wait_all(timeout=30)
    failed = sum(not r.is_successful() for r in collector.stores.values() if r is not None)
    missed = sum(len(b) - b.count() for b in collector.loads.values() if b is not None)
    return failed, missed


@pytest.fixture
def l1() -> Iterator[L1Manager]:
    yield L1Manager(64 << 20)


@pytest.mark.parametrize("serde", [None, {"type": "identity"}], ids=["plain", "wrapped"])
def test_server_killed_mid_stream_then_restarted(
    own_redis_server: LocalRedisServer, make_redis_adapter: MakeAdapter, l1: L1Manager,
    serde: dict[str, Any] | None,
) -> None:
    fields: dict[str, Any] = {"url": own_redis_server.url, "socket_timeout": 2,
                              "connect_timeout": 1, "io_workers": 2}
    if serde is not None:
        fields["serde"] = serde
    adapter = make_redis_adapter(l1=l1 if serde else None, **fields)
    collector = TaskCollector(adapter)
    _stream(collector, 0, 40)
    collector.wait_for_results(5)  # the stream is flowing ...
    own_redis_server.kill()  # ... when the server dies
    _stream(collector, 40, 20)  # and more work arrives while it is down
    failed, missed = _assert_every_task_completed_as_failure_or_success(collector)
    assert failed >= 1 and missed >= 1
    assert adapter.report_status()["is_healthy"] is False

    own_redis_server.start()  # same port, empty data set
    keys = [make_key(1000), make_key(1001)]
    objs = [kv_object(1000), kv_object(1001)]
    assert store_sync(adapter, keys, objs).is_successful()
    outs = [sentinel(), sentinel()]
    assert load_sync(adapter, keys, outs).count() == 2
    assert all(same_bytes(o, s) for o, s in zip(outs, objs))
    assert adapter.report_status()["is_healthy"] is True
    if serde is not None:
        assert l1.memory_used_bytes() == 0, "serde temporaries leaked during the outage"


def test_a_server_that_stops_answering_times_out(own_redis_server: LocalRedisServer,
                                                 make_redis_adapter: MakeAdapter) -> None:
    adapter = make_redis_adapter(url=own_redis_server.url, socket_timeout=0.3,
                                 connect_timeout=0.3, retries=0)
    key = make_key(1)
    assert store_sync(adapter, [key], [kv_object(1)]).is_successful()
    pid = own_redis_server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # accepts connections (kernel backlog) but never replies
    try:
        collector = TaskCollector(adapter)
        collector.store([make_key(2)], [kv_object(2)])
        collector.load([key], [sentinel()])
        collector.lookup([key])
        collector.wait_all(timeout=30)
        assert not next(iter(collector.stores.values())).is_successful()
        assert next(iter(collector.loads.values())).count() == 0
        assert next(iter(collector.lookups.values())).count() == 0
        assert adapter.get_object_sizes([key]) == {}
    finally:
        os.kill(pid, signal.SIGCONT)
    outs = [sentinel()]
    assert load_sync(adapter, [key], outs).count() == 1


def test_server_absent_at_startup(tmp_path: Any, make_redis_adapter: MakeAdapter) -> None:
    server = LocalRedisServer(tmp_path / "late")  # port chosen, nothing listening yet
    adapter = make_redis_adapter(url=server.url, connect_timeout=0.5)
    try:
        key = make_key(1)
        assert not store_sync(adapter, [key], [kv_object(1)]).is_successful()
        assert lookup_sync(adapter, [key]).count() == 0
        assert load_sync(adapter, [key], [sentinel()]).count() == 0
        adapter.delete([key])  # swallowed, logged
        server.start()
        assert store_sync(adapter, [key], [kv_object(1)]).is_successful()
        assert lookup_sync(adapter, [key]).count() == 1
    finally:
        server.close()


def test_a_refused_set_fails_the_store_and_the_adapter_carries_on(
    own_redis_server: LocalRedisServer, make_redis_adapter: MakeAdapter,
) -> None:
    adapter = make_redis_adapter(url=own_redis_server.url, batch_keys=4)  # 32 KiB per round trip
    with own_redis_server.client() as c:
        c.config_set("maxmemory-policy", "noeviction")
        c.config_set("maxmemory", str(c.info("memory")["used_memory"] + 128 * 1024))
    big = [make_key(i) for i in range(40)]
    result = store_sync(adapter, big, [kv_object(i) for i in range(40)])  # ~640 KiB: OOM
    assert not result.is_successful()
    stored = adapter.get_object_sizes(big)
    assert 0 < len(stored) < len(big)  # the SETs before the limit went through
    assert adapter.get_usage().total_bytes_used == sum(stored.values())
    with own_redis_server.client() as c:
        c.config_set("maxmemory", "0")
    assert store_sync(adapter, big, [kv_object(i) for i in range(40)]).is_successful()
