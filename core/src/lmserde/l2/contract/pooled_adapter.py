"""The I/O side of a network adapter: a thread pool, task deadlines and a bounded close.

A network adapter (redis, s3) runs every round trip on a few I/O threads so that ``submit_*``
never touches the network, gives every task a deadline (:class:`~lmserde.l2.TaskDeadlines`) and
counts the jobs in progress (:class:`~lmserde.l2.BusyWorkers`). :class:`AdapterIOPool` is that
machinery, once: the adapter keeps its own protocol code, counters and completion queues.

Closing is bounded: running jobs get ``deadline_s`` to finish, queued ones are dropped, the
adapter's connections are closed (which ends any socket call still running), and the I/O threads
are joined only if they went idle within a further second; otherwise they are logged and left.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, TypeVar

from lmserde.l2.contract.task_deadline import BusyWorkers, TaskDeadlines, TaskGate

__all__ = ["AdapterIOPool"]

T = TypeVar("T")

#: How long close waits a second time, after closing the connections, for jobs still running.
_AFTER_CONNECTIONS_CLOSED_S = 1.0


class AdapterIOPool:
    """``workers`` I/O threads named ``<name>_<n>``, a :class:`TaskDeadlines` of ``deadline_s``
    and the adapter's closed state.

    ``owner`` names the adapter in errors (``"RedisL2Adapter is closed"``), ``service`` in log
    lines (``"redis adapter: ..."``); ``on_deadline`` runs each time a task is reported failed at
    its deadline (the adapter counts it). Thread-safe; every method but :meth:`close` raises
    ``RuntimeError`` once closed.
    """

    def __init__(self, name: str, *, workers: int, deadline_s: float, owner: str, service: str,
                 logger: logging.Logger, on_deadline: Callable[[], None] | None = None) -> None:
        self._owner = owner
        self._service = service
        self._log = logger
        self._on_deadline = on_deadline
        self._deadlines = TaskDeadlines(deadline_s, name)
        self._busy = BusyWorkers()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def deadline_s(self) -> float:
        """Every task's deadline, and the longest a synchronous call waits."""
        return self._deadlines.deadline_s

    @property
    def running(self) -> int:
        """I/O jobs running now (the ``io_jobs_running`` status field)."""
        return self._busy.running

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """``RuntimeError`` once :meth:`close` began."""
        if self._closed:
            raise RuntimeError(f"{self._owner} is closed")

    def submit(self, run: Callable[[], T]) -> Future[T]:
        """Queue ``run`` on the I/O threads (never blocks); its future."""
        return self.submit_all([run])[0]

    def submit_all(self, runs: Sequence[Callable[[], T]]) -> list[Future[T]]:
        """Queue every one of ``runs``, or none of them once closed; their futures."""
        with self._lock:
            self.check_open()
            return [self._pool.submit(self._busy.run, run) for run in runs]

    def submit_detached(self, run: Callable[[], object], what: str) -> None:
        """Queue ``run``, a job nobody waits for (e.g. a deferred delete an unlock released),
        on the I/O threads; once the pool is closed (or it closes meanwhile) ``run`` is dropped
        and a debug line says ``<service> adapter closed before <what>``. Never raises."""
        try:
            self.submit(run)
        except RuntimeError:  # closed
            self._log.debug("%s adapter closed before %s", self._service, what)

    def start_task(self, deliver: Callable[[T], None], failure: Callable[[], T]) -> TaskGate[T]:
        """A deadline-guarded gate (see :class:`TaskGate`): ``deliver`` gets the worker's result,
        or ``failure()`` at the deadline (which also runs ``on_deadline``)."""
        def expired() -> T:
            if self._on_deadline is not None:
                self._on_deadline()
            return failure()

        with self._lock:
            self.check_open()
        return self._deadlines.start(deliver, expired)

    def untracked_gate(self) -> TaskGate[None]:
        """A gate of a synchronous call: its deadline aborts what its job registered with
        :meth:`TaskGate.on_expire` and reports nothing."""
        return self._deadlines.start(lambda _: None, lambda: None)

    def wait_bounded(self, futures: Sequence[Future[Any]]) -> set[Future[Any]]:
        """Wait at most ``deadline_s`` for ``futures``; those not done by then."""
        return set(wait_futures(futures, timeout=self._deadlines.deadline_s).not_done)

    def close(self, close_connections: Callable[[], None]) -> bool:
        """Mark closed, drop queued jobs, give running ones ``deadline_s``, stop the deadlines,
        call ``close_connections()`` (its exception is logged at debug level), give jobs still
        running another second, then join the I/O threads if they are idle (otherwise log a
        warning and leave them). ``False`` (and nothing done) when already closed."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        idle = self._busy.wait_idle(self._deadlines.deadline_s)
        self._deadlines.close()
        try:
            close_connections()
        except Exception as exc:
            self._log.debug("closing the %s client raised %s", self._service, exc)
        if not idle:  # closing the connections ends the socket calls still running
            idle = self._busy.wait_idle(_AFTER_CONNECTIONS_CLOSED_S)
        if idle:
            self._pool.shutdown(wait=True)  # joins the I/O threads
        else:
            self._log.warning("%s adapter: %d I/O job(s) still running after close; their tasks "
                              "were dropped", self._service, self._busy.running)
        return True
