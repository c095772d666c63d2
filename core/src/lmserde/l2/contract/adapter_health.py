"""Service health as a network adapter sees it: logged on transitions, not on every failed call.

A network adapter (redis, s3) records every round trip's outcome here. During an outage every
task fails; logging each failure would flood the log, so :class:`AdapterHealth` warns once when
the service becomes unreachable, logs at debug level while it stays so, and logs once on recovery.
:meth:`AdapterHealth.snapshot` is the ``health`` field of the adapter's ``report_status()``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["AdapterHealth"]


class AdapterHealth:
    """Consecutive and total failures of one adapter's service, and the last error.

    ``service`` names the service in log lines (``"redis"``), ``where`` the endpoint, ``unit``
    what one call is (``"operation"``, ``"request"``); lines go to ``logger``. Thread-safe.
    """

    def __init__(self, service: str, where: str, *, logger: logging.Logger,
                 unit: str = "operation") -> None:
        self._service = service
        self._where = where
        self._unit = unit
        self._log = logger
        self._lock = threading.Lock()
        self._consecutive = 0
        self._total = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None

    def success(self) -> None:
        """A call answered: ends a run of failures (logged once, at info level)."""
        with self._lock:
            failures, self._consecutive = self._consecutive, 0
        if failures:
            self._log.info("%s %s is reachable again after %d failed %s(s)", self._service,
                           self._where, failures, self._unit)

    def failure(self, operation: str, exc: BaseException) -> None:
        """``operation`` failed with ``exc``: the first of a run is a warning, the rest debug."""
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            first = self._consecutive == 0
            self._consecutive += 1
            self._total += 1
            self._last_error = f"{operation}: {message}"
            self._last_error_at = time.time()
        if first:
            self._log.warning("%s %s: %s failed (%s); affected stores fail and loads miss until "
                              "it recovers", self._service, self._where, operation, message)
        else:
            self._log.debug("%s %s: %s failed again (%s)", self._service, self._where, operation,
                            message)

    @property
    def healthy(self) -> bool:
        """No failure since the last success."""
        with self._lock:
            return self._consecutive == 0

    def snapshot(self) -> dict[str, Any]:
        """``consecutive_failures``, ``total_failures``, ``last_error`` (``"operation: Type:
        message"``) and ``last_error_at`` (epoch seconds), ``None`` before any failure."""
        with self._lock:
            return {"consecutive_failures": self._consecutive, "total_failures": self._total,
                    "last_error": self._last_error, "last_error_at": self._last_error_at}
