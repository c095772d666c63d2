"""``SplitTierL2Adapter``: tier-split placement — K stays in L1, V goes to L2 through a serde.

For a serde whose spec declares ``StoragePlacementMode.KV_SPLIT_TIER`` (``asym_k16_v8_v_only``,
slot mapping ``(None, 1)``), every logical key is stored as two halves under distinct child keys
(:func:`derive_component_key`, same model, rank, group and salt): the K group is copied into
L1 (:class:`~lmserde.l2.split.k_pool.KChildPool`, bounded) and the V group goes through an
ordinary, framed :class:`~lmserde.l2.serde.wrapper.SerdeL2AdapterWrapper` to the inner adapter
under the V child key, so V objects are integrity-checked like any stored object. A
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

The adapter is built from the same pieces as the serde wrapper: a
:class:`~lmserde.l2.contract.coordinating_adapter.CoordinatingAdapter` (queues, poll thread,
closed state, status) coordinating a store path (:mod:`~lmserde.l2.split.store_path`) and a read
path (:mod:`~lmserde.l2.split.read_path`), which share the manifest, the K pool and the V side
(:class:`~lmserde.l2.split.parts.SplitTierParts`). This module keeps what concerns both halves of
a key: deletion, the loss of either half, key mapping for the pass-through calls, and close.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from lmserde.base import SerdeProcessor
from lmserde.keys import ObjectKey
from lmserde.l1.manager import L1Manager
from lmserde.l2.contract.coordinating_adapter import CoordinatingAdapter
from lmserde.l2.contract.inner_delegation import InnerBackendDelegation
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper
from lmserde.l2.split.accounting import SplitTierAccounting
from lmserde.l2.split.generation import GenerationSource, derive_v_child_key, parse_v_child_key
from lmserde.l2.split.k_pool import DEFAULT_K_CHILD_MAX_SLOTS, KChildPool
from lmserde.l2.split.l1_claim import check_l1_free, claim_l1, release_l1
from lmserde.l2.split.manifest import SplitTierManifest, SplitTierState
from lmserde.l2.split.parts import SplitTierParts
from lmserde.l2.split.placement import (
    SplitSlots,
    SplitTierConfigError,
    derive_component_key,
    parse_component_key,
    split_slots,
)
from lmserde.l2.split.read_path import SplitReadPath
from lmserde.l2.split.store_path import SplitStorePath
from lmserde.l2.split.v_listener import VSideListener
from lmserde.l2.split.v_slot import VHalfProcessor
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj
from lmserde.spec import SerdeSizeContract

__all__ = ["SplitTierL2Adapter", "create_split_tier_adapter"]

_log = logging.getLogger(__name__)


def _read_only(path: str, doc: str) -> Any:
    """A read-only property answering ``self.<path>`` (a dotted attribute path): the accessors
    of the adapter's parts, as one table (the values' types are those of the parts)."""
    get = attrgetter(path)
    return property(get, doc=doc)


class SplitTierL2Adapter(InnerBackendDelegation, CoordinatingAdapter):
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
    Usage, object-size support, global eviction and the backend identity are the V side's.
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
        super().__init__(v_adapter, "lmserde-split-tier")
        kpool: KChildPool | None = None
        try:
            claim_l1(l1_manager, self)
            self._l1 = l1_manager
            kpool = KChildPool(l1_manager, k_child_max_slots, self._on_k_removed)
            self._parts = SplitTierParts(
                v_adapter, slots, manifest if manifest is not None else SplitTierManifest(),
                kpool, SplitTierAccounting(), self._queues)
            self._stores = SplitStorePath(self._parts, generation_source
                                          if generation_source is not None else GenerationSource())
            self._reads = SplitReadPath(self._parts)
            v_adapter.register_listener(VSideListener(self._call_listeners, self._on_v_removed))
            self._watch({v_adapter.get_store_event_fd(): self._stores.drain,
                         v_adapter.get_load_event_fd(): self._reads.drain_loads,
                         v_adapter.get_lookup_and_lock_event_fd(): self._reads.drain_lookups})
        except BaseException:
            if kpool is not None:
                kpool.close()
            self._loop.stop()
            self._queues.close()
            release_l1(l1_manager, self)
            raise

    # -- accessors ------------------------------------------------------------------------------

    serde = _read_only("_parts.v.serde", "The serde processor (its V-half view) of the V side.")
    serde_type = _read_only("_parts.v.serde_type", "The serde type storing the V halves.")
    framed = _read_only("_parts.v.framed", "Whether the V halves carry the stored-object frame.")
    v_adapter = _read_only("_parts.v", "The serde wrapper that stores V halves.")
    inner_adapter = _read_only("_parts.v.inner_adapter",
                               "The storage adapter holding the V children (the V side's inner).")
    l1_manager = _read_only("_l1", "The L1 cache holding the K halves.")
    manifest = _read_only("_parts.manifest", "The manifest of the logical keys (process-local).")
    slots = _read_only("_parts.slots", "Which group is K (kept in L1) and which V (stored).")
    k_child_max_slots = _read_only("_parts.kpool.max_slots", "The most K halves kept in L1.")

    def k_child_key(self, key: ObjectKey) -> ObjectKey:
        """The L1 key of ``key``'s K half (tag :data:`~lmserde.l2.split.k_pool.SPLIT_TIER_K_TAG`)."""
        return derive_component_key(key, "k")

    def v_child_key(self, key: ObjectKey, generation: bytes | None = None) -> ObjectKey | None:
        """The inner adapter's key of ``key``'s V half written by the store of ``generation``;
        by default of the key's store in flight or complete (``None`` when there is none)."""
        if generation is None:
            generation = self._parts.manifest.live_store(key)
            if generation is None:
                return None
        return derive_v_child_key(key, generation)

    def store_generation(self, key: ObjectKey) -> bytes | None:
        """The store generation of ``key``'s store in flight or complete (``None``: none)."""
        return self._parts.manifest.live_store(key)

    def holds_k(self, key: ObjectKey) -> bool:
        """Whether ``key``'s K half is in L1."""
        return key in self._parts.kpool

    def accounting(self) -> dict[str, Any]:
        """Byte accounting and counters (:meth:`SplitTierAccounting.snapshot`)."""
        p = self._parts
        return p.acct.snapshot(
            l1_k_bytes=p.kpool.bytes_held(), k_children=len(p.kpool),
            k_child_max_slots=p.kpool.max_slots, k_pool_evictions=p.kpool.pool_evictions,
            manifest=p.manifest.counts())

    def metrics(self) -> dict[str, Any]:
        """The V side's serde-wrapper metrics (stage latencies, rejections, ...)."""
        return self._parts.v.metrics()

    # -- tasks ----------------------------------------------------------------------------------

    def submit_store_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                          ) -> L2TaskId:
        """Keep K of each object in L1 and store V through the V side (see
        :mod:`~lmserde.l2.split.store_path`); never waits on the serde or the network."""
        self._check_open()
        return self._stores.submit(keys, objects)

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        """Look up ``keys``: a hit is a ``COMPLETE`` key whose K half (of its store) is in L1
        and whose V child is in L2; both stay locked until :meth:`submit_unlock`."""
        self._check_open()
        return self._reads.submit_lookup(keys)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Release the locks a lookup took on hit ``keys`` (both halves)."""
        self._reads.unlock(keys)

    def submit_load_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                         ) -> L2TaskId:
        """Load ``keys`` into two-group ``objects``: V decoded from L2, K copied from L1 (see
        :mod:`~lmserde.l2.split.read_path`); never waits on the serde or the network."""
        self._check_open()
        return self._reads.submit_load(keys, objects)

    # -- deletion and loss of a half ------------------------------------------------------------

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete both halves of each key (a K half held by a lookup goes on its last unlock)."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return
        p = self._parts
        begun = [p.manifest.begin_delete_store(k) for k in unique]
        try:
            p.kpool.remove(unique)
            # a store still in flight deletes its own V half when it finds itself superseded
            p.delete_v([(k, s) for k, (_, s) in zip(unique, begun) if s is not None])
        finally:
            for key, (generation, _) in zip(unique, begun):
                p.manifest.forget(key, generation)
            p.acct.add(deletes=len(unique))

    def _on_k_removed(self, keys: list[ObjectKey]) -> None:
        """K halves left L1 (eviction, pool bound, our own removal): their keys become misses."""
        if self._closed:
            return
        p = self._parts
        lost = [(k, r) for k in keys
                if (r := p.manifest.invalidate(
                    k, only_from=(SplitTierState.COMPLETE, SplitTierState.STORE_IN_FLIGHT)))
                is not None]
        if not lost:
            return
        p.acct.add(k_evictions=len(lost))
        p.delete_v([(k, store) for k, (_, store) in lost if store is not None])
        for key, (generation, _) in lost:
            p.manifest.forget(key, generation)

    def _on_v_removed(self, v_keys: list[ObjectKey]) -> None:
        """V children left L2 (deleted or evicted there): their keys lose their K half too."""
        if self._closed:
            return
        p = self._parts
        removed = [parsed for parsed in map(parse_v_child_key, v_keys) if parsed is not None]
        # only the V half of the key's current store makes its K half useless; the V halves of
        # displaced stores are deleted by design (and are no news for the listeners)
        current = [k for k, store in removed if p.manifest.live_store(k) == store]
        lost = [(k, g) for k in dict.fromkeys(current)
                if (g := p.manifest.mark_invalidated(
                    k, only_from=(SplitTierState.COMPLETE,))) is not None]
        if lost:
            p.acct.add(v_losses=len(lost))
            p.kpool.remove([k for k, _ in lost])
            for key, generation in lost:
                p.manifest.forget(key, generation)
        gone = [k for k, store in removed if k in current or p.manifest.live_store(k) is None]
        if gone:
            self._call_listeners("on_l2_keys_deleted", list(dict.fromkeys(gone)))

    # -- pass-through with key mapping ----------------------------------------------------------

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> list[ObjectKey]:
        """Logical keys of the V children in the inner adapter (other objects are skipped).

        Only keys whose manifest entry is ``COMPLETE`` are hits (after a restart: none).
        """
        out: dict[ObjectKey, None] = {}
        for key in self._parts.v.list_l2_keys(*args, **kwargs):
            parsed = parse_component_key(key)
            if parsed is not None and parsed[1] == "v":
                out[parsed[0]] = None
        return list(out)

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Stored bytes of each key's V child in L2 (of the key's store in flight or complete;
        keys without one are absent)."""
        children = {k: v for k in keys if (v := self.v_child_key(k)) is not None}
        sizes = self._parts.v.get_object_sizes(list(children.values())) if children else {}
        return {k: sizes[v] for k, v in children.items() if v in sizes}

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        """Mark the V children of ``keys`` (of their live stores) recently used."""
        children = [v for k in keys if (v := self.v_child_key(k)) is not None]
        if children:
            self._parts.v.touch_keys(children)

    def report_status(self) -> dict[str, Any]:
        """The V side's status plus ``placement`` and ``split_tier`` (:meth:`accounting`)."""
        return self._status_over_inner({"placement": "kv_split_tier",
                                        "split_tier": self.accounting()})

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop, close the V side (inner adapter and serde), drop the K halves; idempotent.

        Unfinished tasks complete as failures (stores ``L2StoreResult(False, 0)``, lookups and
        loads all misses); every lock taken on K halves is released.
        """
        if not self._begin_close():
            return
        self._loop.stop()
        try:
            self._parts.v.close()
        except Exception:
            _log.exception("split tier: closing the V adapter raised")
        unfinished_stores = self._stores.close()
        self._reads.close()
        self._parts.kpool.close()
        for task_id in unfinished_stores:
            self._queues.store.complete(task_id, L2StoreResult(False, 0))
        release_l1(self._l1, self)
        self._queues.close()


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
    check_l1_free(l1_manager)
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
