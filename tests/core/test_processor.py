"""AsyncSerdeProcessor: the upstream checklist (I.1) and what lmserde adds."""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Any

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    GroupSlotView,
    MemoryLayoutDesc,
    MultiDeserializer,
    MultiSerializer,
    ObjectKey,
    Serializer,
    TensorMemoryObj,
    hookimpl,
)
from lmserde.hooks import flush_events, get_plugin_manager
from lmserde.observability import SerdeTaskEvent
from lmserde.testing import wait_for_result

KEY = ObjectKey(b"k" * 8, "model", 0)


class RecordingSerializer(Serializer):
    def __init__(self, result: Any = 213, fail_on: set[int] | None = None) -> None:
        self.calls = 0
        self.result = result
        self.fail_on = fail_on or set()
        self.keys: list[ObjectKey] = []

    def serialize(self, src: Any, dst: Any, key: ObjectKey) -> Any:
        index = self.calls
        self.calls += 1
        self.keys.append(key)
        if index in self.fail_on:
            raise RuntimeError(f"boom {index}")
        return self.result

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return 4096


class RecordingDeserializer(Deserializer):
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def deserialize(self, src: Any, dst: Any, key: ObjectKey) -> None:
        self.calls += 1
        if self.fail:
            raise ValueError("bad frame")


class NarrowSpy:
    """A destination that records set_used_size calls."""

    def __init__(self) -> None:
        self.used: list[int] = []

    def set_used_size(self, n: int) -> None:
        self.used.append(n)


def _readable(fd: int, timeout_ms: int = 5000) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_ms))


@pytest.fixture
def proc() -> Any:
    p = AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer(), serde_type="spy")
    yield p
    p.close()


def test_event_fds_are_distinct(proc: AsyncSerdeProcessor) -> None:
    assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()


def test_serialize_signals_fd_and_result_is_returned_once(proc: AsyncSerdeProcessor) -> None:
    dst = NarrowSpy()
    task = proc.submit_serialize([object()], [dst], [KEY])
    assert _readable(proc.get_serialize_event_fd())
    assert proc.query_serialize_result(task) is True
    assert proc.query_serialize_result(task) is None
    assert proc.serializer.calls == 1  # type: ignore[union-attr]


def test_deserialize_signals_fd_and_result_is_returned_once(proc: AsyncSerdeProcessor) -> None:
    task = proc.submit_deserialize([object()], [object()], [KEY])
    assert _readable(proc.get_deserialize_event_fd())
    assert proc.query_deserialize_result(task) is True
    assert proc.query_deserialize_result(task) is None
    assert proc.deserializer.calls == 1  # type: ignore[union-attr]


def test_raising_serializer_signals_and_fails() -> None:
    with AsyncSerdeProcessor(RecordingSerializer(fail_on={0}), RecordingDeserializer()) as p:
        dst = NarrowSpy()
        task = p.submit_serialize([object()], [dst], [KEY])
        assert _readable(p.get_serialize_event_fd())
        assert p.query_serialize_result(task) is False
        assert dst.used == []  # a failing item is never narrowed


def test_unknown_task_ids_return_none(proc: AsyncSerdeProcessor) -> None:
    assert proc.query_serialize_result(42) is None
    assert proc.query_deserialize_result(42) is None


def test_estimate_delegates(proc: AsyncSerdeProcessor) -> None:
    layout = MemoryLayoutDesc([[4]], [torch.float16])
    assert proc.estimate_serialized_size(layout) == 4096


def test_int_result_narrows_exactly_once(proc: AsyncSerdeProcessor) -> None:
    dst = NarrowSpy()
    assert wait_for_result(proc, proc.submit_serialize([object()], [dst], [KEY]), serialize=True)
    assert dst.used == [213]


def test_destination_without_set_used_size_still_succeeds(proc: AsyncSerdeProcessor) -> None:
    assert wait_for_result(proc, proc.submit_serialize([object()], [object()], [KEY]),
                           serialize=True)


def test_none_result_fails_the_item_and_skips_narrowing() -> None:
    # serialize must return the bytes written; None is not a byte count (issue #13, case 5).
    with AsyncSerdeProcessor(RecordingSerializer(result=None), RecordingDeserializer()) as p:
        dst = NarrowSpy()
        assert not wait_for_result(p, p.submit_serialize([object()], [dst], [KEY]),
                                   serialize=True)
        assert dst.used == []


def test_task_ids_are_unique_across_directions(proc: AsyncSerdeProcessor) -> None:
    ids = {proc.submit_serialize([], [], []), proc.submit_deserialize([], [], []),
           proc.submit_serialize([], [], [])}
    assert len(ids) == 3


def test_submit_does_not_block() -> None:
    gate = threading.Event()

    class Slow(RecordingSerializer):
        def serialize(self, src: Any, dst: Any, key: ObjectKey) -> Any:
            gate.wait(10)
            return 1

    with AsyncSerdeProcessor(Slow(), RecordingDeserializer()) as p:
        tasks = [p.submit_serialize([object()], [object()], [KEY]) for _ in range(5)]
        assert all(p.query_serialize_result(t) is None for t in tasks)
        gate.set()
        assert all(wait_for_result(p, t, serialize=True) for t in tasks)


def test_per_item_outcomes_name_the_failed_items() -> None:
    ser = RecordingSerializer(fail_on={1})
    with AsyncSerdeProcessor(ser, RecordingDeserializer()) as p:
        dsts = [NarrowSpy(), NarrowSpy(), NarrowSpy()]
        task = p.submit_serialize([object()] * 3, dsts, [KEY] * 3)
        assert _readable(p.get_serialize_event_fd())
        outcome = p.query_serialize_outcome(task)
        assert outcome is not None and not outcome.ok
        assert outcome.failed_items == (1,)
        assert isinstance(outcome.item_errors[1], RuntimeError)
        assert [d.used for d in dsts] == [[213], [], [213]]  # other items still ran
        assert p.query_serialize_result(task) is None  # taken once


def test_failed_deserialize_zeroes_destination() -> None:
    with AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer(fail=True)) as p:
        dst = TensorMemoryObj.from_tensor(torch.full((16,), 7, dtype=torch.uint8))
        task = p.submit_deserialize([object()], [dst], [KEY])
        assert wait_for_result(p, task, serialize=False) is False
        assert int(dst.raw_data.count_nonzero()) == 0


def test_misaligned_batch_fails_without_running() -> None:
    ser = RecordingSerializer()
    with AsyncSerdeProcessor(ser, RecordingDeserializer()) as p:
        task = p.submit_serialize([object(), object()], [object()], [KEY, KEY])
        assert wait_for_result(p, task, serialize=True) is False
        assert ser.calls == 0


def test_keys_reach_the_serializer_in_order() -> None:
    ser = RecordingSerializer()
    keys = [ObjectKey(bytes([i]) * 4, "m", 0) for i in range(4)]
    with AsyncSerdeProcessor(ser, RecordingDeserializer()) as p:
        assert wait_for_result(p, p.submit_serialize([object()] * 4, [object()] * 4, keys),
                               serialize=True)
    assert ser.keys == keys


def test_max_workers_is_an_int() -> None:
    with AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer(), 2) as p:
        assert p.max_workers == 2
    for value in (0, 2.0, "2"):  # issue #27 case 8: 2.0 and "2" are not ints
        with pytest.raises(ValueError, match="max_workers"):
            AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer(), value)


def test_two_workers_run_tasks_concurrently() -> None:
    barrier = threading.Barrier(2, timeout=10)

    class Meeting(RecordingSerializer):
        def serialize(self, src: Any, dst: Any, key: ObjectKey) -> Any:
            barrier.wait()  # both tasks must be running at once to pass
            return 1

    with AsyncSerdeProcessor(Meeting(), RecordingDeserializer(), max_workers=2) as p:
        t1 = p.submit_serialize([object()], [object()], [KEY])
        t2 = p.submit_serialize([object()], [object()], [KEY])
        assert wait_for_result(p, t1, serialize=True) and wait_for_result(p, t2, serialize=True)


def test_close_waits_for_running_work_and_releases_fds() -> None:
    done = threading.Event()

    class Slow(RecordingSerializer):
        def serialize(self, src: Any, dst: Any, key: ObjectKey) -> Any:
            time.sleep(0.2)
            done.set()
            return 1

    p = AsyncSerdeProcessor(Slow(), RecordingDeserializer())
    fds = (p.get_serialize_event_fd(), p.get_deserialize_event_fd())
    p.submit_serialize([object()], [object()], [KEY])
    p.close()
    assert done.is_set()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    with pytest.raises(RuntimeError, match="closed"):
        p.submit_serialize([object()], [object()], [KEY])
    p.close()  # idempotent


def test_close_leaves_no_threads_behind() -> None:
    before = threading.active_count()
    for _ in range(20):
        p = AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer(), 2)
        wait_for_result(p, p.submit_serialize([object()], [object()], [KEY]), serialize=True)
        p.close()
    assert threading.active_count() == before


def test_events_reach_hook_implementations() -> None:
    seen: list[SerdeTaskEvent] = []

    class Observer:
        @hookimpl
        def lmserde_serde_task_finished(self, event: SerdeTaskEvent) -> None:
            seen.append(event)

    pm = get_plugin_manager()
    observer = Observer()
    pm.register(observer)
    try:
        with AsyncSerdeProcessor(RecordingSerializer(fail_on={1}), RecordingDeserializer(),
                                 serde_type="spy") as p:
            wait_for_result(p, p.submit_serialize([object()] * 2, [object()] * 2, [KEY] * 2),
                            serialize=True)
        assert flush_events()  # delivered off the data path: wait before unregistering
    finally:
        pm.unregister(observer)
    (event,) = seen
    assert event.serde_type == "spy" and event.direction == "serialize"
    assert event.num_objects == 2 and not event.ok
    assert event.error_class == "RuntimeError" and event.failed_items == (1,)
    assert event.seconds >= 0


def test_a_raising_observer_does_not_break_the_processor() -> None:
    class Broken:
        @hookimpl
        def lmserde_serde_task_finished(self, event: SerdeTaskEvent) -> None:
            raise RuntimeError("observer bug")

    pm = get_plugin_manager()
    broken = Broken()
    pm.register(broken)
    try:
        with AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer()) as p:
            assert wait_for_result(p, p.submit_serialize([object()], [object()], [KEY]),
                                   serialize=True)
    finally:
        pm.unregister(broken)


def test_metrics_count_bytes_and_failures() -> None:
    class Copy(Serializer):
        def serialize(self, src: Any, dst: Any, key: ObjectKey) -> int:
            dst.raw_data[: src.get_size()].copy_(src.raw_data[: src.get_size()])
            return src.get_size()

        def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
            return layout_desc.nbytes

    with AsyncSerdeProcessor(Copy(), RecordingDeserializer()) as p:
        src = TensorMemoryObj.from_tensor(torch.ones(8, dtype=torch.float32))
        dst = TensorMemoryObj.from_tensor(torch.zeros(64, dtype=torch.uint8))
        assert wait_for_result(p, p.submit_serialize([src], [dst], [KEY]), serialize=True)
        m = p.metrics()["serialize"]
    assert (m.tasks, m.items, m.failed_items, m.bytes_in, m.bytes_out) == (1, 1, 0, 32, 32)


class TwoSlotCopy(MultiSerializer):
    """Writes each present slot's bytes back to back (test-only format)."""

    @property
    def group_size(self) -> int:
        return 2

    def serialize(self, src: Any, dst: Any, key: ObjectKey) -> int:
        out = dst.raw_data
        pos = 0
        for view in src:
            if view is None:
                continue
            data = view.tensor.reshape(-1).view(torch.uint8)
            out[pos : pos + data.numel()].copy_(data)
            pos += data.numel()
        return pos

    def estimate_serialized_size(self, layout_descs: Any) -> int:
        return sum(d.nbytes for d in layout_descs if d is not None) + 1024


class TwoSlotCopyBack(MultiDeserializer):
    @property
    def group_size(self) -> int:
        return 2

    def deserialize(self, src: Any, dst: Any, key: ObjectKey) -> None:
        pos = 0
        for view in dst:
            if view is None:
                continue
            t = view.tensor.reshape(-1).view(torch.uint8)
            t.copy_(src.raw_data[pos : pos + t.numel()])
            pos += t.numel()


def test_group_views_pass_through_and_narrow_to_exact_size() -> None:
    layout = MemoryLayoutDesc([[4, 8], [4, 8]], [torch.float16, torch.float16])
    obj = TensorMemoryObj.allocate(layout)
    obj.raw_data.copy_(torch.arange(obj.raw_data.numel()).to(torch.uint8))
    with AsyncSerdeProcessor(TwoSlotCopy(), TwoSlotCopyBack()) as p:
        assert p.serializer_group_size() == 2 and p.input_slot_mapping() == (0, 1)
        size = p.estimate_serialized_size((obj.get_layout(), obj.get_layout()))
        blob = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]))
        src = (GroupSlotView(obj, 0), GroupSlotView(obj, 1))
        assert wait_for_result(p, p.submit_serialize([src], [blob], [KEY]), serialize=True)
        assert blob.get_size() == layout.nbytes  # despite 1024 B of over-allocation
        out = TensorMemoryObj.allocate(layout, zero=True)
        dst = (GroupSlotView(out, 0), GroupSlotView(out, 1))
        assert wait_for_result(p, p.submit_deserialize([blob], [dst], [KEY]), serialize=False)
        assert torch.equal(out.raw_data, obj.raw_data)


def test_single_tensor_processor_has_no_group_accessors(proc: AsyncSerdeProcessor) -> None:
    assert proc.serializer_group_size() is None
    assert proc.deserializer_group_size() is None
    assert proc.input_slot_mapping() is None
    assert proc.output_slot_mapping() is None


def test_misaligned_group_views_complete_and_are_scrubbed_on_failure() -> None:
    """A slot view of a misaligned group has no typed tensor; the task must still complete."""
    layout = MemoryLayoutDesc([[3, 5, 7], [2, 9]], [torch.float16, torch.float32])
    out = TensorMemoryObj.allocate(layout)
    out.raw_data.fill_(0x77)
    views = (GroupSlotView(out, 0), GroupSlotView(out, 1))
    assert views[1].get_size() == 72 and views[1].group_bytes().numel() == 72
    with AsyncSerdeProcessor(TwoSlotCopy(), TwoSlotCopyBack()) as p:
        blob = TensorMemoryObj.from_tensor(torch.zeros(8, dtype=torch.uint8))  # far too short
        task = p.submit_deserialize([blob], [views], [KEY])
        assert wait_for_result(p, task, serialize=False) is False
    assert int(out.raw_data[: layout.nbytes].count_nonzero()) == 0


def test_a_task_completes_even_when_item_accounting_fails() -> None:
    class NoSize:
        def get_size(self) -> int:
            raise RuntimeError("cannot size me")

    with AsyncSerdeProcessor(RecordingSerializer(), RecordingDeserializer()) as p:
        task = p.submit_serialize([NoSize()], [NoSize()], [KEY])
        assert wait_for_result(p, task, serialize=True) is True
