"""``EventDelivery``: observability events reach hook plugins off the data path.

A task's completion must never wait for an observer: a hook implementation that is slow (or
never returns) would otherwise delay every store and load of the processor or wrapper that
emits on its worker or poll thread. Events are put on a bounded queue and delivered, in order,
by one daemon thread. When the queue is full (the observers fall behind) an event is dropped and
counted (:meth:`EventDelivery.stats`), never waited for: observability gives way to the data path.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_EVENT_QUEUE_LIMIT", "EventDelivery"]

_log = logging.getLogger("lmserde.hooks")

#: Events waiting for delivery at most; beyond, new events are dropped (and counted).
DEFAULT_EVENT_QUEUE_LIMIT = 4096

#: A drop is logged at most once per this many seconds (with the count so far).
_DROP_LOG_INTERVAL_S = 10.0


class EventDelivery:
    """Delivers ``deliver(*event)`` calls on one daemon thread, started with the first event.

    ``deliver`` is the function that calls the hook implementations; it must not raise (what it
    raises is logged and the thread goes on). Thread-safe.
    """

    def __init__(self, deliver: Callable[..., None], *,
                 limit: int = DEFAULT_EVENT_QUEUE_LIMIT, name: str = "lmserde-events") -> None:
        self._deliver = deliver
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=limit)
        self._name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._limit = limit
        self._delivered = 0
        self._dropped = 0
        self._last_drop_log = 0.0

    def submit(self, *event: Any) -> bool:
        """Queue one event for delivery; never waits. ``False`` when it was dropped (the queue
        is full)."""
        self._ensure_thread()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._lock:
                self._dropped += 1
                dropped = self._dropped
                now = time.monotonic()
                log = now - self._last_drop_log >= _DROP_LOG_INTERVAL_S
                if log:
                    self._last_drop_log = now
            if log:
                _log.warning("hook events: observers fall behind; %d event(s) dropped so far",
                             dropped)
            return False
        return True

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._pid == os.getpid():
            return
        if self._pid != os.getpid():  # a forked child: the parent's thread (and whatever it
            self._lock = threading.Lock()  # held) did not come along; start afresh
            self._queue = queue.Queue(maxsize=self._limit)
            self._thread = None
            self._pid = os.getpid()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                self._deliver(*event)
            except BaseException:
                _log.exception("hook events: delivering an event raised; ignored")
            finally:
                with self._lock:
                    self._delivered += 1
                self._queue.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event queued so far was delivered, at most ``timeout`` seconds;
        whether it was. For tests and orderly shutdowns; never called on the data path."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def stats(self) -> dict[str, int]:
        """``delivered``, ``dropped`` and ``queued`` (waiting now) events."""
        with self._lock:
            return {"delivered": self._delivered, "dropped": self._dropped,
                    "queued": self._queue.qsize()}
