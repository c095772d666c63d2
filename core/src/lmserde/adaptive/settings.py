"""``PolicySettings``: the knobs of the ``auto`` policy, validated once, with the documented
defaults (``docs/adaptive.md`` explains each one and the bounds they give)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["PolicySettings"]


def _positive_int(name: str, value: Any, *, zero: bool = False) -> None:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class PolicySettings:
    """How the ``auto`` policy measures, decides and explores.

    * ``window``: observations each moving estimate keeps (count-based: the adapter's store and
      load throughput, and each candidate's encode speed, decode speed and compression ratio);
    * ``loads_per_store``: expected loads of an object per store (the read-to-write ratio); the
      load half of the expected time is weighted by it;
    * ``hysteresis`` and ``confirm``: another candidate replaces the current one only when its
      expected time is below ``(1 - hysteresis)`` times the current one's on ``confirm``
      consecutive re-evaluations (one per observation);
    * ``explore_every``: after warm-up, one decision in this many stores the object with the
      candidate tried least recently instead of the current one (0: never explore);
    * ``warmup``: decisions each candidate gets, in turn, before the policy chooses by
      measurement;
    * ``seed``: where in the exploration period the first exploration falls (deterministic);
    * ``max_attention_error``: the quality bound on lossy candidates (``None``: no bound).
    """

    window: int = 16
    loads_per_store: float = 1.0
    hysteresis: float = 0.10
    confirm: int = 3
    explore_every: int = 32
    warmup: int = 1
    seed: int = 0
    max_attention_error: float | None = None

    def __post_init__(self) -> None:
        _positive_int("window", self.window)
        _positive_int("confirm", self.confirm)
        _positive_int("warmup", self.warmup)
        _positive_int("explore_every", self.explore_every, zero=True)
        if self.explore_every == 1:
            raise ValueError("explore_every must be 0 (never) or >= 2: with 1 every decision "
                             "would explore")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        lps = self.loads_per_store
        if isinstance(lps, bool) or not isinstance(lps, (int, float)) or not 0.0 <= lps < math.inf:
            raise ValueError(f"loads_per_store must be a finite number >= 0, got {lps!r}")
        h = self.hysteresis
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0.0 <= h < 1.0:
            raise ValueError(f"hysteresis must be in [0, 1), got {h!r}")

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (for status output)."""
        return asdict(self)
