"""Issue #13, case 2 (poll threads): whatever a handler raises, the poll thread keeps running,
so the wrapper and the fault adapter still complete later tasks."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from lmserde import AsyncSerdeProcessor, ObjectKey, TensorMemoryObj
from lmserde.events import create_event_notifier, wait_on_fd
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FaultInjectingL2Adapter,
    FaultPlan,
    L2StoreResult,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    wait_for_store,
)
from lmserde.l2.contract.poll_loop import PollLoop


def _key(i: int) -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "m", 0)


def _obj(fill: int) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((32,), fill, dtype=torch.float16))


@pytest.mark.parametrize("exc", [SystemExit(1), asyncio.CancelledError(), KeyboardInterrupt(),
                                 GeneratorExit(), RuntimeError("x")])
def test_handler_raising_anything_leaves_the_loop_running(exc: BaseException) -> None:
    notifier = create_event_notifier()
    done = create_event_notifier()
    calls: list[int] = []

    def handler() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        done.notify()

    loop = PollLoop("test-containment")
    loop.add_fd(notifier.fileno(), handler)
    loop.start()
    try:
        notifier.notify()
        wait_on_fd(done.fileno(), lambda: len(calls) >= 1 or None, timeout=10, what="first")
        notifier.notify()  # the second signal is handled only if the thread survived
        wait_on_fd(done.fileno(), lambda: len(calls) >= 2 or None, timeout=10, what="second")
        assert len(calls) == 2
        # timers run on the same thread and are contained the same way
        fired = threading.Event()
        loop.call_later(0.0, lambda: (_ for _ in ()).throw(SystemExit(2)))
        loop.call_later(0.0, lambda: (fired.set(), done.notify()))
        wait_on_fd(done.fileno(), lambda: fired.is_set() or None, timeout=10, what="timer")
    finally:
        loop.stop()
        notifier.close()
        done.close()


@pytest.mark.parametrize("delay", [float("inf"), float("nan"), 1e300])
def test_call_later_refuses_a_delay_that_would_kill_the_thread(delay: float) -> None:
    loop = PollLoop("test-delay")
    loop.start()
    try:
        with pytest.raises(ValueError, match="timer delay"):
            loop.call_later(delay, lambda: None)
        fired = threading.Event()
        wake = create_event_notifier()
        loop.call_later(0.0, lambda: (fired.set(), wake.notify()))
        wait_on_fd(wake.fileno(), lambda: fired.is_set() or None, timeout=10, what="timer")
        wake.close()
    finally:
        loop.stop()


class FlakyInner(MemoryL2Adapter):
    """A third-party adapter whose first ``pop_completed_store_tasks`` raises ``SystemExit``."""

    def __init__(self) -> None:
        super().__init__()
        self.pops = 0
        self.raised = threading.Event()

    def pop_completed_store_tasks(self) -> dict[int, L2StoreResult]:
        self.pops += 1
        if self.pops == 1:
            self.raised.set()
            raise SystemExit("adapter plugin called sys.exit")
        return super().pop_completed_store_tasks()


def test_wrapper_completes_later_tasks_after_a_handler_raised_system_exit() -> None:
    l1 = L1Manager(1 << 24)
    processor = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(),
                                    serde_type="identity")
    inner = FlakyInner()
    wrapper = SerdeL2AdapterWrapper(inner, processor, l1)
    try:
        first = wrapper.submit_store_task([_key(1)], [_obj(1)])
        # the first drain raised; the inner result stays queued until the next signal
        assert inner.raised.wait(30)
        second = wrapper.submit_store_task([_key(2)], [_obj(2)])
        others: dict[int, L2StoreResult] = {}
        assert wait_for_store(wrapper, second, timeout=30, others=others).is_successful()
        if first not in others:
            assert wait_for_store(wrapper, first, timeout=30).is_successful()
        assert inner.pops >= 2
    finally:
        wrapper.close()


def test_fault_adapter_relay_survives_and_completes_tasks() -> None:
    inner = FlakyInner()
    fault = FaultInjectingL2Adapter(inner, FaultPlan())
    try:
        first = fault.submit_store_task([_key(1)], [_obj(1)])
        assert inner.raised.wait(30)
        second = fault.submit_store_task([_key(2)], [_obj(2)])
        others: dict[int, L2StoreResult] = {}
        assert wait_for_store(fault, second, timeout=30, others=others).is_successful()
        if first not in others:
            assert wait_for_store(fault, first, timeout=30).is_successful()
    finally:
        fault.close()


def test_fault_adapter_delay_path_is_bounded() -> None:
    plan = FaultPlan(delay_rate=1.0, delay_seconds=0.01)
    fault = create_l2_adapter({"type": "fault", "inner": {"type": "memory"}, "delay_rate": 1.0,
                               "delay_seconds": 0.01})
    try:
        assert fault.plan == plan  # type: ignore[attr-defined]
        task = fault.submit_store_task([_key(3)], [_obj(3)])
        assert wait_for_store(fault, task, timeout=30).is_successful()
    finally:
        fault.close()

