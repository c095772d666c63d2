"""Running metrics of a serde-wrapped adapter: counts, bytes, failures by stage, stage latencies."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

__all__ = ["LatencySummary", "WrapperMetrics", "STAGES"]

#: Stages whose latency is summarised.
STAGES = ("serialize", "inner_store", "inner_load", "deserialize")

_RECENT_SAMPLES = 1024


class LatencySummary:
    """Count, total, min and max of all samples plus percentiles of the most recent ones."""

    __slots__ = ("_recent", "count", "max", "min", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.min = float("inf")
        self.max = 0.0
        self._recent: deque[float] = deque(maxlen=_RECENT_SAMPLES)

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.min = min(self.min, seconds)
        self.max = max(self.max, seconds)
        self._recent.append(seconds)

    def _percentile(self, ordered: list[float], q: float) -> float:
        if not ordered:
            return 0.0
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]

    def snapshot(self) -> dict[str, float]:
        """Seconds: ``count``, ``total``, ``mean``, ``min``, ``max``, ``p50``, ``p99``."""
        ordered = sorted(self._recent)
        return {
            "count": self.count,
            "total": self.total,
            "mean": self.total / self.count if self.count else 0.0,
            "min": self.min if self.count else 0.0,
            "max": self.max,
            "p50": self._percentile(ordered, 0.50),
            "p99": self._percentile(ordered, 0.99),
        }


class WrapperMetrics:
    """Thread-safe totals of one wrapper.

    Store: tasks, ok/failed tasks, KV bytes in, serialized bytes out. Load: tasks, keys, hits,
    serialized bytes in, KV bytes out. ``failures`` counts store *tasks* and load *keys* by the
    stage that failed them (``reserve``, ``serialize``, ``inner_store``, ``inner_load``,
    ``deserialize``, ...). Hits decoded with a ``read_also`` configuration are counted per
    configuration as well (they are part of ``load_hits``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {
            "store_tasks": 0, "store_ok": 0, "store_failed": 0, "store_keys": 0,
            "store_bytes_kv": 0, "store_bytes_serialized": 0,
            "load_tasks": 0, "load_keys": 0, "load_hits": 0,
            "load_bytes_serialized": 0, "load_bytes_kv": 0,
        }
        self._failures: dict[str, int] = {}
        self._rejections: dict[str, int] = {}
        self._repaired = 0
        self._read_also_hits: dict[str, int] = {}
        self._latency = {stage: LatencySummary() for stage in STAGES}
        self._hung_at_close: list[dict[str, Any]] = []

    def record_stage(self, stage: str, seconds: float) -> None:
        with self._lock:
            self._latency[stage].add(seconds)

    def record_failure(self, stage: str, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            self._failures[stage] = self._failures.get(stage, 0) + n

    def record_rejection(self, reason: str, n: int = 1) -> None:
        """``n`` loaded keys whose stored object was refused for ``reason``."""
        if n <= 0:
            return
        with self._lock:
            self._rejections[reason] = self._rejections.get(reason, 0) + n

    def record_repaired(self, n: int) -> None:
        """``n`` refused objects deleted from the inner adapter."""
        with self._lock:
            self._repaired += n

    def record_read_also_hits(self, label: str, n: int) -> None:
        """``n`` hits decoded with the ``read_also`` configuration ``label``."""
        if n <= 0:
            return
        with self._lock:
            self._read_also_hits[label] = self._read_also_hits.get(label, 0) + n

    def record_hung_at_close(self, hung: list[dict[str, Any]]) -> None:
        """The calls ``close()`` left running (each names its plugin, the call and where)."""
        with self._lock:
            self._hung_at_close = [dict(entry) for entry in hung]

    def record_store(self, ok: bool, keys: int, bytes_kv: int, bytes_serialized: int) -> None:
        with self._lock:
            c = self._counts
            c["store_tasks"] += 1
            c["store_ok" if ok else "store_failed"] += 1
            c["store_keys"] += keys
            if ok:
                c["store_bytes_kv"] += bytes_kv
                c["store_bytes_serialized"] += bytes_serialized

    def record_load(self, keys: int, hits: int, bytes_serialized: int, bytes_kv: int) -> None:
        with self._lock:
            c = self._counts
            c["load_tasks"] += 1
            c["load_keys"] += keys
            c["load_hits"] += hits
            c["load_bytes_serialized"] += bytes_serialized
            c["load_bytes_kv"] += bytes_kv

    def snapshot(self) -> dict[str, Any]:
        """A plain-dict copy: counts, ``failures`` by stage, ``rejections`` by reason (loaded keys
        whose stored object was refused), ``repaired`` (refused objects deleted from the inner
        adapter), ``load_hits_read_also`` (hits decoded with a ``read_also`` configuration, part
        of ``load_hits``) and ``read_also_hits`` (those by configuration), ``latency_seconds`` by
        stage, ``hung_at_close`` (the plugin calls ``close()`` left running when it returned at
        its bound; empty otherwise)."""
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            out["failures"] = dict(self._failures)
            out["rejections"] = dict(self._rejections)
            out["repaired"] = self._repaired
            out["read_also_hits"] = dict(self._read_also_hits)
            out["load_hits_read_also"] = sum(self._read_also_hits.values())
            out["latency_seconds"] = {s: v.snapshot() for s, v in self._latency.items()}
            out["hung_at_close"] = [dict(entry) for entry in self._hung_at_close]
        kv, ser = out["store_bytes_kv"], out["store_bytes_serialized"]
        out["store_ratio"] = ser / kv if kv else 0.0
        return out
