"""``DaemonWorkerPool``: worker threads whose shutdown is bounded, even when a call never returns.

``concurrent.futures.ThreadPoolExecutor`` cannot give that: ``shutdown`` without waiting still
leaves its workers to be joined when the interpreter exits (``threading._register_atexit``), so a
plugin call that never returns hangs the process's exit as well. This pool's threads are daemon
threads that nothing joins at exit; :meth:`DaemonWorkerPool.shutdown` waits up to a bound for the
queued and running jobs, then returns what is still running (each with where its thread is
stuck) and what never started, and leaves the stuck threads behind.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DaemonWorkerPool", "RunningCall", "PoolShutdown", "describe_thread_stack"]

_log = logging.getLogger(__name__)
#: Seconds idle workers get to exit after the bound (they only leave a condition wait).
_JOIN_GRACE = 0.5


def describe_thread_stack(thread: threading.Thread | None, *, limit: int = 3) -> str:
    """Where ``thread`` is now: its innermost ``limit`` frames, innermost first
    (``"path:line in func <- ..."``); ``""`` when that cannot be told."""
    if thread is None or thread.ident is None:
        return ""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return ""
    frames = traceback.extract_stack(frame)[-limit:]
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(frames))


@dataclass
class RunningCall:
    """A job a worker is running: ``label`` (what it is doing now, updated with
    :meth:`DaemonWorkerPool.note`), ``info`` (the caller's data for the job), the thread and
    when the current step started (``time.monotonic()``)."""

    label: str
    info: Any
    thread: threading.Thread
    started: float

    @property
    def seconds(self) -> float:
        """Seconds the current step has been running."""
        return time.monotonic() - self.started

    def where(self) -> str:
        """The thread's innermost frames (:func:`describe_thread_stack`)."""
        return describe_thread_stack(self.thread)


@dataclass(frozen=True)
class PoolShutdown:
    """What :meth:`DaemonWorkerPool.shutdown` left: the calls still running at the bound
    (``hung``, their threads left behind as daemon threads) and the ``info`` of each job that
    never started (``abandoned``: the caller completes them as failed)."""

    hung: tuple[RunningCall, ...]
    abandoned: tuple[Any, ...]


@dataclass
class _Job:
    fn: Callable[[], None]
    label: str
    info: Any


class DaemonWorkerPool:
    """``workers`` daemon threads running submitted jobs in submission order.

    A job is a callable taking no argument; what it raises is logged and the worker carries on
    (callers contain their own errors). Thread-safe.
    """

    def __init__(self, workers: int, name: str) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"a worker pool needs at least 1 worker, got {workers!r}")
        self.workers = workers
        self._cond = threading.Condition()
        self._pending: deque[_Job] = deque()
        self._running: dict[int, RunningCall] = {}
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], None], *, label: str = "", info: Any = None) -> None:
        """Queue ``fn``; ``RuntimeError`` after :meth:`shutdown`."""
        with self._cond:
            if self._stopping:
                raise RuntimeError("the worker pool is shut down")
            self._pending.append(_Job(fn, label, info))
            self._cond.notify()

    def note(self, label: str) -> None:
        """From inside a job: say what the calling worker does now (restarts its clock)."""
        ident = threading.get_ident()
        with self._cond:
            call = self._running.get(ident)
            if call is not None:
                call.label = label
                call.started = time.monotonic()

    def running(self) -> tuple[RunningCall, ...]:
        """The calls running now (a snapshot)."""
        with self._cond:
            return tuple(self._running.values())

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                job = self._pending.popleft()
                self._running[threading.get_ident()] = RunningCall(job.label, job.info, me,
                                                                   time.monotonic())
            try:
                job.fn()
            except BaseException:  # a worker survives whatever a job lets escape
                _log.exception("worker %s: job %s raised", me.name, job.label)
            finally:
                with self._cond:
                    self._running.pop(threading.get_ident(), None)
                    self._cond.notify_all()

    def shutdown(self, timeout: float) -> PoolShutdown:
        """Stop taking jobs; wait up to ``timeout`` seconds for the queued and running ones.

        Returns at the latest after ``timeout`` (plus scheduling): the calls still running are
        reported as ``hung`` and their daemon threads left behind (they end when the call
        returns, and never delay the interpreter's exit); jobs not started by then are removed
        and reported as ``abandoned``. Idle workers are joined. Idempotent: a second call
        reports what is still running then.
        """
        deadline = time.monotonic() + max(0.0, float(timeout))
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._pending or self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            abandoned = tuple(job.info for job in self._pending)
            self._pending.clear()
            self._cond.notify_all()
            hung = tuple(self._running.values())
        stuck = {call.thread for call in hung}
        join_deadline = max(deadline, time.monotonic()) + _JOIN_GRACE
        for thread in self._threads:
            if thread not in stuck and thread is not threading.current_thread():
                thread.join(max(0.0, join_deadline - time.monotonic()))
        return PoolShutdown(hung, abandoned)
