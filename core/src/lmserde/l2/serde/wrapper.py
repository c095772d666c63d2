"""``SerdeL2AdapterWrapper``: runs every stored object through a serde, and every load back.

Store: temporary byte buffers are reserved in L1 (one batch, each sized from its own object's
layout), the serde serializes into them, the wrapper seals each one in a stored-object frame
(:mod:`lmserde.l2.serde.stored_frame`), the inner adapter stores them under the original keys, and the
temporaries are released. An inner adapter that writes heads last (``fs``,
:mod:`lmserde.l2.contract.head_last`) gets each header as a pending one: the payload checksum runs
while it writes the payload. Load: temporaries sized to the stored object are filled by the inner
adapter, each frame is verified, and the payloads are deserialized into the caller's objects, key
by key: a key whose bytes fail a check or do not decode is a miss for that key only, counted by
reason, and is removed from the inner adapter so that the next store writes it again. Every
failure releases every temporary.

This module is over 400 lines because it is one state machine (serialize → inner store, inner
load → verify → deserialize) whose stages share the task table and lock; the frame format, the
metrics and the queues live in their own modules.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from lmserde.base import SerdeProcessor
from lmserde.containment import describe_exception, must_propagate
from lmserde.hooks import emit_wrapper_task_event, load_hook_plugins
from lmserde.keys import ObjectKey, make_temp_key
from lmserde.l1.errors import L1Error
from lmserde.l1.manager import L1Manager
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.head_last import HeadLastAdapter, adapter_writes_head_last
from lmserde.l2.contract.inner_delegation import InnerAdapterDelegation, adapter_reports_sizes
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.poll_loop import PollLoop
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.serde.metrics import WrapperMetrics
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, FrameRejected, ObjectFramer, PendingHeader
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, byte_layout
from lmserde.multi import GroupSlotView, item_size, layout_desc_to_group
from lmserde.observability import WrapperTaskEvent
from lmserde.processor import scrub_destination
from lmserde.spec import SerdeSizeContract

__all__ = ["SerdeL2AdapterWrapper", "L1_WRITE_TAG", "UPPER_BOUND_PAIRING_ERROR",
           "UNHEALTHY_AFTER_FAILURES"]

_log = logging.getLogger(__name__)


class _NoItemError(Exception):
    """Stands for the error of an item whose processor reported only that the task failed."""


#: Tag of the wrapper's L1 staging objects (invisible to other readers).
L1_WRITE_TAG = "serde_wrapper"
UPPER_BOUND_PAIRING_ERROR = (
    "Upper-bound serde output requires the filesystem adapter's actual-used-length load "
    "contract; unsupported pairing(s): "
)
_ESTIMATE_CACHE_LIMIT = 256
#: ``report_status()["is_healthy"]`` turns false after this many consecutive failed store tasks,
#: or load tasks that had a key rejected or failing inside the wrapper.
UNHEALTHY_AFTER_FAILURES = 8


class _Phase(enum.Enum):
    SERIALIZE = "serialize"
    INNER_STORE = "inner_store"
    INNER_LOAD = "inner_load"
    DESERIALIZE = "deserialize"


@dataclass(eq=False)
class _Task:
    task_id: int
    keys: list[ObjectKey]
    temp_keys: list[ObjectKey]
    temps: list[MemoryObj]
    phase: _Phase
    started: float
    stage_started: float
    bytes_kv: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    layouts: list[MemoryLayoutDesc] = field(default_factory=list)  # object layout per temp
    bounds: list[int] = field(default_factory=list)  # serde bound (payload bytes) per temp
    payloads: list[Any] = field(default_factory=list)  # what the serde wrote into / read from
    # load only
    num_keys: int = 0
    positions: list[int] = field(default_factory=list)  # caller index of each temp
    dst_items: list[Any] = field(default_factory=list)  # deserialize destination per temp
    hit_slots: list[int] = field(default_factory=list)  # temp indices sent to deserialize
    missed_by_size: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # load: keys refused, by reason
    confirms: list[Any] = field(default_factory=list)  # load: per temp, waits for its checksum
    heads: list[PendingHeader] | None = None  # store, head-last: each temp's header to be written

    def end_stage(self, name: str, now: float) -> float:
        seconds = now - self.stage_started
        self.stage_seconds[name] = seconds
        self.stage_started = now
        return seconds


def _layout_of(obj: MemoryObj) -> MemoryLayoutDesc:
    layout = getattr(obj, "layout", None)
    if isinstance(layout, MemoryLayoutDesc):
        return layout
    return MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())


def _reports_payload_checksum(serde: SerdeProcessor) -> bool:
    """``serde.reports_payload_checksum()``, ``False`` when that raises (a plugin's processor)."""
    try:
        return serde.reports_payload_checksum() is True
    except BaseException as exc:
        if must_propagate(exc):
            raise
        _log.warning("serde wrapper: reports_payload_checksum raised: %s", describe_exception(exc))
        return False


def _resolve_size_contract(serde: SerdeProcessor, serde_type: str) -> SerdeSizeContract:
    if serde.size_contract is not None:
        return serde.size_contract
    try:
        from lmserde.registry import get_serde_size_contract

        return get_serde_size_contract(serde_type)
    except Exception:  # unknown type: the conservative contract
        return SerdeSizeContract.UPPER_BOUND


class SerdeL2AdapterWrapper(InnerAdapterDelegation, QueuedResults, L2AdapterInterface):
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

    A serialize result is checked before anything is written: the serde must have written at most
    its estimate, and exactly its estimate under an ``EXACT`` size contract.

    Store results are the inner results (bytes written, frames included); any failure gives
    ``L2StoreResult(False, 0)``, immediately when it happens inside ``submit_store_task``. Load
    results are per key: inner misses, keys whose stored object fails a frame check (reasons
    ``format``, ``length``, ``config``, ``key``, ``layout``, ``checksum``) and keys that fail to
    deserialize (``decode``) are misses; the other keys of the batch still hit (per-key outcomes
    need a processor that :attr:`~lmserde.SerdeProcessor.reports_item_outcomes`; other
    processors fail the whole batch).
    A rejected key is deleted from ``inner`` (self-repair: the next store writes it again) unless
    ``repair=False`` (``lmserde scrub`` without ``--delete`` looks without touching). Listeners
    are registered on ``inner`` (they hear its stored, accessed and deleted keys); one that also
    has ``on_l2_keys_rejected(reason, keys)`` hears the keys this wrapper refuses, before they are
    deleted. A key that misses without being refused (a decode that failed for a reason other
    than its bytes) is kept and not reported there.

    Lookups, unlocks, deletes, sizes and usage pass through to ``inner`` (all in stored bytes).
    ``report_status()`` adds ``serde_wrapped: True``, ``serde_type``, ``serde_framed`` and
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
    ) -> None:
        super().__init__(inner_adapter.max_capacity_bytes)
        self._inner = inner_adapter
        self._serde = serde
        self._l1 = l1_manager
        self.serde_type = serde_type or serde.serde_type or type(serde).__name__
        self.size_contract = size_contract or _resolve_size_contract(serde, self.serde_type)
        if self.size_contract is SerdeSizeContract.UPPER_BOUND and not adapter_reports_sizes(inner_adapter):
            backend = getattr(inner_adapter, "adapter_type", "") or type(inner_adapter).__name__
            raise ValueError(
                f"{UPPER_BOUND_PAIRING_ERROR}{self.serde_type} on {backend}. The serde may write "
                f"less than its estimate, and '{backend}' cannot report stored object sizes, so "
                "every load would miss. Use an adapter that reports sizes (fs, memory) or a serde "
                "with an EXACT size contract."
            )
        self._framer = self._make_framer(serde) if frame else None
        # A checksummed frame is hashed while the inner adapter writes it, when it can write
        # the header last.
        self._head_last = (self._framer is not None and self._framer.checksum
                           and adapter_writes_head_last(inner_adapter))
        # The serde's deserializer hashes the payload while it decodes (lmserde.frame_checksum).
        self._serde_hashes_loads = (self._framer is not None and self._framer.checksum
                                    and _reports_payload_checksum(serde))
        self._repair = bool(repair)
        self._in_map = serde.input_slot_mapping()
        self._out_map = serde.output_slot_mapping()
        self._has_outcomes = serde.reports_item_outcomes
        watched = {serde.get_serialize_event_fd(): self._drain_serialize,
                   serde.get_deserialize_event_fd(): self._drain_deserialize,
                   inner_adapter.get_store_event_fd(): self._drain_inner_store,
                   inner_adapter.get_load_event_fd(): self._drain_inner_load}
        if len(watched) != 4:
            raise ValueError(
                "the serde's serialize/deserialize fds and the inner adapter's store/load fds "
                "must be four distinct file descriptors"
            )
        self._metrics = WrapperMetrics()
        self._consecutive_failures = {"store": 0, "load": 0}
        load_hook_plugins()  # here, not on the poll thread when the first event is emitted
        self._estimates: dict[MemoryLayoutDesc, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._serializing: dict[int, _Task] = {}
        self._inner_storing: dict[int, _Task] = {}
        self._inner_loading: dict[int, _Task] = {}
        self._deserializing: dict[int, _Task] = {}
        self._queues = AdapterTaskQueues()
        self._loop = PollLoop("serde-l2-wrapper")
        for fd, handler in watched.items():
            self._loop.add_fd(fd, handler)
        self._loop.start()

    def _make_framer(self, serde: SerdeProcessor) -> ObjectFramer:
        try:
            framer = ObjectFramer(serde.get_config(), checksum=not serde.authenticates_output())
        except BaseException as exc:
            raise ValueError(
                f"serde '{self.serde_type}': cannot build the stored-object frame from its config: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return framer

    # -- accessors ------------------------------------------------------------------------------

    @property
    def inner_adapter(self) -> L2AdapterInterface:
        return self._inner

    @property
    def serde(self) -> SerdeProcessor:
        return self._serde

    @property
    def l1_manager(self) -> L1Manager:
        return self._l1

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def framed(self) -> bool:
        """Whether stored objects carry the stored-object frame."""
        return self._framer is not None

    @property
    def framer(self) -> ObjectFramer | None:
        """The frame codec of this wrapper's serde configuration (``None`` when not framing)."""
        return self._framer

    def payload_bound(self, layout: MemoryLayoutDesc) -> int:
        """The serde's bound on the payload of an object of ``layout`` (frame excluded)."""
        return self._estimate(layout)

    def stored_bound(self, layout: MemoryLayoutDesc) -> int:
        """The largest stored object of ``layout`` (frame included): what a load of it reserves
        in L1 for its temporary."""
        return self._stored_bound(self._estimate(layout))

    @property
    def adapter_type(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "adapter_type", "") or type(self._inner).__name__

    def metrics(self) -> dict[str, Any]:
        """The wrapper's own metrics (see :class:`~lmserde.l2.serde.metrics.WrapperMetrics`)."""
        return self._metrics.snapshot()

    # -- sizing and items -----------------------------------------------------------------------

    def _estimate(self, layout: MemoryLayoutDesc) -> int:
        """The serde's bound for ``layout`` (cached); a layout the frame cannot describe raises."""
        size = self._estimates.get(layout)
        if size is None:
            if self._framer is not None:
                self._framer.check_layout(layout)
            arg: Any = layout if self._in_map is None else layout_desc_to_group(layout, self._in_map)
            size = int(self._serde.estimate_serialized_size(arg))
            if size < 0:
                raise ValueError(f"serde '{self.serde_type}' estimated a negative size ({size})")
            if len(self._estimates) >= _ESTIMATE_CACHE_LIMIT:
                self._estimates.clear()
            self._estimates[layout] = size
        return size

    def _stored_bound(self, payload_bound: int) -> int:
        """Largest stored object for a serde bound: the frame header is added when framing."""
        return payload_bound + (FRAME_HEADER_BYTES if self._framer is not None else 0)

    def _serialize_item(self, obj: MemoryObj, layout: MemoryLayoutDesc) -> Any:
        mapping = self._in_map
        if mapping is None:
            return obj
        used = sorted(g for g in mapping if g is not None)
        if used != list(range(layout.num_groups)):
            raise ValueError(
                f"serde '{self.serde_type}' input slots {mapping} must cover each of the object's "
                f"{layout.num_groups} groups exactly once"
            )
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)

    def _deserialize_item(self, obj: MemoryObj, layout: MemoryLayoutDesc) -> Any:
        mapping = self._out_map
        if mapping is None:
            return obj
        for g in mapping:
            if g is not None and not 0 <= g < layout.num_groups:
                raise ValueError(
                    f"serde '{self.serde_type}' output slot mapping {mapping} references group "
                    f"{g}, but the destination has {layout.num_groups} groups"
                )
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)

    # -- temporaries ----------------------------------------------------------------------------

    def _reserve_temps(self, temp_keys: list[ObjectKey], sizes: list[int]) -> list[MemoryObj] | None:
        """One batched reservation; on any failure everything reserved is released (``None``)."""
        layouts = [byte_layout(s) for s in sizes]
        same = all(layout is layouts[0] for layout in layouts)
        try:
            result = self._l1.reserve_write(temp_keys, [True] * len(temp_keys),
                                            layouts[0] if same else layouts, tag=L1_WRITE_TAG)
        except (MemoryError, RuntimeError, ValueError) as exc:
            _log.warning("serde wrapper: reserving %d temporaries failed: %s", len(temp_keys), exc)
            self._release_written(temp_keys)
            return None
        temps: list[MemoryObj] = []
        for key in temp_keys:
            error, obj = result.get(key, (L1Error.KEY_NOT_EXIST, None))
            if error is not L1Error.SUCCESS or obj is None:
                reserved = [k for k in temp_keys if result.get(k, (None,))[0] is L1Error.SUCCESS]
                _log.warning("serde wrapper: temporary reservation failed (%s); releasing %d",
                             getattr(error, "name", error), len(reserved))
                self._release_written(reserved)
                return None
            obj.metadata.fmt = MemoryFormat.BINARY_BUFFER
            temps.append(obj)
        return temps

    def _release_written(self, temp_keys: list[ObjectKey]) -> None:
        if temp_keys:
            self._l1.finish_write_and_delete(temp_keys, tag=L1_WRITE_TAG)

    def _release_read(self, temp_keys: list[ObjectKey]) -> None:
        if temp_keys:
            self._l1.finish_read(temp_keys)

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_store_task got {len(keys)} keys but {len(objects)} objects")
        self._check_open()
        task_id = self._queues.new_task_id()
        now = time.perf_counter()
        task = _Task(task_id, keys, [], [], _Phase.SERIALIZE, now, now, num_keys=len(keys))
        if not keys:
            self._finish_store(task, L2StoreResult(True, 0), None)
            return task_id
        try:
            task.layouts = [_layout_of(o) for o in objects]
            items = [self._serialize_item(o, lay) for o, lay in zip(objects, task.layouts)]
            task.bounds = [self._estimate(lay) for lay in task.layouts]
            task.bytes_kv = sum(o.get_size() for o in objects)
        except BaseException as exc:  # bad input or a raising estimate fails this task only
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: store task %d rejected: %s", task_id,
                         describe_exception(exc))
            self._finish_store(task, L2StoreResult(False, 0), "prepare")
            return task_id
        task.temp_keys = [make_temp_key(k) for k in keys]
        temps = self._reserve_temps(task.temp_keys, [self._stored_bound(b) for b in task.bounds])
        if temps is None:
            self._finish_store(task, L2StoreResult(False, 0), "reserve")
            return task_id
        task.temps = temps
        task.payloads = (temps if self._framer is None else
                         [self._framer.payload_view(t, b) for t, b in zip(temps, task.bounds)])
        failure: str | None = None
        with self._lock:
            if self._closed:
                failure = "closed"
            else:
                serde_id = self._submit_contained(
                    "submit_serialize", task.temp_keys,
                    lambda: self._serde.submit_serialize(items, task.payloads, keys))
                if serde_id is None:
                    failure = "serialize_submit"
                else:
                    self._serializing[serde_id] = task
        if failure is not None:
            self._release_written(task.temp_keys)
            self._finish_store(task, L2StoreResult(False, 0), failure)
            if failure == "closed":
                raise RuntimeError("SerdeL2AdapterWrapper is closed")
        return task_id

    def _submit_contained(self, what: str, temp_keys: list[ObjectKey],
                          submit: Callable[[], int]) -> int | None:
        """``submit()`` (a serde's or inner adapter's submit, called on the caller's thread);
        ``None`` when it raised, logged. Ctrl-C on the main thread releases ``temp_keys`` and
        propagates."""
        try:
            return submit()
        except BaseException as exc:
            if must_propagate(exc):
                self._release_written(temp_keys)
                raise
            _log.warning("serde wrapper: %s raised: %s", what, describe_exception(exc))
            return None

    def _drain_serialize(self) -> None:
        with self._lock:
            pending = list(self._serializing.items())
        for serde_id, task in pending:
            try:
                ok = self._serde.query_serialize_result(serde_id)
            except BaseException as exc:  # a processor that cannot answer failed the task
                _log.warning("serde wrapper: query_serialize_result raised: %s",
                             describe_exception(exc))
                ok = False
            if ok is None:
                continue
            with self._lock:
                self._serializing.pop(serde_id, None)
            try:
                self._after_serialize(task, ok)
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: store task %d failed after serialize", task.task_id)
                self._release_any(task)
                self._finish_store(task, L2StoreResult(False, 0), "internal")

    def _after_serialize(self, task: _Task, ok: bool) -> None:
        self._metrics.record_stage("serialize", task.end_stage("serialize", time.perf_counter()))
        if not ok:
            self._release_written(task.temp_keys)
            self._finish_store(task, L2StoreResult(False, 0), "serialize")
            return
        try:
            self._seal(task)
        except ValueError as exc:
            _log.warning("serde wrapper: store task %d: serde '%s' broke its output contract: %s",
                         task.task_id, self.serde_type, exc)
            self._settle_heads(task)
            self._release_written(task.temp_keys)
            self._finish_store(task, L2StoreResult(False, 0), "output_contract")
            return
        result = self._l1.finish_write_and_reserve_read(task.temp_keys, 1, tag=L1_WRITE_TAG)
        locked = [k for k in task.temp_keys if result[k][0] is L1Error.SUCCESS]
        if len(locked) != len(task.temp_keys):
            _log.error("serde wrapper: L1 refused to read-lock %d temporaries",
                       len(task.temp_keys) - len(locked))
            held = set(locked)
            self._settle_heads(task)
            self._release_read(locked)
            self._release_written([k for k in task.temp_keys if k not in held])
            self._finish_store(task, L2StoreResult(False, 0), "internal")
            return
        task.phase = _Phase.INNER_STORE
        try:
            if task.heads is not None:
                submit = "submit_store_task_head_last"
                inner_id = cast(HeadLastAdapter, self._inner).submit_store_task_head_last(
                    task.keys, task.temps, task.heads)
            else:
                submit = "submit_store_task"
                inner_id = self._inner.submit_store_task(task.keys, task.temps)
        except BaseException as exc:
            _log.warning("serde wrapper: inner %s raised: %s", submit, describe_exception(exc))
            self._settle_heads(task)
            self._release_read(task.temp_keys)
            self._finish_store(task, L2StoreResult(False, 0), "inner_store_submit")
            return
        with self._lock:
            self._inner_storing[inner_id] = task

    def _seal(self, task: _Task) -> None:
        """Check what the serde wrote against its bound and contract, then frame each object.

        Raises ``ValueError`` when an object breaks the output contract; nothing is stored then.
        """
        for i, (payload, bound) in enumerate(zip(task.payloads, task.bounds)):
            written = payload.get_size()
            if not 0 <= written <= bound:
                raise ValueError(f"object {i}: wrote {written} bytes, outside its estimate {bound}")
            if self.size_contract is SerdeSizeContract.EXACT and written != bound:
                raise ValueError(
                    f"object {i}: wrote {written} bytes under an EXACT size contract "
                    f"(estimate {bound})"
                )
        framer = self._framer
        if framer is None:
            return
        # A checksum the serde's pass computed over exactly the payload written (its bound hasher)
        # is used as it is; the others are hashed here: while the inner adapter writes
        # (head-last) or before the store.
        hashed = [framer.serde_checksum(p, p.get_size()) for p in task.payloads]
        if self._head_last and any(c is None for c in hashed):
            task.heads = [framer.seal_deferred(temp, payload.get_size(), key, layout,
                                               checksum=checksum)
                          for temp, payload, key, layout, checksum in zip(
                              task.temps, task.payloads, task.keys, task.layouts, hashed)]
            return
        for temp, payload, key, layout, checksum in zip(task.temps, task.payloads, task.keys,
                                                        task.layouts, hashed):
            framer.seal(temp, payload.get_size(), key, layout, checksum=checksum)

    def _drain_inner_store(self) -> None:
        try:
            done = self._inner.pop_completed_store_tasks()
        except BaseException as exc:  # nothing to match: its tasks fail when the wrapper closes
            _log.warning("serde wrapper: inner pop_completed_store_tasks raised: %s",
                         describe_exception(exc))
            return
        with self._lock:
            mine = [(self._inner_storing.pop(i), r) for i, r in done.items()
                    if i in self._inner_storing]
        for task, result in mine:
            self._metrics.record_stage("inner_store",
                                       task.end_stage("inner_store", time.perf_counter()))
            self._settle_heads(task)  # a key the adapter skipped never finished its head
            self._release_read(task.temp_keys)
            if not isinstance(result, L2StoreResult):
                result = L2StoreResult(bool(result), 0)
            self._finish_store(task, result, None if result.is_successful() else "inner_store")

    def _finish_store(self, task: _Task, result: L2StoreResult, failed_stage: str | None) -> None:
        ok = result.is_successful()
        serialized = result.bytes_transferred()
        self._metrics.record_store(ok, task.num_keys, task.bytes_kv, serialized)
        if failed_stage is not None:
            self._metrics.record_failure(failed_stage)
        if failed_stage != "closed":
            self._count_outcome("store", ok)
        emit_wrapper_task_event(WrapperTaskEvent(
            serde_type=self.serde_type, operation="store", task_id=task.task_id,
            num_keys=task.num_keys, ok=ok, bytes_kv=task.bytes_kv if ok else 0,
            bytes_serialized=serialized, failed_stage=failed_stage,
            stage_seconds=dict(task.stage_seconds),
        ))
        self._queues.store.complete(task.task_id, result)

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_load_task got {len(keys)} keys but {len(objects)} objects")
        self._check_open()
        task_id = self._queues.new_task_id()
        now = time.perf_counter()
        task = _Task(task_id, keys, [], [], _Phase.INNER_LOAD, now, now, num_keys=len(keys))
        try:
            layouts = [_layout_of(o) for o in objects]
            dst_items = [self._deserialize_item(o, lay) for o, lay in zip(objects, layouts)]
            bounds = [self._estimate(lay) for lay in layouts]
        except BaseException as exc:  # bad input or a raising estimate fails this task only
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: load task %d rejected: %s", task_id,
                         describe_exception(exc))
            self._finish_load(task, Bitmap(len(keys)), "prepare")
            return task_id
        stored = self.stored_sizes(keys)
        oversized: list[ObjectKey] = []
        for i, key in enumerate(keys):
            size = stored.get(key)
            if size is not None and size > self._stored_bound(bounds[i]):
                oversized.append(key)  # larger than the serde can ever write: not its bytes
                continue
            task.positions.append(i)
        if oversized:
            task.missed_by_size = len(oversized)
            self._reject(task, "length", oversized)
        if not task.positions:
            self._finish_load(task, Bitmap(len(keys)), "stored_size" if stored else None)
            return task_id
        load_keys = [keys[i] for i in task.positions]
        task.dst_items = [dst_items[i] for i in task.positions]
        task.layouts = [layouts[i] for i in task.positions]
        task.bounds = [bounds[i] for i in task.positions]
        task.temp_keys = [make_temp_key(k) for k in load_keys]
        temps = self._reserve_temps(task.temp_keys, [self._stored_bound(b) for b in task.bounds])
        if temps is None:
            self._finish_load(task, Bitmap(len(keys)), "reserve")
            return task_id
        task.temps = temps
        try:
            for key, temp in zip(load_keys, temps):
                size = stored.get(key)
                if size is not None:
                    temp.set_used_size(size)
        except Exception as exc:
            _log.warning("serde wrapper: cannot narrow load temporaries: %s", exc)
            self._release_written(task.temp_keys)
            self._finish_load(task, Bitmap(len(keys)), "reserve")
            return task_id
        failure: str | None = None
        with self._lock:  # registered before the poll thread can see the inner result
            if self._closed:
                failure = "closed"
            else:
                inner_id = self._submit_contained(
                    "inner submit_load_task", task.temp_keys,
                    lambda: self._inner.submit_load_task(load_keys, temps))
                if inner_id is None:
                    failure = "inner_load_submit"
                else:
                    self._inner_loading[inner_id] = task
        if failure is not None:
            self._release_written(task.temp_keys)
            self._finish_load(task, Bitmap(len(keys)), failure)
            if failure == "closed":
                raise RuntimeError("SerdeL2AdapterWrapper is closed")
        return task_id

    def stored_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """The inner adapter's stored sizes of ``keys`` (frame included); ``{}`` when it does not
        report sizes. When asking for the batch raises, each key is asked alone, so that one key
        the adapter cannot examine does not hide the others' sizes (they narrow the loads of
        upper-bound serdes); a key whose size cannot be had is left out. Never raises (except
        Ctrl-C on the main thread)."""
        return self.examine_sizes(keys)[0]

    def examine_sizes(self, keys: Sequence[ObjectKey]
                      ) -> tuple[dict[ObjectKey, int], set[ObjectKey]]:
        """:meth:`stored_sizes`, plus the keys whose size could not be had because the adapter
        raised (for the batch, then for the key alone): those may well exist, where a key left
        out of the sizes without raising is not stored."""
        keys = list(keys)
        if not adapter_reports_sizes(self._inner):
            return {}, set()
        try:
            return dict(self._inner.get_object_sizes(keys)), set()
        except BaseException as exc:
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: get_object_sizes raised: %s; asking key by key",
                         describe_exception(exc))
        sizes: dict[ObjectKey, int] = {}
        unknown: set[ObjectKey] = set()
        for key in keys:
            try:
                sizes.update(self._inner.get_object_sizes([key]))
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                unknown.add(key)  # this key's size stays unknown
        return sizes, unknown

    def _drain_inner_load(self) -> None:
        with self._lock:
            pending = list(self._inner_loading.items())
        for inner_id, task in pending:
            try:
                bitmap = self._inner.query_load_result(inner_id)
            except BaseException as exc:  # an adapter that cannot answer missed every key
                _log.warning("serde wrapper: inner query_load_result raised: %s",
                             describe_exception(exc))
                bitmap = Bitmap(len(task.temps))
            if bitmap is None:
                continue
            with self._lock:
                self._inner_loading.pop(inner_id, None)
            try:
                self._after_inner_load(task, bitmap)
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: load task %d failed after inner load",
                               task.task_id)
                self._release_any(task)
                self._finish_load(task, Bitmap(task.num_keys), "internal")

    def _after_inner_load(self, task: _Task, bitmap: Bitmap) -> None:
        self._metrics.record_stage("inner_load", task.end_stage("inner_load", time.perf_counter()))
        if len(bitmap) != len(task.temps):
            raise RuntimeError(
                f"inner adapter returned {len(bitmap)} bits for {len(task.temps)} keys"
            )
        hits = bitmap.set_indices()
        self._metrics.record_failure("inner_load", len(task.temps) - len(hits))
        task.hit_slots = self._verify(task, hits)
        if not task.hit_slots:
            self._release_written(task.temp_keys)
            self._finish_load(task, Bitmap(task.num_keys), "verify" if hits else None)
            return
        task.phase = _Phase.DESERIALIZE
        slots = task.hit_slots
        with self._lock:
            try:
                serde_id = self._serde.submit_deserialize(
                    [task.payloads[j] for j in slots], [task.dst_items[j] for j in slots],
                    [task.keys[task.positions[j]] for j in slots])
            except BaseException as exc:
                _log.warning("serde wrapper: submit_deserialize raised: %s",
                             describe_exception(exc))
                serde_id = None
            else:
                self._deserializing[serde_id] = task
        if serde_id is None:
            self._release_written(task.temp_keys)
            self._metrics.record_failure("deserialize_submit", len(slots))
            self._finish_load(task, Bitmap(task.num_keys), "deserialize_submit")

    def _verify(self, task: _Task, hits: list[int]) -> list[int]:
        """Open the frame of every hit temporary; returns the slots that passed.

        ``task.payloads`` gets, per temporary, what the serde will decode (the temporary itself
        when not framing). Refused keys are counted by reason and deleted from the inner adapter.
        """
        if self._framer is None:
            task.payloads = list(task.temps)
            return hits
        task.payloads = [None] * len(task.temps)
        task.confirms = [None] * len(task.temps)
        passed: list[int] = []
        refused: dict[str, list[ObjectKey]] = {}
        for j in hits:
            key = task.keys[task.positions[j]]
            try:  # header checks now; the payload checksum runs while the serde decodes
                task.payloads[j], task.confirms[j] = self._framer.open_deferred(
                    task.temps[j], key, task.layouts[j], task.bounds[j],
                    serde_hashes=self._serde_hashes_loads)
            except FrameRejected as exc:
                _log.warning("serde wrapper: stored object for key %s refused (%s)",
                             key.chunk_hash.hex(), exc)
                refused.setdefault(exc.reason, []).append(key)
                continue
            passed.append(j)
        for reason, keys in refused.items():
            self._reject(task, reason, keys)
        return passed

    @staticmethod
    def _payload_confirmed(task: _Task, slot: int) -> bool:
        """Wait for the slot's payload checksum (started by :meth:`_verify`); ``False`` if bad."""
        confirm = task.confirms[slot] if task.confirms else None
        if confirm is None:
            return True
        try:
            confirm()
        except FrameRejected as exc:
            _log.warning("serde wrapper: stored object for key %s refused (%s)",
                         task.keys[task.positions[slot]].chunk_hash.hex(), exc)
            return False
        return True

    def _reject(self, task: _Task, reason: str, keys: list[ObjectKey]) -> None:
        """Count ``keys`` as refused for ``reason``, tell the listeners and delete the keys from
        the inner adapter."""
        task.rejected[reason] = task.rejected.get(reason, 0) + len(keys)
        self._metrics.record_rejection(reason, len(keys))
        self._call_listeners("on_l2_keys_rejected", reason, list(keys))
        if not self._repair:
            return
        try:
            self._inner.delete(keys)
        except BaseException as exc:  # repair is best effort; the keys are misses either way
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: deleting %d refused objects failed: %s: %s", len(keys),
                         type(exc).__name__, exc)
            return
        self._metrics.record_repaired(len(keys))

    def _drain_deserialize(self) -> None:
        with self._lock:
            pending = list(self._deserializing.items())
        for serde_id, task in pending:
            try:
                errors = self._deserialize_errors(serde_id, len(task.hit_slots))
            except BaseException as exc:  # a processor that cannot answer failed the task
                _log.warning("serde wrapper: querying a deserialize raised: %s",
                             describe_exception(exc))
                errors = [_NoItemError()] * len(task.hit_slots)
            if errors is None:
                continue
            with self._lock:
                self._deserializing.pop(serde_id, None)
            try:
                self._after_deserialize(task, errors)
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: load task %d failed after deserialize",
                               task.task_id)
                self._release_any(task)
                self._finish_load(task, Bitmap(task.num_keys), "internal")

    def _deserialize_errors(self, serde_id: int, items: int) -> list[BaseException | None] | None:
        """Per item of a finished deserialize, what it raised (``None``: decoded); ``None``
        while it runs. A processor without per-item outcomes reports a failed task as
        :class:`_NoItemError` for every item."""
        if self._has_outcomes:
            outcome = self._serde.query_deserialize_outcome(serde_id)
            if outcome is None:
                return None
            return [outcome.item_errors[i] if i < len(outcome.item_errors) else _NoItemError()
                    for i in range(items)]
        result = self._serde.query_deserialize_result(serde_id)
        if result is None:
            return None
        return [None] * items if result else [_NoItemError()] * items

    def _blames_the_bytes(self, error: BaseException) -> bool:
        """Whether a failed decode condemns the stored object (refused as ``decode``, deleted).

        Framed, only a ``ValueError`` does — the deserializer contract's "these bytes are bad"
        (the frame already vouched for them: checksum, key, config); anything else (a key
        service unreachable, ``MemoryError``, a cancelled call, a processor that reports no
        per-item error) is a failure of the serde or its environment, and deleting would wipe
        good objects for as long as it lasts. Unframed, nothing vouches for the bytes: every
        failed decode condemns them.
        """
        return self._framer is None or isinstance(error, ValueError)

    def _after_deserialize(self, task: _Task, errors: list[BaseException | None]) -> None:
        self._metrics.record_stage("deserialize",
                                   task.end_stage("deserialize", time.perf_counter()))
        final = Bitmap(task.num_keys)
        serialized = 0
        undecodable: list[ObjectKey] = []
        corrupt: list[ObjectKey] = []
        kept: list[ObjectKey] = []
        last_error: BaseException | None = None
        for slot, error in zip(task.hit_slots, errors):
            key = task.keys[task.positions[slot]]
            if not self._payload_confirmed(task, slot):
                scrub_destination(task.dst_items[slot])  # decoded from damaged bytes: never used
                corrupt.append(key)
            elif error is None:
                final.set(task.positions[slot])
                serialized += task.temps[slot].get_size()
            elif self._blames_the_bytes(error):
                undecodable.append(key)
            else:
                kept.append(key)
                last_error = error
        failed = len(undecodable) + len(kept)
        self._metrics.record_failure("deserialize", failed)
        if kept:
            _log.warning("serde wrapper: %d objects of load task %d missed, kept in L2: the serde "
                         "failed for a reason other than their bytes (%s)", len(kept),
                         task.task_id, describe_exception(last_error or _NoItemError()))
        if undecodable:
            self._reject(task, "decode", undecodable)
        if corrupt:
            self._reject(task, "checksum", corrupt)
        self._release_written(task.temp_keys)
        stage = "deserialize" if failed else ("verify" if task.rejected else None)
        self._finish_load(task, final, stage, serialized)

    def _finish_load(
        self, task: _Task, bitmap: Bitmap, failed_stage: str | None, serialized: int = 0
    ) -> None:
        hits = bitmap.count()
        if failed_stage in ("prepare", "reserve", "inner_load_submit", "closed", "internal"):
            self._metrics.record_failure(failed_stage, task.num_keys)
        self._metrics.record_failure("stored_size", task.missed_by_size)
        bytes_kv = 0
        if hits:
            for slot in task.hit_slots:
                if bitmap.test(task.positions[slot]):
                    bytes_kv += item_size(task.dst_items[slot])
        self._metrics.record_load(task.num_keys, hits, serialized, bytes_kv)
        broken = bool(task.rejected) or failed_stage in ("internal", "deserialize_submit",
                                                          "reserve", "deserialize")
        self._count_outcome("load", not broken)
        emit_wrapper_task_event(WrapperTaskEvent(
            serde_type=self.serde_type, operation="load", task_id=task.task_id,
            num_keys=task.num_keys, ok=hits == task.num_keys, hits=hits, bytes_kv=bytes_kv,
            bytes_serialized=serialized, failed_stage=failed_stage,
            stage_seconds=dict(task.stage_seconds), rejected=dict(task.rejected),
        ))
        self._queues.load.complete(task.task_id, bitmap)

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

    def _count_outcome(self, operation: str, ok: bool) -> None:
        with self._lock:
            self._consecutive_failures[operation] = (
                0 if ok else self._consecutive_failures[operation] + 1)

    def report_status(self) -> dict[str, Any]:
        """The inner adapter's status plus the wrapper's; ``is_healthy`` also reflects failures."""
        status = dict(self._inner.report_status())
        with self._lock:
            failing = dict(self._consecutive_failures)
        status["serde_wrapped"] = True
        status["serde_type"] = self.serde_type
        status["serde_size_contract"] = self.size_contract.value
        status["serde_framed"] = self._framer is not None
        status["serde_wrapper"] = self._metrics.snapshot()
        status["serde_consecutive_failures"] = failing
        status["is_healthy"] = (bool(status.get("is_healthy", True)) and not self._closed
                                and max(failing.values()) < UNHEALTHY_AFTER_FAILURES)
        return status

    # -- lifecycle ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("SerdeL2AdapterWrapper is closed")

    @staticmethod
    def _settle_heads(task: _Task) -> None:
        """Wait for the checksum threads still reading a store's temporaries (head-last headers
        the inner adapter did not finish); call before the temporaries go back to L1."""
        for head in task.heads or ():
            head.settle()
        task.heads = None

    def _release_any(self, task: _Task) -> None:
        self._settle_heads(task)
        if task.phase is _Phase.INNER_STORE:
            self._release_read(task.temp_keys)
        else:
            self._release_written(task.temp_keys)

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
        from lmserde.l2.serde.bounded_close import FINISH_GRACE_S, call_within, close_within

        with self._lock:
            if self._closed:
                return
            self._closed = True
        report = close_within(self._loop, self._inner, self._serde, self.adapter_type)
        with self._lock:
            hung_serde = [task for serde_id, task in (*self._serializing.items(),
                                                      *self._deserializing.items())
                          if serde_id in report.serde_task_ids]
            hung_inner = ([*self._inner_storing.values(), *self._inner_loading.values()]
                          if report.inner_hung else [])
            stores = list(self._serializing.values()) + list(self._inner_storing.values())
            loads = list(self._inner_loading.values()) + list(self._deserializing.values())
            for table in (self._serializing, self._inner_storing, self._inner_loading,
                          self._deserializing):
                table.clear()
        kept = {id(task) for task in hung_serde + hung_inner}
        if kept:
            _log.error("serde wrapper: %d task(s) keep their L1 temporaries: a plugin call that "
                       "did not return may still write them", len(kept))

        def fail_unfinished() -> None:  # emits events: a hook that hangs must not hang close
            for task in stores:
                if id(task) not in kept:
                    self._release_any(task)
                self._finish_store(task, L2StoreResult(False, 0), "closed")
            for task in loads:
                if id(task) not in kept:
                    self._release_any(task)
                self._finish_load(task, Bitmap(task.num_keys), "closed")

        if stores or loads:
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

    def __enter__(self) -> SerdeL2AdapterWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
