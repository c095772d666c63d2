"""``lmserde scrub`` sees every entry under an ``fs`` tier, not only the objects it lists
(issue 27 item 6): entry damage is reported per reason and removed by ``--delete``, the exit
status stays non-zero while damage remains, and a ``base_path`` that does not exist is an error
that creates nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.cli.main import main
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, create_l2_adapter, key_file_name, scrub_adapter
from lmserde.l2.adapters.fault import FaultInjectingL2Adapter
from lmserde.l2.adapters.fs_names import hashed_name_of, readable_name
from lmserde.l2.adapters.fs_temp_files import pid_domain

KV = MemoryLayoutDesc([[4, 2, 64]], [torch.bfloat16])
LONG = "m" * 300  # a model name that gives hashed file names (with sidecars)
OLD = time.time() - 7200  # older than the default stale_tmp_seconds (3600)


def _spec(base: Path, **extra: object) -> dict:
    return {"type": "fs", "base_path": str(base), "serde": {"type": "identity"}, **extra}


def _scrub(capsys: pytest.CaptureFixture[str], base: Path, *args: str) -> tuple[int, dict]:
    code = main(["scrub", json.dumps(_spec(base)), *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _store(base: Path, l1: L1Manager, cache: Cache, keys: list[ObjectKey]) -> None:
    wrapper = create_l2_adapter(_spec(base), l1)
    try:
        assert cache.store(wrapper, keys, objects_for(KV, len(keys))).is_successful()
    finally:
        wrapper.close()


def _sidecar(base: Path, key: ObjectKey) -> Path:
    return base / (key_file_name(key)[: -len(".data")] + ".key")


def _damaged_tier(base: Path, l1: L1Manager, cache: Cache) -> dict[str, str]:
    """A tier with two good objects and one entry of each kind of damage; reason -> name."""
    good = [key_of(0), key_of(1, model=LONG)]
    no_sidecar, wrong_sidecar = key_of(2, model=LONG), key_of(3, model=LONG)
    _store(base, l1, cache, [*good, no_sidecar, wrong_sidecar])
    _sidecar(base, no_sidecar).unlink()
    _sidecar(base, wrong_sidecar).write_text(readable_name(key_of(9)))
    names = {"symlink": key_file_name(key_of(10)), "fifo": key_file_name(key_of(11)),
             "directory": key_file_name(key_of(12)), "full_directory": key_file_name(key_of(13)),
             "sidecar_missing": key_file_name(no_sidecar),
             "sidecar_foreign": key_file_name(wrong_sidecar),
             "sidecar_orphan": hashed_name_of("gone" * 60 + ".data")[: -len(".data")] + ".key",
             "stale_temp": os.path.join(".tmp", "4242-abcdefabcdef-7.tmp")}
    os.symlink(key_file_name(key_of(0)), base / names["symlink"])
    os.mkfifo(base / names["fifo"])
    os.mkdir(base / names["directory"])
    os.mkdir(base / names["full_directory"])
    (base / names["full_directory"] / "someone's notes").write_text("keep")
    (base / names["sidecar_orphan"]).write_text("gone")
    (base / names["stale_temp"]).write_bytes(b"half an object")
    for reason in ("sidecar_orphan", "stale_temp"):
        os.utime(base / names[reason], (OLD, OLD))
    (base / "README").write_text("not the tier's")
    (base / ".tmp" / "notes.txt").write_text("not a temporary")
    return names


def test_entry_damage_is_reported_per_reason_and_removed_by_delete(
        tmp_path: Path, l1: L1Manager, cache: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    names = _damaged_tier(tmp_path, l1, cache)
    code, report = _scrub(capsys, tmp_path)
    assert code == 1
    entries = report["entries"]
    assert entries["verdicts"] == {"directory": 2, "fifo": 1, "sidecar_foreign": 1,
                                   "sidecar_missing": 1, "sidecar_orphan": 1, "stale_temp": 1,
                                   "symlink": 1}
    assert {f["name"] for f in entries["damaged"]} == set(names.values())
    assert entries["unknown"] == ["README", os.path.join(".tmp", "notes.txt")]
    assert entries["removed"] == 0
    assert report["verdicts"] == {"ok": 2} and report["damage_remaining"] == 8
    assert all(os.path.lexists(tmp_path / name) for name in names.values())  # looking changes nothing

    code, report = _scrub(capsys, tmp_path, "--delete")
    assert code == 1
    kept = [f for f in report["entries"]["damaged"] if not f["removed"]]
    assert [(f["name"], f["reason"]) for f in kept] == [(names["full_directory"], "directory")]
    assert "not empty" in kept[0]["detail"]
    assert report["damage_remaining"] == 1
    for reason, name in names.items():
        assert os.path.lexists(tmp_path / name) == (reason == "full_directory"), reason
    assert (tmp_path / names["full_directory"] / "someone's notes").read_text() == "keep"
    assert (tmp_path / "README").read_text() == "not the tier's"
    assert (tmp_path / ".tmp" / "notes.txt").exists()
    assert not _sidecar(tmp_path, key_of(3, model=LONG)).exists()  # the foreign sidecar went too

    code, report = _scrub(capsys, tmp_path, "--delete")  # damage remains: still failing
    assert code == 1 and report["damage_remaining"] == 1
    (tmp_path / names["full_directory"] / "someone's notes").unlink()
    assert _scrub(capsys, tmp_path, "--delete")[0] == 1  # the now empty directory is removed
    code, report = _scrub(capsys, tmp_path)
    assert code == 0 and report["verdicts"] == {"ok": 2} and report["entries"]["damaged"] == []


def test_the_summary_names_each_damaged_entry(tmp_path: Path, l1: L1Manager, cache: Cache,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    names = _damaged_tier(tmp_path, l1, cache)
    assert main(["scrub", json.dumps(_spec(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert "entries: 8 damaged (0 removed), 2 unknown" in out
    assert f"symlink          {names['symlink']} (kept" in out
    assert "8 damaged objects or entries remain: run again with --delete" in out


def test_writers_in_progress_are_not_damage(tmp_path: Path, l1: L1Manager, cache: Cache,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A live writer's temporary and a sidecar published just before its data file are a store
    in progress: counted, never removed."""
    _store(tmp_path, l1, cache, [key_of(0)])
    live = tmp_path / ".tmp" / f"{pid_domain()}-{os.getpid()}-{'0' * 12}-0.tmp"
    live.write_bytes(b"being written")
    young = tmp_path / (hashed_name_of("soon" * 60 + ".data")[: -len(".data")] + ".key")
    young.write_text("soon")
    code, report = _scrub(capsys, tmp_path, "--delete")
    assert code == 0 and report["entries"]["in_progress"] == 2
    assert report["entries"]["damaged"] == []
    assert live.exists() and young.exists()


@pytest.mark.parametrize("make", ["missing", "file"])
def test_a_base_path_that_is_no_directory_is_an_error_and_nothing_is_created(
        tmp_path: Path, make: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "mistyped"
    if make == "file":
        base.write_text("")
    assert main(["scrub", json.dumps(_spec(base))]) == 2
    assert "not an existing directory" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ([] if make == "missing" else ["mistyped"])


def test_scrub_of_an_empty_tier_creates_nothing(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _scrub(capsys, tmp_path)
    assert code == 0 and report["scanned"] == 0
    assert os.listdir(tmp_path) == []  # no temporary directory made


def test_an_explicit_create_in_the_spec_is_kept(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "new"
    assert main(["scrub", json.dumps(_spec(base, create=True)), "--json"]) == 0
    capsys.readouterr()
    assert base.is_dir()


def test_the_fault_adapter_passes_the_entry_scrub_through(tmp_path: Path, l1: L1Manager) -> None:
    fs = FSL2Adapter(tmp_path)
    os.symlink("nowhere", fs.path_of(key_of(5)))
    faulty = FaultInjectingL2Adapter(fs)
    try:
        found = faulty.scrub_entries(delete=True)
        assert found is not None
        assert [(f.reason, f.removed) for f in found.damaged] == [("symlink", True)]
        assert not os.path.lexists(fs.path_of(key_of(5)))
    finally:
        faulty.close()


def test_adapters_without_entries_report_none(l1: L1Manager, cache: Cache) -> None:
    wrapper = create_l2_adapter({"type": "memory", "serde": {"type": "identity"}}, l1,
                                repair=False)
    try:
        assert cache.store(wrapper, [key_of(0)], objects_for(KV, 1)).is_successful()
        report = scrub_adapter(wrapper)
        assert report.entries is None and report.ok == 1 and not report.found_damage
    finally:
        wrapper.close()
