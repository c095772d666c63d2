"""Failures are per key: throttling (retried), persistent 5xx, stalls, and a server that dies
mid-stream and comes back. Every task completes; the adapter recovers without being rebuilt."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import new_bucket
from lmserde.l1 import L1Manager
from lmserde.l2 import load_sync, lookup_sync, store_sync
from lmserde_s3.local_server import LocalS3Server
from s3_faults import FaultProxy, Rule
from s3_kv import TaskCollector, kv_object, make_key, same_bytes, sentinel

MakeAdapter = Callable[..., Any]


@pytest.fixture
def proxy(s3_server: LocalS3Server) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_server.endpoint_url)
    yield proxy
    proxy.close()


def test_throttling_is_retried_and_persistent_errors_fail_that_key_only(
    proxy: FaultProxy, make_s3_adapter: MakeAdapter,
) -> None:
    adapter = make_s3_adapter(endpoint_url=proxy.endpoint_url, max_attempts=3, read_timeout=5)
    keys = [make_key(i) for i in range(4)]
    throttled = proxy.add(keys[1].chunk_hash.hex(), Rule(times=1))
    broken = proxy.add(keys[2].chunk_hash.hex(), Rule(times=None))
    result = store_sync(adapter, keys, [kv_object(i) for i in range(4)])
    assert not result.is_successful()  # keys[2] never got through
    assert throttled.seen == 2  # one 503 SlowDown, then the retry succeeded
    assert broken.seen == 3  # every attempt of the retry policy
    del proxy._rules[keys[2].chunk_hash.hex()]  # the service heals
    assert lookup_sync(adapter, keys).to_list() == [True, True, False, True]
    broken = proxy.add(keys[3].chunk_hash.hex(), Rule(times=None))
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).to_list() == [True, True, False, False]
    assert same_bytes(outs[0], kv_object(0)) and same_bytes(outs[1], kv_object(1))
    assert adapter.report_status()["health"]["total_failures"] >= 2


def test_a_stalled_request_times_out_as_a_miss_for_that_key(
    proxy: FaultProxy, make_s3_adapter: MakeAdapter,
) -> None:
    adapter = make_s3_adapter(endpoint_url=proxy.endpoint_url, max_attempts=1, read_timeout=0.5)
    keys = [make_key(i) for i in range(3)]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(3)]).is_successful()
    proxy.add(keys[0].chunk_hash.hex(), Rule(times=0, delay=1.5))
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).to_list() == [False, True, True]
    assert same_bytes(outs[1], kv_object(1))


def _stream(collector: TaskCollector, base: int, n: int) -> None:
    for i in range(base, base + n):
        keys = [make_key(2 * i), make_key(2 * i + 1)]
        collector.store(keys, [kv_object(2 * i), kv_object(2 * i + 1)])
        collector.load(keys, [sentinel(), sentinel()])


@pytest.mark.parametrize("serde", [None, {"type": "identity"}], ids=["plain", "wrapped"])
def test_server_killed_mid_stream_then_restarted(
    own_s3_server: LocalS3Server, make_s3_adapter: MakeAdapter, serde: dict[str, Any] | None,
) -> None:
    bucket = new_bucket(own_s3_server)
    l1 = L1Manager(64 << 20)
    fields: dict[str, Any] = {"bucket": bucket, "endpoint_url": own_s3_server.endpoint_url,
                              "connect_timeout": 1, "read_timeout": 2, "max_attempts": 1,
                              "max_in_flight": 4}
    if serde is not None:
        fields["serde"] = serde
    adapter = make_s3_adapter(l1=l1 if serde else None, **fields)
    collector = TaskCollector(adapter)
    _stream(collector, 0, 20)
    collector.wait(count=4)  # the stream is flowing ...
    own_s3_server.kill()  # ... when the server dies
    _stream(collector, 20, 10)  # and more work arrives while it is down
    collector.wait()
    failed = sum(not r.is_successful() for r in collector.stores.values() if r is not None)
    missed = sum(len(b) - b.count() for b in collector.loads.values() if b is not None)
    assert failed >= 1 and missed >= 1
    inner = adapter.inner_adapter if serde else adapter
    assert inner.report_status()["is_healthy"] is False

    own_s3_server.start()  # same port, fresh (empty) service
    own_s3_server.create_bucket(bucket)
    keys = [make_key(1000), make_key(1001)]
    objs = [kv_object(1000), kv_object(1001)]
    assert store_sync(adapter, keys, objs).is_successful()
    outs = [sentinel(), sentinel()]
    assert load_sync(adapter, keys, outs).count() == 2
    assert all(same_bytes(o, s) for o, s in zip(outs, objs))
    assert inner.report_status()["is_healthy"] is True
    if serde is not None:
        assert l1.memory_used_bytes() == 0, "serde temporaries leaked during the outage"
