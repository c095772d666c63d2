"""``AsyncSerdeProcessor``: any synchronous serde pair behind the asynchronous processor contract."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lmserde.base import Deserializer, SerdeProcessor, SerdeTaskId, Serializer
from lmserde.completion_queue import CompletionQueue, TaskIdSource
from lmserde.containment import describe_exception
from lmserde.hooks import emit_serde_task_event, load_hook_plugins
from lmserde.keys import ObjectKey
from lmserde.memory import as_byte_tensor
from lmserde.multi import (
    GroupSlotView,
    MultiDeserializer,
    MultiSerializer,
    check_group_size,
    item_size,
)
from lmserde.observability import SerdeTaskEvent
from lmserde.options import coerce_int
from lmserde.spec import SerdePair

__all__ = ["AsyncSerdeProcessor", "TaskOutcome", "ProcessorMetrics", "SerializedSizeError",
           "check_serialized_size", "scrub_destination"]

_log = logging.getLogger(__name__)

SERIALIZE = "serialize"
DESERIALIZE = "deserialize"


@dataclass(frozen=True)
class TaskOutcome:
    """Result of one finished task: overall ``ok`` and the error of each item (``None`` = ok)."""

    ok: bool
    item_errors: tuple[BaseException | None, ...]

    @property
    def failed_items(self) -> tuple[int, ...]:
        return tuple(i for i, e in enumerate(self.item_errors) if e is not None)


@dataclass
class ProcessorMetrics:
    """Running totals of one processor, per direction."""

    tasks: int = 0
    failed_tasks: int = 0
    items: int = 0
    failed_items: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0


def _logical_size(obj: Any) -> int:
    """Bytes of a source/destination item, for metrics (0 when it cannot be told)."""
    try:
        return item_size(obj)
    except Exception:
        return 0


class _ItemNeverRan(RuntimeError):
    """Placeholder error of an item the worker never reached (replaced when the item runs)."""


class SerializedSizeError(ValueError):
    """A serializer returned something other than a byte count within its destination."""


def _capacity(dst: Any) -> int | None:
    """Bytes a serialize destination can hold (``None`` when it cannot be told)."""
    if dst is None or isinstance(dst, tuple):
        return None
    if not callable(getattr(dst, "get_size", None)) and getattr(dst, "tensor", None) is None:
        return None
    try:
        return item_size(dst)
    except Exception:
        return None


def check_serialized_size(serde_type: str, n: Any, capacity: int | None) -> int:
    """``n`` if it is a valid byte count for a destination of ``capacity`` bytes."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {type(n).__name__} {n!r}; it must return the "
            "number of bytes written (an int)"
        )
    if n < 0:
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {n}, a negative byte count"
        )
    if capacity is not None and n > capacity:
        raise SerializedSizeError(
            f"serde {serde_type}: serialize returned {n} bytes, more than its destination holds "
            f"({capacity} bytes)"
        )
    return int(n)


def scrub_destination(dst: Any) -> None:
    """Zero a deserialize destination (an object, a slot view or a tuple of them) whose data must
    not be used, so no partial data survives; best effort, never raises."""
    for obj in dst if isinstance(dst, tuple) else (dst,):
        if obj is None:
            continue
        try:
            if isinstance(obj, GroupSlotView):
                obj.group_bytes().zero_()
            elif hasattr(obj, "byte_array"):
                as_byte_tensor(obj).zero_()
            elif getattr(obj, "tensor", None) is not None:
                obj.tensor.zero_()
        except BaseException:  # best effort on a worker thread
            _log.debug("could not scrub destination %r", obj, exc_info=True)


class AsyncSerdeProcessor(SerdeProcessor):
    """Runs a serializer/deserializer pair on a thread pool; completion signals an event fd.

    One pool (``max_workers``, default 1) serves both directions; task ids are unique across both.
    The items of one task run in order on one worker; separate tasks run concurrently. A serialize
    item's ``serialize`` must return the bytes written: a non-negative ``int`` (a ``bool`` is not
    one) no larger than the destination; the destination is then narrowed with
    ``set_used_size(n)`` when it has that method, and any other return fails the item
    (:class:`SerializedSizeError`, naming the serde) with nothing narrowed. Anything the serde
    raises — any ``BaseException``, ``SystemExit`` and ``asyncio.CancelledError`` included — fails
    its item (logged with the serde type) and therefore the task; the other items still run, a
    failed deserialize destination is zeroed, and the worker thread survives. A task is ``ok``
    only when every item returned normally.
    ``query_*_outcome`` gives per-item outcomes; ``query_*_result`` the upstream bool. Both take the
    result (exactly once). Multi serdes work the same way with tuples as items.
    """

    reports_item_outcomes = True

    def __init__(
        self,
        serializer: Serializer | MultiSerializer,
        deserializer: Deserializer | MultiDeserializer,
        max_workers: int = 1,
        *,
        serde_type: str = "unknown",
    ) -> None:
        workers = coerce_int(max_workers, name="max_workers")
        if workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers!r}")
        if isinstance(serializer, MultiSerializer):
            check_group_size(serializer.group_size, owner=type(serializer).__name__)
        if isinstance(deserializer, MultiDeserializer):
            check_group_size(deserializer.group_size, owner=type(deserializer).__name__)
        self._serializer = serializer
        self._deserializer = deserializer
        self.serde_type = serde_type
        ids = TaskIdSource()
        self._queues = {SERIALIZE: CompletionQueue[TaskOutcome](ids),
                        DESERIALIZE: CompletionQueue[TaskOutcome](ids)}
        self._pool = ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix=f"lmserde-{serde_type}")
        self._metrics = {SERIALIZE: ProcessorMetrics(), DESERIALIZE: ProcessorMetrics()}
        self._metrics_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._closed = False
        load_hook_plugins()  # here, not on a worker thread when the first event is emitted

    # -- accessors ------------------------------------------------------------------------------

    @property
    def serializer(self) -> Serializer | MultiSerializer:
        return self._serializer

    @property
    def deserializer(self) -> Deserializer | MultiDeserializer:
        return self._deserializer

    def serde_pair(self) -> SerdePair:
        return SerdePair(self._serializer, self._deserializer)

    @property
    def max_workers(self) -> int:
        return self._pool._max_workers

    def get_serialize_event_fd(self) -> int:
        return self._queues[SERIALIZE].fileno()

    def get_deserialize_event_fd(self) -> int:
        return self._queues[DESERIALIZE].fileno()

    def estimate_serialized_size(self, layout_desc: Any) -> int:
        return self._serializer.estimate_serialized_size(layout_desc)

    def serializer_group_size(self) -> int | None:
        s = self._serializer
        return s.group_size if isinstance(s, MultiSerializer) else None

    def deserializer_group_size(self) -> int | None:
        d = self._deserializer
        return d.group_size if isinstance(d, MultiDeserializer) else None

    def input_slot_mapping(self) -> tuple[int | None, ...] | None:
        s = self._serializer
        return tuple(s.input_slot_mapping) if isinstance(s, MultiSerializer) else None

    def output_slot_mapping(self) -> tuple[int | None, ...] | None:
        d = self._deserializer
        return tuple(d.output_slot_mapping) if isinstance(d, MultiDeserializer) else None

    def authenticates_output(self) -> bool:
        """The serializer's ``authenticates_output`` attribute."""
        return bool(self._serializer.authenticates_output)

    def reports_payload_checksum(self) -> bool:
        """The deserializer's ``reports_payload_checksum`` attribute (default ``False``)."""
        return getattr(self._deserializer, "reports_payload_checksum", False) is True

    def metrics(self) -> dict[str, ProcessorMetrics]:
        """A snapshot of the per-direction totals."""
        with self._metrics_lock:
            return {k: ProcessorMetrics(**vars(v)) for k, v in self._metrics.items()}

    # -- submit / query -------------------------------------------------------------------------

    def submit_serialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[Any], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId:
        return self._submit(SERIALIZE, src_objs, dst_objs, keys)

    def submit_deserialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[Any], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId:
        return self._submit(DESERIALIZE, src_objs, dst_objs, keys)

    def query_serialize_result(self, task_id: SerdeTaskId) -> bool | None:
        outcome = self._queues[SERIALIZE].pop(task_id)
        return None if outcome is None else outcome.ok

    def query_deserialize_result(self, task_id: SerdeTaskId) -> bool | None:
        outcome = self._queues[DESERIALIZE].pop(task_id)
        return None if outcome is None else outcome.ok

    def query_serialize_outcome(self, task_id: SerdeTaskId) -> TaskOutcome | None:
        """Like :meth:`query_serialize_result`, with per-item outcomes."""
        return self._queues[SERIALIZE].pop(task_id)

    def query_deserialize_outcome(self, task_id: SerdeTaskId) -> TaskOutcome | None:
        """Like :meth:`query_deserialize_result`, with per-item outcomes."""
        return self._queues[DESERIALIZE].pop(task_id)

    def _submit(
        self, direction: str, srcs: Sequence[Any], dsts: Sequence[Any], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId:
        with self._state_lock:
            if self._closed:
                raise RuntimeError(
                    f"AsyncSerdeProcessor({self.serde_type!r}) is closed; create a new processor"
                )
            queue = self._queues[direction]
            task_id = queue.new_task_id()
            self._pool.submit(self._run_task, direction, task_id, list(srcs), list(dsts),
                              list(keys))
        return task_id

    # -- worker ---------------------------------------------------------------------------------

    def _run_task(
        self, direction: str, task_id: int, srcs: list[Any], dsts: list[Any], keys: list[Any]
    ) -> None:
        """Run every item of one task and complete it; never raises, whatever the serde raises.

        The per-item error list starts with every item marked "never ran", so an item that was
        not reached (whatever stopped the loop) counts as failed: ``ok`` means every item
        returned normally.
        """
        start = time.perf_counter()
        count = max(len(srcs), len(dsts), len(keys), 1)
        never_ran = _ItemNeverRan(
            f"serde {self.serde_type}: {direction} task {task_id}: the item never ran")
        errors: list[BaseException | None] = [never_ran] * count
        bytes_in = bytes_out = 0
        try:
            if not (len(srcs) == len(dsts) == len(keys)):
                raise ValueError(
                    f"{direction} task {task_id}: {len(srcs)} sources, {len(dsts)} destinations "
                    f"and {len(keys)} keys must be aligned"
                )
            if not srcs:
                errors = []
            for i, (src, dst, key) in enumerate(zip(srcs, dsts, keys)):
                error = self._run_item(direction, src, dst, key)
                errors[i] = error
                if error is None:
                    bytes_in += _logical_size(src)
                    bytes_out += _logical_size(dst)
        except BaseException as exc:  # a worker thread contains everything
            _log.error("serde %s: %s task %d failed: %s", self.serde_type, direction, task_id,
                       describe_exception(exc))
            errors = [exc if e is never_ran else e for e in errors]
        finally:
            seconds = time.perf_counter() - start
            outcome = TaskOutcome(ok=all(e is None for e in errors), item_errors=tuple(errors))
            try:
                self._record(direction, task_id, outcome, bytes_in, bytes_out, seconds)
            except BaseException:  # metrics/hooks never block completion
                _log.exception("serde %s: recording %s task %d failed", self.serde_type,
                               direction, task_id)
            finally:
                self._queues[direction].complete(task_id, outcome)

    def _run_item(self, direction: str, src: Any, dst: Any, key: Any) -> BaseException | None:
        """Run one item; its exception (if any) is returned, logged, and a failed destination zeroed.

        Any ``BaseException`` counts (this runs on a worker thread). A serialize item must return
        a non-negative ``int`` (not a ``bool``) no larger than the destination's size; anything
        else fails the item and nothing is narrowed.
        """
        try:
            if direction == SERIALIZE:
                capacity = _capacity(dst)
                n = self._serializer.serialize(src, dst, key)
                n = check_serialized_size(self.serde_type, n, capacity)
                if hasattr(dst, "set_used_size"):
                    dst.set_used_size(n)
            else:
                self._deserializer.deserialize(src, dst, key)
        except BaseException as exc:  # plugin code on a worker thread
            _log.warning("serde %s: %s of item for key %r failed: %s", self.serde_type,
                         direction, getattr(key, "chunk_hash", key), describe_exception(exc))
            if direction == DESERIALIZE:
                scrub_destination(dst)
            return exc
        return None

    def _record(
        self, direction: str, task_id: int, outcome: TaskOutcome, bytes_in: int, bytes_out: int,
        seconds: float,
    ) -> None:
        failed = outcome.failed_items
        with self._metrics_lock:
            m = self._metrics[direction]
            m.tasks += 1
            m.failed_tasks += 0 if outcome.ok else 1
            m.items += len(outcome.item_errors)
            m.failed_items += len(failed)
            m.bytes_in += bytes_in
            m.bytes_out += bytes_out
            m.seconds += seconds
        first_error = next((e for e in outcome.item_errors if e is not None), None)
        emit_serde_task_event(SerdeTaskEvent(
            serde_type=self.serde_type, direction=direction, task_id=task_id,
            num_objects=len(outcome.item_errors), bytes_in=bytes_in, bytes_out=bytes_out,
            seconds=seconds, ok=outcome.ok,
            error_class=type(first_error).__name__ if first_error is not None else None,
            failed_items=failed,
        ))

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wait for running and queued tasks, stop the workers, close both fds. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True)
        self._queues[SERIALIZE].close()
        self._queues[DESERIALIZE].close()

    def __enter__(self) -> AsyncSerdeProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
