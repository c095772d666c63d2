"""The split tier's store path: K into the K pool (L1), V through the V side, one state machine.

``submit`` splits each object into its halves, gives every key a fresh store generation,
registers the store in the manifest, copies K into the K pool and submits V to the V side (a
serde wrapper) under the V child key of that generation. When the V side's store event fires,
:meth:`SplitStorePath.drain` completes the task: success marks each key ``COMPLETE`` unless a
newer store, a delete or a lost half superseded it, and deletes the V halves of the stores it
displaced (and its own superseded ones). Any failure undoes the store (:meth:`_abandon`): a
failed store leaves neither half behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lmserde.keys import ObjectKey
from lmserde.l2.contract.in_flight import InFlight
from lmserde.l2.contract.interface import L2TaskId
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.split.generation import check_generation, derive_v_child_key
from lmserde.l2.split.halves import check_store_keys, split_object
from lmserde.l2.split.parts import SplitTierParts
from lmserde.memory import MemoryObj

__all__ = ["SplitStorePath"]


@dataclass(eq=False)
class _Store:
    """A store in flight, waiting for its V store."""

    task_id: int
    keys: list[ObjectKey]
    generations: list[int]  # manifest generations
    stores: list[bytes]  # store generations, one per key
    displaced: list[tuple[ObjectKey, bytes]]  # (key, store generation) of displaced stores
    logical_bytes: int
    k_bytes: int


_log = logging.getLogger("lmserde.l2.split.adapter")


class SplitStorePath:
    """Stores of one split-tier adapter (see the module docstring). Thread-safe: ``submit``
    runs on callers' threads, :meth:`drain` on the adapter's poll thread.

    ``new_generation()`` makes each key's store generation (16 bytes never made before by any
    source sharing the L2 tier).
    """

    def __init__(self, parts: SplitTierParts, new_generation: Callable[[], bytes]) -> None:
        self._p = parts
        self._new_generation = new_generation
        self._in_flight: InFlight[_Store] = InFlight()

    def submit(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> L2TaskId:
        """Start storing ``objects`` under ``keys``; the result comes through the store queue.
        ``ValueError`` for mismatched arguments, ``RuntimeError`` once closed; bad keys or
        objects fail the task only."""
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_store_task got {len(keys)} keys but {len(objects)} objects")
        p = self._p
        task_id = p.queues.new_task_id()
        if not keys:
            p.queues.store.complete(task_id, L2StoreResult(True, 0))
            return task_id
        try:
            check_store_keys(keys)
            halves = [split_object(o, p.slots) for o in objects]
        except ValueError as exc:  # bad input fails this task only
            _log.warning("split tier: store task %d rejected: %s", task_id, exc)
            return self._fail(task_id)
        stores = [check_generation(self._new_generation()) for _ in keys]
        registered = [p.manifest.register_store(k, g) for k, g in zip(keys, stores)]
        task = _Store(task_id, keys, [g for g, _ in registered], stores,
                      [(k, d) for k, (_, d) in zip(keys, registered) if d is not None],
                      sum(h.nbytes for h in halves), sum(h.k_layout.nbytes for h in halves))
        why = p.kpool.put(keys, [h.k_bytes for h in halves], [h.k_layout for h in halves], stores)
        if why is not None:
            _log.warning("split tier: store task %d: keeping K in L1 failed: %s", task_id, why)
            self._abandon(task, delete_v=False)
            return self._fail(task_id)
        failure = self._in_flight.start(task, lambda: p.v.submit_store_task(
            [derive_v_child_key(k, g) for k, g in zip(keys, stores)], [h.v_view for h in halves]))
        if failure is not None:
            _log.warning("split tier: store task %d: V store not submitted: %s", task_id, failure)
            self._abandon(task, delete_v=True)
            self._fail(task_id)
            if failure == "closed":
                raise RuntimeError("SplitTierL2Adapter is closed")
        return task_id

    def _fail(self, task_id: int) -> int:
        self._p.acct.add(store_tasks_failed=1)
        self._p.queues.store.complete(task_id, L2StoreResult(False, 0))
        return task_id

    def _abandon(self, task: _Store, *, delete_v: bool) -> None:
        """Undo a store: keys still at its generation lose their entry and any K half; keys
        taken over meanwhile lose this store's K half only. The V halves of the stores it
        displaced go (their keys are misses now), and its own V halves with ``delete_v``."""
        p = self._p
        mine = [k for k, g in zip(task.keys, task.generations) if p.manifest.forget(k, g)]
        taken = set(mine)
        if mine:
            p.kpool.remove(mine)
        p.kpool.remove_if([(k, g) for k, g in zip(task.keys, task.stores) if k not in taken])
        doomed = list(task.displaced)
        if delete_v:
            doomed += list(zip(task.keys, task.stores))
        p.delete_v(doomed)

    def drain(self) -> None:
        """Handle the V side's store event: complete every store whose V store finished."""
        for task, result in self._in_flight.finished_among(self._p.v.pop_completed_store_tasks):
            try:
                self._after_store(task, result)
            except Exception:  # never leave a task unfinished
                _log.exception("split tier: store task %d failed after the V store", task.task_id)
                self._abandon(task, delete_v=True)
                self._fail(task.task_id)

    def _after_store(self, task: _Store, result: L2StoreResult) -> None:
        p = self._p
        if not isinstance(result, L2StoreResult) or not result.is_successful():
            self._abandon(task, delete_v=True)
            self._fail(task.task_id)
            return
        stale: list[tuple[ObjectKey, bytes]] = []
        for key, generation, store in zip(task.keys, task.generations, task.stores):
            if not p.manifest.mark_complete(key, generation):
                # superseded (a newer store, a delete or a lost half): no entry will ever name
                # this generation again, so neither of its halves can be part of a hit
                stale.append((key, store))
        if stale:
            p.kpool.remove_if(stale)
        p.delete_v(stale + task.displaced)
        stored = result.bytes_transferred()
        p.acct.add(store_tasks_ok=1, keys_stored=len(task.keys),
                   logical_bytes_stored=task.logical_bytes, l1_k_bytes_stored=task.k_bytes,
                   l2_v_bytes_stored=stored, stores_superseded=len(stale))
        p.queues.store.complete(task.task_id, L2StoreResult(True, stored))

    def close(self) -> list[int]:
        """Refuse new stores (``submit`` raises ``RuntimeError``) and take every unfinished one
        out of the path; their task ids (the caller completes them as failures)."""
        return [task.task_id for task in self._in_flight.close()]
