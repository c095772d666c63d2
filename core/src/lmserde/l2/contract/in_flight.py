"""``InFlight``: the tasks of a coordinating adapter that wait on another component's tasks.

An adapter that carries out its tasks through another asynchronous component (the serde wrapper's
V side for the split tier) registers each task under the id that component returned. The submit
and the registration run in one critical section, and the drains list the table in the same
one, so the poll thread that hears the component's event always finds the task it belongs to;
a task is taken out exactly once (by a drain, or by :meth:`InFlight.close`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

__all__ = ["InFlight"]

T = TypeVar("T")
R = TypeVar("R")


class InFlight(Generic[T]):
    """Tasks ``T`` by the id of the component task they wait on. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[int, T] = {}
        self._closed = False

    def start(self, task: T, submit: Callable[[], int]) -> str | None:
        """Run ``submit()`` (the component's non-blocking submit) and register ``task`` under
        the id it returns. ``None`` when started; otherwise why not, with nothing registered:
        ``"closed"`` after :meth:`close`, else the ``Exception`` ``submit`` raised, as
        ``"Type: message"``."""
        with self._lock:
            if self._closed:
                return "closed"
            try:
                component_id = submit()
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            self._tasks[component_id] = task
        return None

    def finished(self, query: Callable[[int], R | None]) -> list[tuple[T, R]]:
        """The tasks whose component task has a result (``query(id)`` is not ``None``: a
        take-once query such as ``query_load_result``), taken out of the table."""
        with self._lock:
            pending = list(self._tasks.items())
        done: list[tuple[T, R]] = []
        for component_id, task in pending:
            result = query(component_id)
            if result is None:
                continue
            with self._lock:
                if self._tasks.pop(component_id, None) is None:  # taken by close() meanwhile
                    continue
            done.append((task, result))
        return done

    def finished_among(self, pop_all: Callable[[], Mapping[int, R]]) -> list[tuple[T, R]]:
        """The tasks among the results ``pop_all()`` takes (``pop_completed_store_tasks``), taken
        out of the table; results of other ids are dropped (they are not this table's)."""
        with self._lock:  # a submit registers before the results of its id can be taken
            results = pop_all()
            return [(self._tasks.pop(i), r) for i, r in results.items() if i in self._tasks]

    def close(self) -> list[T]:
        """Refuse new tasks (:meth:`start` answers ``"closed"``) and take every task still
        waiting. Idempotent."""
        with self._lock:
            self._closed = True
            tasks = list(self._tasks.values())
            self._tasks.clear()
        return tasks
