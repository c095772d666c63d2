"""``KChildPool``: the K halves of split-tier objects, kept in L1 under their K child keys.

Each K half is a regular (non-temporary) L1 object tagged :data:`SPLIT_TIER_K_TAG`: it counts
against the L1 capacity and its tenant's bytes like any object, fires no write-finished
notification (so nothing stores it to L2) and is invisible to untagged readers. Whoever owns L1
eviction evicts one with ``l1.delete([k_child], tag=SPLIT_TIER_K_TAG)``; the pool learns it through
an L1 delete listener and reports the logical keys to ``on_removed``.

The pool holds at most ``max_slots`` K halves; storing one more evicts the least recently used
halves that no lookup or load holds. Halves held by a lookup lock or a load (read locks taken
through :meth:`KChildPool.lock`) cannot be evicted; :meth:`KChildPool.remove` of a held half
deletes it when the last holder lets go.

Each half records the store generation of the store that wrote it
(:mod:`lmserde.l2.split.generation`). Writing a half and recording its generation happen under
the pool's lock, the same lock :meth:`KChildPool.lock` checks the generation under, so a half
locked as generation ``g`` holds the bytes ``g``'s store wrote, and L1 keeps them unchanged while
it is locked (L1 refuses to replace a read-locked object). A store whose half is held by a reader
is refused (it cannot replace the held bytes, and keeping them under the new generation would
mix stores).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from lmserde.keys import ObjectKey
from lmserde.l1.errors import L1Error
from lmserde.l1.manager import L1Manager
from lmserde.l2.split.placement import derive_component_key
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["KChildPool", "SPLIT_TIER_K_TAG", "DEFAULT_K_CHILD_MAX_SLOTS"]

_log = logging.getLogger(__name__)

#: L1 tag of K halves.
SPLIT_TIER_K_TAG = "lmserde-split-k"
#: Default bound on the number of K halves a pool keeps (LMCache's ``k_child_max_slots``).
DEFAULT_K_CHILD_MAX_SLOTS = 256


@dataclass
class _Child:
    key: ObjectKey  # the K child key in L1
    nbytes: int
    generation: bytes | None  # the store generation of the bytes in L1


class KChildPool:
    """K halves in ``l1`` by logical key, bounded by ``max_slots`` (see the module docstring).

    ``on_removed(logical_keys)`` is called (in the deleting thread) whenever K halves leave L1
    through ``L1Manager.delete`` — an outside eviction, a pool eviction or :meth:`remove`.
    """

    def __init__(
        self, l1: L1Manager, max_slots: int, on_removed: Callable[[list[ObjectKey]], None]
    ) -> None:
        if not isinstance(max_slots, int) or isinstance(max_slots, bool) or max_slots < 1:
            raise ValueError(f"k_child_max_slots must be an int >= 1, got {max_slots!r}")
        self._l1 = l1
        self._max = max_slots
        self._on_removed = on_removed
        self._lock = threading.RLock()  # the L1 listener may run inside our own l1.delete
        self._children: OrderedDict[ObjectKey, _Child] = OrderedDict()  # LRU first
        self._by_child: dict[ObjectKey, ObjectKey] = {}
        self._holds: dict[ObjectKey, int] = {}
        self._delete_when_free: set[ObjectKey] = set()
        self._pool_evictions = 0
        self._closed = False
        l1.add_delete_listener(self._on_l1_delete)

    # -- accounting -----------------------------------------------------------------------------

    @property
    def max_slots(self) -> int:
        return self._max

    def __len__(self) -> int:
        with self._lock:
            return len(self._children)

    def __contains__(self, logical: object) -> bool:
        with self._lock:
            return logical in self._children

    def bytes_held(self) -> int:
        """Bytes of every K half in L1 now."""
        with self._lock:
            return sum(c.nbytes for c in self._children.values())

    @property
    def pool_evictions(self) -> int:
        """K halves this pool evicted to stay within ``max_slots``."""
        return self._pool_evictions

    # -- store ----------------------------------------------------------------------------------

    def put(
        self, keys: Sequence[ObjectKey], sources: Sequence[torch.Tensor],
        layouts: Sequence[MemoryLayoutDesc], generations: Sequence[bytes],
    ) -> str | None:
        """Copy each ``sources[i]`` (uint8 bytes of a K group) into L1 under ``keys[i]``'s K child,
        as store generation ``generations[i]``.

        All or nothing: returns ``None`` on success, else why not (what was written is removed).
        A K half that exists and is held by a lookup or load cannot be replaced: the put fails
        (the held half stays, under its own generation).
        """
        if not len(keys) == len(sources) == len(layouts) == len(generations):
            raise ValueError("put needs one source, layout and generation per key")
        if len(set(keys)) > self._max:
            return f"{len(set(keys))} K halves in one task exceed k_child_max_slots={self._max}"
        self._make_room(keys)
        with self._lock:
            over = len(self._children) + len(set(keys) - self._children.keys()) - self._max
        if over > 0:
            return (f"the K-copy pool is full (k_child_max_slots={self._max}) and {over} more "
                    "half/halves are held by lookups or loads")
        written: list[ObjectKey] = []
        failure: str | None = None
        for logical, src, layout, generation in zip(keys, sources, layouts, generations):
            failure = self._put_one(logical, src, layout, generation)
            if failure is not None:
                break
            written.append(logical)
        if failure is not None:
            self.remove(written)
        return failure

    def _put_one(self, logical: ObjectKey, src: torch.Tensor, layout: MemoryLayoutDesc,
                 generation: bytes) -> str | None:
        child = derive_component_key(logical, "k")
        # under the pool lock: no lock() sees the new bytes under the old generation or the
        # old bytes under the new one (reserve_write and finish_write call no listeners)
        with self._lock:
            result = self._l1.reserve_write([child], False, layout, tag=SPLIT_TIER_K_TAG,
                                            mode="all")
            error, obj = result[child]
            if error is not L1Error.SUCCESS or obj is None:
                if error is L1Error.KEY_NOT_WRITABLE and self._holds.get(logical):
                    return ("the key's K half is being read by a lookup or load; a re-store "
                            "replaces both halves or neither, so it is refused")
                return (f"L1 refused the K half ({getattr(error, 'name', error)}; "
                        f"{layout.nbytes} bytes)")
            try:
                obj.raw_data[: src.numel()].copy_(src)
            except BaseException:
                self._l1.finish_write_and_delete([child], tag=SPLIT_TIER_K_TAG)
                self._forget_child(child)
                raise
            self._l1.finish_write([child], tag=SPLIT_TIER_K_TAG)
            self._children[logical] = _Child(child, layout.nbytes, generation)
            self._children.move_to_end(logical)
            self._by_child[child] = logical
        return None

    def _forget_child(self, child: ObjectKey) -> None:
        """Drop the tables' entry of a K child that left L1 without a delete (a failed write)."""
        logical = self._by_child.pop(child, None)
        if logical is not None:
            self._children.pop(logical, None)

    def generation(self, logical: ObjectKey) -> bytes | None:
        """The store generation of ``logical``'s K half in L1 (``None``: no half)."""
        with self._lock:
            child = self._children.get(logical)
            return None if child is None else child.generation

    def _make_room(self, keys: Sequence[ObjectKey]) -> None:
        """Evict least recently used, unheld K halves until ``keys`` fit in ``max_slots``."""
        batch = set(keys)
        with self._lock:
            needed = len(self._children) + len(batch - self._children.keys()) - self._max
            victims = [k for k in self._children
                       if k not in batch and not self._holds.get(k)][: max(needed, 0)]
        if victims:
            with self._lock:
                self._pool_evictions += len(victims)
            self._delete_children(victims)

    # -- read -----------------------------------------------------------------------------------

    def lock(
        self, keys: Sequence[ObjectKey], generations: Sequence[bytes | None] | None = None
    ) -> tuple[dict[ObjectKey, MemoryObj], list[ObjectKey]]:
        """Take a read lock per key occurrence on its K half; returns ``(locked, mismatched)``.

        ``locked``: the halves in L1, locked. With ``generations`` (one per key), a half is locked
        only when its store generation is ``generations[i]``; the occurrences whose half exists
        under another generation are listed in ``mismatched``. A key whose half is absent,
        mismatched or cannot be locked is missing from ``locked`` and holds no lock.
        """
        if generations is not None and len(generations) != len(keys):
            raise ValueError("lock needs one generation per key")
        locked: dict[ObjectKey, MemoryObj] = {}
        mismatched: list[ObjectKey] = []
        for i, logical in enumerate(keys):  # one lock per occurrence
            with self._lock:
                child = self._children.get(logical)
                if child is None or self._closed:
                    continue
                if generations is not None and child.generation != generations[i]:
                    mismatched.append(logical)
                    continue
                result = self._l1.reserve_read([child.key], tag=SPLIT_TIER_K_TAG)
                error, obj = result[child.key]
                if error is not L1Error.SUCCESS or obj is None:
                    continue
                self._holds[logical] = self._holds.get(logical, 0) + 1
                self._children.move_to_end(logical)
                locked[logical] = obj
        return locked, mismatched

    def unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Drop one read lock per key taken by :meth:`lock` (keys not held are ignored)."""
        free: list[ObjectKey] = []
        for logical in keys:
            with self._lock:
                count = self._holds.get(logical, 0)
                if count <= 0:
                    continue
                child = self._children.get(logical)
                child_key = child.key if child is not None else derive_component_key(logical, "k")
                self._l1.finish_read([child_key])
                if count == 1:
                    del self._holds[logical]
                    if logical in self._delete_when_free:
                        self._delete_when_free.discard(logical)
                        free.append(logical)
                else:
                    self._holds[logical] = count - 1
        if free:
            self._delete_children(free)

    def holds(self, logical: ObjectKey) -> int:
        """Read locks held on ``logical``'s K half through this pool."""
        with self._lock:
            return self._holds.get(logical, 0)

    # -- removal --------------------------------------------------------------------------------

    def remove(self, keys: Sequence[ObjectKey]) -> None:
        """Delete the K halves of ``keys`` from L1 (held ones when their last holder lets go)."""
        now: list[ObjectKey] = []
        with self._lock:
            for logical in dict.fromkeys(keys):
                if logical not in self._children:
                    continue
                if self._holds.get(logical):
                    self._delete_when_free.add(logical)
                else:
                    now.append(logical)
        self._delete_children(now)

    def remove_if(self, pairs: Sequence[tuple[ObjectKey, bytes]]) -> None:
        """:meth:`remove` of each ``(key, generation)`` whose K half is of that store generation."""
        with self._lock:
            keys = [k for k, g in pairs if k in self._children and self._children[k].generation == g]
        if keys:
            self.remove(keys)

    def _delete_children(self, logical_keys: list[ObjectKey]) -> None:
        with self._lock:
            children = [self._children[k].key for k in logical_keys if k in self._children]
        if children:
            self._l1.delete(children, tag=SPLIT_TIER_K_TAG)  # the listener updates the tables

    def _on_l1_delete(self, keys: list[ObjectKey], tag: str) -> None:
        if tag != SPLIT_TIER_K_TAG:
            return
        removed: list[ObjectKey] = []
        with self._lock:
            for child in keys:
                logical = self._by_child.pop(child, None)
                if logical is None:
                    continue
                self._children.pop(logical, None)
                self._delete_when_free.discard(logical)
                removed.append(logical)
        if removed:
            self._on_removed(removed)

    def close(self) -> None:
        """Release every lock this pool holds and delete every K half from L1; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            holds = dict(self._holds)
            self._holds.clear()
            children = [c.key for c in self._children.values()]
        for logical, count in holds.items():
            child = derive_component_key(logical, "k")
            for _ in range(count):
                self._l1.finish_read([child])
        if children:
            self._l1.delete(children, tag=SPLIT_TIER_K_TAG)
        self._l1.remove_delete_listener(self._on_l1_delete)
        with self._lock:
            self._children.clear()
            self._by_child.clear()
            self._delete_when_free.clear()
