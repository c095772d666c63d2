"""``PollLoop``: one daemon thread that waits on event fds and timers and runs their handlers."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import select
import threading
import time
from collections.abc import Callable

from lmserde.containment import describe_exception
from lmserde.events import consume_fd, create_event_notifier
from lmserde.worker_pool import describe_thread_stack

__all__ = ["PollLoop", "MAX_TIMER_DELAY"]

#: Longest delay :meth:`PollLoop.call_later` accepts (one day).
MAX_TIMER_DELAY = 86400.0
#: Longest single ``poll`` wait (a timer further away is re-checked after this).
_MAX_POLL_MS = 3_600_000.0

_log = logging.getLogger(__name__)

Handler = Callable[[], None]


class PollLoop:
    """Runs ``handler()`` after each readable registered fd has been drained, and timers when due.

    The fd is consumed *before* its handler runs, so a completion signalled during the handler
    wakes the loop again. Whatever a handler or timer raises (any ``BaseException``, ``SystemExit``
    included) is logged and the loop continues: the thread only ends through :meth:`stop`. :meth:`stop` wakes
    the loop through an internal event fd and joins the thread: no polling timeout is involved.
    A ``timeout`` bounds that join: a handler that never returns (a hook plugin that hangs) is
    logged and reported, and the daemon thread is left behind; it never touches an fd again
    (each fd is read only under the loop's lock, after checking that the loop still runs).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._wake = create_event_notifier()
        self._handlers: dict[int, Handler] = {}
        self._timers: list[tuple[float, int, Handler]] = []
        self._timer_seq = itertools.count()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._current: tuple[Handler, float] | None = None  # the handler running, since when

    def add_fd(self, fd: int, handler: Handler) -> None:
        """Watch ``fd``; only before :meth:`start`."""
        if self._thread is not None:
            raise RuntimeError("PollLoop.add_fd must be called before start()")
        if fd in self._handlers:
            raise ValueError(f"fd {fd} is already watched by this loop")
        self._handlers[fd] = handler

    def call_later(self, delay: float, handler: Handler) -> None:
        """Run ``handler`` on the loop thread after ``delay`` seconds (thread-safe).

        ``delay`` must be a finite number of at most :data:`MAX_TIMER_DELAY` seconds
        (``ValueError`` otherwise); a negative delay runs the handler at the next turn.
        """
        seconds = float(delay)
        if not math.isfinite(seconds) or seconds > MAX_TIMER_DELAY:
            raise ValueError(
                f"{self._name}: timer delay must be a finite number of at most "
                f"{MAX_TIMER_DELAY:g} seconds, got {delay!r}"
            )
        with self._lock:
            heapq.heappush(self._timers,
                           (time.monotonic() + max(seconds, 0.0), next(self._timer_seq), handler))
        self._wake.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float | None = None) -> str | None:
        """Stop the thread and release the wake fd; idempotent. Pending timers never run.

        Waits for a running handler to return: forever without ``timeout``, else at most
        ``timeout`` seconds. Returns ``None`` when the thread ended, else a description of the
        handler still running (which handler, for how long, where its thread is), also logged
        as an error; the stuck daemon thread is left behind and never touches an fd again.
        """
        with self._lock:
            if self._stopping:
                return None
            self._stopping = True
        self._wake.notify()
        thread = self._thread
        stuck = None
        if thread is not None and not self.in_loop_thread:
            thread.join(timeout)
            if thread.is_alive():
                stuck = self._describe_stuck(thread)
                _log.error("%s: stop() returned after %g s with a handler still running (left "
                           "on a daemon thread): %s", self._name, timeout, stuck)
        with self._lock:  # the loop reads fds only under this lock while not stopping
            self._wake.close()
        return stuck

    def _describe_stuck(self, thread: threading.Thread) -> str:
        with self._lock:
            current = self._current
        what = "a handler" if current is None else (
            f"handler {current[0]!r} running for {time.monotonic() - current[1]:.1f} s")
        where = describe_thread_stack(thread, limit=4)
        return f"{what} on thread {thread.name}" + (f", at {where}" if where else "")

    def _run(self) -> None:
        poller = select.poll()
        wake_fd = self._wake.fileno()
        poller.register(wake_fd, select.POLLIN)
        for fd in self._handlers:
            poller.register(fd, select.POLLIN)
        while True:
            with self._lock:
                if self._stopping:
                    return
                timeout_ms = None
                if self._timers:
                    timeout_ms = min(max((self._timers[0][0] - time.monotonic()) * 1000.0, 0.0),
                                     _MAX_POLL_MS)
            try:
                ready = poller.poll(timeout_ms)
            except InterruptedError:
                continue
            for fd, _events in ready:
                with self._lock:  # never read an fd stop() may already have closed
                    if self._stopping:
                        return
                    if fd == wake_fd or not _events & select.POLLNVAL:
                        consume_fd(fd)
                if fd == wake_fd:
                    continue
                if _events & select.POLLNVAL:  # closed under us: stop watching it
                    _log.error("%s: fd %d was closed while watched", self._name, fd)
                    poller.unregister(fd)
                    continue
                self._call(self._handlers[fd])
            self._run_due_timers()

    def _run_due_timers(self) -> None:
        now = time.monotonic()
        due: list[Handler] = []
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                due.append(heapq.heappop(self._timers)[2])
        for handler in due:
            self._call(handler)

    def _call(self, handler: Handler) -> None:
        with self._lock:
            if self._stopping:
                return
            self._current = (handler, time.monotonic())
        try:
            handler()
        except BaseException as exc:  # one bad drain must not stop the loop
            _log.error("%s: handler %r raised %s; continuing", self._name, handler,
                       describe_exception(exc), exc_info=exc)
        finally:
            with self._lock:
                self._current = None
