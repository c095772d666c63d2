"""Byte accounting of split-tier placement: what stays in L1 (K) and what goes to L2 (V).

For bf16 K and V of ``n`` elements each, an object is ``4n`` bytes. Stored with ``asym_k16_v8``
(K exact, V fp8) L2 gets ``3n`` bytes (0.75 of the object); split-tier with
``asym_k16_v8_v_only`` keeps K in L1 (``2n`` bytes, half the object, in host memory) and sends
``n`` bytes of fp8 codes to L2: 1/3 of the storage-only blob, 1/4 of the object. The stored
objects add a fixed overhead per object (the codec header and scale, and the stored-object
frame when framing), which :class:`SplitTierAccounting` counts in ``l2_v_bytes_stored``.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["SplitTierAccounting"]


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


class SplitTierAccounting:
    """Thread-safe counters of a split-tier adapter (see :meth:`snapshot` for the fields)."""

    _FIELDS = (
        "store_tasks_ok", "store_tasks_failed", "keys_stored", "logical_bytes_stored",
        "l1_k_bytes_stored", "l2_v_bytes_stored", "stores_superseded",
        "lookup_keys", "lookup_hits", "lookup_misses_generation", "load_keys", "load_hits",
        "load_misses_not_complete", "load_misses_k_absent", "load_misses_generation",
        "load_misses_v", "k_evictions", "v_losses", "deletes",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self._FIELDS, 0)

    def add(self, **deltas: int) -> None:
        """Add to counters by name (unknown names raise ``KeyError``)."""
        with self._lock:
            for name, delta in deltas.items():
                if name not in self._counts:
                    raise KeyError(f"unknown split-tier counter {name!r}")
                self._counts[name] += int(delta)

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self, *, l1_k_bytes: int, k_children: int, k_child_max_slots: int,
                 k_pool_evictions: int, manifest: dict[str, int]) -> dict[str, Any]:
        """Counters plus the current L1 footprint and the fractions of the logical bytes stored.

        ``l1_k_bytes``/``k_children``: K halves in L1 now. ``*_misses_generation``: keys whose
        K half in L1 was written by another store than the key's complete entry (racing stores
        of one key; a miss, never a mixed hit). ``logical_bytes_stored``: bytes of the
        (K, V) objects of successful stores; ``l1_k_bytes_stored`` / ``l2_v_bytes_stored``: what
        of them stayed in L1 / went to L2 (stored bytes, headers and frames included).
        ``stored_fraction`` = L2 bytes / logical bytes (0.25 plus overhead for fp8 V from bf16),
        ``l1_fraction`` = K bytes / logical bytes (0.5 for equal K and V).
        """
        with self._lock:
            counts = dict(self._counts)
        logical = counts["logical_bytes_stored"]
        counts.update(
            l1_k_bytes=l1_k_bytes, k_children=k_children, k_child_max_slots=k_child_max_slots,
            k_pool_evictions=k_pool_evictions, manifest=dict(manifest),
            stored_fraction=_ratio(counts["l2_v_bytes_stored"], logical),
            l1_fraction=_ratio(counts["l1_k_bytes_stored"], logical),
        )
        return counts
