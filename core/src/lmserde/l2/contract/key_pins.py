"""Lookup locks of an adapter's keys, counted, and the deletes deferred to a key's last unlock.

``submit_lookup_and_lock_task`` read-locks (pins) each hit until ``submit_unlock``; a ``delete``
of a pinned key must wait for its last unlock. :class:`KeyPins` keeps that bookkeeping for an
adapter: the adapter pins hits, asks which keys of a delete may go now, and learns from each
unlock which deferred deletes became due.
"""

from __future__ import annotations

from collections.abc import Iterable

from lmserde.keys import ObjectKey

__all__ = ["KeyPins"]


class KeyPins:
    """Pin counts per key and the set of pinned keys whose delete is deferred.

    Not thread-safe: an adapter calls it while holding its own state lock.
    """

    def __init__(self) -> None:
        self._counts: dict[ObjectKey, int] = {}
        self._deferred: set[ObjectKey] = set()

    def pin(self, key: ObjectKey) -> None:
        """Add one lookup lock on ``key``."""
        self._counts[key] = self._counts.get(key, 0) + 1

    def unpin(self, keys: Iterable[ObjectKey]) -> list[ObjectKey]:
        """Drop one lock of each key (unknown keys are ignored); returns, in order, the keys whose
        last lock went and whose delete was deferred: the caller deletes them now."""
        due: list[ObjectKey] = []
        for key in keys:
            count = self._counts.get(key, 0)
            if count > 1:
                self._counts[key] = count - 1
                continue
            self._counts.pop(key, None)
            if key in self._deferred:
                self._deferred.discard(key)
                due.append(key)
        return due

    def defer_pinned(self, keys: Iterable[ObjectKey]) -> list[ObjectKey]:
        """For a delete of ``keys``: pinned ones are deferred to their last unlock; returns, in
        order, the others, which the caller deletes now."""
        now: list[ObjectKey] = []
        for key in keys:
            if key in self._counts:
                self._deferred.add(key)
            else:
                now.append(key)
        return now

    def is_pinned(self, key: ObjectKey) -> bool:
        """Whether ``key`` holds at least one lookup lock."""
        return key in self._counts

    def is_deferred(self, key: ObjectKey) -> bool:
        """Whether ``key`` was deleted while pinned and goes at its last unlock."""
        return key in self._deferred

    def cancel_deferred(self, key: ObjectKey) -> None:
        """Forget a deferred delete of ``key`` (it was stored again)."""
        self._deferred.discard(key)

    @property
    def pinned_count(self) -> int:
        """How many keys hold at least one lookup lock."""
        return len(self._counts)

    @property
    def deferred_count(self) -> int:
        """How many deletes wait for a last unlock."""
        return len(self._deferred)

    def clear(self) -> None:
        """Forget every lock and deferred delete (the adapter is closing)."""
        self._counts.clear()
        self._deferred.clear()
