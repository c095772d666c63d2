"""``SerdeL2AdapterWrapper``: runs every stored object through a serde, and every load back.

The wrapper coordinates; the data path lives in its own modules, one state machine each:

- :mod:`~lmserde.l2.serde.store_path`: serialize → seal → inner store;
- :mod:`~lmserde.l2.serde.load_path`: (stored sizes →) inner load → verify → deserialize;
- :mod:`~lmserde.l2.serde.stored_frame`: the stored-object frame (seal, open, refusal reasons);
- :mod:`~lmserde.l2.serde.temporaries`, :mod:`~lmserde.l2.serde.serde_shape`: the L1 temporaries
  and the serde's bounds and item views both paths use.

The wrapper builds them from its serde and inner adapter, runs one poll thread that hands each of
the four event fds (the serde's serialize and deserialize fds, the inner adapter's store and load
fds) to its path, passes lookups and the rest through to the inner adapter, and reports status.
The queues, the poll thread, the closed state and the status frame are those of every
coordinating adapter (:class:`~lmserde.l2.contract.coordinating_adapter.CoordinatingAdapter`,
the split tier's base too).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from lmserde.adaptive import AutoPolicy
from lmserde.base import SerdeProcessor
from lmserde.hooks import load_hook_plugins
from lmserde.keys import ObjectKey
from lmserde.l1.manager import L1Manager
from lmserde.l2.contract.coordinating_adapter import CoordinatingAdapter
from lmserde.l2.contract.head_last import adapter_writes_head_last
from lmserde.l2.contract.inner_delegation import (
    InnerAdapterDelegation,
    adapter_reports_sizes,
    adapter_sizes_are_local,
)
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.replacing_store import enable_replacing_stores
from lmserde.l2.contract.tenant_routing import adapter_routes_tenants
from lmserde.l2.serde.authenticated_frame import (
    AUTH_HEADER_BYTES,
    KEY_RECORD_REGION,
    AuthenticatedFramer,
)
from lmserde.l2.serde.auto_writes import AutoWrites
from lmserde.l2.serde.bounded_close import FINISH_GRACE_S, call_within, close_within
from lmserde.l2.serde.failure_streaks import UNHEALTHY_AFTER_FAILURES, FailureStreaks
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.hidden_names_adapter import HiddenNamesAdapter
from lmserde.l2.serde.load_path import LoadPath
from lmserde.l2.serde.metrics import WrapperMetrics
from lmserde.l2.serde.read_configs import (
    ConfigReaders,
    ReadAlsoSerde,
)
from lmserde.l2.serde.store_path import StorePath
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.l2.serde.stored_sizes import examine_stored_sizes
from lmserde.l2.serde.temporaries import L1_WRITE_TAG, Temporaries
from lmserde.l2.serde.wrapper_configs import resolve_size_contract, wrapper_configs
from lmserde.l2.serde.wrapper_task import UnfinishedTask
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj
from lmserde.spec import SerdeSizeContract

__all__ = ["SerdeL2AdapterWrapper", "L1_WRITE_TAG", "UPPER_BOUND_PAIRING_ERROR",
           "UNHEALTHY_AFTER_FAILURES", "ReadAlsoSerde", "AutoWrites"]

_log = logging.getLogger(__name__)

UPPER_BOUND_PAIRING_ERROR = (
    "Upper-bound serde output requires the filesystem adapter's actual-used-length load "
    "contract; unsupported pairing(s): "
)


class SerdeL2AdapterWrapper(InnerAdapterDelegation, CoordinatingAdapter):
    """An L2 adapter that stores serialized bytes in ``inner`` and decodes them on load.

    ``serde`` is owned by the wrapper (closed with it); ``l1_manager`` provides the temporary
    buffers. ``size_contract`` defaults to the processor's declared
    :attr:`~lmserde.SerdeProcessor.size_contract`, else the contract registered for
    ``serde_type``, else ``UPPER_BOUND``; an ``UPPER_BOUND`` serde on an
    adapter that cannot report object sizes is refused with ``ValueError`` here, at construction.

    With ``frame=True`` (the default) every stored object is a stored-object frame: a 64-byte
    header (format version, the fingerprint of the serde's ``get_config()``, the object key and
    layout, the payload length and an XXH3-64 checksum of the payload, skipped when the serde
    ``authenticates_output()``) followed by the serde's bytes. ``frame=False`` stores the serde's
    bytes alone, as LMCache does — for an L2 shared with LMCache processes; it gives up the
    detection of corrupted, moved and foreign objects for serdes without their own checks.
    ``frame_keys`` (adapter option ``frame_key_path`` or ``frame_keyring_path``) makes it the
    authenticated frame (version 2, :mod:`~lmserde.l2.serde.authenticated_frame`): a keyed MAC
    per tenant over header, key, config, layout and payload instead of the checksum; frames
    without a valid MAC are misses (``auth``). It needs ``frame=True``. ``hidden_names``
    (adapter option ``hide_names``, needs ``frame_keys``) stores every object under a keyed hash
    of its key (:class:`~lmserde.l2.serde.hidden_names_adapter.HiddenNamesAdapter` over
    ``inner``; ``inner_adapter`` is then that layer), with the real key encrypted in the frame.

    A serialize result is checked before anything is written: the serde must have written at most
    its estimate, and exactly its estimate under an ``EXACT`` size contract.

    Store results are the inner results (bytes written, frames included); any failure gives
    ``L2StoreResult(False, 0)``, immediately when it happens inside ``submit_store_task``. Load
    results are per key: inner misses, keys whose stored object fails a frame check (reasons in
    :data:`~lmserde.l2.serde.stored_frame.REJECT_REASONS`) and keys that fail to deserialize
    (``decode``; ``foreign`` for a :class:`~lmserde.ForeignObjectError`) are misses; the other keys
    of the batch still hit (per-key outcomes need a processor that
    :attr:`~lmserde.SerdeProcessor.reports_item_outcomes`; other processors fail the whole batch).
    A key refused for a reason that proves its object damaged is deleted from ``inner`` unless
    ``repair=False`` (``lmserde scrub`` without ``--delete`` looks without touching); an object
    that may be another reader's ("not mine": another config, key, layout, frame version or key
    material) is left in place. A framed wrapper switches an inner adapter that can replace
    objects to replacing stores (:mod:`lmserde.l2.contract.replacing_store`), so that the next
    store of a refused key writes the genuine object over whatever is there. Listeners
    are registered on ``inner`` (they hear its stored, accessed and deleted keys); one that also
    has ``on_l2_keys_rejected(reason, keys)`` hears the keys this wrapper refuses, before they are
    deleted. A key that misses without being refused (a decode that failed for a reason other
    than its bytes) is kept and not reported there.

    ``read_also``: earlier serde configurations this wrapper also reads (stores always use
    ``serde``): an object whose frame names one of them is decoded with that configuration's
    processor and is a hit (counted in ``load_hits_read_also`` and ``read_also_hits`` by
    configuration); an object of a configuration not listed stays a ``config`` miss, kept. They
    need framing and an adapter that reports stored sizes (load temporaries hold the largest
    bound of every configuration, narrowed to the stored object); ``ValueError`` otherwise, or
    for a configuration listed twice or equal to ``serde``. Their processors are owned by the
    wrapper and closed with it, under the same bound.

    ``auto`` (:class:`~lmserde.l2.serde.auto_writes.AutoWrites`): serde ``auto``, ``serde`` its
    first candidate (``serde_type`` that one's type): each object of a store task is written by
    the candidate its policy picks for it (one serialize per candidate the task uses, one inner
    store), framed with that candidate's config; loads decode any candidate. It needs
    framing and stored sizes (``ValueError``); ``serde_type`` is then ``auto``, and
    ``report_status()["serde_auto"]`` the policy's :meth:`~lmserde.adaptive.AutoPolicy.snapshot`.

    Lookups, unlocks, deletes, sizes and usage pass through to ``inner`` (all in stored bytes).
    ``report_status()`` adds ``serde_wrapped: True``, ``serde_type``, ``serde_framed``,
    ``serde_read_also`` (the labels of the ``read_also`` configurations) and
    ``serde_wrapper`` (the :class:`~lmserde.l2.serde.metrics.WrapperMetrics` snapshot, with
    ``rejections`` by reason and ``repaired``); its ``is_healthy`` is false while the inner adapter
    is unhealthy or after :data:`UNHEALTHY_AFTER_FAILURES` consecutive failing stores or loads.
    Each finished task is also emitted as a :class:`~lmserde.WrapperTaskEvent`.
    """

    def __init__(
        self,
        inner_adapter: L2AdapterInterface,
        serde: SerdeProcessor,
        l1_manager: L1Manager,
        *,
        serde_type: str | None = None,
        size_contract: SerdeSizeContract | None = None,
        frame: bool = True,
        repair: bool = True,
        read_also: Sequence[ReadAlsoSerde] = (),
        frame_keys: FrameKeys | None = None,
        hidden_names: NameHider | None = None,
        auto: AutoWrites | None = None,
    ) -> None:
        if hidden_names is not None:
            if frame_keys is None or not frame:
                raise ValueError("hide_names needs a frame key (frame_key_path): the real key "
                                 "travels in the authenticated frame")
            if adapter_routes_tenants(inner_adapter):
                raise ValueError("hide_names hands the adapter hidden keys, which name no tenant: "
                                 "it cannot be combined with an adapter that places tenants "
                                 "apart (s3 'tenant_routes'); use one adapter per routed tenant")
            inner_adapter = HiddenNamesAdapter(
                inner_adapter, hidden_names,
                lambda head, hidden: self._auth_framer().read_key_record(head, hidden),
                AUTH_HEADER_BYTES + KEY_RECORD_REGION)
        self._serde = serde
        self._l1 = l1_manager
        self._auto = auto
        self.serde_type = first_type = serde_type or serde.serde_type or type(serde).__name__
        self.size_contract = first_contract = (size_contract
                                               or resolve_size_contract(serde, first_type))
        reports_sizes = adapter_reports_sizes(inner_adapter)
        if auto is not None:
            auto.check_adapter(frame, reports_sizes)
            self.serde_type = "auto"
            self.size_contract = auto.size_contract_of_all or self.size_contract
        backend = getattr(inner_adapter, "adapter_type", "") or type(inner_adapter).__name__
        if self.size_contract is SerdeSizeContract.UPPER_BOUND and not reports_sizes:
            raise ValueError(
                f"{UPPER_BOUND_PAIRING_ERROR}{self.serde_type} on {backend}. The serde may write "
                f"less than its estimate, and '{backend}' cannot report stored object sizes, so "
                "every load would miss. Use an adapter that reports sizes (fs, memory) or a serde "
                "with an EXACT size contract."
            )
        configs = wrapper_configs(
            serde, first_type, first_contract, frame=frame, frame_keys=frame_keys,
            hidden_names=hidden_names, read_also=read_also, auto=auto,
            reports_sizes=reports_sizes, backend=backend,
            head_last=adapter_writes_head_last(inner_adapter))
        self._framer, self._readers = configs.framer, configs.readers
        self._own_count = configs.written  # the readers of the configs it writes, then read_also
        read_fds, write_fds = configs.event_fds(inner_adapter)  # ValueError unless distinct
        # A framed tier heals on store: an object that does not verify, or that another config
        # or key wrote, is replaced by the next store of its key (not skipped as existing).
        self._replacing_stores = self._framer is not None and enable_replacing_stores(inner_adapter)
        self._metrics = WrapperMetrics()
        self._streaks = FailureStreaks()
        load_hook_plugins()  # here, not on the poll thread when the first event is emitted
        super().__init__(inner_adapter, "serde-l2-wrapper")  # opens the queues' fds
        temporaries = Temporaries(l1_manager)
        self._shape = self._readers.primary.shape
        self._stores = StorePath(
            writers=configs.writers, serde_type=self.serde_type, inner=inner_adapter,
            temporaries=temporaries, queues=self._queues, metrics=self._metrics,
            streaks=self._streaks, choose=None if auto is None else auto.policy.decide,
            on_stored=None if auto is None else auto.observe_store)
        self._loads = LoadPath(
            readers=self._readers, serde_type=self.serde_type, inner=inner_adapter,
            # the stored sizes narrow the temporaries (an upper-bound serde's objects vary in
            # length; an exact one reads objects other writers' options made shorter, e.g. an
            # older aesgcm frame version): asked inline when they are local (fs: a stat), on the
            # background worker when they may wait on the network (redis, s3)
            stored_sizes=(("inline" if adapter_sizes_are_local(inner_adapter) else "worker")
                          if reports_sizes else "none"),
            repair=bool(repair), temporaries=temporaries, queues=self._queues,
            metrics=self._metrics, streaks=self._streaks,
            on_rejected=lambda reason, keys: self._call_listeners("on_l2_keys_rejected",
                                                                  reason, keys),
            on_loaded=None if auto is None else auto.observe_load, written_configs=configs.written)
        self._watch({serde.get_serialize_event_fd(): self._stores.drain_serialize,
                     inner_adapter.get_store_event_fd(): self._stores.drain_inner_store,
                     inner_adapter.get_load_event_fd(): self._loads.drain_inner_load,
                     serde.get_deserialize_event_fd(): self._loads.drain_deserialize,
                     **{fd: self._loads.drain_deserialize for fd in read_fds},
                     **{fd: functools.partial(self._stores.drain_serialize, i)
                        for i, fd in enumerate(write_fds, start=1)}})

    # -- accessors ------------------------------------------------------------------------------

    @property
    def serde(self) -> SerdeProcessor:
        return self._serde

    @property
    def l1_manager(self) -> L1Manager:
        return self._l1

    @property
    def framed(self) -> bool:
        """Whether stored objects carry the stored-object frame."""
        return self._framer is not None

    def _auth_framer(self) -> AuthenticatedFramer:
        framer = self._framer
        assert isinstance(framer, AuthenticatedFramer)
        return framer

    @property
    def framer(self) -> ObjectFramer | None:
        """The frame codec of this wrapper's serde configuration (``None`` when not framing)."""
        return self._framer

    def payload_bound(self, layout: MemoryLayoutDesc) -> int:
        """The serde's bound on the payload of an object of ``layout`` (frame excluded)."""
        return self._shape.payload_bound(layout)

    def stored_bound(self, layout: MemoryLayoutDesc) -> int:
        """The largest stored object of ``layout`` (frame included) of any configuration this
        wrapper reads: what a load of it reserves in L1 for its temporary."""
        return self._shape.stored_bound(self._readers.load_bound(layout))

    @property
    def written_configs(self) -> int:
        """How many of :attr:`read_configs` (the first) stores write: 1, or ``auto``'s candidates."""
        return self._own_count

    @property
    def auto_policy(self) -> AutoPolicy | None:
        """The ``auto`` serde's decision policy (``None`` for a wrapper of one serde)."""
        return self._auto and self._auto.policy

    @property
    def read_configs(self) -> ConfigReaders:
        """The serde configurations loads decode: this wrapper's own first, then ``read_also``."""
        return self._readers

    def metrics(self) -> dict[str, Any]:
        """The wrapper's own metrics (see :class:`~lmserde.l2.serde.metrics.WrapperMetrics`)."""
        return self._metrics.snapshot()

    # -- tasks ----------------------------------------------------------------------------------

    def submit_store_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                          ) -> L2TaskId:
        """Serialize ``objects`` and store them under ``keys`` (see
        :mod:`~lmserde.l2.serde.store_path`); never waits on the serde or the network."""
        self._check_open()
        return self._stores.submit(keys, objects)

    def submit_load_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                         ) -> L2TaskId:
        """Load ``keys`` and deserialize them into ``objects``, key by key (see
        :mod:`~lmserde.l2.serde.load_path`); never waits on the serde or the network."""
        self._check_open()
        return self._loads.submit(keys, objects)

    def stored_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """The inner adapter's stored sizes of ``keys`` (frame included); ``{}`` when it does not
        report sizes; a key whose size cannot be had is left out. Never raises (except Ctrl-C on
        the main thread). A synchronous call to the inner adapter, for offline tools (scrub)."""
        return examine_stored_sizes(self._inner, keys)[0]

    def examine_sizes(self, keys: Sequence[ObjectKey]
                      ) -> tuple[dict[ObjectKey, int], set[ObjectKey]]:
        """:meth:`stored_sizes`, plus the keys whose size could not be had because the adapter
        raised: those may well exist, where a key left out of the sizes without raising is not
        stored (:func:`~lmserde.l2.serde.stored_sizes.examine_stored_sizes`)."""
        return examine_stored_sizes(self._inner, keys)

    # -- pass-through ---------------------------------------------------------------------------

    def register_listener(self, listener: Any) -> None:
        """Register ``listener`` on the inner adapter (stored, accessed and deleted keys); if it
        has ``on_l2_keys_rejected(reason, keys)``, it also hears the keys this wrapper refuses."""
        self._inner.register_listener(listener)
        self._listeners.append(listener)

    def unregister_listener(self, listener: Any) -> None:
        """Undo :meth:`register_listener`; no-op for a listener that is not registered."""
        self._inner.unregister_listener(listener)
        L2AdapterInterface.unregister_listener(self, listener)  # the rejection listeners

    def report_status(self) -> dict[str, Any]:
        """The inner adapter's status plus the wrapper's; ``is_healthy`` also reflects failures."""
        return self._status_over_inner({
            "serde_wrapped": True, "serde_type": self.serde_type,
            "serde_size_contract": self.size_contract.value,
            "serde_framed": self._framer is not None,
            "serde_frame_mode": "unframed" if self._framer is None else self._framer.describe(),
            "serde_read_also": self._readers.labels[self._own_count:],
            **({} if self._auto is None else {"serde_auto": self._auto.policy.snapshot()}),
            "serde_replacing_stores": self._replacing_stores,
            "serde_wrapper": self._metrics.snapshot(),
            "serde_consecutive_failures": self._streaks.snapshot(),
        }, healthy=self._streaks.healthy())

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the poll thread, close inner and serde, release every temporary, close the fds.

        Bounded: returns within the serde's ``close_timeout_s`` (default 10 s; see
        :func:`~lmserde.l2.serde.bounded_close.close_within`) plus ``FINISH_GRACE_S`` (1 s) even
        if a plugin call (a serde call, the inner adapter's close, a hook) never returns. Work
        running in the inner adapter or the serde is waited for up to that bound (never
        cancelled mid-write); a call still running then is logged naming the plugin and
        the call, and listed in ``report_status()["serde_wrapper"]["hung_at_close"]``; the
        temporaries it may still write are not returned to L1 (kept, never reused). Tasks still
        unfinished are completed as failures (stage ``closed``). Idempotent.
        """
        if not self._begin_close():
            return
        self._stores.stop_accepting()
        self._loads.stop_accepting()
        report = close_within(self._loop, self._inner, self._serde, self.adapter_type,
                              read_serdes=[r.serde for r in list(self._readers)[1:]])
        unfinished: list[UnfinishedTask] = []
        hung_ids = {0: report.serde_task_ids, **{
            index: ids for index, ids in enumerate(report.read_serde_task_ids, start=1)}}
        paths: tuple[tuple[str, Any], ...] = (("store path", self._stores),
                                              ("load path", self._loads))
        for name, path in paths:
            taken = path.take_unfinished(hung_ids, report.inner_hung, max(report.left(), 0.05))
            if taken is None:
                what = (f"a caller's submit_{name.split()[0]}_task is stuck in the serde's or the "
                        "inner adapter's submit; its tasks were left unfinished")
                report.hung.append({"component": name, "where": "", "what": what})
                _log.error("serde wrapper: close(): %s", what)
            else:
                unfinished += taken
        kept = sum(1 for task in unfinished if task.keeps_temporaries)
        if kept:
            _log.error("serde wrapper: %d task(s) keep their L1 temporaries: a plugin call that "
                       "did not return may still write them", kept)

        def fail_unfinished() -> None:  # emits events: a hook that hangs must not hang close
            for task in unfinished:
                task.fail()

        if unfinished:
            where = call_within(fail_unfinished, report.left() + FINISH_GRACE_S,
                                "lmserde-close-tasks")
            if where is not None:
                report.hung.append({"component": "task events", "where": where,
                                    "what": f"failing the unfinished tasks (a hook that does "
                                            f"not return?), at {where}"})
                _log.error("serde wrapper: close() left a thread failing the unfinished tasks, "
                           "stuck at %s", where)
        if report.hung:
            self._metrics.record_hung_at_close(report.hung)
        self._queues.close()
