"""A distribution-free confidence interval of a median (the sign-test interval), and the verdict
"within noise" it gives a paired difference.

For ``n`` independent samples of any continuous distribution, the ``k``-th smallest and the
``k``-th largest bracket the true median with probability ``P(k <= B <= n - k)``, ``B`` binomial
``(n, 1/2)``; :func:`median_interval` takes the narrowest such pair that still covers the asked
confidence (or the whole sample when ``n`` is too small to reach it, saying how much it covers).
No resampling, no random numbers: the same timings always give the same interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MedianInterval", "median_interval"]


@dataclass(frozen=True)
class MedianInterval:
    """The median of a sample and an interval that holds the true median with ``coverage``."""

    median: float
    low: float
    high: float
    coverage: float
    samples: int

    @property
    def includes_zero(self) -> bool:
        """Whether the interval reaches 0: the sample does not tell the sign of its median (a
        paired difference this small is within noise)."""
        return self.low <= 0.0 <= self.high


def _two_sided_coverage(n: int, k: int) -> float:
    """``P(k <= B <= n - k)`` for ``B`` binomial ``(n, 1/2)``: the coverage of the interval
    from the ``k``-th smallest to the ``k``-th largest of ``n`` samples."""
    below = sum(math.comb(n, i) for i in range(k)) / 2.0**n
    return 1.0 - 2.0 * below


def median_interval(values: Sequence[float], confidence: float = 0.95) -> MedianInterval:
    """The median of ``values`` and its sign-test interval at ``confidence`` (``ValueError`` for
    no values or a confidence outside (0, 1))."""
    if not values:
        raise ValueError("median_interval needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    k = 1  # the whole sample: the widest interval there is
    for candidate in range(n // 2, 0, -1):  # narrowest first
        if _two_sided_coverage(n, candidate) >= confidence:
            k = candidate
            break
    return MedianInterval(median=statistics.median(ordered), low=ordered[k - 1],
                          high=ordered[n - k], coverage=_two_sided_coverage(n, k), samples=n)
