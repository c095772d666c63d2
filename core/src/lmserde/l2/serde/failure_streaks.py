"""Consecutive failures of the wrapper's stores and of its loads, behind its health verdict."""

from __future__ import annotations

import threading

__all__ = ["UNHEALTHY_AFTER_FAILURES", "FailureStreaks"]

#: ``report_status()["is_healthy"]`` turns false after this many consecutive failed store tasks
#: (not counting those refused for a tenant the frame key holds no key for), or load tasks that
#: had a key refused as damaged or failing inside the wrapper.
UNHEALTHY_AFTER_FAILURES = 8


class FailureStreaks:
    """Per operation (``store``, ``load``), how many tasks in a row failed. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streaks = {"store": 0, "load": 0}

    def count(self, operation: str, ok: bool) -> None:
        """Record one finished task of ``operation``: a success ends its streak."""
        with self._lock:
            self._streaks[operation] = 0 if ok else self._streaks[operation] + 1

    def snapshot(self) -> dict[str, int]:
        """The current streak per operation."""
        with self._lock:
            return dict(self._streaks)

    def healthy(self) -> bool:
        """Whether no streak has reached :data:`UNHEALTHY_AFTER_FAILURES`."""
        return max(self.snapshot().values()) < UNHEALTHY_AFTER_FAILURES
