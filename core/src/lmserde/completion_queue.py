"""The one task-completion queue shared by processors, adapters and wrappers.

Task ids, a lock, a dict of finished results and an event fd signalled after each result is
stored: the bookkeeping upstream copies into every component.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Generic, TypeVar

from lmserde.events import EventNotifier, create_event_notifier

__all__ = ["TaskIdSource", "CompletionQueue"]

_log = logging.getLogger(__name__)

ResultT = TypeVar("ResultT")


class TaskIdSource:
    """Thread-safe source of increasing task ids starting at 0; may be shared by several queues."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            return next(self._counter)


class CompletionQueue(Generic[ResultT]):
    """Finished task results keyed by task id, with a coalescing event fd.

    ``complete`` stores a result, then signals the fd. ``pop`` returns a result exactly once
    (``None`` while pending, unknown or already taken); ``pop_all`` takes every finished result.
    A consumer woken by the fd must drain everything that is ready: the signal coalesces.
    """

    def __init__(self, ids: TaskIdSource | None = None) -> None:
        self._ids = ids if ids is not None else TaskIdSource()
        self._lock = threading.Lock()
        self._done: dict[int, ResultT] = {}
        self._notifier: EventNotifier | None = create_event_notifier()

    def new_task_id(self) -> int:
        """A fresh task id (unique across every queue sharing this queue's id source)."""
        return self._ids.next_id()

    def complete(self, task_id: int, result: ResultT) -> None:
        """Record ``result`` for ``task_id`` and signal the fd (a signal failure is logged)."""
        with self._lock:
            self._done[task_id] = result
        notifier = self._notifier
        if notifier is None:
            return
        try:
            notifier.notify()
        except OSError:
            _log.exception("failed to signal completion of task %d", task_id)

    def pop(self, task_id: int) -> ResultT | None:
        with self._lock:
            return self._done.pop(task_id, None)

    def pop_all(self) -> dict[int, ResultT]:
        with self._lock:
            done, self._done = self._done, {}
        return done

    def fileno(self) -> int:
        if self._notifier is None:
            raise RuntimeError("completion queue is closed")
        return self._notifier.fileno()

    @property
    def closed(self) -> bool:
        return self._notifier is None

    def close(self) -> None:
        """Close the fd; idempotent. Results not yet taken are dropped."""
        notifier, self._notifier = self._notifier, None
        if notifier is not None:
            notifier.close()
