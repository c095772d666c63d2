"""The split tier's lookups and loads: K from the K pool (L1), V through the V side.

A lookup or load takes the store generation of each key's ``COMPLETE`` manifest entry and
read-locks the key's K half only if it is of that generation (else a miss counted as
``*_misses_generation``), then asks the V side for the V child of that generation. A lookup hit
keeps both locks (the K half's and the V side's on the V child) until ``unlock``; a load copies
K from L1 into the caller's object once V decoded into it, and releases the K half.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from lmserde.keys import ObjectKey
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.in_flight import InFlight
from lmserde.l2.contract.interface import L2TaskId
from lmserde.l2.split.generation import derive_v_child_key
from lmserde.l2.split.halves import KVHalves, split_object
from lmserde.l2.split.parts import SplitTierParts
from lmserde.memory import MemoryObj

__all__ = ["SplitReadPath"]

_log = logging.getLogger("lmserde.l2.split.adapter")


@dataclass(eq=False)
class _Read:
    """A lookup or load in flight: ``positions`` are the caller indexes sent to the V side."""

    task_id: int
    keys: list[ObjectKey]
    positions: list[int]
    stores: list[bytes] = field(default_factory=list)  # store generation read, per position
    halves: list[KVHalves] = field(default_factory=list)  # load only, per position
    k_objs: list[MemoryObj] = field(default_factory=list)  # load only, per position

    def v_keys(self) -> list[ObjectKey]:
        """The V child key of each position (of the store generation read)."""
        return [derive_v_child_key(self.keys[i], g) for i, g in zip(self.positions, self.stores)]

    def k_keys(self) -> list[ObjectKey]:
        """The logical key of each position (whose K half this read locked)."""
        return [self.keys[i] for i in self.positions]


class SplitReadPath:
    """Lookups, unlocks and loads of one split-tier adapter (see the module docstring).
    Thread-safe: submits and unlocks run on callers' threads, the drains on the adapter's poll
    thread."""

    def __init__(self, parts: SplitTierParts) -> None:
        self._p = parts
        self._lookups: InFlight[_Read] = InFlight()
        self._loads: InFlight[_Read] = InFlight()
        self._lock = threading.Lock()
        self._v_locks: dict[ObjectKey, list[ObjectKey]] = {}  # V children a lookup locked
        self._closed = False

    def _lock_complete(
        self, keys: list[ObjectKey], wanted: list[int]
    ) -> tuple[dict[ObjectKey, tuple[MemoryObj, bytes]], int]:
        """Read-lock the K halves of the ``COMPLETE`` keys at positions ``wanted``, each only when
        it is of the complete store's generation. Returns ``{key: (K half, store generation)}``
        and the number of positions whose K half is of another generation."""
        stores: dict[ObjectKey, bytes] = {}
        for key in dict.fromkeys(keys[i] for i in wanted):
            store = self._p.manifest.complete_store(key) if key.object_group_id == 0 else None
            if store is not None:
                stores[key] = store
        candidates = [keys[i] for i in wanted if keys[i] in stores]
        locked, mismatched = self._p.kpool.lock(candidates, [stores[k] for k in candidates])
        return {k: (obj, stores[k]) for k, obj in locked.items()}, len(mismatched)

    # -- lookup ---------------------------------------------------------------------------------

    def submit_lookup(self, keys: Sequence[ObjectKey]) -> L2TaskId:
        """Start a lookup-and-lock of ``keys``; the bitmap comes through the lookup queue."""
        p, keys = self._p, list(keys)
        task_id = p.queues.new_task_id()
        locked, mismatched = self._lock_complete(keys, list(range(len(keys))))
        task = _Read(task_id, keys, [i for i, k in enumerate(keys) if k in locked])
        task.stores = [locked[keys[i]][1] for i in task.positions]
        p.acct.add(lookup_keys=len(keys), lookup_misses_generation=mismatched)
        if not task.positions:
            p.queues.lookup.complete(task_id, Bitmap(len(keys)))
            return task_id
        failure = self._lookups.start(task, lambda: p.v.submit_lookup_and_lock_task(task.v_keys()))
        if failure is not None:
            _log.warning("split tier: inner lookup not submitted: %s", failure)
            p.kpool.unlock(task.k_keys())
            p.queues.lookup.complete(task_id, Bitmap(len(keys)))
        return task_id

    def drain_lookups(self) -> None:
        """Handle the V side's lookup event: complete every lookup whose V lookup finished."""
        p = self._p
        for task, bitmap in self._lookups.finished(p.v.query_lookup_and_lock_result):
            final = Bitmap(len(task.keys))
            release_k: list[ObjectKey] = []
            release_v: list[ObjectKey] = []
            held: list[tuple[ObjectKey, ObjectKey]] = []
            for j, (key, v_key) in enumerate(zip(task.k_keys(), task.v_keys())):
                v_hit = j < len(bitmap) and bitmap.test(j)
                if v_hit and p.manifest.complete_store(key) == task.stores[j]:
                    final.set(task.positions[j])
                    held.append((key, v_key))
                    continue
                release_k.append(key)
                if v_hit:
                    release_v.append(v_key)
            with self._lock:
                for key, v_key in held:
                    self._v_locks.setdefault(key, []).append(v_key)
            p.kpool.unlock(release_k)
            if release_v:
                p.v.submit_unlock(release_v)
            p.acct.add(lookup_hits=final.count())
            p.queues.lookup.complete(task.task_id, final)

    def unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Release the locks a lookup took on hit ``keys`` (both halves)."""
        keys = list(keys)
        self._p.kpool.unlock(keys)
        v_keys: list[ObjectKey] = []
        with self._lock:
            for key in keys:
                locks = self._v_locks.get(key)
                if locks:
                    v_keys.append(locks.pop())
                    if not locks:
                        del self._v_locks[key]
            closed = self._closed
        if v_keys and not closed:
            self._p.v.submit_unlock(v_keys)

    # -- load -----------------------------------------------------------------------------------

    def submit_load(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> L2TaskId:
        """Start loading ``keys`` into ``objects``; the bitmap comes through the load queue.
        ``ValueError`` for mismatched arguments, ``RuntimeError`` when the path closed while the
        task started (it is then completed as all misses)."""
        p, keys, objects = self._p, list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_load_task got {len(keys)} keys but {len(objects)} objects")
        task_id = p.queues.new_task_id()
        n = len(keys)
        halves: dict[int, KVHalves] = {}
        for i, obj in enumerate(objects):
            try:
                halves[i] = split_object(obj, p.slots)
            except ValueError as exc:
                _log.warning("split tier: load task %d: key %d is a miss: %s", task_id, i, exc)
        wanted = list(halves)
        not_complete = sum(1 for i in wanted if not p.manifest.is_complete(keys[i]))
        locked, mismatched = self._lock_complete(keys, wanted)
        task = _Read(task_id, keys, [])
        unusable: list[ObjectKey] = []
        for i in wanted:
            entry = locked.get(keys[i])
            if entry is None:
                continue
            k_obj, store = entry
            if k_obj.get_layout() != halves[i].k_layout:  # same key, another layout: not ours
                unusable.append(keys[i])
                continue
            task.positions.append(i)
            task.stores.append(store)
            task.halves.append(halves[i])
            task.k_objs.append(k_obj)
        p.kpool.unlock(unusable)
        k_absent = max(len(wanted) - not_complete - len(task.positions) - mismatched, 0)
        p.acct.add(load_keys=n, load_misses_not_complete=not_complete + (n - len(wanted)),
                   load_misses_k_absent=k_absent, load_misses_generation=mismatched)
        if not task.positions:
            p.queues.load.complete(task_id, Bitmap(n))
            return task_id
        failure = self._loads.start(task, lambda: p.v.submit_load_task(
            task.v_keys(), [h.v_view for h in task.halves]))
        if failure is not None:
            if failure != "closed":
                _log.warning("split tier: V load not submitted: %s", failure)
            p.kpool.unlock(task.k_keys())
            p.acct.add(load_misses_v=len(task.positions))
            p.queues.load.complete(task_id, Bitmap(n))
            if failure == "closed":
                raise RuntimeError("SplitTierL2Adapter is closed")
        return task_id

    def drain_loads(self) -> None:
        """Handle the V side's load event: copy K into every load whose V decoded, complete it."""
        p = self._p
        for task, bitmap in self._loads.finished(p.v.query_load_result):
            final = Bitmap(len(task.keys))
            try:
                for j, i in enumerate(task.positions):
                    if j < len(bitmap) and bitmap.test(j):
                        nbytes = task.halves[j].k_bytes.numel()
                        task.halves[j].k_bytes.copy_(task.k_objs[j].raw_data[:nbytes])
                        final.set(i)
            except Exception:  # never leave a task unfinished
                _log.exception("split tier: load task %d: copying K failed", task.task_id)
                final = Bitmap(len(task.keys))
            finally:
                p.kpool.unlock(task.k_keys())
            p.acct.add(load_hits=final.count(), load_misses_v=len(task.positions) - final.count())
            p.queues.load.complete(task.task_id, final)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new reads, release the K halves the unfinished ones locked and complete them
        as all misses; forget the V side's locks (the V side closes with them)."""
        p = self._p
        with self._lock:
            self._closed = True
            self._v_locks.clear()
        lookups, loads = self._lookups.close(), self._loads.close()
        for task in lookups + loads:
            p.kpool.unlock(task.k_keys())
        for task in lookups:
            p.queues.lookup.complete(task.task_id, Bitmap(len(task.keys)))
        for task in loads:
            p.queues.load.complete(task.task_id, Bitmap(len(task.keys)))
