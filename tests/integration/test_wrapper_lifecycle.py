"""Create/close cycles and closing with work in flight: no threads, fds or temporaries left."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, live_threads, objects_for, open_fds
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, MemoryObj, ObjectKey
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FaultInjectingL2Adapter,
    FaultPlan,
    FSL2Adapter,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    load_sync,
)
from lmserde.spec import SerdeSizeContract

KV = MemoryLayoutDesc([[8, 2, 16]], [torch.float16])
HANG_GUARD = 20.0  # seconds; only reached if close() hangs


def _settled_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    """Threads started since ``before`` that are still alive (finished ones are joined first)."""
    extra = live_threads() - before
    for t in extra:
        t.join(timeout=HANG_GUARD)
    return {t for t in extra if t.is_alive()}


def test_200_create_close_cycles_leave_nothing_behind(tmp_path: Path, l1: L1Manager,
                                                      cache: Cache) -> None:
    objs = objects_for(KV, 2)
    keys = [key_of(i) for i in range(2)]
    specs: list[dict[str, Any]] = [
        {"type": "fs", "base_path": str(tmp_path), "serde": {"type": "identity"}},
        {"type": "memory", "serde": [{"type": "t_int8"}, {"type": "t_crc"}]},
        {"type": "fault", "inner": {"type": "memory"}, "serde": {"type": "t_crc"}},
    ]
    # warm up lazily created process-wide state (plugin scans, hook manager, logging)
    for spec in specs:
        create_l2_adapter(spec, l1).close()
    fds, threads = open_fds(), live_threads()
    for cycle in range(200):
        adapter = create_l2_adapter(specs[cycle % len(specs)], l1)
        if cycle % 10 == 0:  # exercise every thread and fd of the stack now and then
            assert cache.store(adapter, keys, objs).is_successful()
            assert cache.load(adapter, keys, KV)[0].count() == 2
        adapter.close()
    assert _settled_threads(threads) == set()
    assert open_fds() == fds
    assert l1.memory_used_bytes() == 0


class _GatedSerializer(IdentitySerializer):
    def __init__(self, gate: threading.Event, entered: threading.Event) -> None:
        self.gate, self.entered = gate, entered

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        self.entered.set()
        self.gate.wait(HANG_GUARD)
        return super().serialize(src, dst, key)


class _GatedDeserializer(IdentityDeserializer):
    def __init__(self, gate: threading.Event, entered: threading.Event) -> None:
        self.gate, self.entered = gate, entered

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        self.entered.set()
        self.gate.wait(HANG_GUARD)
        super().deserialize(src, dst, key)


def _close_in_thread(wrapper: SerdeL2AdapterWrapper, gate: threading.Event) -> None:
    closer = threading.Thread(target=wrapper.close, daemon=True)
    closer.start()
    gate.set()  # close waits for the running serde item; let it finish
    closer.join(HANG_GUARD)
    assert not closer.is_alive(), "close() hung"


@pytest.mark.parametrize("phase", ["serialize", "deserialize"])
def test_close_while_the_serde_is_working(phase: str, tmp_path: Path, l1: L1Manager,
                                          cache: Cache) -> None:
    gate, entered = threading.Event(), threading.Event()
    if phase == "serialize":
        proc = AsyncSerdeProcessor(_GatedSerializer(gate, entered), IdentityDeserializer())
    else:
        proc = AsyncSerdeProcessor(IdentitySerializer(), _GatedDeserializer(gate, entered))
    threads = live_threads()
    wrapper = SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), proc, l1,
                                    size_contract=SerdeSizeContract.EXACT)
    keys = [key_of(i) for i in range(3)]
    if phase == "serialize":
        wrapper.submit_store_task(keys, objects_for(KV, 3))
    else:
        gate.set()
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        gate.clear()
        wrapper.submit_load_task(keys, objects_for(KV, 3))
    assert entered.wait(HANG_GUARD)
    _close_in_thread(wrapper, gate)
    assert l1.memory_used_bytes() == 0
    assert wrapper.metrics()["failures"].get("closed", 0) >= 1
    assert _settled_threads(threads) == set()


def test_close_while_the_inner_adapter_holds_results(l1: L1Manager) -> None:
    """Delayed inner results (a slow backend) never keep close() waiting."""
    threads = live_threads()
    inner = FaultInjectingL2Adapter(MemoryL2Adapter(),
                                    FaultPlan(delay_rate=1.0, delay_seconds=3600.0))
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer())
    wrapper = SerdeL2AdapterWrapper(inner, proc, l1, size_contract=SerdeSizeContract.EXACT)
    for i in range(4):
        wrapper.submit_store_task([key_of(i)], objects_for(KV, 1))
        wrapper.submit_load_task([key_of(100 + i)], objects_for(KV, 1))
    closer = threading.Thread(target=wrapper.close, daemon=True)
    closer.start()
    closer.join(HANG_GUARD)
    assert not closer.is_alive(), "close() hung"
    assert l1.memory_used_bytes() == 0
    assert l1.num_objects() == 0
    assert _settled_threads(threads) == set()


def test_close_is_idempotent_and_later_submits_raise(l1: L1Manager) -> None:
    wrapper = create_l2_adapter({"type": "memory", "serde": {"type": "identity"}}, l1)
    wrapper.close()
    wrapper.close()
    with pytest.raises(RuntimeError, match="closed"):
        wrapper.submit_store_task([key_of(0)], objects_for(KV, 1))
    with pytest.raises(RuntimeError, match="closed"):
        load_sync(wrapper, [key_of(0)], objects_for(KV, 1))
