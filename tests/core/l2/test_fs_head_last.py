"""Head-last stores on ``fs``: the body goes to the file first, the head last, and an object whose
head could not be produced is never published.

The wrapper stores head-last when it hashes a payload itself; ``identity`` hashes in its own copy
(tests/core/l2/test_serde_hashed_payload.py), so these tests switch that off
(:func:`_wrapper_hashes`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, create_l2_adapter, load_sync, store_sync, wait_for_store
from lmserde.l2.adapters.fs_io import write_head_last
from lmserde.l2.contract.head_last import adapter_writes_head_last
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, PendingHeader, parse_header
from lmserde.testing import adapter_key

HEAD = 16


@pytest.fixture(autouse=True)
def _wrapper_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``identity`` copies without reporting a checksum: the wrapper hashes every payload."""
    import lmserde.identity

    monkeypatch.setattr(lmserde.identity, "payload_hasher", lambda buffer: None)
    monkeypatch.setattr(lmserde.identity.IdentityDeserializer, "reports_payload_checksum", False)


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
    """Bytes 0..250 repeating; the head holds a stale marker (0x11) until ``finish_head``."""
    data = torch.arange(n, dtype=torch.int64).remainder(251).to(torch.uint8)
    data[:HEAD] = 0x11
    return TensorMemoryObj.from_tensor(data)


def test_the_body_is_on_disk_before_the_head_is_asked_for(tmp_path: Path) -> None:
    obj = _object(5000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        head = _Head(obj, fd)
        write_head_last(fd, memoryview(obj.byte_array).cast("B"), head)
        assert head.file_at_finish is not None
        body = bytes(obj.raw_data[HEAD:].tolist())
        # the body is written, the head not yet (a hole reads as zeros; never the stale bytes)
        assert head.file_at_finish == b"\0" * HEAD + body
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"\xee" * HEAD + body  # the head read after finish


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
        assert os.listdir(fs.tmp_dir) == []  # the half-written temporary was removed
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


LAYOUTS = {"one segment": MemoryLayoutDesc([[1000]], [torch.bfloat16]),  # 2 KB
           "three segments": MemoryLayoutDesc([[5 << 20]], [torch.bfloat16])}  # 10 MiB


class _Spy:
    """Counts calls of an adapter method, optionally raising instead of calling it."""

    def __init__(self, adapter: object, name: str, error: BaseException | None = None) -> None:
        self.calls = 0
        self.error = error
        self._real = getattr(adapter, name)
        setattr(adapter, name, self)

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self._real(*args)


def _wrapper(tmp_path: Path, l1: L1Manager, serde: Any = None, **fs_options: Any) -> Any:
    return create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                              "serde": serde or {"type": "identity"}, **fs_options}, l1)


def _store(wrapper: Any, l1: L1Manager, key: ObjectKey, layout: MemoryLayoutDesc,
           seed: int = 0) -> tuple[bool, torch.Tensor]:
    (_, obj), = l1.reserve_write([key], False, layout).values()
    obj.raw_data.copy_(torch.randint(0, 256, (obj.raw_data.numel(),), dtype=torch.uint8,
                                     generator=torch.Generator().manual_seed(seed)))
    expected = obj.raw_data.clone()
    l1.finish_write_and_reserve_read([key])
    ok = store_sync(wrapper, [key], [obj]).is_successful()
    l1.finish_read([key])
    l1.delete([key])
    return ok, expected


def _load(wrapper: Any, l1: L1Manager, key: ObjectKey, layout: MemoryLayoutDesc
          ) -> torch.Tensor | None:
    (_, dst), = l1.reserve_write([key], False, layout).values()
    try:
        if not load_sync(wrapper, [key], [dst]).test(0):
            return None
        return dst.raw_data.clone()
    finally:
        l1.finish_write_and_delete([key])


@pytest.mark.parametrize("fsync", [False, True])
@pytest.mark.parametrize("size", sorted(LAYOUTS))
def test_a_framed_fs_store_goes_through_the_head_last_path(tmp_path: Path, size: str,
                                                          fsync: bool) -> None:
    """Through the wrapper on ``fs`` a framed store writes its header last; every stored file
    starts with a valid header and loads back bit-exact."""
    l1 = L1Manager(1 << 27)
    wrapper = _wrapper(tmp_path, l1, fsync=fsync)
    try:
        head_last = _Spy(wrapper._inner, "submit_store_task_head_last")
        plain = _Spy(wrapper._inner, "submit_store_task")
        layout, key = LAYOUTS[size], adapter_key(10)
        ok, expected = _store(wrapper, l1, key, layout)
        assert ok and (head_last.calls, plain.calls) == (1, 0)
        stored = Path(wrapper._inner.path_of(key)).read_bytes()
        assert parse_header(stored[:FRAME_HEADER_BYTES]).payload_length == expected.numel()
        loaded = _load(wrapper, l1, key, layout)
        assert loaded is not None and torch.equal(loaded, expected)
    finally:
        wrapper.close()


@pytest.mark.parametrize("frame", ["plain", "authenticated"])
def test_the_checksum_starts_once_the_adapter_has_the_object(tmp_path: Path, monkeypatch: Any,
                                                             frame: str) -> None:
    """The head's work (the plain frame's checksum, or the authenticated frame's MAC) starts
    after the inner adapter was handed the object, so that its write of the body goes first
    (started before, it delayed the write by about 0.3 ms per 32 MiB chunk on 2 cores)."""
    import lmserde.l2.serde.authenticated_frame as authenticated_frame
    import lmserde.l2.serde.stored_frame as stored_frame
    from lmserde.tenant_keys import write_master_key

    events: list[str] = []

    def recording(module: Any, name: str) -> None:
        real = getattr(module, name)

        def started(*args: Any) -> Any:
            events.append("checksum")
            return real(*args)
        monkeypatch.setattr(module, name, started)

    recording(stored_frame, "start_payload_checksum")
    recording(authenticated_frame, "start_mac")
    options = ({"frame_key_path": str(write_master_key(tmp_path / "frame.key"))}
               if frame == "authenticated" else {})
    l1 = L1Manager(1 << 27)
    wrapper = _wrapper(tmp_path / "l2", l1, **options)
    try:
        real_submit = wrapper._inner.submit_store_task_head_last

        def submit(*args: Any) -> Any:
            events.append("submit")
            return real_submit(*args)

        monkeypatch.setattr(wrapper._inner, "submit_store_task_head_last", submit)
        layout, key = LAYOUTS["three segments"], adapter_key(6)
        ok, expected = _store(wrapper, l1, key, layout)
        assert ok and events == ["submit", "checksum"]
        loaded = _load(wrapper, l1, key, layout)
        assert loaded is not None and torch.equal(loaded, expected)
    finally:
        wrapper.close()


def test_head_last_false_stores_headers_first(tmp_path: Path) -> None:
    l1 = L1Manager(1 << 24)
    wrapper = _wrapper(tmp_path, l1, head_last=False)
    try:
        head_last = _Spy(wrapper._inner, "submit_store_task_head_last")
        layout = LAYOUTS["one segment"]
        ok, expected = _store(wrapper, l1, adapter_key(1), layout)
        assert ok and head_last.calls == 0
        loaded = _load(wrapper, l1, adapter_key(1), layout)
        assert loaded is not None and torch.equal(loaded, expected)
    finally:
        wrapper.close()


def test_a_checksum_that_fails_stores_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """The head cannot be produced: the store fails, no file or temporary is left, L1 gets its
    temporaries back, and the key is a miss."""
    import lmserde.l2.serde.stored_frame as stored_frame

    def broken(_payload: torch.Tensor) -> Any:
        def wait() -> int:
            raise RuntimeError("checksum thread died")
        return wait

    monkeypatch.setattr(stored_frame, "start_payload_checksum", broken)
    l1 = L1Manager(1 << 27)
    wrapper = _wrapper(tmp_path, l1)
    try:
        layout, key = LAYOUTS["three segments"], adapter_key(3)
        ok, _ = _store(wrapper, l1, key, layout)
        assert not ok
        assert not os.path.exists(wrapper._inner.path_of(key))
        assert os.listdir(wrapper._inner.tmp_dir) == []
        assert l1.memory_used_bytes() == 0
        assert _load(wrapper, l1, key, layout) is None
    finally:
        wrapper.close()


def _count_settles(monkeypatch: Any) -> list[PendingHeader]:
    settled: list[PendingHeader] = []
    real = PendingHeader.settle

    def counting(self: PendingHeader) -> None:
        settled.append(self)
        real(self)

    monkeypatch.setattr(PendingHeader, "settle", counting)
    return settled


def test_an_inner_submit_that_raises_fails_the_store_and_returns_the_temporaries(
        tmp_path: Path, monkeypatch: Any) -> None:
    l1 = L1Manager(1 << 27)
    wrapper = _wrapper(tmp_path, l1)
    try:
        spy = _Spy(wrapper._inner, "submit_store_task_head_last", OSError("disk went away"))
        settled = _count_settles(monkeypatch)
        layout, key = LAYOUTS["three segments"], adapter_key(4)
        ok, _ = _store(wrapper, l1, key, layout)
        assert not ok and spy.calls == 1
        assert len(settled) == 1  # the checksum threads were waited for before the release
        assert l1.memory_used_bytes() == 0
        assert not os.path.exists(wrapper._inner.path_of(key))
    finally:
        wrapper.close()


def test_a_key_already_stored_waits_for_its_unfinished_checksum(
        tmp_path: Path, monkeypatch: Any) -> None:
    """An ``fs`` adapter that skips existing keys (not switched to replacing stores) skips a
    key whose file exists without finishing its head; the wrapper waits for the checksum
    threads before the temporary goes back to L1, and the first object stays."""
    monkeypatch.setattr(FSL2Adapter, "replace_existing_on_store", lambda self: False)
    l1 = L1Manager(1 << 27)
    wrapper = _wrapper(tmp_path, l1)
    try:
        layout, key = LAYOUTS["three segments"], adapter_key(5)
        ok, first = _store(wrapper, l1, key, layout, seed=1)
        assert ok
        settled = _count_settles(monkeypatch)
        ok, _ = _store(wrapper, l1, key, layout, seed=2)
        assert ok and len(settled) == 1
        assert wrapper._inner.report_status()["stores_skipped"] == 1
        loaded = _load(wrapper, l1, key, layout)
        assert loaded is not None and torch.equal(loaded, first)
    finally:
        wrapper.close()


@pytest.mark.parametrize("raised", [RuntimeError("boom"), SystemExit(3)])
def test_a_capability_probe_that_raises_counts_as_no(tmp_path: Path, raised: BaseException,
                                                     caplog: Any) -> None:
    """Adapter code is plugin code: a raising ``writes_head_last`` (SystemExit included) is
    logged and the wrapper falls back to sealing before the store."""
    from lmserde.l2.contract.inner_delegation import adapter_reports_sizes

    class Flaky(FSL2Adapter):
        def writes_head_last(self) -> bool:
            raise raised

        def reports_object_sizes(self) -> bool:
            raise raised

    fs = Flaky(tmp_path / "l2")
    try:
        assert not adapter_writes_head_last(fs)
        assert not adapter_reports_sizes(fs)
        assert "writes_head_last() raised" in caplog.text
    finally:
        fs.close()
