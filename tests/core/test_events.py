"""Event notifiers and the shared completion queue."""

from __future__ import annotations

import os
import select
import threading

import pytest
from lmserde.completion_queue import CompletionQueue, TaskIdSource
from lmserde.events import EventfdNotifier, PipeNotifier, consume_fd, wait_on_fd


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


@pytest.mark.parametrize("cls", [EventfdNotifier, PipeNotifier])
def test_notifier_is_binary_and_coalescing(cls: type) -> None:
    n = cls()
    try:
        assert not _readable(n.fileno())
        for _ in range(100):
            n.notify()
        assert _readable(n.fileno())
        n.consume()
        assert not _readable(n.fileno())
        n.consume()  # nothing to read is fine
        consume_fd(n.fileno())
    finally:
        n.close()


def test_completion_queue_returns_each_result_once() -> None:
    q: CompletionQueue[str] = CompletionQueue()
    a, b = q.new_task_id(), q.new_task_id()
    assert a != b
    q.complete(a, "done")
    assert _readable(q.fileno())
    assert q.pop(b) is None
    assert q.pop(a) == "done" and q.pop(a) is None
    q.complete(b, "x")
    assert q.pop_all() == {b: "x"} and q.pop_all() == {}
    fd = q.fileno()
    q.close()
    q.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(RuntimeError, match="closed"):
        q.fileno()


def test_queues_sharing_an_id_source_never_collide() -> None:
    ids = TaskIdSource()
    q1: CompletionQueue[int] = CompletionQueue(ids)
    q2: CompletionQueue[int] = CompletionQueue(ids)
    seen: list[int] = []
    lock = threading.Lock()

    def take(q: CompletionQueue[int]) -> None:
        for _ in range(500):
            i = q.new_task_id()
            with lock:
                seen.append(i)

    threads = [threading.Thread(target=take, args=(q,)) for q in (q1, q2, q1, q2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == len(set(seen)) == 2000
    q1.close()
    q2.close()


def test_wait_on_fd_returns_the_first_result_and_times_out() -> None:
    q: CompletionQueue[str] = CompletionQueue()
    task = q.new_task_id()
    threading.Timer(0.05, q.complete, args=(task, "done")).start()
    assert wait_on_fd(q.fileno(), lambda: q.pop(task), timeout=30) == "done"
    with pytest.raises(TimeoutError, match="never did not complete within 0.1 s"):
        wait_on_fd(q.fileno(), lambda: None, timeout=0.1, what="never")
    q.close()
