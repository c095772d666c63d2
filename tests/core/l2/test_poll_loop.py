"""PollLoop: fd handlers run after the fd is drained, failures are contained, stop joins."""

from __future__ import annotations

import threading

import pytest
from lmserde.events import create_event_notifier
from lmserde.l2.contract.poll_loop import PollLoop

WAIT = 10.0


def test_handlers_timers_and_stop() -> None:
    notifier = create_event_notifier()
    calls: list[str] = []
    seen = threading.Event()
    timer_ran = threading.Event()

    def handler() -> None:
        calls.append("fd")
        if len(calls) == 1:
            raise RuntimeError("a failing drain")  # logged; the loop keeps running
        seen.set()

    loop = PollLoop("test-loop")
    loop.add_fd(notifier.fileno(), handler)
    loop.start()
    try:
        notifier.notify()
        notifier.notify()  # usually coalesces with the first; under load it may wake twice
        loop.call_later(0.0, timer_ran.set)
        assert timer_ran.wait(WAIT)
        notifier.notify()
        assert seen.wait(WAIT)
        assert calls[:2] == ["fd", "fd"]  # the loop survived the failing first drain
    finally:
        loop.stop()
        loop.stop()
        notifier.close()
    assert not any(t.name == "test-loop" for t in threading.enumerate())


def test_pending_timers_never_run_after_stop() -> None:
    ran = threading.Event()
    loop = PollLoop("test-loop-2")
    loop.start()
    loop.call_later(3600.0, ran.set)
    loop.stop()
    assert not ran.is_set()


def test_fds_are_registered_before_start() -> None:
    loop = PollLoop("test-loop-3")
    notifier = create_event_notifier()
    loop.add_fd(notifier.fileno(), lambda: None)
    try:
        with pytest.raises(ValueError, match="already watched"):
            loop.add_fd(notifier.fileno(), lambda: None)
        loop.start()
        with pytest.raises(RuntimeError, match="before start"):
            loop.add_fd(99, lambda: None)
    finally:
        loop.stop()
        notifier.close()
