"""The ``fs`` adapter removes temporary files of dead writers when it opens, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from lmserde import TensorMemoryObj
from lmserde.events import wait_on_fd
from lmserde.l2 import FSL2Adapter, create_l2_adapter, load_sync, lookup_sync, store_sync
from lmserde.l2.adapters.fs_temp_files import TempName, parse_temp_name, pid_domain, temp_file_prefix
from lmserde.testing import adapter_key as key

HOUR = 3600.0

#: A writer that opens an adapter and stalls halfway through writing one object's temporary file
#: (the write is real: half the bytes are in the file), then tells the test through a pipe.
_STALLED_WRITER = """
import os, sys, time
import torch
import lmserde.l2.adapters.fs as fs_adapter
from lmserde import ObjectKey, TensorMemoryObj

base, ready = sys.argv[1], int(sys.argv[2])
write_all = fs_adapter.write_all

def stalled(fd, view):
    write_all(fd, view[: len(view) // 2])
    os.write(ready, b"1")
    time.sleep(3600)

fs_adapter.write_all = stalled  # a plain adapter store (no serde wrapper, no head-last write)
adapter = fs_adapter.FSL2Adapter(base)
obj = TensorMemoryObj.from_tensor(torch.full((1 << 20,), 7, dtype=torch.uint8))
adapter.submit_store_task([ObjectKey(b"stalled", "model/a", 0)], [obj])
time.sleep(3600)
"""


def _bytes(n: int, fill: int = 7) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((n,), fill, dtype=torch.uint8))


def _temps(base: Path) -> list[str]:
    return sorted(os.listdir(base / ".tmp"))


@pytest.fixture
def stalled_writer(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A real writer process blocked mid-write in ``tmp_path / "l2"``; killed afterwards."""
    base = tmp_path / "l2"
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    proc = subprocess.Popen([sys.executable, "-c", _STALLED_WRITER, str(base), str(write_fd)],
                            pass_fds=(write_fd,))
    os.close(write_fd)

    def started() -> bool | None:  # the pipe only wakes the wait; the file system is the truth
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited early with {proc.returncode}")
        tmp = base / ".tmp"
        sizes = [p.stat().st_size for p in tmp.iterdir()] if tmp.is_dir() else []
        return True if sizes == [1 << 19] else None

    try:
        wait_on_fd(read_fd, started, timeout=120, what="the writer's first half")
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(read_fd)


def test_temp_names_carry_the_pid_domain_and_pid() -> None:
    name = temp_file_prefix(pid_domain()) + "0.tmp"
    assert parse_temp_name(name) == TempName(pid_domain(), os.getpid())
    assert parse_temp_name("123-0123456789ab-4.tmp") == TempName(None, 123)  # the older form
    for foreign in ("notes.txt", "123.tmp", "x-1-0123456789ab-0.tmp", "../1-0123456789ab-0.tmp"):
        assert parse_temp_name(foreign) is None


def test_a_killed_writers_temporary_is_removed_by_the_next_open(
    stalled_writer: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, base = stalled_writer
    temps = _temps(base)
    assert len(temps) == 1 and parse_temp_name(temps[0]) == TempName(pid_domain(), proc.pid)
    assert os.path.getsize(base / ".tmp" / temps[0]) == 1 << 19  # really half written
    proc.kill()
    proc.wait()
    fs = FSL2Adapter(base)
    try:
        assert _temps(base) == []
        status = fs.report_status()
        assert (status["tmp_removed"], status["tmp_kept_live"]) == (1, 0)
        assert fs.list_l2_keys() == []  # nothing was published
        assert store_sync(fs, [key(0)], [_bytes(4)]).is_successful()  # and the tier works
    finally:
        fs.close()


def test_a_zombie_writer_counts_as_dead(
    stalled_writer: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, base = stalled_writer
    proc.kill()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    fs = FSL2Adapter(base)
    try:
        assert _temps(base) == [] and fs.tmp_sweep.removed == 1
    finally:
        fs.close()


def test_a_live_writers_temporary_survives_however_old(
    stalled_writer: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, base = stalled_writer
    (temp,) = _temps(base)
    old = time.time() - 10 * HOUR
    os.utime(base / ".tmp" / temp, (old, old))
    fs = FSL2Adapter(base, stale_tmp_seconds=60)
    try:
        assert _temps(base) == [temp]
        assert fs.tmp_sweep.kept_live == 1 and fs.tmp_sweep.removed == 0
    finally:
        fs.close()
    assert proc.poll() is None  # the writer is still alive and writing


def _touch(path: Path, age: float, data: bytes = b"x") -> None:
    path.write_bytes(data)
    when = time.time() - age
    os.utime(path, (when, when))


def test_other_writers_files_are_removed_by_age_only(tmp_path: Path) -> None:
    tmp = tmp_path / ".tmp"
    tmp.mkdir()
    other = "0123456789abcdef" if pid_domain() != "0123456789abcdef" else "fedcba9876543210"
    mine = pid_domain()
    stale = {f"{other}-{os.getpid()}-0123456789ab-0.tmp",  # another host, same pid number
             "4242-0123456789ab-7.tmp",  # the older pid-only form
             f"{mine}-0-0123456789ab-0.tmp"}  # pid 0 is nobody's: judged by age
    young = {f"{other}-77-0123456789ab-1.tmp", "4242-0123456789ab-8.tmp"}
    for name in stale:
        _touch(tmp / name, 2 * HOUR)
    for name in young:
        _touch(tmp / name, 0.5 * HOUR)
    _touch(tmp / "notes.txt", 100 * HOUR)  # not a temporary: never touched
    (tmp / f"{other}-78-0123456789ab-0.tmp").mkdir()  # a directory with a temporary's name
    outside = tmp_path / "precious"
    _touch(outside, 100 * HOUR)
    link = tmp / f"{other}-79-0123456789ab-0.tmp"
    link.symlink_to(outside)
    os.utime(link, (time.time() - 100 * HOUR,) * 2, follow_symlinks=False)

    fs = FSL2Adapter(tmp_path, stale_tmp_seconds=HOUR)
    try:
        left = set(os.listdir(tmp))
        assert left == young | {"notes.txt", f"{other}-78-0123456789ab-0.tmp", link.name}
        assert outside.read_bytes() == b"x"
        sweep = fs.tmp_sweep
        assert (sweep.removed, sweep.kept_young, sweep.kept_live, sweep.errors) == (3, 2, 0, 0)
    finally:
        fs.close()


def test_a_tmp_dir_that_is_a_link_is_not_swept(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "4242-0123456789ab-0.tmp"
    _touch(victim, 100 * HOUR)
    base = tmp_path / "l2"
    base.mkdir()
    (base / ".tmp").symlink_to(elsewhere)
    fs = FSL2Adapter(base)
    try:
        assert victim.exists()
        assert fs.report_status()["tmp_sweep_errors"] == 1
    finally:
        fs.close()


def test_stores_still_leave_no_temporary_and_keys_load(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        assert store_sync(fs, [key(0)], [_bytes(8, 3)]).is_successful()
        assert os.listdir(tmp_path / ".tmp") == []
    finally:
        fs.close()
    again = FSL2Adapter(tmp_path)  # a second open removes nothing that is not a temporary
    try:
        assert again.tmp_sweep.removed == 0
        dst = _bytes(8, 0)
        assert load_sync(again, [key(0)], [dst]).to_list() == [True]
        assert bytes(dst.byte_array) == b"\x03" * 8
    finally:
        again.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, 59.0, 31 * 86400.0])
def test_stale_tmp_seconds_is_finite_and_bounded(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="stale_tmp_seconds"):
        FSL2Adapter(tmp_path, stale_tmp_seconds=bad)
    with pytest.raises(ValueError, match="stale_tmp_seconds"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "stale_tmp_seconds": bad})


def test_stale_tmp_seconds_option_reaches_the_adapter(tmp_path: Path) -> None:
    (tmp_path / "l2" / ".tmp").mkdir(parents=True)
    _touch(tmp_path / "l2" / ".tmp" / "4242-0123456789ab-0.tmp", 200)  # default 3600 keeps it
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "l2"),
                                 "stale_tmp_seconds": 120})
    try:
        status = adapter.report_status()
        assert status["stale_tmp_seconds"] == 120.0 and status["tmp_removed"] == 1
        assert lookup_sync(adapter, [key(0)]).to_list() == [False]
    finally:
        adapter.close()


def test_opening_with_create_false_changes_nothing(tmp_path: Path) -> None:
    """Issue 27 item 6: a tool that only looks (``lmserde scrub``) opens with ``create=False``:
    a missing base_path is an error and nothing is created; a dead writer's temporary stays
    (the scrub reports it), and an adapter that only looks finds it without removing it."""
    with pytest.raises(FileNotFoundError, match="not an existing directory"):
        FSL2Adapter(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    base = tmp_path / "l2"
    FSL2Adapter(base).close()
    dead = base / ".tmp" / "4242-abcdefabcdef-0.tmp"
    dead.write_bytes(b"x")
    os.utime(dead, (time.time() - 2 * HOUR, time.time() - 2 * HOUR))
    looking = FSL2Adapter(base, create=False)
    try:
        assert dead.exists() and looking.tmp_sweep.removed == 0
        found = looking.scrub_entries()
        assert [(f.name, f.reason, f.removed) for f in found.damaged] == [
            (os.path.join(".tmp", dead.name), "stale_temp", False)]
        assert dead.exists()
    finally:
        looking.close()
    opened = FSL2Adapter(base)  # an ordinary open sweeps it, as before
    try:
        assert not dead.exists() and opened.tmp_sweep.removed_names == (dead.name,)
    finally:
        opened.close()
