"""Head-last stores on ``fs``: the body goes to the file first, the head last, and an object whose
head could not be produced is never published."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from lmserde import TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, create_l2_adapter, load_sync, store_sync, wait_for_store
from lmserde.l2.adapters.fs_io import write_head_last
from lmserde.l2.contract.head_last import adapter_writes_head_last
from lmserde.testing import adapter_key

HEAD = 16


class _Head:
    """Fills the head with a marker; records what the file held when it was asked to."""

    head_bytes = HEAD

    def __init__(self, obj: TensorMemoryObj, fd: int | None = None, fail: bool = False) -> None:
        self.obj, self.fd, self.fail = obj, fd, fail
        self.file_at_finish: bytes | None = None
        self.calls = 0

    def finish_head(self) -> None:
        self.calls += 1
        if self.fd is not None:
            self.file_at_finish = os.pread(self.fd, 1 << 20, 0)
        if self.fail:
            raise RuntimeError("the checksum could not be computed")
        self.obj.raw_data[:HEAD].fill_(0xEE)


def _object(n: int) -> TensorMemoryObj:
    data = torch.arange(n, dtype=torch.int64).remainder(251).to(torch.uint8)
    data[:HEAD] = 0
    return TensorMemoryObj.from_tensor(data)


def test_the_body_is_on_disk_before_the_head_is_asked_for(tmp_path: Path) -> None:
    obj = _object(5000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        head = _Head(obj, fd)
        write_head_last(fd, memoryview(obj.byte_array).cast("B"), head)
        assert head.file_at_finish is not None
        body = bytes(obj.raw_data[HEAD:].tolist())
        assert head.file_at_finish == b"\0" * HEAD + body  # body written, head still a hole
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"\xee" * HEAD + body


def test_an_object_shorter_than_its_head_is_refused(tmp_path: Path) -> None:
    obj = TensorMemoryObj.from_tensor(torch.zeros(HEAD - 1, dtype=torch.uint8))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(ValueError, match="no room"):
            write_head_last(fd, memoryview(obj.byte_array).cast("B"), _Head(obj))
    finally:
        os.close(fd)


def test_a_head_that_fails_publishes_nothing(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path / "l2")
    try:
        good, bad = _object(3000), _object(3000)
        heads = [_Head(good), _Head(bad, fail=True)]
        keys = [adapter_key(1), adapter_key(2)]
        result = wait_for_store(fs, fs.submit_store_task_head_last(keys, [good, bad], heads))
        assert not result.is_successful()  # one failed file fails the task, as a plain store
        assert fs.get_object_sizes(keys) == {keys[0]: 3000}
        assert (Path(fs.path_of(keys[0]))).read_bytes()[:HEAD] == b"\xee" * HEAD
        assert fs.report_status()["store_errors"] == 1
        leftovers = [n for n in os.listdir(fs.tmp_dir)] if os.path.isdir(fs.tmp_dir) else []
        assert leftovers == []  # the half-written temporary was removed
    finally:
        fs.close()


def test_a_key_already_stored_is_skipped_without_asking_for_its_head(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path / "l2")
    try:
        key = adapter_key(1)
        assert store_sync(fs, [key], [_object(100)]).is_successful()
        head = _Head(_object(100))
        assert wait_for_store(fs, fs.submit_store_task_head_last([key], [head.obj], [head])) \
            .is_successful()
        assert head.calls == 0
        assert fs.report_status()["stores_skipped"] == 1
    finally:
        fs.close()


def test_mismatched_argument_lengths_are_refused(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path / "l2")
    try:
        with pytest.raises(ValueError, match="1 keys, 1 objects and 0 heads"):
            fs.submit_store_task_head_last([adapter_key(1)], [_object(20)], [])
    finally:
        fs.close()


def test_which_adapters_write_heads_last(tmp_path: Path) -> None:
    l1 = L1Manager(1 << 24)
    fs = create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "a")}, l1)
    memory = create_l2_adapter({"type": "memory"}, l1)
    faulty = create_l2_adapter({"type": "fault", "inner": {"type": "fs",
                                                           "base_path": str(tmp_path / "b")}}, l1)
    try:
        assert adapter_writes_head_last(fs)
        assert not adapter_writes_head_last(memory)
        assert not adapter_writes_head_last(faulty)  # it must see every write: no shortcut
    finally:
        for adapter in (fs, memory, faulty):
            adapter.close()


def test_a_framed_fs_store_round_trips_through_the_head_last_path(tmp_path: Path) -> None:
    """Through the wrapper on ``fs`` every stored file starts with a valid frame header, and what
    was stored loads back bit-exact (payloads of one and of several checksum segments)."""
    from lmserde import MemoryLayoutDesc
    from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, parse_header

    l1 = L1Manager(1 << 27)
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "identity"}}, l1)
    try:
        for i, elems in enumerate((1000, 5 << 20)):  # 2 KB and 10 MiB of bf16
            layout = MemoryLayoutDesc([[elems]], [torch.bfloat16])
            key = adapter_key(10 + i)
            (_, obj), = l1.reserve_write([key], False, layout).values()
            obj.raw_data.copy_(torch.randint(0, 256, (obj.raw_data.numel(),), dtype=torch.uint8))
            expected = obj.raw_data.clone()
            l1.finish_write_and_reserve_read([key])
            assert store_sync(wrapper, [key], [obj]).is_successful()
            l1.finish_read([key])
            l1.delete([key])
            stored = (tmp_path / os.path.basename(wrapper._inner.path_of(key))).read_bytes()
            header = parse_header(stored[:FRAME_HEADER_BYTES])
            assert header.payload_length == expected.numel()
            (_, dst), = l1.reserve_write([key], False, layout).values()
            assert load_sync(wrapper, [key], [dst]).test(0)
            assert torch.equal(dst.raw_data, expected)
            l1.finish_write_and_delete([key])
    finally:
        wrapper.close()
