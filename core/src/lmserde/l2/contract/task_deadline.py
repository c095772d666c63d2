"""Task deadlines: every task of a network adapter completes by its deadline, whatever its worker does.

A network adapter runs its tasks on I/O threads that may sit in a socket call far longer than any
timeout suggests (a server that trickles one byte at a time never trips a per-read timeout). The
caller still needs an answer: :class:`TaskDeadlines` gives each task a :class:`TaskGate` and
completes it as failed when its deadline passes; the worker's own, later answer is then discarded.

The gate is also what keeps a late worker away from the caller's memory. A task that was reported
(by its worker or by its deadline) is *closed*: the caller may reuse its buffers at once. A worker
therefore touches caller memory only through :meth:`TaskGate.while_open`, which runs a short copy
under the gate's lock only while the task is open, and the deadline closes the gate under the same
lock. So a load copies into the destination only before the task is reported, and a store reads its
source (into a private copy it then sends) only before the task is reported; neither ever reads or
writes caller memory afterwards.

A worker may also register an abort action with :meth:`TaskGate.on_expire` (e.g. shutting down the
socket it is blocked on), so that a task past its deadline frees its thread instead of holding it
for as long as a trickling server takes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["DEFAULT_TASK_DEADLINE_S", "BusyWorkers", "TaskDeadlines", "TaskGate",
           "check_task_deadline"]

_log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

#: The documented default of the network adapters' ``task_deadline_s`` option.
DEFAULT_TASK_DEADLINE_S = 30.0
#: The largest ``task_deadline_s`` accepted (a day: anything longer is a configuration mistake).
MAX_TASK_DEADLINE_S = 86400.0


def check_task_deadline(value: float, name: str = "task_deadline_s") -> float:
    """``value`` as a float when it is a finite number in ``(0, MAX_TASK_DEADLINE_S]``; otherwise
    ``ValueError`` naming the option (bools and strings are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"option '{name}' must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not 0 < seconds <= MAX_TASK_DEADLINE_S:  # also refuses NaN
        raise ValueError(f"option '{name}' must be > 0 and <= {MAX_TASK_DEADLINE_S:g} seconds, "
                         f"got {value!r}")
    return seconds


class TaskGate(Generic[R]):
    """The once-only completion of one task, shared by its worker(s) and its deadline.

    ``deliver(result)`` (e.g. a completion queue's ``complete``) is called exactly once: by
    :meth:`finish` or by :meth:`expire`, whichever comes first, under the gate's lock. After
    :meth:`abandon` (adapter closing) it is never called.
    """

    def __init__(self, deliver: Callable[[R], None], failure: Callable[[], R]) -> None:
        self._deliver: Callable[[R], None] | None = deliver
        self._failure: Callable[[], R] | None = failure
        self._lock = threading.Lock()
        self._open = True
        self.expired = False
        self._aborts: dict[int, Callable[[], None]] = {}
        self._abort_ids = itertools.count()

    @property
    def is_open(self) -> bool:
        return self._open

    def while_open(self, action: Callable[[], T]) -> tuple[bool, T | None]:
        """``(True, action())`` when the task is still open, ``(False, None)`` once it was
        reported; ``action`` runs under the gate's lock, so it must be short (a memory copy) and
        never touch the network."""
        with self._lock:
            if not self._open:
                return False, None
            return True, action()

    def finish(self, result: R, before: Callable[[], None] | None = None) -> bool:
        """Report ``result`` unless the task was already reported; ``before()`` runs first, under
        the same lock (e.g. pinning a lookup's hits, so late hits are never pinned). Whether
        this call reported the task."""
        with self._lock:
            if not self._open:
                return False
            self._open = False
            deliver = self._release()
            if before is not None:
                before()
            deliver(result)
            return True

    def on_expire(self, abort: Callable[[], None]) -> Callable[[], None]:
        """Run ``abort()`` if the task expires while it is registered (at once if it already
        has); returns the function that unregisters it. ``abort`` runs on the deadline thread,
        after the failure was reported and outside the gate's lock; what it raises is logged."""
        with self._lock:
            if not self.expired:
                token = next(self._abort_ids)
                self._aborts[token] = abort

                def unregister() -> None:
                    with self._lock:
                        self._aborts.pop(token, None)

                return unregister
        _run_abort(abort)
        return lambda: None

    def expire(self) -> bool:
        """Report the task's failure result (its deadline passed) unless it was reported, then
        run the registered abort actions."""
        with self._lock:
            if not self._open:
                return False
            self._open = False
            self.expired = True
            aborts, self._aborts = list(self._aborts.values()), {}
            failure = self._failure
            deliver = self._release()
            assert failure is not None
            deliver(failure())
        for abort in aborts:
            _run_abort(abort)
        return True

    def abandon(self) -> None:
        """Close the task without reporting it (the adapter is closing)."""
        with self._lock:
            if self._open:
                self._open = False
                self._release()
            self._aborts = {}

    def _release(self) -> Callable[[R], None]:
        """The deliver function, dropping the gate's references (a closed gate may stay queued
        until its deadline; it must not keep a task's data alive). Under the lock, once."""
        deliver = self._deliver
        self._deliver = self._failure = None
        assert deliver is not None
        return deliver


def _run_abort(abort: Callable[[], None]) -> None:
    try:
        abort()
    except Exception as exc:  # an abort is best effort; the task is already reported
        _log.warning("aborting the work of an expired task raised %s: %s", type(exc).__name__, exc)


class TaskDeadlines:
    """One watcher thread per adapter that expires each registered gate at its deadline.

    :meth:`start` registers a task and never blocks on anything but a short lock. The thread
    starts with the first task and ends at :meth:`close`, which also abandons every open gate
    (workers finishing after ``close`` neither report nor touch caller memory).
    """

    def __init__(self, deadline_s: float, name: str) -> None:
        self.deadline_s = check_task_deadline(deadline_s)
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, TaskGate]] = []  # type: ignore[type-arg]
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.expired_count = 0

    def start(self, deliver: Callable[[R], None], failure: Callable[[], R]) -> TaskGate[R]:
        """A gate for a new task whose deadline is ``deadline_s`` from now."""
        gate: TaskGate[R] = TaskGate(deliver, failure)
        due = time.monotonic() + self.deadline_s
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self._name}: closed")
            heapq.heappush(self._heap, (due, next(self._seq), gate))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name=f"{self._name}-deadlines")
                self._thread.start()
            elif self._heap[0][2] is gate:
                self._cond.notify()
        return gate

    def _watch(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    while self._heap and not self._heap[0][2].is_open:
                        heapq.heappop(self._heap)  # finished in time
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed:
                    return
                gate = heapq.heappop(self._heap)[2]
            try:
                if gate.expire():
                    self.expired_count += 1
                    # the first one is a warning; the rest are counted (adapters show the count
                    # in their status) so that an outage does not log once per task
                    log = _log.warning if self.expired_count == 1 else _log.debug
                    log("%s: a task passed its %.3g s deadline and completed as failed (%d so "
                        "far)", self._name, self.deadline_s, self.expired_count)
            except BaseException as exc:  # a failing deliver never stops the watcher
                _log.exception("%s: completing an expired task raised %s", self._name, exc)

    def close(self) -> None:
        """Stop the watcher and abandon every open gate; idempotent."""
        with self._cond:
            self._closed = True
            gates = [entry[2] for entry in self._heap]
            self._heap.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        for gate in gates:
            gate.abandon()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


class BusyWorkers:
    """Counts jobs running on an adapter's I/O threads, so ``close()`` can wait for them with a
    bound instead of joining threads that may sit in a socket call."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0

    def run(self, job: Callable[[], T]) -> T:
        """``job()``, counted as running while it runs."""
        with self._cond:
            self._running += 1
        try:
            return job()
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self._cond.notify_all()

    @property
    def running(self) -> int:
        with self._cond:
            return self._running

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for no job to be running; whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: self._running == 0, timeout)
