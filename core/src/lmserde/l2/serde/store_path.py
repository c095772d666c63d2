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
:class:`StoreWriter`): ``choose()`` picks one per object, the task's objects are grouped by the
configuration chosen (:func:`~lmserde.l2.serde.wrapper_task.group_slots`, as the load path groups
its hits by reader), each group is serialized by one call into that configuration's processor,
and the serialize stage ends once every group has answered; a group whose submit or result fails
fails the task (nothing is stored), as a failed serialize does with one configuration. Each object
is framed with its own configuration's fingerprint (the frame records what was used), then one
inner store writes all of them, and ``on_stored`` hears what each group's store took
(:data:`StoreObserver`). With one configuration the task is one group.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

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
from lmserde.l2.serde.store_writer import StoreObserver, StoreWriter
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.l2.serde.temporaries import Temporaries
from lmserde.l2.serde.wrapper_task import (
    TaskPhase,
    UnfinishedTask,
    WrapperTask,
    contained_submit,
    group_slots,
    layout_of,
    taken_once,
)
from lmserde.memory import MemoryObj
from lmserde.observability import WrapperTaskEvent
from lmserde.spec import SerdeSizeContract

__all__ = ["StorePath", "StoreWriter", "StoreObserver"]  # the last two from store_writer

#: Store failures that say nothing about the tier's health, so no unhealthy streak counts them:
#: a closing wrapper, and a tenant the frame key holds no key for (a policy refusal: a forgotten
#: or not yet provisioned tenant's requests must not mark the tier unhealthy for every tenant).
_NOT_BREAKAGE = frozenset({"closed", "frame_key"})

_log = logging.getLogger("lmserde.l2.serde.wrapper")

class StorePath:
    """Stores of one serde wrapper (see the module docstring). Thread-safe: ``submit`` runs on
    callers' threads, the drains on the wrapper's poll thread."""

    def __init__(self, *, writers: Sequence[StoreWriter], serde_type: str,
                 inner: L2AdapterInterface, temporaries: Temporaries, queues: AdapterTaskQueues,
                 metrics: WrapperMetrics, streaks: FailureStreaks,
                 choose: Callable[[], int] | None = None,
                 on_stored: StoreObserver | None = None) -> None:
        """``writers``: the configurations it writes with (one, or ``choose()`` picks the index
        of the one each object uses, called once per object; each writer's serialize event fd
        must run :meth:`drain_serialize` with its index). ``serde_type`` names the path in events."""
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
            if self._choose is not None:  # one decision per object
                task.writers = [self._choose() for _ in keys]
            writers = [self._writers[w] for w in task.writers] or [self._writers[0]] * len(keys)
            task.layouts = [layout_of(o) for o in objects]
            items = [w.shape.serialize_item(o, lay)
                     for w, o, lay in zip(writers, objects, task.layouts)]
            task.bounds = [w.shape.payload_bound(lay) for w, lay in zip(writers, task.layouts)]
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
                                    [w.shape.stored_bound(b) for w, b in zip(writers, task.bounds)])
        if temps is None:
            self._finish(task, L2StoreResult(False, 0), "reserve")
            return task_id
        task.temps = temps
        task.payloads = [t if w.framer is None else w.framer.payload_view(t, b)
                         for w, t, b in zip(writers, temps, task.bounds)]
        failure: str | None = None
        with self._lock:
            if self._closed:
                failure = "closed"
            else:
                for index, slots in group_slots(range(len(keys)), task.writers).items():
                    if not self._submit_serialize(task, index, slots, items):
                        failure = "serialize_submit"
                        break
                if failure is not None and task.encoding:  # earlier groups still write temps:
                    task.failed_stage = failure  # the last of them to answer fails the task
                    failure = None
        if failure is not None:
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), failure)
            if failure == "closed":
                raise RuntimeError("SerdeL2AdapterWrapper is closed")
        return task_id

    def _submit_serialize(self, task: WrapperTask, index: int, slots: list[int],
                          items: list[Any]) -> bool:
        """Hand ``slots`` to writer ``index``'s serde (under the path's lock); ``False`` when
        its submit raised."""
        if len(slots) == len(task.keys):  # one group: the task's own lists
            args = (items, task.payloads, task.keys)
        else:
            args = ([items[j] for j in slots], [task.payloads[j] for j in slots],
                    [task.keys[j] for j in slots])
        serde_id = contained_submit(
            "submit_serialize", lambda: self._writers[index].serde.submit_serialize(*args),
            lambda: self._temps.release_written(task.temp_keys))
        if serde_id is None:
            return False
        task.encoding[index] = slots
        self._serializing[(index, serde_id)] = task
        return True

    # -- serialize done -------------------------------------------------------------------------

    def drain_serialize(self, writer: int = 0) -> None:
        """Handle the serialize event of writer ``writer``'s serde: collect its finished
        groups; a task moves on once each writer it handed objects to has answered."""
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
                task.encoding.pop(writer, None)
                task.encoded[writer] = time.perf_counter() - task.stage_started
                if not ok and task.failed_stage is None:
                    task.failed_stage = "serialize"
                last = not task.encoding  # else another writer still serializes some
            if not last:
                continue
            try:
                self._after_serialize(task)
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: store task %d failed after serialize", task.task_id)
                self._release(task)
                self._finish(task, L2StoreResult(False, 0), "internal")

    def _after_serialize(self, task: WrapperTask) -> None:
        self._metrics.record_stage("serialize", task.end_stage("serialize", time.perf_counter()))
        if task.failed_stage is not None:  # a group's submit or serialize failed
            self._temps.release_written(task.temp_keys)
            self._finish(task, L2StoreResult(False, 0), task.failed_stage)
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
            _log.warning("serde wrapper: store task %d broke its output contract: %s",
                         task.task_id, exc)
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
        task.start_heads()  # after the submit: the adapter's writes start first
        with self._lock:
            self._inner_storing[inner_id] = task

    def _seal(self, task: WrapperTask) -> None:
        """Check what the serde wrote against its bound and contract, then frame each object.

        Raises ``ValueError`` when an object breaks the output contract; nothing is stored then.
        """
        writers = ([self._writers[w] for w in task.writers]
                   or [self._writers[0]] * len(task.payloads))
        for i, (writer, payload, bound) in enumerate(zip(writers, task.payloads, task.bounds)):
            written = payload.get_size()
            if not 0 <= written <= bound:
                raise ValueError(f"object {i}: serde '{writer.serde_type}' wrote {written} "
                                 f"bytes, outside its estimate {bound}")
            if writer.size_contract is SerdeSizeContract.EXACT and written != bound:
                raise ValueError(
                    f"object {i}: serde '{writer.serde_type}' wrote {written} bytes under an "
                    f"EXACT size contract (estimate {bound})"
                )
        if writers[0].framer is None:  # framed or not is the wrapper's, alike for every writer
            return
        framers = [cast(ObjectFramer, w.framer) for w in writers]
        # A checksum the serde's pass computed over exactly the payload written (its bound hasher)
        # is used as it is; the others are hashed here: while the inner adapter writes
        # (head-last: when every object's writer defers its head) or before the store.
        hashed = [f.serde_checksum(p, p.get_size()) for f, p in zip(framers, task.payloads)]
        if all(w.head_last for w in writers) and any(c is None for c in hashed):
            task.heads = [framer.seal_deferred(temp, payload.get_size(), key, layout,
                                               checksum=checksum)
                          for framer, temp, payload, key, layout, checksum in zip(
                              framers, task.temps, task.payloads, task.keys, task.layouts,
                              hashed)]
            return
        for framer, temp, payload, key, layout, checksum in zip(
                framers, task.temps, task.payloads, task.keys, task.layouts, hashed):
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
            stored = [t.get_size() for t in task.temps]  # before L1 may hand them out again
            self._temps.release_read(task.temp_keys)
            if not isinstance(result, L2StoreResult):
                result = L2StoreResult(bool(result), 0)
            if self._on_stored is not None and result.is_successful():
                self._observe(task, stored)  # heard before the caller has its result
            self._finish(task, result, None if result.is_successful() else "inner_store")

    def _observe(self, task: WrapperTask, stored: list[int]) -> None:
        """Tell ``on_stored`` what each group of the task took (``stored``: bytes per object;
        the inner store time is split among the groups by stored bytes). Never fails the
        task."""
        assert self._on_stored is not None
        try:
            groups = group_slots(range(len(stored)), task.writers)
            store_seconds = task.stage_seconds.get("inner_store", 0.0)
            total = sum(stored) or 1
            for index, slots in groups.items():
                group_stored = sum(stored[j] for j in slots)
                group_kv = (task.bytes_kv if len(groups) == 1 else
                            sum(task.layouts[j].nbytes for j in slots))
                self._on_stored(index, group_kv, group_stored,
                                task.encoded.get(index, 0.0),
                                store_seconds * group_stored / total)
        except Exception as exc:
            _log.warning("serde wrapper: store observer raised: %s", describe_exception(exc))

    def _finish(self, task: WrapperTask, result: L2StoreResult, failed_stage: str | None) -> None:
        ok = result.is_successful()
        serialized = result.bytes_transferred()
        self._metrics.record_store(ok, task.num_keys, task.bytes_kv, serialized)
        if failed_stage is not None:
            self._metrics.record_failure(failed_stage)
        if failed_stage not in _NOT_BREAKAGE:
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
        held = taken_once(serializing, hung_serde_ids)  # a task of several groups: once
        held += [(task, inner_hung) for task in storing]
        return [UnfinishedTask(self._failer(task, keep), keep) for task, keep in held]

    def _failer(self, task: WrapperTask, keep_temporaries: bool) -> Callable[[], None]:
        def fail() -> None:
            if not keep_temporaries:
                self._release(task)
            self._finish(task, L2StoreResult(False, 0), "closed")
        return fail
