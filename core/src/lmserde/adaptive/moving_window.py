"""``MovingRatio``: the ratio of two sums over the last ``size`` observations (a count-based
moving window).

One concept serves every online estimate of the ``auto`` policy: a throughput is bytes over
seconds, a compression ratio raw bytes over stored bytes. The ratio of the sums (not the mean of
per-observation ratios) weights each observation by its size, so one tiny, slow object does not
count as much as a large one. Count-based, not time-based: an idle tier keeps its last estimate
instead of forgetting it, and tests feed observations without a clock.

The sums are recomputed exactly (``math.fsum``, correctly rounded) on every addition: a running
sum that subtracts the evicted value loses a small observation after a large one to cancellation
(found by the property test), and a window is short (``O(window)`` per addition, reading is
``O(1)``). Not thread-safe on its own (the policy holds its lock around it).
"""

from __future__ import annotations

import math

__all__ = ["MovingRatio"]

_INF = math.inf
_fsum = math.fsum


class MovingRatio:
    """``sum(numerators) / sum(denominators)`` of the last ``size`` observations."""

    __slots__ = ("_count", "_den", "_next", "_num", "_sum_den", "_sum_num")

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a moving window holds at least one observation, got {size!r}")
        self._num = [0.0] * size
        self._den = [0.0] * size
        self._next = 0
        self._count = 0
        self._sum_num = 0.0
        self._sum_den = 0.0

    def add(self, numerator: float, denominator: float) -> None:
        """Add one observation (both non-negative and finite; ``ValueError`` otherwise), evicting
        the oldest once the window is full."""
        if not (0.0 <= numerator < _INF and 0.0 <= denominator < _INF):
            raise ValueError(f"observation must be finite and >= 0, got {numerator!r} / "
                             f"{denominator!r}")
        nums, dens, i = self._num, self._den, self._next
        nums[i] = numerator
        dens[i] = denominator
        i += 1
        if self._count < i:
            self._count = i
        self._next = 0 if i == len(nums) else i
        self._sum_num, self._sum_den = _fsum(nums), _fsum(dens)

    @property
    def count(self) -> int:
        """Observations in the window (at most its size)."""
        return self._count

    def value(self) -> float | None:
        """The windowed ratio; ``None`` before the first observation or while every numerator is
        0; ``math.inf`` when the numerators are positive and every denominator is 0 (a transfer
        too fast for the clock to see)."""
        if self._count == 0 or self._sum_num <= 0.0:
            return None
        if self._sum_den <= 0.0:
            return math.inf
        return self._sum_num / self._sum_den
