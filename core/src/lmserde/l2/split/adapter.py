"""``SplitTierL2Adapter``: tier-split placement — K stays in L1, V goes to L2 through a serde.

For a V-only serde such as ``asym_k16_v8_v_only`` (slot mapping ``(None, 1)``), every logical key
is stored as two halves under distinct child keys (:func:`derive_component_key`, same model, rank,
group and salt): the K group is copied into L1 (:class:`~lmserde.l2.split.k_pool.KChildPool`,
bounded) and the V group goes through an ordinary, framed
:class:`~lmserde.l2.serde.wrapper.SerdeL2AdapterWrapper` to the inner adapter under the V child
key, so V objects are integrity-checked like any stored object. A
:class:`~lmserde.l2.split.manifest.SplitTierManifest` tracks each logical key:
a lookup or load reports a key only when its entry is ``COMPLETE``, its K half is in L1 and its
V child is in L2; a load fills the caller's two-group object, K from L1 and V decoded from L2.
Losing either half (K evicted from L1 by anyone, V deleted or evicted from L2) invalidates the
key and removes the other half, so it is a miss, never a hit with stale or missing K.

Store generations (:mod:`lmserde.l2.split.generation`) make a hit one store's K and V. Each store
of a key takes a fresh 16-byte generation (random per host, counted per store), recorded with
the K half in the K pool and in the V half's key (the V child key names it, and the stored
frame fingerprints the whole key). A lookup or load takes the generation of the key's
``COMPLETE`` entry, locks the K half only if it is of that generation (else a miss counted as
``lookup_misses_generation`` / ``load_misses_generation``) and reads the V child of that
generation (absent: a miss). A re-store therefore never meets an existing V object: it writes
its own, so it works the same whether the inner adapter skips or replaces existing keys; the
V half of the store it displaced, and its own V half if it is superseded or fails, are deleted
after its V store finishes. Racing stores of one key can leave K of one and the complete entry
of the other: that is a generation mismatch, a miss until the next store, never a mixed hit. A
re-store of a key whose K half a lookup or load holds is refused (the store fails; the key is
then a miss until stored again).

Startup rules (violations raise :class:`~lmserde.l2.split.placement.SplitTierConfigError`): a
single split-tier serde (no chain) with a two-slot mapping that leaves the K group out; an inner
adapter that reports stored sizes (the serde is upper-bound); one split-tier adapter per
``L1Manager`` (the only L2 adapter of that cache). At run time, keys must have
``object_group_id == 0`` and objects exactly two groups (K, V); others fail the store and are
load misses. The manifest is process-local: after a restart every V child is a miss.

This module is over 400 lines because ``SplitTierL2Adapter`` is one adapter whose store, lookup,
load, delete and eviction paths share the manifest, the K pool and one lock; the manifest, the
pool, the placement rules and the accounting live in their own modules.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lmserde.base import SerdeProcessor
from lmserde.keys import ObjectKey
from lmserde.l1.manager import L1Manager
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.poll_loop import PollLoop
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.contract.usage import AdapterUsage
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper
from lmserde.l2.split.accounting import SplitTierAccounting
from lmserde.l2.split.generation import (
    GenerationSource,
    check_generation,
    derive_v_child_key,
    parse_v_child_key,
)
from lmserde.l2.split.k_pool import DEFAULT_K_CHILD_MAX_SLOTS, KChildPool
from lmserde.l2.split.manifest import SplitTierManifest, SplitTierState
from lmserde.l2.split.placement import (
    SplitSlots,
    SplitTierConfigError,
    derive_component_key,
    parse_component_key,
    split_slots,
)
from lmserde.l2.split.v_slot import VHalfProcessor
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj
from lmserde.spec import SerdeSizeContract

__all__ = ["SplitTierL2Adapter", "create_split_tier_adapter"]

_log = logging.getLogger(__name__)

_ACTIVE_LOCK = threading.Lock()
#: The open split-tier adapter of each L1Manager (one at most).
_ACTIVE: weakref.WeakKeyDictionary[L1Manager, SplitTierL2Adapter] = weakref.WeakKeyDictionary()


def _v(key: ObjectKey, generation: bytes) -> ObjectKey:
    return derive_v_child_key(key, generation)


@dataclass
class _Halves:
    """The two groups of one caller object: K as bytes in place, V as a one-group view."""

    k_layout: MemoryLayoutDesc
    k_bytes: torch.Tensor  # uint8 view of the K group inside the caller's object
    v_view: TensorMemoryObj  # one-group object over the V group's bytes
    nbytes: int  # the whole object


@dataclass(eq=False)
class _Store:
    task_id: int
    keys: list[ObjectKey]
    generations: list[int]  # manifest generations
    stores: list[bytes]  # store generations, one per key
    displaced: list[tuple[ObjectKey, bytes]]  # (key, store generation) of displaced stores
    logical_bytes: int
    k_bytes: int


@dataclass(eq=False)
class _Read:
    """A lookup or load in flight: ``positions`` are the caller indexes sent to the V side."""

    task_id: int
    keys: list[ObjectKey]
    positions: list[int]
    stores: list[bytes] = field(default_factory=list)  # store generation read, per position
    halves: list[_Halves] = field(default_factory=list)  # load only, per position
    k_objs: list[MemoryObj] = field(default_factory=list)  # load only, per position


def _logical_of(v_keys: Sequence[ObjectKey]) -> list[int | ObjectKey]:
    """Logical key of each V child key (positions of other keys hold their index)."""
    out: list[int | ObjectKey] = []
    for i, key in enumerate(v_keys):
        parsed = parse_component_key(key)
        out.append(parsed[0] if parsed is not None and parsed[1] == "v" else i)
    return out


class _InnerEvents:
    """Listener on the V side: V children deleted or evicted there invalidate their keys; every
    event reaches this adapter's listeners with logical keys."""

    def __init__(self, adapter: SplitTierL2Adapter) -> None:
        self._adapter = weakref.ref(adapter)

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        adapter = self._adapter()
        if adapter is not None:
            pairs = [(k, s) for k, s in zip(_logical_of(keys), sizes) if isinstance(k, ObjectKey)]
            if pairs:
                adapter._call_listeners("on_l2_keys_stored", [k for k, _ in pairs],
                                        [s for _, s in pairs])

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        adapter = self._adapter()
        if adapter is not None:
            logical = [k for k in _logical_of(keys) if isinstance(k, ObjectKey)]
            if logical:
                adapter._call_listeners("on_l2_keys_accessed", logical)

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        adapter = self._adapter()
        if adapter is not None:
            adapter._on_v_removed(keys)


class SplitTierL2Adapter(QueuedResults, L2AdapterInterface):
    """K of each logical key in L1, V in L2 through ``v_adapter`` (see the module docstring).

    ``v_adapter`` is the serde wrapper storing V halves (one-group objects) in the inner
    adapter; this adapter owns it, and closing closes it (inner adapter and serde included) and
    deletes the K halves from L1. ``slots`` says which group is K and which V.

    Listeners (:meth:`register_listener`) hear the inner adapter's stored, accessed and deleted
    events of V children, with logical keys. Store results: success with the bytes the V side
    wrote to L2, or ``L2StoreResult(False, 0)``
    (K could not be kept, or the V store failed); a failed store leaves neither half behind.
    Lookup-and-lock hits hold a read lock on the K half (it cannot be evicted) and the inner
    adapter's lock on the V child until :meth:`submit_unlock`. :meth:`accounting` reports the
    bytes kept in L1 and stored in L2 (see :class:`~lmserde.l2.split.accounting.SplitTierAccounting`).
    """

    def __init__(
        self,
        v_adapter: SerdeL2AdapterWrapper,
        l1_manager: L1Manager,
        slots: SplitSlots,
        *,
        manifest: SplitTierManifest | None = None,
        k_child_max_slots: int = DEFAULT_K_CHILD_MAX_SLOTS,
        generation_source: Callable[[], bytes] | None = None,
    ) -> None:
        super().__init__(v_adapter.max_capacity_bytes)
        _claim_l1(l1_manager, self)
        try:
            self._v = v_adapter
            self._l1 = l1_manager
            self._slots = slots
            self._manifest = manifest if manifest is not None else SplitTierManifest()
            self._new_generation = (generation_source if generation_source is not None
                                    else GenerationSource())
            self._v_locks: dict[ObjectKey, list[ObjectKey]] = {}  # V children a lookup locked
            self._acct = SplitTierAccounting()
            self._lock = threading.Lock()
            self._closed = False
            self._stores: dict[int, _Store] = {}
            self._lookups: dict[int, _Read] = {}
            self._loads: dict[int, _Read] = {}
            self._kpool = KChildPool(l1_manager, k_child_max_slots, self._on_k_removed)
            self._queues = AdapterTaskQueues()
            self._loop = PollLoop("lmserde-split-tier")
            self._loop.add_fd(v_adapter.get_store_event_fd(), self._drain_stores)
            self._loop.add_fd(v_adapter.get_load_event_fd(), self._drain_loads)
            self._loop.add_fd(v_adapter.get_lookup_and_lock_event_fd(), self._drain_lookups)
            v_adapter.register_listener(_InnerEvents(self))
            self._loop.start()
        except BaseException:
            _release_l1(l1_manager, self)
            raise

    # -- accessors ------------------------------------------------------------------------------

    @property
    def adapter_type(self) -> str:  # type: ignore[override]
        return self._v.adapter_type

    @property
    def v_adapter(self) -> SerdeL2AdapterWrapper:
        """The serde wrapper that stores V halves."""
        return self._v

    @property
    def inner_adapter(self) -> L2AdapterInterface:
        """The storage adapter holding the V children."""
        return self._v.inner_adapter

    @property
    def serde(self) -> SerdeProcessor:
        return self._v.serde

    @property
    def serde_type(self) -> str:
        return self._v.serde_type

    @property
    def framed(self) -> bool:
        return self._v.framed

    @property
    def l1_manager(self) -> L1Manager:
        return self._l1

    @property
    def manifest(self) -> SplitTierManifest:
        return self._manifest

    @property
    def slots(self) -> SplitSlots:
        return self._slots

    @property
    def k_child_max_slots(self) -> int:
        return self._kpool.max_slots

    @property
    def closed(self) -> bool:
        return self._closed

    def k_child_key(self, key: ObjectKey) -> ObjectKey:
        """The L1 key of ``key``'s K half (tag :data:`~lmserde.l2.split.k_pool.SPLIT_TIER_K_TAG`)."""
        return derive_component_key(key, "k")

    def v_child_key(self, key: ObjectKey, generation: bytes | None = None) -> ObjectKey | None:
        """The inner adapter's key of ``key``'s V half written by the store of ``generation``;
        by default of the key's store in flight or complete (``None`` when there is none)."""
        if generation is None:
            generation = self._manifest.live_store(key)
            if generation is None:
                return None
        return _v(key, generation)

    def store_generation(self, key: ObjectKey) -> bytes | None:
        """The store generation of ``key``'s store in flight or complete (``None``: none)."""
        return self._manifest.live_store(key)

    def holds_k(self, key: ObjectKey) -> bool:
        """Whether ``key``'s K half is in L1."""
        return key in self._kpool

    def accounting(self) -> dict[str, Any]:
        """Byte accounting and counters (:meth:`SplitTierAccounting.snapshot`)."""
        return self._acct.snapshot(
            l1_k_bytes=self._kpool.bytes_held(), k_children=len(self._kpool),
            k_child_max_slots=self._kpool.max_slots, k_pool_evictions=self._kpool.pool_evictions,
            manifest=self._manifest.counts())

    def metrics(self) -> dict[str, Any]:
        """The V side's serde-wrapper metrics (stage latencies, rejections, ...)."""
        return self._v.metrics()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("SplitTierL2Adapter is closed")

    # -- objects --------------------------------------------------------------------------------

    def _halves(self, obj: MemoryObj) -> _Halves:
        layout = MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())
        if layout.num_groups != 2:
            raise ValueError(
                f"split-tier placement stores two-group (K, V) objects; this object has "
                f"{layout.num_groups} group(s)"
            )
        offsets = layout.group_offsets()
        k, v = self._slots.k_group, self._slots.v_group
        raw = obj.raw_data
        if raw.numel() < offsets[-1]:
            raise ValueError(f"object holds {raw.numel()} bytes, its layout needs {offsets[-1]}")
        v_layout = MemoryLayoutDesc([layout.shapes[v]], [layout.dtypes[v]])
        v_view = TensorMemoryObj.over(raw[offsets[v]:offsets[v + 1]], v_layout,
                                      fmt=MemoryFormat.KV_TENSOR)
        return _Halves(MemoryLayoutDesc([layout.shapes[k]], [layout.dtypes[k]]),
                       raw[offsets[k]:offsets[k + 1]], v_view, offsets[-1])

    @staticmethod
    def _check_keys(keys: list[ObjectKey]) -> None:
        if len(set(keys)) != len(keys):
            raise ValueError("the same key appears more than once in one store task")
        groups = sorted({k.object_group_id for k in keys if k.object_group_id != 0})
        if groups:
            raise ValueError(
                f"split-tier placement supports object group 0 only; keys of group(s) {groups} "
                "cannot be stored (configure a serde that stores K and V together for them)"
            )

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_store_task got {len(keys)} keys but {len(objects)} objects")
        self._check_open()
        task_id = self._queues.new_task_id()
        if not keys:
            self._queues.store.complete(task_id, L2StoreResult(True, 0))
            return task_id
        try:
            self._check_keys(keys)
            halves = [self._halves(o) for o in objects]
        except ValueError as exc:  # bad input fails this task only
            _log.warning("split tier: store task %d rejected: %s", task_id, exc)
            return self._fail_store(task_id)
        stores = [check_generation(self._new_generation()) for _ in keys]
        registered = [self._manifest.register_store(k, g) for k, g in zip(keys, stores)]
        generations = [g for g, _ in registered]
        task = _Store(task_id, keys, generations, stores,
                      [(k, d) for k, (_, d) in zip(keys, registered) if d is not None],
                      sum(h.nbytes for h in halves), sum(h.k_layout.nbytes for h in halves))
        why = self._kpool.put(keys, [h.k_bytes for h in halves], [h.k_layout for h in halves],
                              stores)
        if why is not None:
            _log.warning("split tier: store task %d: keeping K in L1 failed: %s", task_id, why)
            self._abandon(task, delete_v=False)
            return self._fail_store(task_id)
        failure: str | None = None
        with self._lock:  # registered before the poll thread can see the V result
            if self._closed:
                failure = "closed"
            else:
                try:
                    v_id = self._v.submit_store_task([_v(k, g) for k, g in zip(keys, stores)],
                                                     [h.v_view for h in halves])
                except Exception as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                else:
                    self._stores[v_id] = task
        if failure is not None:
            _log.warning("split tier: store task %d: V store not submitted: %s", task_id, failure)
            self._abandon(task, delete_v=True)
            self._fail_store(task_id)
            if failure == "closed":
                raise RuntimeError("SplitTierL2Adapter is closed")
        return task_id

    def _fail_store(self, task_id: int) -> int:
        self._acct.add(store_tasks_failed=1)
        self._queues.store.complete(task_id, L2StoreResult(False, 0))
        return task_id

    def _abandon(self, task: _Store, *, delete_v: bool) -> None:
        """Undo a store: keys still at its generation lose their entry and any K half; keys
        taken over meanwhile lose this store's K half only. The V halves of the stores it
        displaced go (their keys are misses now), and its own V halves with ``delete_v``."""
        mine = [k for k, g in zip(task.keys, task.generations) if self._manifest.forget(k, g)]
        taken = set(mine)
        if mine:
            self._kpool.remove(mine)
        self._kpool.remove_if([(k, g) for k, g in zip(task.keys, task.stores) if k not in taken])
        doomed = list(task.displaced)
        if delete_v:
            doomed += list(zip(task.keys, task.stores))
        self._delete_v(doomed)

    def _delete_v(self, pairs: Sequence[tuple[ObjectKey, bytes]]) -> None:
        """Delete the V children of ``(key, store generation)`` pairs (errors are logged)."""
        if not pairs:
            return
        try:
            self._v.delete([_v(k, g) for k, g in pairs])
        except Exception as exc:  # orphaned V children are misses (no K of their generation)
            _log.warning("split tier: deleting %d V children failed: %s: %s", len(pairs),
                         type(exc).__name__, exc)

    def _drain_stores(self) -> None:
        with self._lock:
            done = self._v.pop_completed_store_tasks()
            mine = [(self._stores.pop(i), r) for i, r in done.items() if i in self._stores]
        for task, result in mine:
            try:
                self._after_store(task, result)
            except Exception:  # never leave a task unfinished
                _log.exception("split tier: store task %d failed after the V store", task.task_id)
                self._abandon(task, delete_v=True)
                self._fail_store(task.task_id)

    def _after_store(self, task: _Store, result: L2StoreResult) -> None:
        if not isinstance(result, L2StoreResult) or not result.is_successful():
            self._abandon(task, delete_v=True)
            self._fail_store(task.task_id)
            return
        stale: list[tuple[ObjectKey, bytes]] = []
        for key, generation, store in zip(task.keys, task.generations, task.stores):
            if not self._manifest.mark_complete(key, generation):
                # superseded (a newer store, a delete or a lost half): no entry will ever name
                # this generation again, so neither of its halves can be part of a hit
                stale.append((key, store))
        superseded = len(stale)
        if stale:
            self._kpool.remove_if(stale)
        self._delete_v(stale + task.displaced)
        stored = result.bytes_transferred()
        self._acct.add(store_tasks_ok=1, keys_stored=len(task.keys),
                       logical_bytes_stored=task.logical_bytes, l1_k_bytes_stored=task.k_bytes,
                       l2_v_bytes_stored=stored, stores_superseded=superseded)
        self._queues.store.complete(task.task_id, L2StoreResult(True, stored))

    # -- lookup ---------------------------------------------------------------------------------

    def _lock_complete(
        self, keys: list[ObjectKey], wanted: list[int]
    ) -> tuple[dict[ObjectKey, tuple[MemoryObj, bytes]], int]:
        """Read-lock the K halves of the ``COMPLETE`` keys at positions ``wanted``, each only when
        it is of the complete store's generation. Returns ``{key: (K half, store generation)}``
        and the number of positions whose K half is of another generation."""
        stores: dict[ObjectKey, bytes] = {}
        for key in dict.fromkeys(keys[i] for i in wanted):
            store = self._manifest.complete_store(key) if key.object_group_id == 0 else None
            if store is not None:
                stores[key] = store
        candidates = [keys[i] for i in wanted if keys[i] in stores]
        locked, mismatched = self._kpool.lock(candidates, [stores[k] for k in candidates])
        return {k: (obj, stores[k]) for k, obj in locked.items()}, len(mismatched)

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        keys = list(keys)
        self._check_open()
        task_id = self._queues.new_task_id()
        locked, mismatched = self._lock_complete(keys, list(range(len(keys))))
        task = _Read(task_id, keys, [i for i, k in enumerate(keys) if k in locked])
        task.stores = [locked[keys[i]][1] for i in task.positions]
        self._acct.add(lookup_keys=len(keys), lookup_misses_generation=mismatched)
        if not task.positions:
            self._queues.lookup.complete(task_id, Bitmap(len(keys)))
            return task_id
        failed = False
        with self._lock:
            try:
                inner_id = self._v.submit_lookup_and_lock_task(
                    [_v(keys[i], g) for i, g in zip(task.positions, task.stores)])
            except Exception as exc:
                _log.warning("split tier: inner lookup raised: %s: %s", type(exc).__name__, exc)
                failed = True
            else:
                self._lookups[inner_id] = task
        if failed:
            self._kpool.unlock([keys[i] for i in task.positions])
            self._queues.lookup.complete(task_id, Bitmap(len(keys)))
        return task_id

    def _drain_lookups(self) -> None:
        with self._lock:
            pending = list(self._lookups.items())
        for inner_id, task in pending:
            bitmap = self._v.query_lookup_and_lock_result(inner_id)
            if bitmap is None:
                continue
            with self._lock:
                self._lookups.pop(inner_id, None)
            final = Bitmap(len(task.keys))
            release_k: list[ObjectKey] = []
            release_v: list[ObjectKey] = []
            held: list[tuple[ObjectKey, ObjectKey]] = []
            for j, i in enumerate(task.positions):
                key, store = task.keys[i], task.stores[j]
                v_hit = j < len(bitmap) and bitmap.test(j)
                if v_hit and self._manifest.complete_store(key) == store:
                    final.set(i)
                    held.append((key, _v(key, store)))
                    continue
                release_k.append(key)
                if v_hit:
                    release_v.append(_v(key, store))
            with self._lock:
                for key, v_key in held:
                    self._v_locks.setdefault(key, []).append(v_key)
            self._kpool.unlock(release_k)
            if release_v:
                self._v.submit_unlock(release_v)
            self._acct.add(lookup_hits=final.count())
            self._queues.lookup.complete(task.task_id, final)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Release the locks a lookup took on hit ``keys`` (both halves)."""
        keys = list(keys)
        self._kpool.unlock(keys)
        v_keys: list[ObjectKey] = []
        with self._lock:
            for key in keys:
                locks = self._v_locks.get(key)
                if locks:
                    v_keys.append(locks.pop())
                    if not locks:
                        del self._v_locks[key]
        if v_keys and not self._closed:
            self._v.submit_unlock(v_keys)

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_load_task got {len(keys)} keys but {len(objects)} objects")
        self._check_open()
        task_id = self._queues.new_task_id()
        n = len(keys)
        halves: dict[int, _Halves] = {}
        for i, obj in enumerate(objects):
            try:
                halves[i] = self._halves(obj)
            except ValueError as exc:
                _log.warning("split tier: load task %d: key %d is a miss: %s", task_id, i, exc)
        wanted = list(halves)
        not_complete = sum(1 for i in wanted if not self._manifest.is_complete(keys[i]))
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
        self._kpool.unlock(unusable)
        k_absent = max(len(wanted) - not_complete - len(task.positions) - mismatched, 0)
        self._acct.add(load_keys=n, load_misses_not_complete=not_complete + (n - len(wanted)),
                       load_misses_k_absent=k_absent, load_misses_generation=mismatched)
        if not task.positions:
            self._queues.load.complete(task_id, Bitmap(n))
            return task_id
        failed = False
        with self._lock:  # registered before the poll thread can see the V result
            if self._closed:
                failed = True
            else:
                try:
                    v_id = self._v.submit_load_task(
                        [_v(keys[i], g) for i, g in zip(task.positions, task.stores)],
                        [h.v_view for h in task.halves])
                except Exception as exc:
                    _log.warning("split tier: V load not submitted: %s: %s", type(exc).__name__,
                                 exc)
                    failed = True
                else:
                    self._loads[v_id] = task
        if failed:
            self._kpool.unlock([keys[i] for i in task.positions])
            self._acct.add(load_misses_v=len(task.positions))
            self._queues.load.complete(task_id, Bitmap(n))
            self._check_open()
        return task_id

    def _drain_loads(self) -> None:
        with self._lock:
            pending = list(self._loads.items())
        for v_id, task in pending:
            bitmap = self._v.query_load_result(v_id)
            if bitmap is None:
                continue
            with self._lock:
                self._loads.pop(v_id, None)
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
                self._kpool.unlock([task.keys[i] for i in task.positions])
            self._acct.add(load_hits=final.count(),
                           load_misses_v=len(task.positions) - final.count())
            self._queues.load.complete(task.task_id, final)

    # -- deletion and loss of a half ------------------------------------------------------------

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete both halves of each key (a K half held by a lookup goes on its last unlock)."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return
        begun = [self._manifest.begin_delete_store(k) for k in unique]
        generations = [g for g, _ in begun]
        try:
            self._kpool.remove(unique)
            # a store still in flight deletes its own V half when it finds itself superseded
            self._delete_v([(k, s) for k, (_, s) in zip(unique, begun) if s is not None])
        finally:
            for key, generation in zip(unique, generations):
                self._manifest.forget(key, generation)
            self._acct.add(deletes=len(unique))

    def _on_k_removed(self, keys: list[ObjectKey]) -> None:
        """K halves left L1 (eviction, pool bound, our own removal): their keys become misses."""
        if self._closed:
            return
        lost = [(k, r) for k in keys
                if (r := self._manifest.invalidate(
                    k, only_from=(SplitTierState.COMPLETE, SplitTierState.STORE_IN_FLIGHT)))
                is not None]
        if not lost:
            return
        self._acct.add(k_evictions=len(lost))
        self._delete_v([(k, store) for k, (_, store) in lost if store is not None])
        for key, (generation, _) in lost:
            self._manifest.forget(key, generation)

    def _on_v_removed(self, v_keys: list[ObjectKey]) -> None:
        """V children left L2 (deleted or evicted there): their keys lose their K half too."""
        if self._closed:
            return
        removed = [p for p in map(parse_v_child_key, v_keys) if p is not None]
        # only the V half of the key's current store makes its K half useless; the V halves of
        # displaced stores are deleted by design (and are no news for the listeners)
        current = [k for k, store in removed if self._manifest.live_store(k) == store]
        lost = [(k, g) for k in dict.fromkeys(current)
                if (g := self._manifest.mark_invalidated(
                    k, only_from=(SplitTierState.COMPLETE,))) is not None]
        if lost:
            self._acct.add(v_losses=len(lost))
            self._kpool.remove([k for k, _ in lost])
            for key, generation in lost:
                self._manifest.forget(key, generation)
        gone = [k for k, store in removed
                if k in current or self._manifest.live_store(k) is None]
        if gone:
            self._call_listeners("on_l2_keys_deleted", list(dict.fromkeys(gone)))

    # -- pass-through with key mapping ----------------------------------------------------------

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> list[ObjectKey]:
        """Logical keys of the V children in the inner adapter (other objects are skipped).

        Only keys whose manifest entry is ``COMPLETE`` are hits (after a restart: none).
        """
        listed = self._v.list_l2_keys(*args, **kwargs)
        out: dict[ObjectKey, None] = {}
        for key in listed:
            parsed = parse_component_key(key)
            if parsed is not None and parsed[1] == "v":
                out[parsed[0]] = None
        return list(out)

    def reports_object_sizes(self) -> bool:
        return self._v.reports_object_sizes()

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Stored bytes of each key's V child in L2 (of the key's store in flight or complete;
        keys without one are absent)."""
        children = {k: v for k in keys if (v := self.v_child_key(k)) is not None}
        sizes = self._v.get_object_sizes(list(children.values())) if children else {}
        return {k: sizes[v] for k, v in children.items() if v in sizes}

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        children = [v for k in keys if (v := self.v_child_key(k)) is not None]
        if children:
            self._v.touch_keys(children)

    def get_usage(self) -> AdapterUsage:
        """Usage of the inner adapter (L2 bytes; the K halves are in :meth:`accounting`)."""
        return self._v.get_usage()

    def supports_global_eviction(self) -> bool:
        return self._v.supports_global_eviction()

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        self._v.set_backend_identity(name, shared)

    def report_status(self) -> dict[str, Any]:
        """The V side's status plus ``placement`` and ``split_tier`` (:meth:`accounting`)."""
        status = dict(self._v.report_status())
        status["placement"] = "kv_split_tier"
        status["split_tier"] = self.accounting()
        status["is_healthy"] = bool(status.get("is_healthy", True)) and not self._closed
        return status

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop, close the V side (inner adapter and serde), drop the K halves; idempotent.

        Unfinished tasks complete as failures; every lock taken on K halves is released.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._loop.stop()
        try:
            self._v.close()
        except Exception:
            _log.exception("split tier: closing the V adapter raised")
        with self._lock:
            stores = list(self._stores.values())
            reads = list(self._lookups.values()) + list(self._loads.values())
            self._stores.clear()
            self._lookups.clear()
            self._loads.clear()
            self._v_locks.clear()
        for read in reads:
            self._kpool.unlock([read.keys[i] for i in read.positions])
        self._kpool.close()
        for store in stores:
            self._queues.store.complete(store.task_id, L2StoreResult(False, 0))
        _release_l1(self._l1, self)
        self._queues.close()

    def __enter__(self) -> SplitTierL2Adapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _claim_l1(l1: L1Manager, adapter: SplitTierL2Adapter) -> None:
    with _ACTIVE_LOCK:
        current = _ACTIVE.get(l1)
        if current is not None and not current.closed:
            raise SplitTierConfigError(
                "split-tier placement needs exactly one L2 adapter per L1 cache: this L1Manager "
                "already has an open split-tier adapter (close it first, or use a serde that "
                "stores K and V together)"
            )
        _ACTIVE[l1] = adapter


def _release_l1(l1: L1Manager, adapter: SplitTierL2Adapter) -> None:
    with _ACTIVE_LOCK:
        if _ACTIVE.get(l1) is adapter:
            del _ACTIVE[l1]


def create_split_tier_adapter(
    inner: L2AdapterInterface,
    processor: SerdeProcessor,
    l1_manager: L1Manager,
    *,
    serde_type: str,
    size_contract: SerdeSizeContract | None = None,
    frame: bool = True,
    repair: bool = True,
    k_child_max_slots: int = DEFAULT_K_CHILD_MAX_SLOTS,
    manifest: SplitTierManifest | None = None,
    generation_source: Callable[[], bytes] | None = None,
    frame_keys: FrameKeys | None = None,
) -> SplitTierL2Adapter:
    """A :class:`SplitTierL2Adapter` storing V through ``processor`` into ``inner``.

    Checks the startup rules first (:class:`SplitTierConfigError`, nothing taken over then): the
    serde's slots (:func:`~lmserde.l2.split.placement.split_slots`), one split-tier adapter per
    ``l1_manager``, and ``k_child_max_slots``. The V side is a :class:`SerdeL2AdapterWrapper`
    (framed unless ``frame`` is false) over a :class:`~lmserde.l2.split.v_slot.VHalfProcessor`;
    an upper-bound serde on an adapter that cannot report stored sizes is refused there.
    ``generation_source`` makes the store generations (default: a
    :class:`~lmserde.l2.split.generation.GenerationSource` with a random host id); each call
    must return 16 bytes never returned before by any source sharing the L2 tier. ``frame_keys``
    makes the V side's frames authenticated (see :class:`SerdeL2AdapterWrapper`).
    """
    slots = split_slots(processor, serde_type)
    if not isinstance(k_child_max_slots, int) or isinstance(k_child_max_slots, bool) \
            or k_child_max_slots < 1:
        raise SplitTierConfigError(f"k_child_max_slots must be an int >= 1, got {k_child_max_slots!r}")
    with _ACTIVE_LOCK:
        current = _ACTIVE.get(l1_manager)
    if current is not None and not current.closed:
        _claim_l1(l1_manager, current)  # raises the startup-rule error
    wrapper = SerdeL2AdapterWrapper(inner, VHalfProcessor(processor, slots.v_mapping), l1_manager,
                                    serde_type=serde_type, size_contract=size_contract,
                                    frame=frame, repair=repair, frame_keys=frame_keys)
    try:
        return SplitTierL2Adapter(wrapper, l1_manager, slots, manifest=manifest,
                                  k_child_max_slots=k_child_max_slots,
                                  generation_source=generation_source)
    except BaseException:
        wrapper.close()  # closes inner and the serde: ownership passed to the wrapper
        raise
