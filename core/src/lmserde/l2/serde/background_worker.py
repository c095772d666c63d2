"""``BackgroundWorker``: one daemon thread that runs the wrapper's jobs that may touch the network.

``submit_*`` of an L2 adapter never waits on the network. A load through the serde wrapper of a
serde whose stored size varies (``UPPER_BOUND`` size contract) first asks the inner adapter for
the stored sizes of its keys, and for ``redis`` or ``s3`` that is a round trip (or, with a
frozen server, as long as the adapter's deadline). The wrapper hands that step, and the rest of
the task's start, to this worker, so its caller only registers the task.

The thread is a daemon: a job stuck in plugin code (an adapter that never returns) neither keeps
the interpreter alive nor blocks :meth:`close`, which only stops new jobs from starting. A job
that raises is logged; jobs must complete their own tasks (the worker never sees them).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from lmserde.containment import describe_exception

__all__ = ["BackgroundWorker"]

_log = logging.getLogger(__name__)

_STOP = object()


class BackgroundWorker:
    """Runs submitted callables one after another on one daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job``; raises ``RuntimeError`` after :meth:`close`. Never waits."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            try:
                job()  # type: ignore[operator]
            except BaseException as exc:
                _log.error("%s: a job raised %s", self._name, describe_exception(exc))

    def close(self) -> None:
        """Stop taking jobs; the thread ends after the jobs already queued. Never waits for
        them (a job blocked in plugin code must not block shutdown). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._thread is not None
        if started:
            self._jobs.put(_STOP)
