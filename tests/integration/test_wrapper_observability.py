"""The wrapper's status, metrics and observability hook events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import MemoryLayoutDesc, WrapperTaskEvent, hookimpl
from lmserde.hooks import flush_events, get_plugin_manager
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, key_file_name

KV = MemoryLayoutDesc([[16, 2, 32]], [torch.float16])


class _Recorder:
    """Records the wrapper events; they are delivered off the data path, so reading them first
    waits for the events emitted so far."""

    def __init__(self) -> None:
        self._events: list[WrapperTaskEvent] = []

    @property
    def events(self) -> list[WrapperTaskEvent]:
        assert flush_events()
        return self._events

    @hookimpl
    def lmserde_wrapper_task_finished(self, event: WrapperTaskEvent) -> None:
        self._events.append(event)


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    rec = _Recorder()
    pm = get_plugin_manager()
    pm.register(rec, name="test-wrapper-recorder")
    yield rec
    pm.unregister(name="test-wrapper-recorder")


def test_status_metrics_and_events(tmp_path: Path, l1: L1Manager, cache: Cache,
                                   recorder: _Recorder) -> None:
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_int8"}}, l1)
    try:
        keys = [key_of(i) for i in range(4)]
        assert cache.store(wrapper, keys, objects_for(KV, 4)).is_successful()
        damaged = bytearray((tmp_path / key_file_name(keys[3])).read_bytes())
        damaged[20] ^= 0x01  # a header that fails its own checksum: refused, proven damage
        (tmp_path / key_file_name(keys[3])).write_bytes(bytes(damaged))
        bitmap, _ = cache.load(wrapper, [*keys, key_of(99)], KV)
        assert bitmap.to_list() == [True, True, True, False, False]

        status = wrapper.report_status()
        assert status["serde_wrapped"] is True
        assert status["type"] == "fs"  # the inner adapter's own status is kept
        assert status["serde_type"] == "t_int8"
        metrics = status["serde_wrapper"]
        serialized = FRAME_HEADER_BYTES + 4 + KV.numel  # stored bytes: frame header + payload
        assert metrics["store_tasks"] == 1 and metrics["store_ok"] == 1
        assert metrics["store_keys"] == 4
        assert metrics["store_bytes_kv"] == 4 * KV.nbytes
        assert metrics["store_bytes_serialized"] == 4 * serialized
        assert metrics["store_ratio"] == pytest.approx(serialized / KV.nbytes)
        assert metrics["rejections"] == {"format": 1}
        assert metrics["repaired"] == 1
        assert not (tmp_path / key_file_name(keys[3])).exists()  # deleted: the next store rewrites
        assert metrics["load_tasks"] == 1 and metrics["load_keys"] == 5
        assert metrics["load_hits"] == 3
        assert metrics["load_bytes_serialized"] == 3 * serialized
        assert metrics["load_bytes_kv"] == 3 * KV.nbytes
        assert metrics["failures"] == {"inner_load": 1}
        assert status["is_healthy"] is True and status["serde_framed"] is True
        for stage in ("serialize", "inner_store", "inner_load", "deserialize"):
            summary = metrics["latency_seconds"][stage]
            assert summary["count"] == 1
            assert 0 <= summary["min"] <= summary["p50"] <= summary["max"]

        store_event, load_event = recorder.events
        assert (store_event.operation, store_event.ok, store_event.num_keys) == ("store", True, 4)
        assert store_event.bytes_kv == 4 * KV.nbytes
        assert store_event.bytes_serialized == 4 * serialized
        assert set(store_event.stage_seconds) == {"serialize", "inner_store"}
        assert store_event.serde_type == "t_int8"
        assert (load_event.operation, load_event.hits, load_event.ok) == ("load", 3, False)
        assert load_event.failed_stage == "verify"
        assert load_event.rejected == {"format": 1}
        assert load_event.bytes_serialized == 3 * serialized
        assert set(load_event.stage_seconds) == {"inner_load", "deserialize"}
    finally:
        wrapper.close()


def test_failed_store_event_names_the_stage(l1: L1Manager, cache: Cache,
                                            recorder: _Recorder) -> None:
    wrapper = create_l2_adapter({"type": "fault", "inner": {"type": "memory"},
                                 "store_failure_rate": 1.0, "serde": {"type": "t_crc"}}, l1)
    try:
        assert not cache.store(wrapper, [key_of(1)], objects_for(KV, 1)).is_successful()
        (event,) = recorder.events
        assert (event.ok, event.failed_stage, event.bytes_serialized) == (False, "inner_store", 0)
        status = wrapper.report_status()
        assert status["fault_inject"]["store_failures"] == 1  # the fault adapter's own status
        assert status["serde_wrapper"]["store_failed"] == 1
    finally:
        wrapper.close()
