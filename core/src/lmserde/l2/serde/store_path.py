"""The serde wrapper's store path: serialize → seal → inner store, one state machine.

``submit`` reserves one L1 temporary per object (sized to the serde's bound plus the frame),
hands the objects to the serde and returns. When the serde's serialize event fires,
:meth:`StorePath.drain_serialize` checks each result against the size contract, seals it in its
stored-object frame (or hands an adapter that writes heads last a pending header: the payload
checksum then runs while it writes), read-locks the temporaries and submits the inner store.
When the inner adapter's store event fires, :meth:`StorePath.drain_inner_store` releases the
temporaries and completes the task. Any failure releases every temporary and completes the task
as ``L2StoreResult(False, 0)``, naming the stage that failed.

A path may write with several serde configurations (the ``auto`` serde's candidates, each a
:class:`StoreWriter`): ``choose()`` picks one per task, the task's objects are serialized by that
configuration's processor and framed with its config fingerprint (the frame records what was
used), and ``on_stored`` hears what each successful store took (:data:`StoreObserver`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from lmserde.base import SerdeProcessor
from lmserde.containment import describe_exception, must_propagate
from lmserde.hooks import emit_wrapper_task_event
from lmserde.keys import ObjectKey, make_temp_key
from lmserde.l2.contract.head_last import HeadLastAdapter
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues
from lmserde.l2.serde.failure_streaks import FailureStreaks
from lmserde.l2.serde.frame_keys import KeyNotHeld
from lmserde.l2.serde.metrics import WrapperMetrics
from lmserde.l2.serde.serde_shape import SerdeShape
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.l2.serde.temporaries import Temporaries
from lmserde.l2.serde.wrapper_task import (
    TaskPhase,
    UnfinishedTask,
    WrapperTask,
    contained_submit,
    layout_of,
)
from lmserde.memory import MemoryObj
from lmserde.observability import WrapperTaskEvent
from lmserde.spec import SerdeSizeContract

__all__ = ["StorePath", "StoreWriter", "StoreObserver"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")

#: Hears each successful store task: ``(writer index, KV bytes, stored bytes, serialize
#: seconds, inner store seconds)`` (stored bytes: what the inner adapter was handed, frames
#: included). Called on the poll thread; what it raises is logged, never the task's failure.
StoreObserver = Callable[[int, int, int, float, float], None]


@dataclass(frozen=True)
class StoreWriter:
    """One serde configuration a store path writes with: its processor, its name in logs
    (``serde_type``), its size contract, its frame codec (``None``: unframed), whether its
    frame's head is finished while the inner adapter writes (``head_last``), and its bounds
    and item views (``shape``)."""

    serde: SerdeProcessor
    serde_type: str
    size_contract: SerdeSizeContract
    framer: ObjectFramer | None
    head_last: bool
    shape: SerdeShape


class StorePath:
    """Stores of one serde wrapper (see the module docstring). Thread-safe: ``submit`` runs on
    callers' threads, the drains on the wrapper's poll thread."""

    def __init__(self, *, writers: Sequence[StoreWriter], serde_type: str,
                 inner: L2AdapterInterface, temporaries: Temporaries, queues: AdapterTaskQueues,
                 metrics: WrapperMetrics, streaks: FailureStreaks,
                 choose: Callable[[], int] | None = None,
                 on_stored: StoreObserver | None = None) -> None:
        """``writers``: the configurations it writes with (one, or ``choose()`` picks the index
        of the one each task uses; each writer's serialize event fd must run
        :meth:`drain_serialize` with its index). ``serde_type`` names the path in events."""
        self._writers = tuple(writers)
        if not self._writers or (choose is None and len(self._writers) != 1):
            raise ValueError("a store path writes with one serde configuration, or chooses "
                             "among several with choose()")
        self._choose = choose
        self._on_stored = on_stored
        self._serde_type = serde_type
        self._inner = inner
        self._temps = temporaries
        self._queues = queues
        self._metrics = metrics
        self._streaks = streaks
        self._lock = threading.Lock()
        self._closed = False
        self._serializing: dict[tuple[int, int], WrapperTask] = {}  # (writer, serde task id)
        self._inner_storing: dict[int, WrapperTask] = {}

    def submit(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> L2TaskId:
        """Start storing ``objects`` under ``keys``; the task's result comes through the store
        queue. Raises ``RuntimeError`` when the path is closed, ``ValueError`` for mismatched
        arguments; any other failure fails the task only."""
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_store_task got {len(keys)} keys but {len(objects)} objects")
        task_id = self._queues.new_task_id()
        now = time.perf_counter()
        task = WrapperTask(task_id, keys, TaskPhase.SERIALIZE, now, now, num_keys=len(keys))
        if not keys:
            self._finish(task, L2StoreResult(True, 0), None)
            return task_id
        try:
            task.writer = 0 if self._choose is None else self._choose()
            writer = self._writers[task.writer]
            shape = writer.shape
            task.layouts = [layout_of(o) for o in objects]
            items = [shape.serialize_item(o, lay) for o, lay in zip(objects, task.layouts)]
            task.bounds = [shape.payload_bound(lay) for lay in task.layouts]
            task.bytes_kv = sum(o.get_size() for o in objects)
        except BaseException as exc:  # bad input or a raising estimate fails this task only
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: store task %d rejected: %s", task_id,
                         describe_exception(exc))
            self._finish(task, L2StoreResult(False, 0), "prepare")
            return task_id
        task.temp_keys = [make_temp_key(k) for k in keys]
        temps = self._temps.reserve(task.temp_keys,
                                    [shape.stored_bound(b) for b in task.bounds])
        if temps is None:
            self._finish(task, L2StoreResult(False, 0), "reserve")
            return task_id
        task.temps = temps
        framer = writer.framer
        task.payloads = (temps if framer is None else
                         [framer.payload_view(t, b) for t, b in zip(temps, task.bounds)])
        failure: str | None = None
        with self._lock:
            if self._closed:
                failure = "closed"
            else:
                serde_id = contained_submit(
                    "submit_serialize",
                    lambda: writer.serde.submit_serialize(items, task.payloads, keys),
                    lambda: self._temps.release_written(task.temp_keys))
                if serde_id is None:
                    failure = "serialize_submit"
                else:
                    self._serializing[(task.writer, serde_id)] = task
        if failure is not None:
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), failure)
            if failure == "closed":
                raise RuntimeError("SerdeL2AdapterWrapper is closed")
        return task_id

    # -- serialize done -------------------------------------------------------------------------

    def drain_serialize(self, writer: int = 0) -> None:
        """Handle the serialize event of writer ``writer``'s serde: move every finished task
        on."""
        serde = self._writers[writer].serde
        with self._lock:
            pending = [(ids[1], task) for ids, task in self._serializing.items()
                       if ids[0] == writer]
        for serde_id, task in pending:
            try:
                ok = serde.query_serialize_result(serde_id)
            except BaseException as exc:  # a processor that cannot answer failed the task
                _log.warning("serde wrapper: query_serialize_result raised: %s",
                             describe_exception(exc))
                ok = False
            if ok is None:
                continue
            with self._lock:
                self._serializing.pop((writer, serde_id), None)
            try:
                self._after_serialize(task, ok)
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: store task %d failed after serialize", task.task_id)
                self._release(task)
                self._finish(task, L2StoreResult(False, 0), "internal")

    def _after_serialize(self, task: WrapperTask, ok: bool) -> None:
        self._metrics.record_stage("serialize", task.end_stage("serialize", time.perf_counter()))
        if not ok:
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), "serialize")
            return
        try:
            self._seal(task)
        except KeyNotHeld as exc:  # a tenant the frame key has no key for: nothing is stored
            _log.warning("serde wrapper: store task %d: no frame key: %s", task.task_id, exc)
            task.settle_heads()
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), "frame_key")
            return
        except ValueError as exc:
            _log.warning("serde wrapper: store task %d: serde '%s' broke its output contract: %s",
                         task.task_id, self._writers[task.writer].serde_type, exc)
            task.settle_heads()
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), "output_contract")
            return
        locked = self._temps.to_read_locked(task.temp_keys)
        if len(locked) != len(task.temp_keys):
            _log.error("serde wrapper: L1 refused to read-lock %d temporaries",
                       len(task.temp_keys) - len(locked))
            held = set(locked)
            task.settle_heads()
            self._temps.release_read(locked)
            self._temps.release_written([k for k in task.temp_keys if k not in held])
            self._finish(task, L2StoreResult(False, 0), "internal")
            return
        task.phase = TaskPhase.INNER_STORE
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
            task.settle_heads()
            self._temps.release_read(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), "inner_store_submit")
            return
        with self._lock:
            self._inner_storing[inner_id] = task

    def _seal(self, task: WrapperTask) -> None:
        """Check what the serde wrote against its bound and contract, then frame each object.

        Raises ``ValueError`` when an object breaks the output contract; nothing is stored then.
        """
        writer = self._writers[task.writer]
        for i, (payload, bound) in enumerate(zip(task.payloads, task.bounds)):
            written = payload.get_size()
            if not 0 <= written <= bound:
                raise ValueError(f"object {i}: wrote {written} bytes, outside its estimate {bound}")
            if writer.size_contract is SerdeSizeContract.EXACT and written != bound:
                raise ValueError(
                    f"object {i}: wrote {written} bytes under an EXACT size contract "
                    f"(estimate {bound})"
                )
        framer = writer.framer
        if framer is None:
            return
        # A checksum the serde's pass computed over exactly the payload written (its bound hasher)
        # is used as it is; the others are hashed here: while the inner adapter writes
        # (head-last) or before the store.
        hashed = [framer.serde_checksum(p, p.get_size()) for p in task.payloads]
        if writer.head_last and any(c is None for c in hashed):
            task.heads = [framer.seal_deferred(temp, payload.get_size(), key, layout,
                                               checksum=checksum)
                          for temp, payload, key, layout, checksum in zip(
                              task.temps, task.payloads, task.keys, task.layouts, hashed)]
            return
        for temp, payload, key, layout, checksum in zip(task.temps, task.payloads, task.keys,
                                                        task.layouts, hashed):
            framer.seal(temp, payload.get_size(), key, layout, checksum=checksum)

    # -- inner store done -----------------------------------------------------------------------

    def drain_inner_store(self) -> None:
        """Handle the inner adapter's store event: complete every finished task."""
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
            task.settle_heads()  # a key the adapter skipped never finished its head
            stored = sum(t.get_size() for t in task.temps)  # before L1 may hand them out again
            self._temps.release_read(task.temp_keys)
            if not isinstance(result, L2StoreResult):
                result = L2StoreResult(bool(result), 0)
            if self._on_stored is not None and result.is_successful():
                self._observe(task, stored)  # heard before the caller has its result
            self._finish(task, result, None if result.is_successful() else "inner_store")

    def _observe(self, task: WrapperTask, stored: int) -> None:
        """Tell ``on_stored`` what the task's store took (never fails the task)."""
        assert self._on_stored is not None
        try:
            self._on_stored(task.writer, task.bytes_kv, stored,
                            task.stage_seconds.get("serialize", 0.0),
                            task.stage_seconds.get("inner_store", 0.0))
        except Exception as exc:
            _log.warning("serde wrapper: store observer raised: %s", describe_exception(exc))

    def _finish(self, task: WrapperTask, result: L2StoreResult, failed_stage: str | None) -> None:
        ok = result.is_successful()
        serialized = result.bytes_transferred()
        self._metrics.record_store(ok, task.num_keys, task.bytes_kv, serialized)
        if failed_stage is not None:
            self._metrics.record_failure(failed_stage)
        if failed_stage != "closed":
            self._streaks.count("store", ok)
        emit_wrapper_task_event(WrapperTaskEvent(
            serde_type=self._serde_type, operation="store", task_id=task.task_id,
            num_keys=task.num_keys, ok=ok, bytes_kv=task.bytes_kv if ok else 0,
            bytes_serialized=serialized, failed_stage=failed_stage,
            stage_seconds=dict(task.stage_seconds),
        ))
        self._queues.store.complete(task.task_id, result)

    def _release(self, task: WrapperTask) -> None:
        task.settle_heads()
        if task.phase is TaskPhase.INNER_STORE:
            self._temps.release_read(task.temp_keys)
        else:
            self._temps.release_written(task.temp_keys)

    # -- lifecycle ------------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        """Refuse new stores from now on (``submit`` raises ``RuntimeError``). Never waits (a
        caller's submit may be stuck in plugin code holding the path's lock)."""
        self._closed = True

    def take_unfinished(self, hung_serde_ids: Mapping[int, Collection[int]], inner_hung: bool,
                        timeout: float) -> list[UnfinishedTask] | None:
        """Take every unfinished store out of the path (call after :meth:`stop_accepting`, once
        the serdes and the inner adapter were closed, or gave up on). A task whose serialize
        task id is in ``hung_serde_ids[writer index]``, or that the inner adapter holds while
        ``inner_hung``, keeps its
        temporaries. ``None`` when the path's lock could not be had within ``timeout`` seconds
        (a caller's submit into the serde never returned): its tasks are left as they are."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return None
        try:
            serializing = list(self._serializing.items())
            storing = list(self._inner_storing.values())
            self._serializing.clear()
            self._inner_storing.clear()
        finally:
            self._lock.release()
        held = [(task, serde_id in hung_serde_ids.get(writer, ()))
                for (writer, serde_id), task in serializing]
        held += [(task, inner_hung) for task in storing]
        return [UnfinishedTask(self._failer(task, keep), keep) for task, keep in held]

    def _failer(self, task: WrapperTask, keep_temporaries: bool) -> Callable[[], None]:
        def fail() -> None:
            if not keep_temporaries:
                self._release(task)
            self._finish(task, L2StoreResult(False, 0), "closed")
        return fail
