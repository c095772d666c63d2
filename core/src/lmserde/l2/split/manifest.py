"""``SplitTierManifest``: which logical keys have both halves stored (split-tier placement).

A logical key's entry moves ``STORE_IN_FLIGHT → COMPLETE`` when its V half reaches L2 after its K
half was kept in L1; ``INVALIDATED`` when a half is lost (K evicted from L1, V deleted from L2);
``DELETE_IN_FLIGHT`` while a delete removes both halves. Every transition takes a new generation
number (never reused in the process), so a store that finishes after a delete or a newer store
of the same key cannot mark the key complete (:meth:`SplitTierManifest.mark_complete` with the
generation the store registered).

An entry also records the *store generation* of the store it belongs to
(:mod:`lmserde.l2.split.generation`: the id both halves of that store carry); transitions other
than a new store keep it, and the transitions that displace a store return it, so whoever
displaces a store knows which V half to delete.

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


#: Entry states that belong to a store whose halves may be in L1 and L2.
_LIVE = (SplitTierState.STORE_IN_FLIGHT, SplitTierState.COMPLETE)


@dataclass
class _Entry:
    state: SplitTierState
    generation: int
    store: bytes | None = None  # the store generation of the entry's store


class SplitTierManifest:
    """Thread-safe map logical key → (state, generation). Only ``COMPLETE`` keys are hits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[ObjectKey, _Entry] = {}
        self._generations = itertools.count(1)

    def _set(self, key: ObjectKey, state: SplitTierState, store: bytes | None = None,
             *, new_store: bool = False) -> tuple[int, bytes | None]:
        """New entry state and generation; returns ``(generation, the store generation the
        previous entry had)``. The store generation stays unless ``new_store``."""
        old = self._entries.get(key)
        previous = old.store if old is not None else None
        generation = next(self._generations)
        self._entries[key] = _Entry(state, generation, store if new_store else previous)
        return generation, previous

    def register_pending(self, key: ObjectKey, store: bytes | None = None) -> int:
        """A store of ``key`` begins: ``STORE_IN_FLIGHT`` with a new generation (returned)."""
        return self.register_store(key, store)[0]

    def register_store(self, key: ObjectKey, store: bytes | None) -> tuple[int, bytes | None]:
        """A store of ``key`` with store generation ``store`` begins: ``STORE_IN_FLIGHT``.

        Returns ``(generation, displaced)``: ``displaced`` is the store generation of the store
        this one displaces (an entry in flight or complete), ``None`` when there was none.
        """
        with self._lock:
            old = self._entries.get(key)
            live = old is not None and old.state in _LIVE
            generation, previous = self._set(key, SplitTierState.STORE_IN_FLIGHT, store,
                                             new_store=True)
            return generation, previous if live else None

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
        result = self.invalidate(key, only_from=only_from)
        return None if result is None else result[0]

    def invalidate(
        self, key: ObjectKey, *, only_from: Collection[SplitTierState] | None = None
    ) -> tuple[int, bytes | None] | None:
        """:meth:`mark_invalidated` returning ``(generation, the entry's store generation)``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (only_from is not None and entry.state not in only_from):
                return None
            return self._set(key, SplitTierState.INVALIDATED)

    def begin_delete(self, key: ObjectKey) -> int:
        """A delete begins: ``DELETE_IN_FLIGHT`` with a new generation (returned)."""
        return self.begin_delete_store(key)[0]

    def begin_delete_store(self, key: ObjectKey) -> tuple[int, bytes | None]:
        """:meth:`begin_delete` returning ``(generation, the previous entry's store generation)``
        (``None`` when there was no entry)."""
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

    def complete_store(self, key: ObjectKey) -> bytes | None:
        """The store generation of ``key``'s ``COMPLETE`` entry (``None``: not complete)."""
        with self._lock:
            entry = self._entries.get(key)
            ok = entry is not None and entry.state is SplitTierState.COMPLETE
            return entry.store if ok and entry is not None else None

    def live_store(self, key: ObjectKey) -> bytes | None:
        """The store generation of ``key``'s entry in flight or complete (else ``None``)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.store if entry is not None and entry.state in _LIVE else None

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
