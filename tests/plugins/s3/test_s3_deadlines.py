"""Task deadlines: a frozen (SIGSTOP) or trickling S3 server never blocks ``submit_*``, every task
completes as failed by its deadline, a late answer never reaches the caller, and the adapter works
again once the server recovers. Also: replacing stores.

The client settings are the issue's (connect 1 s, read 2 s, 2 attempts; a frozen server then
costs about 4 s per request, a trickling one far longer) with a 2 s deadline. Bounds: the issue
asks for ``submit_*`` < 50 ms; on loaded 2-core machines this asserts < 0.5 s and prints the
measured values; completion is asserted within the deadline + 1 s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import new_bucket, raw_client
from lmserde.l2 import enable_replacing_stores, load_sync, store_sync
from lmserde.testing import TrickleProxy, frozen_process, timed_task, wait_until_idle
from lmserde_s3.local_server import LocalS3Server
from s3_kv import kv_object, make_key, same_bytes, sentinel

MakeAdapter = Callable[..., Any]

DEADLINE_S = 2.0
SUBMIT_BOUND_S = 0.5  # the 50 ms, loosened for a loaded 2-core machine (see above)
SLOW = {"task_deadline_s": DEADLINE_S, "connect_timeout": 1, "read_timeout": 2,
        "max_attempts": 2, "max_in_flight": 4, "addressing_style": "path"}


@contextmanager
def frozen(server: LocalS3Server) -> Iterator[None]:
    assert server.pid is not None
    with frozen_process(server.pid):
        yield


def _wait_idle(adapter: Any, timeout: float = 60.0) -> None:
    wait_until_idle(adapter, timeout)


def _assert_slow_tasks_fail_by_their_deadline(adapter: Any, stored: Any) -> Any:
    dst = sentinel()
    measured = {}
    for kind, keys, objs in (("store", [make_key(2)], [kv_object(2)]),
                             ("load", [stored], [dst]),
                             ("lookup", [stored], [])):
        task = timed_task(adapter, kind, keys, objs, timeout=DEADLINE_S + 60)
        measured[kind] = task
        assert task.submit_s < SUBMIT_BOUND_S, f"submit_{kind} blocked for {task.submit_s:.3f} s"
        assert task.done_s <= DEADLINE_S + 1.0, f"{kind} completed after {task.done_s:.2f} s"
        failed = (not task.result.is_successful()) if kind == "store" else task.result.count() == 0
        assert failed, f"a {kind} against a stalled server was reported as {task.result}"
    print({k: f"submit {t.submit_s * 1000:.2f} ms, done {t.done_s:.2f} s"
           for k, t in measured.items()})
    started = time.monotonic()
    assert adapter.get_object_sizes([stored]) == {}
    assert time.monotonic() - started <= DEADLINE_S + 1.0
    assert same_bytes(dst, sentinel())
    return dst


def _assert_recovered(adapter: Any, stored: Any, dst: Any) -> None:
    _wait_idle(adapter)  # the late answers have arrived by now ...
    assert same_bytes(dst, sentinel()), "a late load wrote into a buffer after its deadline"
    status = adapter.report_status()
    assert status["locked_keys"] == 0, "a late lookup pinned a key after its deadline"
    assert status["deadline_failures"] >= 3
    key, obj = make_key(3), kv_object(3)  # ... and later tasks work again
    assert store_sync(adapter, [key], [obj]).is_successful()
    outs = [sentinel(), sentinel()]
    assert load_sync(adapter, [key, stored], outs).count() == 2
    assert same_bytes(outs[0], obj) and same_bytes(outs[1], kv_object(1))


def test_a_frozen_server_fails_tasks_by_their_deadline(own_s3_server: LocalS3Server,
                                                      make_s3_adapter: MakeAdapter) -> None:
    adapter = make_s3_adapter(bucket=new_bucket(own_s3_server),
                              endpoint_url=own_s3_server.endpoint_url, **SLOW)
    stored = make_key(1)
    assert store_sync(adapter, [stored], [kv_object(1)]).is_successful()
    with frozen(own_s3_server):
        dst = _assert_slow_tasks_fail_by_their_deadline(adapter, stored)
    _assert_recovered(adapter, stored, dst)


def test_a_trickling_server_fails_tasks_by_their_deadline(own_s3_server: LocalS3Server,
                                                         make_s3_adapter: MakeAdapter) -> None:
    bucket = new_bucket(own_s3_server)
    with TrickleProxy("127.0.0.1", own_s3_server.port, interval=0.25) as proxy:
        adapter = make_s3_adapter(bucket=bucket, endpoint_url=f"http://127.0.0.1:{proxy.port}",
                                  **SLOW)
        stored = make_key(1)
        assert store_sync(adapter, [stored], [kv_object(1)]).is_successful()
        proxy.set_trickling(True)  # 1 byte every 0.25 s: no read timeout ever fires
        dst = _assert_slow_tasks_fail_by_their_deadline(adapter, stored)
        proxy.set_trickling(False)  # the network recovers
        _assert_recovered(adapter, stored, dst)


def test_the_deadline_frees_a_request_stuck_in_a_trickling_body(
        own_s3_server: LocalS3Server, make_s3_adapter: MakeAdapter) -> None:
    """The headers and the first bytes of the body arrive at full speed (``grace_bytes``), the
    rest of the 8 KiB body would take half an hour; the deadline shuts the response's socket
    down, so the only I/O thread is free again right after the deadline while the trickle goes
    on."""
    bucket = new_bucket(own_s3_server)
    with TrickleProxy("127.0.0.1", own_s3_server.port, interval=0.25, grace_bytes=2048) as proxy:
        adapter = make_s3_adapter(bucket=bucket, endpoint_url=f"http://127.0.0.1:{proxy.port}",
                                  **{**SLOW, "max_in_flight": 1})
        stored = make_key(1)
        assert store_sync(adapter, [stored], [kv_object(1)]).is_successful()
        proxy.set_trickling(True)
        started = time.monotonic()
        dst = sentinel()
        task = timed_task(adapter, "load", [stored], [dst], timeout=30)
        assert task.result.count() == 0 and task.done_s <= DEADLINE_S + 1.0
        _wait_idle(adapter, timeout=DEADLINE_S + 1.0 - (time.monotonic() - started))
        assert proxy.trickling
        assert same_bytes(dst, sentinel())  # nothing was copied in after the deadline
        proxy.set_trickling(False)
        outs = [sentinel()]
        assert load_sync(adapter, [stored], outs).count() == 1
        assert same_bytes(outs[0], kv_object(1))


@pytest.mark.parametrize("conditional_writes", [True, False], ids=["if-none-match", "head"])
def test_replacing_stores_overwrite_an_existing_object(
        s3_server: LocalS3Server, make_s3_adapter: MakeAdapter, bucket: str,
        conditional_writes: bool) -> None:
    adapter = make_s3_adapter(conditional_writes=conditional_writes)
    key, first, second = make_key(1), kv_object(1), kv_object(2)
    assert store_sync(adapter, [key], [first]).is_successful()
    skipped = store_sync(adapter, [key], [second])  # the default: the first writer wins
    assert skipped.is_successful() and skipped.bytes_transferred() == 0
    assert enable_replacing_stores(adapter) is True
    assert adapter.report_status()["replacing_stores"] is True
    result = store_sync(adapter, [key], [second])
    assert result.is_successful() and result.bytes_transferred() == second.get_size()
    out = sentinel()
    assert load_sync(adapter, [key], [out]).count() == 1
    assert same_bytes(out, second)
    listed = raw_client(s3_server).list_objects_v2(Bucket=bucket)["Contents"]
    assert len(listed) == 1 and listed[0]["Size"] == second.get_size()


def test_the_deadline_option_is_validated(make_s3_adapter: MakeAdapter) -> None:
    assert make_s3_adapter().report_status()["task_deadline_s"] == 30.0
    for bad in (0, -1, math.nan, math.inf, "soon", True):
        with pytest.raises(ValueError, match="task_deadline_s"):
            make_s3_adapter(task_deadline_s=bad)
