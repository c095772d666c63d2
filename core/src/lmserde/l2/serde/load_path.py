"""The serde wrapper's load path: (stored sizes →) inner load → verify → deserialize.

``submit`` checks the destinations and starts the inner load into L1 temporaries sized to the
stored objects (the inner adapter's stored sizes: asked in ``submit`` when they are local, as
``fs``'s are; on the background worker when they may be a network round trip, as for ``redis``
and ``s3``: ``submit`` never waits on the network). When the inner load's event fires,
:meth:`LoadPath.drain_inner_load` opens each hit's stored-object frame (header checks now, the
payload checksum while the serde decodes) and hands the passing payloads to the serde of the
configuration that wrote each (:mod:`~lmserde.l2.serde.read_configs`: the wrapper's own, or one of
its ``read_also`` configurations); when the deserialize events fire,
:meth:`LoadPath.drain_deserialize` confirms the checksums and completes the task. Results are
per key: a key whose object is refused is a miss counted by reason, deleted from the inner
adapter only when the refusal proves damage
(:data:`~lmserde.l2.serde.stored_frame.DAMAGE_REASONS`); an object another reader wrote stays.
Every failure releases every temporary. ``on_loaded`` (:data:`LoadObserver`) hears, per
configuration, what the decoded objects of each load took (the ``auto`` serde's measurements).

This module is over 400 lines because it is one state machine (sizes → inner load → verify →
deserialize) whose stages share the task tables and the lock; what a decoded item comes to is
:mod:`~lmserde.l2.serde.decode_outcomes`, the frame checks :mod:`~lmserde.l2.serde.stored_frame`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

from lmserde.containment import describe_exception, must_propagate
from lmserde.hooks import emit_wrapper_task_event
from lmserde.keys import ObjectKey, make_temp_key
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.task_queues import AdapterTaskQueues
from lmserde.l2.serde.background_worker import BackgroundWorker
from lmserde.l2.serde.decode_outcomes import decode_outcome, deserialize_errors, payload_confirmed
from lmserde.l2.serde.failure_streaks import FailureStreaks
from lmserde.l2.serde.metrics import WrapperMetrics
from lmserde.l2.serde.read_configs import ConfigReaders
from lmserde.l2.serde.stored_frame import DAMAGE_REASONS, FrameRejected
from lmserde.l2.serde.stored_sizes import examine_stored_sizes
from lmserde.l2.serde.temporaries import Temporaries
from lmserde.l2.serde.wrapper_task import (
    NoItemError,
    TaskPhase,
    UnfinishedTask,
    WrapperTask,
    contained_submit,
    group_slots,
    layout_of,
    taken_once,
)
from lmserde.memory import MemoryObj
from lmserde.multi import item_size
from lmserde.observability import WrapperTaskEvent
from lmserde.processor import scrub_destination

__all__ = ["LoadPath", "LoadObserver", "StoredSizes"]

#: How a load path has the stored sizes of its keys (see :class:`LoadPath`).
StoredSizes = Literal["inline", "worker", "none"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")

#: Hears, per reader of a load task, the objects it decoded: ``(reader index, KV bytes, stored
#: bytes, deserialize seconds, inner load seconds)``; the task's inner load time is shared out
#: by stored bytes. Called on the poll thread; what it raises is logged, never a miss.
LoadObserver = Callable[[int, int, int, float, float], None]


class LoadPath:
    """Loads of one serde wrapper (see the module docstring). Thread-safe: ``submit`` runs on
    callers' threads, the size lookups on the background worker, the drains on the wrapper's
    poll thread.

    ``stored_sizes``: how the inner adapter's stored sizes are had before loading — ``"inline"``
    (they are local: asked in ``submit``), ``"worker"`` (they may wait on the network: asked on
    the background worker, ``submit`` only registers the task) or ``"none"`` (the adapter
    reports none). ``repair``: delete objects proven damaged.
    ``on_rejected(reason, keys)`` hears every refusal, before any deletion. ``readers``: the
    serde configurations it decodes (the wrapper's own first; every one's deserialize event fd
    must run :meth:`drain_deserialize`); its temporaries hold the largest of their bounds.
    ``on_loaded``: see :data:`LoadObserver`. ``written_configs``: how many of the first readers
    are configs the wrapper writes (``auto``'s candidates); hits of the others count as
    ``read_also`` hits.
    """

    def __init__(self, *, readers: ConfigReaders, serde_type: str, inner: L2AdapterInterface,
                 stored_sizes: StoredSizes, repair: bool, temporaries: Temporaries,
                 queues: AdapterTaskQueues, metrics: WrapperMetrics, streaks: FailureStreaks,
                 on_rejected: Callable[[str, list[ObjectKey]], None],
                 on_loaded: LoadObserver | None = None, written_configs: int = 1) -> None:
        self._readers = readers
        self._written_configs = written_configs
        self._on_loaded = on_loaded
        self._serde_type = serde_type
        self._inner = inner
        self._framer = readers.primary.framer
        if stored_sizes not in ("inline", "worker", "none"):
            raise ValueError(f"stored_sizes is 'inline', 'worker' or 'none', not {stored_sizes!r}")
        self._stored_sizes = stored_sizes
        self._repair = repair
        self._shape = readers.primary.shape
        self._temps = temporaries
        self._queues = queues
        self._metrics = metrics
        self._streaks = streaks
        self._on_rejected = on_rejected
        self._lock = threading.Lock()
        self._closed = False
        self._sizing: dict[int, WrapperTask] = {}  # loads waiting for their stored sizes
        self._inner_loading: dict[int, WrapperTask] = {}
        self._deserializing: dict[tuple[int, int], WrapperTask] = {}  # (reader, serde task id)
        self._worker = BackgroundWorker("serde-l2-wrapper-sizes")

    def submit(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        if len(keys) != len(objects):
            raise ValueError(f"submit_load_task got {len(keys)} keys but {len(objects)} objects")
        task_id = self._queues.new_task_id()
        now = time.perf_counter()
        task = WrapperTask(task_id, keys, TaskPhase.INNER_LOAD, now, now, num_keys=len(keys))
        try:
            task.layouts = [layout_of(o) for o in objects]
            task.dst_items = [self._shape.deserialize_item(o, lay)
                              for o, lay in zip(objects, task.layouts)]
            task.bounds = [self._readers.load_bound(lay) for lay in task.layouts]
            task.dst_objects = objects
        except BaseException as exc:  # bad input or a raising estimate fails this task only
            if must_propagate(exc):
                raise
            _log.warning("serde wrapper: load task %d rejected: %s", task_id,
                         describe_exception(exc))
            self._finish(task, Bitmap(len(keys)), "prepare")
            return task_id
        if self._stored_sizes != "worker":  # everything from here on is local: start it now
            sizes = (examine_stored_sizes(self._inner, keys)[0] if self._stored_sizes == "inline"
                     else {})
            self._start_inner_load(task, sizes)
            return task_id
        with self._lock:  # the stored sizes may be a network round trip: on the worker
            if self._closed:
                raise RuntimeError("SerdeL2AdapterWrapper is closed")
            self._sizing[task_id] = task
        self._worker.submit(lambda: self._size_and_start(task))
        return task_id

    def _size_and_start(self, task: WrapperTask) -> None:
        """On the background worker: look up the stored sizes, then start the inner load."""
        try:
            stored = examine_stored_sizes(self._inner, task.keys)[0]
        except BaseException:  # Ctrl-C cannot reach this thread; never leave the task open
            stored = {}
        with self._lock:
            if self._sizing.pop(task.task_id, None) is None:  # close() finished it meanwhile
                return
        try:
            self._start_inner_load(task, stored)
        except RuntimeError:  # closed between the lookup and the inner submit: already failed
            pass
        except BaseException:
            _log.exception("serde wrapper: load task %d failed to start", task.task_id)
            self._finish(task, Bitmap(task.num_keys), "internal")

    def _start_inner_load(self, task: WrapperTask, stored: dict[ObjectKey, int]) -> None:
        """Narrow the task to the keys worth loading (an object larger than any configuration it
        reads can write is not this reader's: a miss, left in place), reserve the temporaries
        sized to the stored objects and submit the inner load. Raises ``RuntimeError`` when the wrapper was
        closed (the task is then already completed as failed)."""
        keys = task.keys
        oversized: list[ObjectKey] = []
        for i, key in enumerate(keys):
            size = stored.get(key)
            if size is not None and size > self._shape.stored_bound(task.bounds[i]):
                oversized.append(key)  # larger than the serde can ever write: not its bytes
                continue
            task.positions.append(i)
        if oversized:
            task.missed_by_size = len(oversized)
            self._reject(task, "foreign", oversized)
        if not task.positions:
            self._finish(task, Bitmap(len(keys)), "stored_size" if stored else None)
            return
        load_keys = [keys[i] for i in task.positions]
        task.dst_items = [task.dst_items[i] for i in task.positions]
        task.dst_objects = [task.dst_objects[i] for i in task.positions]
        task.layouts = [task.layouts[i] for i in task.positions]
        task.bounds = [task.bounds[i] for i in task.positions]
        task.temp_keys = [make_temp_key(k) for k in load_keys]
        temps = self._temps.reserve(task.temp_keys,
                                    [self._shape.stored_bound(b) for b in task.bounds])
        if temps is None:
            self._finish(task, Bitmap(len(keys)), "reserve")
            return
        task.temps = temps
        try:
            for key, temp in zip(load_keys, temps):
                size = stored.get(key)
                if size is not None:
                    temp.set_used_size(size)
        except Exception as exc:
            _log.warning("serde wrapper: cannot narrow load temporaries: %s", exc)
            self._temps.release_written(task.temp_keys)
            self._finish(task, Bitmap(len(keys)), "reserve")
            return
        failure: str | None = None
        with self._lock:  # registered before the poll thread can see the inner result
            if self._closed:
                failure = "closed"
            else:
                inner_id = contained_submit(
                    "inner submit_load_task",
                    lambda: self._inner.submit_load_task(load_keys, temps),
                    lambda: self._temps.release_written(task.temp_keys))
                if inner_id is None:
                    failure = "inner_load_submit"
                else:
                    self._inner_loading[inner_id] = task
        if failure is not None:
            self._temps.release_written(task.temp_keys)
            self._finish(task, Bitmap(len(keys)), failure)
            if failure == "closed":
                raise RuntimeError("SerdeL2AdapterWrapper is closed")

    def drain_inner_load(self) -> None:
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
                self._release(task)
                self._finish(task, Bitmap(task.num_keys), "internal")

    def _after_inner_load(self, task: WrapperTask, bitmap: Bitmap) -> None:
        self._metrics.record_stage("inner_load", task.end_stage("inner_load", time.perf_counter()))
        if len(bitmap) != len(task.temps):
            raise RuntimeError(
                f"inner adapter returned {len(bitmap)} bits for {len(task.temps)} keys"
            )
        hits = bitmap.set_indices()
        self._metrics.record_failure("inner_load", len(task.temps) - len(hits))
        task.hit_slots = self._verify(task, hits)
        if not task.hit_slots:
            self._temps.release_written(task.temp_keys)
            self._finish(task, Bitmap(task.num_keys), "verify" if hits else None)
            return
        task.phase = TaskPhase.DESERIALIZE
        groups = group_slots(task.hit_slots, task.readers)  # each to the config that wrote it
        failed: list[int] = []
        with self._lock:
            for index, slots in groups.items():
                serde_id = self._submit_deserialize(index, task, slots)
                if serde_id is None:
                    failed += slots
                else:
                    task.decoding[index] = slots
                    self._deserializing[(index, serde_id)] = task
            submitted = bool(task.decoding)
            for j in failed:  # if another configuration's decode runs: these miss, kept
                task.slot_errors[j] = NoItemError("submit_deserialize failed")
        if failed:
            self._metrics.record_failure("deserialize_submit", len(failed))
        if not submitted:
            self._temps.release_written(task.temp_keys)
            self._finish(task, Bitmap(task.num_keys), "deserialize_submit")

    def _submit_deserialize(self, index: int, task: WrapperTask, slots: list[int]) -> int | None:
        """Hand ``slots`` to reader ``index``'s serde; its task id, ``None`` when it raised."""
        try:
            return self._readers[index].serde.submit_deserialize(
                [task.payloads[j] for j in slots], [task.dst_items[j] for j in slots],
                [task.keys[task.positions[j]] for j in slots])
        except BaseException as exc:
            _log.warning("serde wrapper: submit_deserialize of '%s' raised: %s",
                         self._readers[index].label, describe_exception(exc))
            return None

    def _verify(self, task: WrapperTask, hits: list[int]) -> list[int]:
        """Open the frame of every hit temporary; returns the slots that passed.

        ``task.payloads`` gets, per temporary, what the serde will decode (the temporary itself
        when not framing). Refused keys are counted by reason and deleted from the inner adapter.
        """
        if self._framer is None:
            task.payloads = list(task.temps)
            return hits
        task.payloads = [None] * len(task.temps)
        task.confirms = [None] * len(task.temps)
        task.readers = [0] * len(task.temps)
        passed: list[int] = []
        refused: dict[str, list[ObjectKey]] = {}
        for j in hits:
            key = task.keys[task.positions[j]]
            try:  # header checks now; the payload checksum runs while the serde decodes
                task.readers[j], task.payloads[j], task.confirms[j] = (
                    self._readers.open_deferred(task.temps[j], key, task.layouts[j]))
                if task.readers[j]:  # a read_also configuration fills the object its own way
                    task.dst_items[j] = self._read_also_destination(task, j)
            except FrameRejected as exc:
                _log.warning("serde wrapper: stored object for key %s refused (%s)",
                             key.chunk_hash.hex(), exc)
                refused.setdefault(exc.reason, []).append(key)
                continue
            passed.append(j)
        for reason, keys in refused.items():
            self._reject(task, reason, keys)
        return passed

    def _read_also_destination(self, task: WrapperTask, j: int) -> Any:
        """The destination items of slot ``j`` for the ``read_also`` reader that opened it;
        :class:`FrameRejected` (``layout``: not mine, kept) when its slots do not fit the
        object, after its payload checksum is done with the temporary."""
        try:
            return self._readers.destination(task.readers[j], task.dst_objects[j],
                                             task.layouts[j])
        except ValueError as exc:
            try:
                task.confirms[j]()  # the checksum threads must be done with the temporary
            except FrameRejected:
                pass
            label = self._readers[task.readers[j]].label
            raise FrameRejected("layout", f"read_also config '{label}' cannot fill this object: "
                                f"{exc}") from exc

    def _reject(self, task: WrapperTask, reason: str, keys: list[ObjectKey]) -> None:
        """Count ``keys`` as refused for ``reason`` and tell the listeners; delete the keys from
        the inner adapter only when ``reason`` proves their objects damaged
        (:data:`~lmserde.l2.serde.stored_frame.DAMAGE_REASONS`): an object this reader cannot
        read (another config, key, layout, frame version or key material) stays for its own
        reader, and the next store of the key replaces it."""
        task.rejected[reason] = task.rejected.get(reason, 0) + len(keys)
        self._metrics.record_rejection(reason, len(keys))
        self._on_rejected(reason, list(keys))
        if not self._repair or reason not in DAMAGE_REASONS:
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

    def drain_deserialize(self) -> None:
        """Collect every finished deserialize (of any configuration); a task completes once
        each configuration it handed payloads to has answered."""
        with self._lock:
            pending = list(self._deserializing.items())
        for (index, serde_id), task in pending:
            slots = task.decoding.get(index, [])
            try:
                errors = deserialize_errors(self._readers[index].serde, serde_id, len(slots))
            except BaseException as exc:  # a processor that cannot answer failed its items
                _log.warning("serde wrapper: querying a deserialize raised: %s",
                             describe_exception(exc))
                errors = [NoItemError()] * len(slots)
            if errors is None:
                continue
            if self._on_loaded is not None:  # heard before the caller has its result
                self._observe(task, index, slots, errors)
            with self._lock:
                self._deserializing.pop((index, serde_id), None)
                task.decoding.pop(index, None)
                task.slot_errors.update(zip(slots, errors))
                last = not task.decoding  # else another configuration still decodes some
            if not last:
                continue
            try:
                self._after_deserialize(task, [task.slot_errors.get(j, NoItemError())
                                               for j in task.hit_slots])
            except BaseException:  # never leave a task unfinished (this is the poll thread)
                _log.exception("serde wrapper: load task %d failed after deserialize",
                               task.task_id)
                self._release(task)
                self._finish(task, Bitmap(task.num_keys), "internal")

    def _observe(self, task: WrapperTask, index: int, slots: list[int],
                 errors: Sequence[BaseException | None]) -> None:
        """Tell ``on_loaded`` what reader ``index``'s decoded slots took (see
        :data:`LoadObserver`; what it raises is logged, never a miss)."""
        assert self._on_loaded is not None
        try:
            decoded = [j for j, error in zip(slots, errors) if error is None]
            if not decoded:
                return
            stored = sum(task.temps[j].get_size() for j in decoded)
            loaded = sum(task.temps[j].get_size() for j in task.hit_slots) or stored
            self._on_loaded(index, sum(item_size(task.dst_items[j]) for j in decoded), stored,
                            time.perf_counter() - task.stage_started,
                            task.stage_seconds.get("inner_load", 0.0) * stored / loaded)
        except Exception as exc:
            _log.warning("serde wrapper: load observer raised: %s", describe_exception(exc))

    def _after_deserialize(self, task: WrapperTask, errors: list[BaseException | None]) -> None:
        self._metrics.record_stage("deserialize",
                                   task.end_stage("deserialize", time.perf_counter()))
        final = Bitmap(task.num_keys)
        serialized = 0
        read_also_hits: dict[int, int] = {}
        missed: dict[str, list[ObjectKey]] = {"decode": [], "foreign": [], "unkeyed": [],
                                              "checksum": [], "auth": [], "kept": []}
        last_error: BaseException | None = None
        for slot, error in zip(task.hit_slots, errors):
            outcome = decode_outcome(error, confirmed=payload_confirmed(task, slot),
                                     framed=self._framer is not None)
            if outcome == "hit":
                final.set(task.positions[slot])
                serialized += task.temps[slot].get_size()
                if task.readers and task.readers[slot] >= self._written_configs:
                    read_also_hits[task.readers[slot]] = read_also_hits.get(
                        task.readers[slot], 0) + 1
                continue
            if outcome in ("checksum", "auth", "foreign", "unkeyed"):  # decoded from other bytes:
                scrub_destination(task.dst_items[slot])  # never handed back
            missed[outcome].append(task.keys[task.positions[slot]])
            last_error = error if outcome == "kept" else last_error
        undecodable, foreign, corrupt, kept = (missed["decode"], missed["foreign"],
                                               missed["checksum"], missed["kept"])
        failed = len(undecodable) + len(kept)
        self._metrics.record_failure("deserialize", failed)
        for index, count in read_also_hits.items():
            self._metrics.record_read_also_hits(self._readers[index].label, count)
        if kept:
            _log.warning("serde wrapper: %d objects of load task %d missed, kept in L2: the serde "
                         "failed for a reason other than their bytes (%s)", len(kept),
                         task.task_id, describe_exception(last_error or NoItemError()))
        if undecodable:
            self._reject(task, "decode", undecodable)
        if foreign:
            _log.info("serde wrapper: %d objects of load task %d were written with key material "
                      "this reader does not hold; left in place", len(foreign), task.task_id)
            self._reject(task, "foreign", foreign)
        if missed["unkeyed"]:
            _log.info("serde wrapper: %d objects of load task %d were written with keys this "
                      "reader's key provider no longer holds (forgotten tenant, retired key "
                      "version); left in place", len(missed["unkeyed"]), task.task_id)
            self._reject(task, "unkeyed", missed["unkeyed"])
        if corrupt:
            self._reject(task, "checksum", corrupt)
        if missed["auth"]:  # the MAC did not verify: not this reader's object, left in place
            self._reject(task, "auth", missed["auth"])
        self._temps.release_written(task.temp_keys)
        stage = "deserialize" if failed else ("verify" if task.rejected else None)
        self._finish(task, final, stage, serialized)

    def _finish(
        self, task: WrapperTask, bitmap: Bitmap, failed_stage: str | None, serialized: int = 0
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
        broken = (bool(DAMAGE_REASONS.intersection(task.rejected))
                  or failed_stage in ("internal", "deserialize_submit", "reserve", "deserialize"))
        self._streaks.count("load", not broken)
        emit_wrapper_task_event(WrapperTaskEvent(
            serde_type=self._serde_type, operation="load", task_id=task.task_id,
            num_keys=task.num_keys, ok=hits == task.num_keys, hits=hits, bytes_kv=bytes_kv,
            bytes_serialized=serialized, failed_stage=failed_stage,
            stage_seconds=dict(task.stage_seconds), rejected=dict(task.rejected),
        ))
        self._queues.load.complete(task.task_id, bitmap)

    # -- pass-through ---------------------------------------------------------------------------


    def _release(self, task: WrapperTask) -> None:
        self._temps.release_written(task.temp_keys)

    # -- lifecycle ------------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        """Refuse new loads from now on (``submit`` raises ``RuntimeError``); stop the worker.
        Never waits (a caller's submit may be stuck in plugin code holding the path's lock)."""
        self._closed = True
        self._worker.close()

    def take_unfinished(self, hung_serde_ids: Mapping[int, Collection[int]], inner_hung: bool,
                        timeout: float) -> list[UnfinishedTask] | None:
        """Take every unfinished load out of the path (call after :meth:`stop_accepting`, once
        the serdes and the inner adapter were closed, or gave up on). A load still waiting for
        its stored sizes holds no temporaries; one with a deserialize whose task id is in
        ``hung_serde_ids[reader index]``, or that the inner adapter holds while ``inner_hung``,
        keeps its temporaries. ``None`` when the path's lock could not be had within ``timeout``
        seconds (a caller's submit into the inner adapter never returned): its tasks are left as
        they are."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return None
        try:
            waiting = list(self._sizing.values())
            loading = list(self._inner_loading.values())
            decoding = list(self._deserializing.items())
            for table in (self._inner_loading, self._deserializing, self._sizing):
                table.clear()
        finally:
            self._lock.release()
        held = [(task, False) for task in waiting]
        held += [(task, inner_hung) for task in loading]
        held += taken_once(decoding, hung_serde_ids)  # a task of several groups: once
        return [UnfinishedTask(self._failer(task, keep), keep) for task, keep in held]

    def _failer(self, task: WrapperTask, keep_temporaries: bool) -> Callable[[], None]:
        def fail() -> None:
            if not keep_temporaries:
                self._release(task)
            self._finish(task, Bitmap(task.num_keys), "closed")
        return fail
