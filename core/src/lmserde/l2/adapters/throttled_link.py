"""``ThrottledLink``: one direction of a simulated storage link of a given bandwidth (the fault
adapter's bandwidth injection)."""

from __future__ import annotations

import math
import threading
import time

__all__ = ["ThrottledLink", "check_bandwidth"]


def check_bandwidth(value: float) -> float:
    """``value`` as a bandwidth in bytes per second; ``ValueError`` unless finite and >= 0."""
    bandwidth = float(value)
    if not 0.0 <= bandwidth < math.inf:  # also refuses NaN
        raise ValueError(f"fault adapter: bandwidth_bytes_per_second must be a finite number "
                         f">= 0 (0: unthrottled), got {value!r}")
    return bandwidth


class ThrottledLink:
    """One direction of a simulated link of ``bandwidth`` bytes per second (0: unthrottled).

    Transfers go one after another: a transfer of ``n`` bytes that starts when the link is free
    ends ``n / bandwidth`` seconds later (:meth:`reserve` returns that time, on
    ``time.monotonic()``'s clock). The bandwidth can change while tasks run
    (:meth:`set_bandwidth`); transfers already reserved keep their end. Thread-safe.
    """

    def __init__(self, bandwidth: float = 0.0) -> None:
        self._bandwidth = check_bandwidth(bandwidth)
        self._free_at = 0.0
        self._lock = threading.Lock()

    @property
    def bandwidth(self) -> float:
        """Bytes per second (0: unthrottled)."""
        return self._bandwidth

    def set_bandwidth(self, bandwidth: float) -> None:
        """Throttle to ``bandwidth`` bytes per second from now on (0: unthrottled)."""
        self._bandwidth = check_bandwidth(bandwidth)

    def reserve(self, nbytes: int) -> float:
        """When a transfer of ``nbytes`` starting now ends (now, unthrottled)."""
        now = time.monotonic()
        bandwidth = self._bandwidth
        if bandwidth <= 0.0 or nbytes <= 0:
            return now
        with self._lock:
            self._free_at = max(self._free_at, now) + nbytes / bandwidth
            return self._free_at
