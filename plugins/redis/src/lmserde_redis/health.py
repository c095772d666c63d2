"""Connection health as the adapter sees it: logged on transitions, not on every failed call."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["HealthTracker"]

_log = logging.getLogger("lmserde_redis")


class HealthTracker:
    """Counts consecutive failures; logs once when the server becomes unreachable and once on
    recovery, so an outage does not flood the log with one warning per task."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._lock = threading.Lock()
        self._consecutive_failures = 0
        self._total_failures = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None

    def success(self) -> None:
        with self._lock:
            recovered = self._consecutive_failures > 0
            failures = self._consecutive_failures
            self._consecutive_failures = 0
        if recovered:
            _log.info("redis %s is reachable again after %d failed operation(s)",
                      self._where, failures)

    def failure(self, operation: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            first = self._consecutive_failures == 0
            self._consecutive_failures += 1
            self._total_failures += 1
            self._last_error = f"{operation}: {message}"
            self._last_error_at = time.time()
        if first:
            _log.warning("redis %s: %s failed (%s); affected stores fail and loads miss until it "
                         "recovers", self._where, operation, message)
        else:
            _log.debug("redis %s: %s failed again (%s)", self._where, operation, message)

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._consecutive_failures == 0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"consecutive_failures": self._consecutive_failures,
                    "total_failures": self._total_failures,
                    "last_error": self._last_error,
                    "last_error_at": self._last_error_at}
