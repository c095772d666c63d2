"""Service health as the adapter sees it: logged on transitions, not on every failed request."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["HealthTracker"]

_log = logging.getLogger("lmserde_s3")


class HealthTracker:
    """Counts consecutive failed requests; warns once when the service becomes unreachable and
    logs once on recovery, so an outage does not flood the log with one line per key."""

    def __init__(self, where: str) -> None:
        self._where = where
        self._lock = threading.Lock()
        self._consecutive = 0
        self._total = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None

    def success(self) -> None:
        with self._lock:
            failures, self._consecutive = self._consecutive, 0
        if failures:
            _log.info("s3 %s answers again after %d failed request(s)", self._where, failures)

    def failure(self, operation: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            first = self._consecutive == 0
            self._consecutive += 1
            self._total += 1
            self._last_error = f"{operation}: {message}"
            self._last_error_at = time.time()
        if first:
            _log.warning("s3 %s: %s failed (%s); affected stores fail and loads miss until it "
                         "recovers", self._where, operation, message)
        else:
            _log.debug("s3 %s: %s failed again (%s)", self._where, operation, message)

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._consecutive == 0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"consecutive_failures": self._consecutive, "total_failures": self._total,
                    "last_error": self._last_error, "last_error_at": self._last_error_at}
