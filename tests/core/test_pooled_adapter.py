"""AdapterIOPool: the I/O threads, task deadlines and bounded close of the network adapters."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from lmserde.l2 import AdapterIOPool

_LOGGER = "lmserde.tests.pooled_adapter"
# generous bounds: a loaded 2-core machine must not flake, yet each is far below the hang it
# guards against (an event nobody sets)
_WAIT_S = 10.0


def _pool(deadline_s: float = 5.0, **kwargs: object) -> AdapterIOPool:
    return AdapterIOPool("lmserde-test", workers=2, deadline_s=deadline_s, owner="TestAdapter",
                         service="test", logger=logging.getLogger(_LOGGER), **kwargs)  # type: ignore[arg-type]


def test_jobs_run_on_named_io_threads_and_are_counted_while_running() -> None:
    pool = _pool()
    release = threading.Event()
    names: list[str] = []

    def job() -> int:
        names.append(threading.current_thread().name)
        release.wait(_WAIT_S)
        return 7

    futures = pool.submit_all([job, job])
    deadline = time.monotonic() + _WAIT_S
    while pool.running < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.running == 2
    release.set()
    assert [f.result(_WAIT_S) for f in futures] == [7, 7]
    assert all(n.startswith("lmserde-test") for n in names)
    assert pool.close(lambda: None) is True


def test_a_task_past_its_deadline_is_reported_failed_once_and_counted() -> None:
    expired = []
    pool = _pool(deadline_s=0.2, on_deadline=lambda: expired.append(1))
    delivered: list[str] = []
    done = threading.Event()

    def deliver(result: str) -> None:
        delivered.append(result)
        done.set()

    gate = pool.start_task(deliver, lambda: "failed")
    assert done.wait(_WAIT_S)
    assert gate.finish("late") is False  # the worker's late answer is discarded
    assert delivered == ["failed"] and expired == [1]
    assert pool.deadline_s == 0.2
    pool.close(lambda: None)


def test_wait_bounded_returns_the_jobs_not_done_by_the_deadline() -> None:
    pool = _pool(deadline_s=0.2)
    release = threading.Event()
    slow = pool.submit(lambda: release.wait(_WAIT_S))
    fast = pool.submit(lambda: None)
    assert pool.wait_bounded([slow, fast]) == {slow}
    release.set()
    pool.close(lambda: None)


def test_close_is_idempotent_and_refuses_new_work() -> None:
    pool = _pool()
    closed_connections = []
    assert pool.close(lambda: closed_connections.append(1)) is True
    assert pool.close(lambda: closed_connections.append(1)) is False
    assert closed_connections == [1] and pool.closed
    with pytest.raises(RuntimeError, match="TestAdapter is closed"):
        pool.submit(lambda: None)
    with pytest.raises(RuntimeError, match="TestAdapter is closed"):
        pool.start_task(lambda _: None, lambda: None)


def test_close_drops_queued_jobs_and_closing_connections_frees_a_stuck_worker() -> None:
    pool = _pool(deadline_s=0.2)
    connection = threading.Event()  # set = closed: what a socket call blocked on would see
    started = threading.Barrier(3, timeout=_WAIT_S)
    ran = []

    def stuck() -> None:
        started.wait()
        connection.wait(_WAIT_S)

    pool.submit_all([stuck, stuck])
    queued = pool.submit(lambda: ran.append(1))
    started.wait()
    begin = time.monotonic()
    assert pool.close(connection.set)
    assert time.monotonic() - begin < _WAIT_S / 2  # the deadline, then the freed workers
    assert queued.cancelled() and ran == []
    assert pool.running == 0


def test_close_leaves_and_logs_workers_still_stuck(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=_LOGGER)
    pool = _pool(deadline_s=0.1)
    release = threading.Event()
    pool.submit(lambda: release.wait(_WAIT_S))

    def broken_close() -> None:
        raise OSError("already gone")

    try:
        assert pool.close(broken_close)
        messages = [r.getMessage() for r in caplog.records if r.name == _LOGGER]
        assert "closing the test client raised already gone" in messages
        assert any("1 I/O job(s) still running after close" in m for m in messages)
        assert pool.running == 1
    finally:
        release.set()


def test_a_detached_job_runs_while_open_and_is_dropped_with_a_debug_line_once_closed(
        caplog: pytest.LogCaptureFixture) -> None:
    pool = _pool()
    ran = threading.Event()
    pool.submit_detached(ran.set, "a test job")
    assert ran.wait(_WAIT_S)
    pool.close(lambda: None)
    late = threading.Event()
    with caplog.at_level(logging.DEBUG, logger=_LOGGER):
        pool.submit_detached(late.set, "a deferred delete of 3 key(s)")  # never raises
    assert "test adapter closed before a deferred delete of 3 key(s)" in caplog.text
    assert not late.wait(0.2)
