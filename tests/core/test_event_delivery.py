"""Hook events are delivered off the data path: in order, on one thread, never waited for."""

from __future__ import annotations

import threading
import time

from lmserde.event_delivery import EventDelivery


def test_events_arrive_in_order_on_the_event_thread() -> None:
    seen: list[tuple[int, str]] = []
    delivery = EventDelivery(lambda n: seen.append((n, threading.current_thread().name)),
                             name="test-events")
    for n in range(50):
        assert delivery.submit(n)
    assert delivery.flush(5)
    assert [n for n, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"test-events"}
    assert delivery.stats() == {"delivered": 50, "dropped": 0, "queued": 0}


def test_a_full_queue_drops_and_counts_instead_of_waiting() -> None:
    release = threading.Event()
    delivery = EventDelivery(lambda _n: release.wait(30), limit=3)
    try:
        started = time.monotonic()
        results = [delivery.submit(n) for n in range(10)]
        assert time.monotonic() - started < 1.0  # never waits for the stuck observer
        assert results.count(False) >= 6  # 1 in delivery + 3 queued at most
        assert delivery.stats()["dropped"] == results.count(False)
    finally:
        release.set()
    assert delivery.flush(5)
    stats = delivery.stats()
    assert stats["delivered"] + stats["dropped"] == 10 and stats["queued"] == 0


def test_a_raising_delivery_does_not_stop_the_thread() -> None:
    seen: list[int] = []

    def deliver(n: int) -> None:
        if n == 1:
            raise SystemExit("observer gone")
        seen.append(n)

    delivery = EventDelivery(deliver)
    for n in range(3):
        delivery.submit(n)
    assert delivery.flush(5)
    assert seen == [0, 2]


def test_flush_gives_up_at_its_timeout() -> None:
    release = threading.Event()
    delivery = EventDelivery(lambda _n: release.wait(30))
    try:
        delivery.submit(0)
        started = time.monotonic()
        assert delivery.flush(0.2) is False
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
    assert delivery.flush(5)


def test_a_forked_child_delivers_its_own_events() -> None:
    """The parent's delivery thread does not come along into a forked child: the child starts
    its own on its first event (else its events would queue forever)."""
    import os

    seen: list[int] = []
    delivery = EventDelivery(seen.append)
    assert delivery.submit(0) and delivery.flush(5)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when its event arrived
        ok = delivery.submit(1) and delivery.flush(5) and seen == [0, 1]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert seen == [0]  # the parent's own list: the child's event stayed in the child
