"""``SplitTierManifest``: which logical keys have both halves stored (split-tier placement).

A logical key's entry moves ``STORE_IN_FLIGHT → COMPLETE`` when its V half reaches L2 after its K
half was kept in L1; ``INVALIDATED`` when a half is lost (K evicted from L1, V deleted from L2);
``DELETE_IN_FLIGHT`` while a delete removes both halves. Every transition takes a new generation
number (never reused in the process), so a store that finishes after a delete or a newer store
of the same key cannot mark the key complete (:meth:`SplitTierManifest.mark_complete` with the
generation the store registered).

The manifest is process-local: after a restart it is empty and every V child in L2 is a miss.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Collection
from dataclasses import dataclass

from lmserde.keys import ObjectKey

__all__ = ["SplitTierState", "SplitTierManifest"]


class SplitTierState(enum.Enum):
    """Lifecycle state of one logical key (see the module docstring)."""

    STORE_IN_FLIGHT = "store_in_flight"
    COMPLETE = "complete"
    INVALIDATED = "invalidated"
    DELETE_IN_FLIGHT = "delete_in_flight"


@dataclass
class _Entry:
    state: SplitTierState
    generation: int


class SplitTierManifest:
    """Thread-safe map logical key → (state, generation). Only ``COMPLETE`` keys are hits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[ObjectKey, _Entry] = {}
        self._generations = itertools.count(1)

    def _set(self, key: ObjectKey, state: SplitTierState) -> int:
        generation = next(self._generations)
        self._entries[key] = _Entry(state, generation)
        return generation

    def register_pending(self, key: ObjectKey) -> int:
        """A store of ``key`` begins: ``STORE_IN_FLIGHT`` with a new generation (returned)."""
        with self._lock:
            return self._set(key, SplitTierState.STORE_IN_FLIGHT)

    def mark_complete(self, key: ObjectKey, generation: int | None = None) -> bool:
        """``STORE_IN_FLIGHT → COMPLETE`` if ``generation`` (default: the current one) is still
        the key's; returns whether it happened (``False`` for a superseded store)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.state is not SplitTierState.STORE_IN_FLIGHT:
                return False
            if generation is not None and entry.generation != generation:
                return False
            entry.state = SplitTierState.COMPLETE
            return True

    def mark_invalidated(
        self, key: ObjectKey, *, only_from: Collection[SplitTierState] | None = None
    ) -> int | None:
        """A half was lost: ``INVALIDATED`` with a new generation (returned), or ``None`` when the
        key is unknown or (with ``only_from``) in a state not listed there. Atomic."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (only_from is not None and entry.state not in only_from):
                return None
            return self._set(key, SplitTierState.INVALIDATED)

    def begin_delete(self, key: ObjectKey) -> int:
        """A delete begins: ``DELETE_IN_FLIGHT`` with a new generation (returned)."""
        with self._lock:
            return self._set(key, SplitTierState.DELETE_IN_FLIGHT)

    def forget(self, key: ObjectKey, generation: int) -> bool:
        """Drop the entry if its generation is still ``generation``; returns whether it did."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.generation != generation:
                return False
            del self._entries[key]
            return True

    def lookup(self, key: ObjectKey) -> SplitTierState | None:
        """The key's state, ``None`` when the manifest has no entry."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.state

    def generation(self, key: ObjectKey) -> int | None:
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.generation

    def is_complete(self, key: ObjectKey) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and entry.state is SplitTierState.COMPLETE

    def complete_keys(self) -> list[ObjectKey]:
        with self._lock:
            return [k for k, e in self._entries.items() if e.state is SplitTierState.COMPLETE]

    def counts(self) -> dict[str, int]:
        """Number of entries per state name."""
        with self._lock:
            counts = {s.value: 0 for s in SplitTierState}
            for entry in self._entries.values():
                counts[entry.state.value] += 1
            return counts

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
