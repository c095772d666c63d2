"""The ``fs`` adapter with something other than a regular file at a key's path.

A FIFO, a socket, a symlink (dangling, looping, or pointing at a FIFO or at another key's file)
or a directory where an object file belongs is damage, like a corrupt file: loads of that key
miss without blocking, other keys of the same batch are unaffected, the next store replaces the
entry (an empty directory too; what a directory holds is never removed: storing that key fails,
visibly), and listing skips it.
Also here: a listener raising a ``BaseException`` never stalls the adapter's io threads.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, create_l2_adapter, key_file_name, load_sync, lookup_sync, store_sync
from lmserde.testing import L2AdapterConformance, adapter_key, random_object

LAYOUT = L2AdapterConformance.layout
SECONDS = 10.0  # a load that blocks on the entry fails the test after this long, not hangs it
key = adapter_key


def _fifo(path: str) -> None:
    os.mkfifo(path)


def _socket(path: str) -> None:
    short = tempfile.mkdtemp()  # AF_UNIX paths are limited to ~100 bytes: bind, then move
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(os.path.join(short, "s"))
        sock.close()  # the socket file stays
        os.rename(os.path.join(short, "s"), path)
    finally:
        os.rmdir(short)


def _dangling(path: str) -> None:
    os.symlink("no-such-file", path)


def _loop(path: str) -> None:
    os.symlink(os.path.basename(path), path)


def _to_fifo(path: str) -> None:
    os.mkfifo(path + ".fifo")
    os.symlink(path + ".fifo", path)


FOREIGN: dict[str, Callable[[str], None]] = {
    "fifo": _fifo, "socket": _socket, "dangling symlink": _dangling, "symlink loop": _loop,
    "symlink to a fifo": _to_fifo,
}


@pytest.fixture
def fs(tmp_path: Path) -> FSL2Adapter:
    adapter = FSL2Adapter(tmp_path / "l2")
    yield adapter
    adapter.close()


def _dst() -> TensorMemoryObj:
    return TensorMemoryObj.allocate(LAYOUT)


@pytest.mark.parametrize("make", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_foreign_entry_misses_without_blocking_and_the_next_store_replaces_it(
        fs: FSL2Adapter, make: Callable[[str], None]) -> None:
    good, bad = key(0), key(1)
    src = random_object(LAYOUT, 1)
    assert store_sync(fs, [good], [random_object(LAYOUT, 0)]).is_successful()
    make(fs.path_of(bad))
    # every io worker loads the bad key at once: none of them may block on it
    for _ in range(4):
        assert load_sync(fs, [bad, good], [_dst(), _dst()], timeout=SECONDS).to_list() == [
            False, True]
    assert lookup_sync(fs, [bad, good], timeout=SECONDS).to_list() == [False, True]
    assert fs.get_object_sizes([bad, good]) == {good: LAYOUT.nbytes}
    assert fs.list_l2_keys() == [good]

    result = store_sync(fs, [bad], [src], timeout=SECONDS)
    assert result.is_successful() and result.bytes_transferred() == LAYOUT.nbytes
    assert os.path.isfile(fs.path_of(bad)) and not os.path.islink(fs.path_of(bad))
    dst = _dst()
    assert load_sync(fs, [bad], [dst], timeout=SECONDS).to_list() == [True]
    assert bytes(dst.byte_array) == bytes(src.byte_array)
    assert fs.report_status()["foreign_entries_replaced"] == 1


def test_a_symlink_to_another_keys_file_is_not_followed(fs: FSL2Adapter) -> None:
    assert store_sync(fs, [key(0)], [random_object(LAYOUT, 0)]).is_successful()
    os.symlink(fs.path_of(key(0)), fs.path_of(key(1)))
    assert load_sync(fs, [key(1)], [_dst()], timeout=SECONDS).to_list() == [False]
    assert fs.get_object_sizes([key(1)]) == {}


def test_a_directory_holding_anything_fails_its_store_and_is_kept(fs: FSL2Adapter) -> None:
    os.mkdir(fs.path_of(key(0)))
    Path(fs.path_of(key(0)), "someone's file").write_bytes(b"keep me")
    result = store_sync(fs, [key(0), key(1)], [random_object(LAYOUT, 0), random_object(LAYOUT, 1)],
                        timeout=SECONDS)
    assert not result.is_successful()  # never "stored" when nothing was written
    assert fs.report_status()["store_errors"] == 1
    assert Path(fs.path_of(key(0)), "someone's file").read_bytes() == b"keep me"
    assert load_sync(fs, [key(0), key(1)], [_dst(), _dst()], timeout=SECONDS).to_list() == [
        False, True]


def test_an_empty_directory_at_a_key_path_is_replaced_by_the_next_store(fs: FSL2Adapter) -> None:
    """Issue 27 item 6: an (empty) directory at a key's path made that key unstorable forever."""
    os.mkdir(fs.path_of(key(0)))
    src = random_object(LAYOUT, 0)
    assert store_sync(fs, [key(0)], [src], timeout=SECONDS).is_successful()
    dst = _dst()
    assert load_sync(fs, [key(0)], [dst], timeout=SECONDS).to_list() == [True]
    assert bytes(dst.byte_array) == bytes(src.byte_array)
    assert fs.report_status()["foreign_entries_replaced"] == 1


def test_a_fifo_sidecar_does_not_block_listing(fs: FSL2Adapter) -> None:
    long_key = ObjectKey(b"\x01" * 8, "m" * 300, 0)  # a hashed file name, listed via its sidecar
    assert store_sync(fs, [long_key], [random_object(LAYOUT, 0)]).is_successful()
    sidecar = fs.path_of(long_key)[: -len(".data")] + ".key"
    os.unlink(sidecar)
    os.mkfifo(sidecar)
    done: list[list[ObjectKey]] = []
    lister = threading.Thread(target=lambda: done.append(fs.list_l2_keys()), daemon=True)
    lister.start()
    lister.join(SECONDS)
    assert done == [[]]  # not listable until the next store rewrites the sidecar
    assert store_sync(fs, [long_key], [random_object(LAYOUT, 0)]).is_successful()
    assert fs.list_l2_keys() == [long_key]


@pytest.mark.parametrize("serde", [{"type": "identity"}, {"type": "zstd"}], ids=["identity", "zstd"])
def test_one_unexaminable_key_does_not_hide_the_others_sizes(tmp_path: Path, serde: dict) -> None:
    """Through the serde wrapper: an UPPER_BOUND serde narrows loads to the stored sizes, so a
    key whose size cannot be read must not make the whole batch miss."""
    pytest.importorskip("lmserde_zstd") if serde["type"] == "zstd" else None
    layout = MemoryLayoutDesc([[2, 4, 16, 128]], [torch.bfloat16])
    l1 = L1Manager(64 << 20)
    wrapper = create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": serde}, l1)
    try:
        keys = [key(i) for i in range(3)]
        sources = [random_object(layout, i) for i in range(2)]
        assert store_sync(wrapper, keys[:2], sources, timeout=SECONDS).is_successful()
        _loop(str(tmp_path / key_file_name(keys[2])))
        dsts = [TensorMemoryObj.allocate(layout) for _ in keys]
        assert load_sync(wrapper, keys, dsts, timeout=SECONDS).to_list() == [True, True, False]
        for src, dst in zip(sources, dsts):
            assert bytes(src.byte_array) == bytes(dst.byte_array)
    finally:
        wrapper.close()


class _RaisingListener:
    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        raise SystemExit("listener")

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        raise GeneratorExit


def test_a_listener_raising_a_base_exception_does_not_stall_the_io_threads(
        fs: FSL2Adapter) -> None:
    fs.register_listener(_RaisingListener())
    for i in range(4):  # more tasks than io workers: a killed or stuck worker would show
        assert store_sync(fs, [key(i)], [random_object(LAYOUT, i)], timeout=SECONDS).is_successful()
        assert load_sync(fs, [key(i)], [_dst()], timeout=SECONDS).to_list() == [True]
