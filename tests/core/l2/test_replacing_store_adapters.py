"""Replacing stores of the core adapters (``fs``, ``memory``, ``fault``): a store of a key that
has an object replaces it, atomically, once the adapter was switched with
``replace_existing_on_store()`` (:mod:`lmserde.l2.contract.replacing_store`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import ObjectKey, TensorMemoryObj
from lmserde.l2 import (
    FSL2Adapter,
    MemoryL2Adapter,
    create_l2_adapter,
    load_sync,
    store_sync,
    wait_for_store,
)
from lmserde.l2.contract.replacing_store import enable_replacing_stores
from lmserde.testing import adapter_key

SECONDS = 30.0
N = 4096
key = adapter_key


def _filled(fill: int, n: int = N) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((n,), fill, dtype=torch.uint8))


def _load(adapter: Any, k: ObjectKey, n: int = N) -> bytes | None:
    dst = _filled(0, n)
    return bytes(dst.byte_array) if load_sync(adapter, [k], [dst], timeout=SECONDS).test(0) \
        else None


class _Head:
    """A deferred head (see :mod:`lmserde.l2.contract.head_last`) filling 16 bytes with ``fill``."""

    head_bytes = 16

    def __init__(self, obj: TensorMemoryObj, fill: int) -> None:
        self.obj, self.fill = obj, fill

    def finish_head(self) -> None:
        self.obj.raw_data[: self.head_bytes].fill_(self.fill)


def _fs(tmp_path: Path) -> FSL2Adapter:
    return FSL2Adapter(tmp_path / "l2")


def _fault_over_fs(tmp_path: Path) -> Any:
    return create_l2_adapter({"type": "fault", "inner": {"type": "fs",
                                                         "base_path": str(tmp_path / "l2")}})


MAKERS: dict[str, Callable[[Path], Any]] = {
    "fs": _fs, "memory": lambda _: MemoryL2Adapter(), "fault": _fault_over_fs,
}


@pytest.fixture(params=list(MAKERS), ids=list(MAKERS))
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = MAKERS[request.param](tmp_path)
    yield made
    made.close()


def test_a_replacing_store_replaces_and_reports_its_bytes(adapter: Any) -> None:
    assert enable_replacing_stores(adapter)
    assert adapter.replace_existing_on_store()  # idempotent
    assert store_sync(adapter, [key(0)], [_filled(1)], timeout=SECONDS).is_successful()
    result = store_sync(adapter, [key(0)], [_filled(2, N // 2)], timeout=SECONDS)
    assert result.is_successful() and result.bytes_transferred() == N // 2
    assert _load(adapter, key(0), N // 2) == bytes([2]) * (N // 2)
    assert _load(adapter, key(0)) is None  # the old, longer object is gone
    assert adapter.get_usage().total_bytes_used == N // 2  # the old size left the accounting


def test_fs_skips_existing_keys_until_switched(tmp_path: Path) -> None:
    fs = _fs(tmp_path)
    try:
        assert store_sync(fs, [key(0)], [_filled(1)], timeout=SECONDS).is_successful()
        skipped = store_sync(fs, [key(0)], [_filled(2)], timeout=SECONDS)
        assert skipped.is_successful() and skipped.bytes_transferred() == 0
        assert _load(fs, key(0)) == bytes([1]) * N
        assert not fs.replaces_existing
        assert fs.replace_existing_on_store() and fs.replaces_existing
        assert store_sync(fs, [key(0)], [_filled(2)], timeout=SECONDS).bytes_transferred() == N
        assert _load(fs, key(0)) == bytes([2]) * N
        status = fs.report_status()
        assert status["files_replaced"] == 1 and status["files_written"] == 1
        assert os.listdir(fs.tmp_dir) == []  # the replaced file's temporary is gone too
    finally:
        fs.close()


def test_fs_replaces_in_the_head_last_path(tmp_path: Path) -> None:
    fs = _fs(tmp_path)
    try:
        fs.replace_existing_on_store()
        for fill in (3, 4):
            obj = _filled(fill)
            head = _Head(obj, 0xE0 + fill)
            result = wait_for_store(fs, fs.submit_store_task_head_last([key(0)], [obj], [head]),
                                    timeout=SECONDS)
            assert result.is_successful() and result.bytes_transferred() == N
        assert _load(fs, key(0)) == bytes([0xE4]) * 16 + bytes([4]) * (N - 16)
    finally:
        fs.close()


def test_fs_replacing_a_hashed_name_keeps_its_sidecar_right(tmp_path: Path) -> None:
    fs = _fs(tmp_path)
    try:
        fs.replace_existing_on_store()
        long_key = ObjectKey(b"\x07" * 8, "m" * 300, 0)  # hashed file name, listed by its sidecar
        assert store_sync(fs, [long_key], [_filled(1)], timeout=SECONDS).is_successful()
        sidecar = Path(fs.path_of(long_key)[: -len(".data")] + ".key")
        sidecar.write_bytes(b"other@0@0@00.data")  # a sidecar naming another key
        assert fs.list_l2_keys() == []
        assert store_sync(fs, [long_key], [_filled(2)], timeout=SECONDS).is_successful()
        assert fs.list_l2_keys() == [long_key]
        assert _load(fs, long_key) == bytes([2]) * N
    finally:
        fs.close()


def test_fs_replacing_store_of_a_non_empty_directory_fails_clearly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fs = _fs(tmp_path)
    try:
        fs.replace_existing_on_store()
        os.mkdir(fs.path_of(key(0)))
        Path(fs.path_of(key(0)), "data").write_bytes(b"x")
        assert not store_sync(fs, [key(0)], [_filled(1)], timeout=SECONDS).is_successful()
        assert "not empty" in caplog.text and fs.path_of(key(0)) in caplog.text
        assert Path(fs.path_of(key(0)), "data").read_bytes() == b"x"
    finally:
        fs.close()


def test_concurrent_replacing_stores_of_one_key_leave_one_complete_object(adapter: Any) -> None:
    """Eight threads submit stores of one key with their own fill byte, over and over, while a
    reader loads it: every hit, and the object left, is all one store's bytes. (The sync helpers
    suit one consumer per queue: the threads only submit, this thread collects the results.)"""
    adapter.replace_existing_on_store()
    assert store_sync(adapter, [key(0)], [_filled(0)], timeout=SECONDS).is_successful()
    failures: list[str] = []
    task_ids: list[int] = []
    done = threading.Event()

    def writer(fill: int) -> None:
        for _ in range(20):
            task_ids.append(adapter.submit_store_task([key(0)], [_filled(fill)]))

    def reader() -> None:
        while not done.is_set():
            got = _load(adapter, key(0))
            if got is None or len(set(got)) != 1:
                failures.append("a load missed or mixed stores")

    threads = [threading.Thread(target=writer, args=(fill,)) for fill in range(1, 9)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS)
    results: dict[int, Any] = {}
    for task_id in list(task_ids):
        if task_id not in results:
            results[task_id] = wait_for_store(adapter, task_id, SECONDS, others=results)
    done.set()
    watcher.join(SECONDS)
    assert len(task_ids) == 160 and all(r.is_successful() for r in results.values())
    assert failures == []
    final = _load(adapter, key(0))
    assert final is not None and len(set(final)) == 1 and final[0] in range(1, 9)
    assert adapter.get_usage().total_bytes_used == N


def test_fs_replacing_stores_of_one_key_from_several_instances(tmp_path: Path) -> None:
    """Adapters of one directory (as processes sharing it would): one complete file is left."""
    adapters = [_fs(tmp_path) for _ in range(4)]
    try:
        failures: list[str] = []

        def writer(fs: FSL2Adapter, fill: int) -> None:
            fs.replace_existing_on_store()
            for _ in range(25):
                if not store_sync(fs, [key(0)], [_filled(fill)], timeout=SECONDS).is_successful():
                    failures.append(f"store of {fill} failed")

        threads = [threading.Thread(target=writer, args=(fs, i + 1)) for i, fs in
                   enumerate(adapters)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SECONDS * 2)
        assert failures == []
        final = _load(adapters[0], key(0))
        assert final is not None and len(set(final)) == 1 and final[0] in range(1, 5)
        assert os.listdir(adapters[0].tmp_dir) == []
    finally:
        for fs in adapters:
            fs.close()


def test_fault_says_no_over_an_adapter_that_cannot_replace() -> None:
    class _Skipping(MemoryL2Adapter):
        def replace_existing_on_store(self) -> bool:
            return False

    from lmserde.l2.adapters.fault import FaultInjectingL2Adapter

    faulty = FaultInjectingL2Adapter(_Skipping())
    try:
        assert not enable_replacing_stores(faulty)
    finally:
        faulty.close()
