"""Issue #27 case 5: a hung plugin no longer hangs shutdown.

A serializer (or deserializer) that never returns made ``close()`` wait as long as it ran (80 s
observed). Now ``close()`` returns within the serde's ``close_timeout_s`` plus a margin, logs the
hung call naming the serde and where it is stuck, and reports it in the status; the stuck thread
is a daemon thread that ends when the call returns (the tests release it at teardown) and never
delays the interpreter's exit. Bounds: the tests use a 0.5 s close bound and accept up to 2.5 s
more, so a loaded 2-core machine does not flake, while a close that waits for the call (which
blocks until teardown, up to ``HANG_GUARD``) fails.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    SerdePair,
    SerdeSizeContract,
    SerdeSpec,
    close_timeout_option,
    hookimpl,
    max_workers_option,
)
from lmserde.hooks import event_delivery_stats, flush_events, get_plugin_manager
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import MemoryL2Adapter, SerdeL2AdapterWrapper, create_l2_adapter
from lmserde.l2.contract.poll_loop import PollLoop
from lmserde.l2.serde.bounded_close import FINISH_GRACE_S
from lmserde.options import DEFAULT_CLOSE_TIMEOUT_S
from lmserde.registry import register_serde_factory, unregister_serde_factory

KV = MemoryLayoutDesc([[8, 2, 16]], [torch.float16])
BOUND = 0.5
MARGIN = 2.5  # scheduling on a loaded machine; far below the time a hung call would take
HANG_GUARD = 60.0  # a gated call returns after this at the latest, if teardown never came


class _Gate:
    """What the hanging serdes wait on; teardown opens it so every stuck thread ends."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.hang_serialize = False
        self.hang_deserialize = False
        self.calls = 0


class HangingSerializer(IdentitySerializer):
    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        self.gate.calls += 1
        if self.gate.hang_serialize:
            self.gate.entered.set()
            self.gate.release.wait(HANG_GUARD)
        return super().serialize(src, dst, key)


class HangingDeserializer(IdentityDeserializer):
    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        if self.gate.hang_deserialize:
            self.gate.entered.set()
            self.gate.release.wait(HANG_GUARD)
        super().deserialize(src, dst, key)


@pytest.fixture
def gate() -> Iterator[_Gate]:
    g = _Gate()
    yield g
    g.release.set()


@pytest.fixture
def hanging_serde(gate: _Gate) -> Iterator[str]:
    """A registered serde ``tp_hang`` whose calls hang while the gate says so."""
    spec = SerdeSpec(pair_factory=lambda options: SerdePair(HangingSerializer(gate),
                                                            HangingDeserializer(gate)),
                     options=(max_workers_option(1), close_timeout_option()),
                     size_contract=SerdeSizeContract.EXACT)
    register_serde_factory("tp_hang", spec)
    yield "tp_hang"
    unregister_serde_factory("tp_hang")


def _timed_close(closeable: object) -> float:
    start = time.monotonic()
    closeable.close()  # type: ignore[attr-defined]
    return time.monotonic() - start


def _assert_named(status: dict, caplog: pytest.LogCaptureFixture, call: str) -> None:
    hung = status["serde_wrapper"]["hung_at_close"]
    assert len(hung) == 1, hung
    entry = hung[0]
    assert entry["component"] == "serde tp_hang" and entry["serde_type"] == "tp_hang"
    assert entry["origin"] == "registered programmatically"
    assert entry["call"].startswith(call) and entry["seconds"] >= BOUND * 0.9
    assert f"in {call.split()[0]}" in entry["where"] and "test_bounded_close.py" in entry["where"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("tp_hang" in m and call in m and "still running" in m for m in errors), errors


def _close_while_hung(adapter: Any, gate: _Gate, caplog: pytest.LogCaptureFixture, call: str,
                      *, closed: int) -> None:
    """Close ``adapter`` once a gated ``call`` hangs: within the bound, the call named, and
    ``closed`` tasks failed as ``closed``."""
    assert gate.entered.wait(HANG_GUARD)
    with caplog.at_level(logging.ERROR):
        seconds = _timed_close(adapter)
    assert seconds < BOUND + MARGIN, seconds
    _assert_named(adapter.report_status(), caplog, call)
    assert adapter.metrics()["failures"].get("closed", 0) == closed


def test_a_hung_serialize_does_not_hang_the_wrapper_close(
    hanging_serde: str, gate: _Gate, l1: L1Manager, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": hanging_serde, "close_timeout_s": BOUND}}, l1)
    gate.hang_serialize = True
    adapter.submit_store_task([key_of(1)], objects_for(KV, 1))
    assert gate.entered.wait(HANG_GUARD)
    with caplog.at_level(logging.ERROR):
        seconds = _timed_close(adapter)
    assert BOUND * 0.9 <= seconds < BOUND + MARGIN, seconds
    status = adapter.report_status()
    assert status["is_healthy"] is False
    _assert_named(status, caplog, "serialize of key")
    assert adapter.metrics()["failures"].get("closed", 0) == 1
    # the stuck call may still write its temporary: it is kept, never handed back to L1
    assert l1.memory_used_bytes() > 0


def test_a_hung_deserialize_does_not_hang_the_wrapper_close(
    hanging_serde: str, gate: _Gate, l1: L1Manager, cache: Cache, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": hanging_serde, "close_timeout_s": BOUND}}, l1)
    keys = [key_of(i) for i in range(2)]
    assert cache.store(adapter, keys, objects_for(KV, 2)).is_successful()
    gate.hang_deserialize = True
    adapter.submit_load_task(keys, objects_for(KV, 2))
    assert gate.entered.wait(HANG_GUARD)
    with caplog.at_level(logging.ERROR):
        seconds = _timed_close(adapter)
    assert BOUND * 0.9 <= seconds < BOUND + MARGIN, seconds
    _assert_named(adapter.report_status(), caplog, "deserialize of key")


def test_the_processor_reports_the_hung_call_and_never_runs_queued_tasks(gate: _Gate) -> None:
    gate.hang_serialize = True
    proc = AsyncSerdeProcessor(HangingSerializer(gate), IdentityDeserializer(),
                               serde_type="hangs", close_timeout_s=BOUND)
    first = objects_for(KV, 2)
    dst = objects_for(KV, 2, seed=1)
    proc.submit_serialize([first[0]], [dst[0]], [key_of(0)])
    proc.submit_serialize([first[1]], [dst[1]], [key_of(1)])  # queued behind the hung one
    assert gate.entered.wait(HANG_GUARD)
    assert _timed_close(proc) < BOUND + MARGIN
    (hung,) = proc.hung_calls()
    assert (hung.serde_type, hung.direction, hung.task_id) == ("hangs", "serialize", 0)
    assert "in serialize" in hung.where and hung.thread.startswith("lmserde-hangs")
    assert proc.metrics()["serialize"].hung_calls == 1
    stuck = next(t for t in threading.enumerate() if t.name == hung.thread)
    assert stuck.daemon
    gate.release.set()
    stuck.join(HANG_GUARD)
    assert not stuck.is_alive()
    assert gate.calls == 1  # the queued task was abandoned at the bound, not run afterwards


def test_close_without_hung_calls_reports_nothing(l1: L1Manager, cache: Cache) -> None:
    adapter = create_l2_adapter({"type": "memory", "serde": {"type": "identity"}}, l1)
    assert cache.store(adapter, [key_of(0)], objects_for(KV, 1)).is_successful()
    adapter.close()
    assert adapter.report_status()["serde_wrapper"]["hung_at_close"] == []
    assert l1.memory_used_bytes() == 0


def test_a_hung_handler_does_not_hang_poll_loop_stop(gate: _Gate) -> None:
    """A hook (or any handler) that never returns on the poll thread: stop() is bounded."""
    loop = PollLoop("test-loop")
    loop.start()

    def hook_that_hangs() -> None:
        gate.entered.set()
        gate.release.wait(HANG_GUARD)

    loop.call_later(0, hook_that_hangs)
    assert gate.entered.wait(HANG_GUARD)
    start = time.monotonic()
    stuck = loop.stop(timeout=BOUND)
    assert time.monotonic() - start < BOUND + MARGIN
    assert stuck is not None and "hook_that_hangs" in stuck and "test-loop" in stuck
    assert loop.stop(timeout=BOUND) is None  # idempotent


def test_close_timeout_option_is_validated() -> None:
    option = close_timeout_option()
    assert option.default == DEFAULT_CLOSE_TIMEOUT_S == 10.0 and option.identity is False
    for bad, message in (("5", "must be a number"), (-1, "must be >= 0"),
                         (float("inf"), "finite"), (7200, "must be <= 3600")):
        with pytest.raises(ValueError, match=message):
            create_l2_adapter({"type": "memory",
                               "serde": {"type": "identity", "close_timeout_s": bad}},
                              L1Manager(1 << 20))
    with pytest.raises(ValueError, match="close_timeout_s"):
        AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), close_timeout_s=-1)


def test_a_hung_worker_does_not_delay_interpreter_exit(tmp_path: Path) -> None:
    """ThreadPoolExecutor workers are joined at exit; the processor's are daemon threads."""
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent("""
        import threading, torch
        from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, TensorMemoryObj
        from lmserde.identity import IdentityDeserializer, IdentitySerializer
        from lmserde.keys import ObjectKey

        class Forever(IdentitySerializer):
            def serialize(self, src, dst, key):
                threading.Event().wait()  # never returns

        proc = AsyncSerdeProcessor(Forever(), IdentityDeserializer(), close_timeout_s=0.2)
        layout = MemoryLayoutDesc([[4]], [torch.uint8])
        obj = TensorMemoryObj.allocate(layout)
        proc.submit_serialize([obj], [TensorMemoryObj.allocate(layout)],
                              [ObjectKey(b"k" * 32, "m", 1)])
        proc.close()
        print("closed", len(proc.hung_calls()))
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "closed 1" in result.stdout


class _HangingHook:
    """A hook plugin whose wrapper-event hook never returns once armed (a dead service)."""

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    @hookimpl
    def lmserde_wrapper_task_finished(self, event: object) -> None:
        self.gate.entered.set()
        self.gate.release.wait(HANG_GUARD)


def test_a_hook_that_never_returns_delays_no_task_and_no_close(gate: _Gate, l1: L1Manager,
                                                               cache: Cache) -> None:
    """Events reach hook plugins off the data path: while an observer is stuck in its hook,
    every task still completes, and close() does not wait for the observer."""
    adapter = create_l2_adapter({"type": "memory", "serde": {"type": "identity",
                                                             "close_timeout_s": BOUND}}, l1)
    hook = _HangingHook(gate)
    pm = get_plugin_manager()
    pm.register(hook, name="hanging-hook")
    try:
        assert cache.store(adapter, [key_of(0)], objects_for(KV, 1)).is_successful()
        assert gate.entered.wait(HANG_GUARD)  # the event thread is inside the hook now
        for i in range(1, 4):  # tasks keep completing while the observer hangs
            assert cache.store(adapter, [key_of(i)], objects_for(KV, 1)).is_successful()
            assert cache.load(adapter, [key_of(i)], KV)[0].to_list() == [True]
        seconds = _timed_close(adapter)
        assert seconds < BOUND + MARGIN, seconds
        assert not adapter.report_status()["serde_wrapper"].get("hung_at_close")
        assert event_delivery_stats()["queued"] >= 1  # the later events wait for the observer
    finally:
        gate.release.set()
        assert flush_events()
        pm.unregister(hook)


class _SubmitHangsInner(MemoryL2Adapter):
    """An inner adapter whose submit_load_task never returns once armed (a caller's thread is
    stuck in plugin code, holding the wrapper's load path)."""

    def __init__(self, gate: _Gate) -> None:
        super().__init__()
        self.gate = gate

    def submit_load_task(self, keys: Any, objects: Any) -> int:
        self.gate.entered.set()
        self.gate.release.wait(HANG_GUARD)
        return super().submit_load_task(keys, objects)


def test_a_submit_stuck_in_the_inner_adapter_does_not_hang_close(gate: _Gate, l1: L1Manager,
                                                                 cache: Cache) -> None:
    inner = _SubmitHangsInner(gate)
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(),
                               serde_type="t_stuck_submit", close_timeout_s=BOUND)
    wrapper = SerdeL2AdapterWrapper(inner, proc, l1, size_contract=SerdeSizeContract.EXACT)
    keys = [key_of(0)]
    dsts = cache.put(keys, objects_for(KV, 1))
    caller = threading.Thread(target=lambda: wrapper.submit_load_task(keys, dsts), daemon=True)
    try:
        caller.start()
        assert gate.entered.wait(HANG_GUARD)  # the caller's thread is inside the inner submit
        seconds = _timed_close(wrapper)
        assert seconds < BOUND + FINISH_GRACE_S + MARGIN, seconds
        hung = wrapper.report_status()["serde_wrapper"]["hung_at_close"]
        assert [h["component"] for h in hung] == ["load path"], hung
        assert "submit_load_task is stuck" in hung[0]["what"]
    finally:
        gate.release.set()
        caller.join(HANG_GUARD)
        l1.delete(keys)


def test_a_hung_read_also_deserialize_does_not_hang_the_wrapper_close(
    hanging_serde: str, gate: _Gate, l1: L1Manager, cache: Cache, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The read_also config's processor is closed under the wrapper's one bound; its hung call
    is named, and the temporaries it may still write are kept."""
    keys = [key_of(i) for i in range(2)]
    writer = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                "serde": {"type": hanging_serde}}, l1)
    assert cache.store(writer, keys, objects_for(KV, 2)).is_successful()
    writer.close()
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "identity", "close_timeout_s": BOUND},
                                 "read_also": [{"type": hanging_serde,
                                                "close_timeout_s": BOUND}]}, l1)
    gate.hang_deserialize = True
    adapter.submit_load_task(keys, objects_for(KV, 2))
    _close_while_hung(adapter, gate, caplog, "deserialize of key", closed=2)
    assert l1.memory_used_bytes() > 0  # the stuck call may still write its temporaries


def test_a_hung_auto_candidate_does_not_hang_the_wrapper_close(
    hanging_serde: str, gate: _Gate, l1: L1Manager, cache: Cache, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every candidate of serde ``auto`` is closed under the wrapper's one bound: the second
    candidate's hung serialize is named, its store fails as ``closed`` and the temporary it
    may still write is kept."""
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": {
        "type": "auto", "candidates": [{"type": "identity", "close_timeout_s": BOUND},
                                       {"type": hanging_serde, "close_timeout_s": BOUND}]}}, l1)
    assert cache.store(adapter, [key_of(0)], objects_for(KV, 1)).is_successful()  # identity's turn
    gate.hang_serialize = True
    adapter.submit_store_task([key_of(1)], objects_for(KV, 1, seed=1))  # the hung candidate's
    _close_while_hung(adapter, gate, caplog, "serialize of key", closed=1)
    assert l1.memory_used_bytes() > 0  # the stuck call may still write its temporary
