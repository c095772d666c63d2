"""The ``fs`` adapter: safe file names, atomic writes, skip-if-exists, exact-length loads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l2 import (
    FSL2Adapter,
    key_file_name,
    load_sync,
    lookup_sync,
    store_sync,
    wait_for_store,
)
from lmserde.testing import L2AdapterConformance, adapter_key, random_object

LAYOUT = L2AdapterConformance.layout
key = adapter_key


@pytest.fixture
def fs(tmp_path: Path) -> FSL2Adapter:
    adapter = FSL2Adapter(tmp_path / "l2")
    yield adapter
    adapter.close()


def _bytes(n: int, fill: int = 7) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((n,), fill, dtype=torch.uint8))


class TestFSAdapterConformance(L2AdapterConformance):
    def make_adapter(self, tmp_path: Path) -> FSL2Adapter:
        return FSL2Adapter(tmp_path / "kv")


def test_one_file_per_key_and_no_temporary_left(fs: FSL2Adapter) -> None:
    store_sync(fs, [key(0), key(1, "s")], [random_object(LAYOUT, 0), random_object(LAYOUT, 1)])
    names = sorted(os.listdir(fs.base_path))
    assert names == sorted([".tmp", key_file_name(key(0)), key_file_name(key(1, "s"))])
    assert os.listdir(os.path.join(fs.base_path, ".tmp")) == []
    assert key_file_name(key(1, "s")).endswith("@s.data")


def test_sizes_are_file_lengths(fs: FSL2Adapter) -> None:
    buf = TensorMemoryObj.allocate(MemoryLayoutDesc([[32]], [torch.uint8]))
    buf.set_used_size(5)
    assert store_sync(fs, [key(0)], [buf]).bytes_transferred() == 5
    assert os.path.getsize(fs.path_of(key(0))) == 5
    assert fs.get_object_sizes([key(0), key(1)]) == {key(0): 5}


def test_existing_files_are_skipped(fs: FSL2Adapter) -> None:
    store_sync(fs, [key(0)], [_bytes(10, 1)])
    result = store_sync(fs, [key(0)], [_bytes(10, 2)])
    assert result.is_successful() and result.bytes_transferred() == 0
    assert Path(fs.path_of(key(0))).read_bytes() == b"\x01" * 10
    assert fs.report_status()["stores_skipped"] == 1
    assert fs.get_usage().total_bytes_used == 10


def test_load_hits_only_on_exact_length(fs: FSL2Adapter) -> None:
    store_sync(fs, [key(0), key(1)], [_bytes(10), _bytes(0)])
    dsts = [_bytes(10, 0), _bytes(11, 0), _bytes(0)]
    assert load_sync(fs, [key(0), key(0), key(1)], dsts).to_list() == [True, False, True]
    assert bytes(dsts[0].byte_array) == b"\x07" * 10
    assert bytes(dsts[1].byte_array) == b"\0" * 11
    narrowed = _bytes(64, 0)
    narrowed.set_used_size(10)
    assert load_sync(fs, [key(0)], [narrowed]).to_list() == [True]
    assert fs.report_status()["size_mismatches"] == 1


def test_delete_and_lookup(fs: FSL2Adapter) -> None:
    store_sync(fs, [key(0), key(1)], [_bytes(3), _bytes(4)])
    fs.delete([key(0), key(5)])
    assert lookup_sync(fs, [key(0), key(1)]).to_list() == [False, True]
    assert fs.get_usage().total_bytes_used == 4


def test_concurrent_stores_of_one_key_write_it_once(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path, io_workers=4)
    try:
        tasks = [fs.submit_store_task([key(0)], [_bytes(4096, i)]) for i in range(8)]
        others: dict = {}
        results = [wait_for_store(fs, t, others=others) if t not in others else others[t]
                   for t in tasks]
        assert all(r.is_successful() for r in results)
        data = Path(fs.path_of(key(0))).read_bytes()
        assert len(data) == 4096 and len(set(data)) == 1  # one writer's bytes, never torn
        assert fs.get_usage().total_bytes_used == 4096
        assert fs.report_status()["files_written"] == 1
    finally:
        fs.close()


def test_fsync_option(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path, fsync=True, relative_tmp_dir="staging/tmp")
    try:
        assert store_sync(fs, [key(0)], [_bytes(100)]).is_successful()
        assert os.path.isdir(tmp_path / "staging" / "tmp")
        assert fs.report_status()["fsync"] is True
    finally:
        fs.close()


@pytest.mark.parametrize("bad", ["/abs", "..", "../x", "."])
def test_tmp_dir_must_stay_inside(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="relative_tmp_dir"):
        FSL2Adapter(tmp_path, relative_tmp_dir=bad)


def test_a_failing_write_fails_the_task(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        os.rmdir(tmp_path / ".tmp")  # nowhere to write temporaries
        assert not store_sync(fs, [key(0)], [_bytes(3)]).is_successful()
        assert fs.report_status()["store_errors"] == 1
        assert not os.path.exists(fs.path_of(key(0)))
    finally:
        fs.close()


def test_closed_adapter(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    fs.close()
    fs.close()
    with pytest.raises(RuntimeError, match="closed"):
        fs.submit_load_task([key(0)], [_bytes(1)])


KEYS = st.builds(
    ObjectKey,
    chunk_hash=st.binary(max_size=200),
    model_name=st.text(st.characters(exclude_characters="@"), max_size=120),
    kv_rank=st.integers(-(2**40), 2**40),
    object_group_id=st.integers(0, 2**40),
    cache_salt=st.text(st.characters(exclude_characters="@/\\\x00"), max_size=128),
)


@settings(max_examples=300, deadline=None)
@given(KEYS, KEYS)
def test_file_names_are_safe_and_injective(a: ObjectKey, b: ObjectKey) -> None:
    name = key_file_name(a)
    assert "/" not in name and "\x00" not in name and name not in (".", "..")
    assert name.endswith(".data") and len(name.encode()) <= 255
    assert name.isascii()
    if a != b:
        assert key_file_name(b) != name


def test_any_key_round_trips_through_a_file(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        weird = [ObjectKey(b"\x00/..", "../../etc/passwd", -1, 0, "..."),
                 ObjectKey(b"h" * 300, "m" * 400, 0, 1, "ü" * 100),
                 ObjectKey(b"", ".hidden", 0, 0, "\ud800-lone-surrogate")]
        objs = [_bytes(5 + i, i) for i in range(3)]
        assert store_sync(fs, weird, objs).is_successful()
        hashed = key_file_name(weird[1])
        assert hashed.startswith("h-")  # its readable name is kept in a sidecar
        assert sorted(os.listdir(tmp_path)) == sorted(
            [".tmp", *map(key_file_name, weird), hashed[: -len(".data")] + ".key"])
        assert set(fs.list_l2_keys()) == set(weird)
        dsts = [_bytes(5 + i, 9) for i in range(3)]
        assert load_sync(fs, weird, dsts).count() == 3
        assert [bytes(d.byte_array) for d in dsts] == [bytes(o.byte_array) for o in objs]
    finally:
        fs.close()


def test_threads_are_released_on_close(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    fs = FSL2Adapter(tmp_path, io_workers=3)
    store_sync(fs, [key(i) for i in range(3)], [_bytes(10) for _ in range(3)])
    fs.close()
    for t in set(threading.enumerate()) - before:
        t.join(10)
    assert set(threading.enumerate()) - before == set()
