"""The key lifecycle on the frame keyring (``frame_keyring_path``), for a serde with no key of its
own (``fp8``): ``lmserde tenant forget``, ``keys rotate`` and ``keys retire`` on the frame ring
reach running readers within ``frame_keyring_reload_interval_s`` (a second process too); a
forgotten tenant's or retired version's objects are ``unkeyed`` misses, kept by loads, that no
key left in the ring authenticates, and ``lmserde scrub --delete-unkeyed`` reclaims exactly them
(a version newer than the reader's ring holds stays ``foreign`` and is kept).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from datapath_driver import Cache, key_of, objects_for
from lmserde import ObjectKey
from lmserde.cli.main import main
from lmserde.l1 import L1Manager
from lmserde.l2 import L2AdapterInterface, create_l2_adapter, key_file_name
from lmserde.tenant_keys import Keyring, read_keyring_file
from lmserde.testing import wait_until
from second_reader import read_across_a_change
from shipped_serdes import KV

pytest.importorskip("lmserde_fp8")

RELOAD_S = 0.05
ALICE = [key_of(i, salt="alice") for i in range(3)]
BOB = [key_of(0x40 + i, salt="bob") for i in range(3)]
#: Where the authenticated header records the key version that keyed the MAC.
_KEY_VERSION_AT = 16


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    path = tmp_path / "frame.keyring"
    for tenant in ("alice", "bob"):
        assert main(["keys", "rotate", str(path), tenant]) == 0
    return path


def _spec(base: Path, ring: Path) -> dict[str, Any]:
    return {"type": "fs", "base_path": str(base), "serde": {"type": "fp8"},
            "frame_keyring_path": str(ring), "frame_keyring_reload_interval_s": RELOAD_S}


@pytest.fixture
def wrapper(tmp_path: Path, ring: Path, l1: L1Manager) -> Iterator[L2AdapterInterface]:
    adapter = create_l2_adapter(_spec(tmp_path / "l2", ring), l1)
    yield adapter
    adapter.close()


def _store_ok(cache: Cache, adapter: L2AdapterInterface, keys: list[ObjectKey],
              seed: int = 0) -> bool:
    return bool(cache.store(adapter, keys, objects_for(KV, len(keys), seed)).is_successful())


def _hits(cache: Cache, adapter: L2AdapterInterface, keys: list[ObjectKey]) -> list[bool]:
    return list(cache.load(adapter, keys, KV)[0].to_list())


def _path(base: Path, key: ObjectKey) -> Path:
    return base / key_file_name(key)


def _key_version(base: Path, key: ObjectKey) -> int:
    return int(struct.unpack_from("<I", _path(base, key).read_bytes(), _KEY_VERSION_AT)[0])


def _rejections(adapter: L2AdapterInterface) -> dict[str, int]:
    return dict(adapter.metrics()["rejections"])  # type: ignore[attr-defined]


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait (on a deadline) for a change of the ring to reach the running wrapper."""
    wait_until(condition, what, 10.0, retry_on=())


def test_forget_on_the_frame_ring_makes_the_tenants_objects_kept_unkeyed_misses(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, cache: Cache) -> None:
    base = tmp_path / "l2"
    assert _store_ok(cache, wrapper, ALICE) and _store_ok(cache, wrapper, BOB, seed=1)
    assert _hits(cache, wrapper, ALICE + BOB) == [True] * 6
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    _until(lambda: _hits(cache, wrapper, ALICE) == [False] * 3, "alice's objects missing")
    assert _hits(cache, wrapper, BOB) == [True] * 3, "other tenants keep hitting"
    assert set(_rejections(wrapper)) == {"unkeyed"}
    assert all(_path(base, k).exists() for k in ALICE), "a load never deletes"
    assert not _store_ok(cache, wrapper, [key_of(0x77, salt="alice")]), "no key: nothing stored"


def test_stores_of_a_tenant_without_a_frame_key_do_not_make_the_tier_unhealthy(
        wrapper: L2AdapterInterface, ring: Path, cache: Cache) -> None:
    """A tenant the ring does not hold (forgotten, or not given a key yet) is refused by policy:
    however many of its stores fail in a row, the tier stays healthy for the others."""
    from lmserde.l2.serde.failure_streaks import UNHEALTHY_AFTER_FAILURES

    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    _until(lambda: not _store_ok(cache, wrapper, ALICE[:1]), "alice's stores refused")
    for i in range(UNHEALTHY_AFTER_FAILURES + 1):
        assert not _store_ok(cache, wrapper, [key_of(0x80 + i, salt="alice")])
    assert wrapper.report_status()["is_healthy"] is True
    assert wrapper.metrics()["failures"]["frame_key"] >= UNHEALTHY_AFTER_FAILURES  # type: ignore[attr-defined]
    assert _store_ok(cache, wrapper, BOB) and _hits(cache, wrapper, BOB) == [True] * 3


def _ring_file(path: Path, keyring: Keyring) -> Path:
    path.write_bytes(keyring.dumps())
    path.chmod(0o600)
    return path


def test_no_key_left_in_the_frame_ring_authenticates_a_forgotten_tenants_object(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, l1: L1Manager,
        cache: Cache) -> None:
    """Every secret left in the ring, given to a reader as alice's key at the version her
    frames name, fails the MAC (``auth``); the old ring, as a control, still authenticates."""
    base = tmp_path / "l2"
    assert _store_ok(cache, wrapper, ALICE)
    assert {_key_version(base, k) for k in ALICE} == {1}
    old = _ring_file(tmp_path / "old.keyring", read_keyring_file(ring))
    assert main(["keys", "rotate", str(ring), "bob"]) == 0
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    remaining = read_keyring_file(ring)
    secrets = [s for keys in remaining.tenants.values() for s in keys.secrets.values()]
    assert "alice" not in remaining.tenants and len(secrets) == 2
    candidates = [Keyring().with_new_version("alice", secret) for secret in secrets]
    for i, candidate in enumerate([*candidates, read_keyring_file(old)]):
        probe = create_l2_adapter(_spec(base, _ring_file(tmp_path / f"probe{i}", candidate)), l1)
        try:
            control = i == len(candidates)
            assert _hits(cache, probe, ALICE) == [control] * 3
            assert _rejections(probe) == ({} if control else {"auth": 3})
        finally:
            probe.close()


def test_a_second_process_picks_up_forget_on_the_frame_ring(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, cache: Cache) -> None:
    assert _store_ok(cache, wrapper, ALICE[:1]) and _store_ok(cache, wrapper, BOB[:1], seed=1)
    before, after, reasons = read_across_a_change(
        _spec(tmp_path / "l2", ring), [ALICE[0], BOB[0]], KV,
        lambda: main(["tenant", "forget", str(ring), "alice"]), [False, True])
    assert (before, after, reasons) == ([True, True], [False, True], ["unkeyed"])


def test_scrub_delete_unkeyed_reclaims_only_the_forgotten_tenants_frames(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, cache: Cache,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The frame alone says ``unkeyed`` (no decode needed); only ``--delete-unkeyed`` deletes."""
    base = tmp_path / "l2"
    assert _store_ok(cache, wrapper, ALICE) and _store_ok(cache, wrapper, BOB, seed=1)
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    capsys.readouterr()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(base, ring)))
    files = lambda: sorted(p.name for p in base.rglob("*") if p.is_file())  # noqa: E731
    before = files()
    assert main(["scrub", f"@{spec}", "--delete", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"] == {"ok": 3, "unkeyed": 3} and report["unkeyed_deleted"] == 0
    assert files() == before, "without --delete-unkeyed nothing is deleted"
    assert main(["scrub", f"@{spec}", "--delete-unkeyed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"] == {"ok": 3, "unkeyed": 3} and report["unkeyed_deleted"] == 3
    assert not any(_path(base, k).exists() for k in ALICE)
    assert all(_path(base, k).exists() for k in BOB)
    assert _hits(cache, wrapper, BOB) == [True] * 3


def test_scrub_delete_unkeyed_keeps_frames_of_versions_not_yet_distributed(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, cache: Cache,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "l2"
    stale = _ring_file(tmp_path / "stale.keyring", read_keyring_file(ring))
    assert main(["keys", "rotate", str(ring), "alice"]) == 0
    _until(lambda: _store_ok(cache, wrapper, ALICE[:1]) and _key_version(base, ALICE[0]) == 2,
           "alice writing with version 2")
    capsys.readouterr()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(base, stale)))
    assert main(["scrub", f"@{spec}", "--delete-unkeyed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"] == {"foreign": 1} and report["unkeyed_deleted"] == 0
    assert _path(base, ALICE[0]).exists()


def test_rotation_and_retirement_on_the_frame_ring_under_a_running_reader_writer(
        tmp_path: Path, wrapper: L2AdapterInterface, ring: Path, cache: Cache) -> None:
    base = tmp_path / "l2"
    old, new = ALICE[:2], ALICE[2:]
    assert _store_ok(cache, wrapper, old)
    assert [_key_version(base, k) for k in old] == [1, 1]
    assert main(["keys", "rotate", str(ring), "alice"]) == 0
    _until(lambda: _store_ok(cache, wrapper, new, seed=5) and _key_version(base, new[0]) == 2,
           "new frames written with version 2")
    assert _hits(cache, wrapper, old + new) == [True] * 3, "old versions still read"
    assert _rejections(wrapper) == {}
    assert main(["keys", "retire", str(ring), "alice", "1"]) == 0
    _until(lambda: _hits(cache, wrapper, old) == [False, False], "version-1 objects missing")
    assert _hits(cache, wrapper, new) == [True]
    assert set(_rejections(wrapper)) == {"unkeyed"}
    assert all(_path(base, k).exists() for k in old), "retired objects are kept by loads"
