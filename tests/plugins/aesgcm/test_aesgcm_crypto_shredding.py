"""Crypto-shredding and rotation without downtime, end to end: the aesgcm serde with
``key_provider: keyring`` on the fs adapter through the serde wrapper, while the keyring file is
edited with the ``lmserde`` CLI under the running wrapper (and under a second process).

After ``lmserde tenant forget`` every object of the tenant is a miss on every reader (reason
``unkeyed``, the object kept), no key left in the keyring decrypts any of them, the other tenants
keep hitting, and ``lmserde scrub --delete-unkeyed`` (never a load, never scrub without the flag)
reclaims the space. After ``lmserde keys rotate`` new frames carry the new version while old ones
keep hitting; after ``lmserde keys retire`` the old ones are kept misses.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from aesgcm_objects import kv_object, make_key
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.cli.main import main
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, key_file_name, load_sync, store_sync
from lmserde.tenant_keys import read_keyring_file
from lmserde_aesgcm import derive_key, frame_v3
from second_reader import read_across_a_change

SHAPE = [2, 4, 16, 64]
NBYTES = 2 * 4 * 16 * 64 * 2
LAYOUT = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
RELOAD_S = 0.05
ALICE = [make_key(chunk=bytes([i]) * 32, salt="alice") for i in range(3)]
BOB = [make_key(chunk=bytes([0x40 + i]) * 32, salt="bob") for i in range(3)]


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    path = tmp_path / "ring.json"
    for tenant in ("alice", "bob"):
        assert main(["keys", "rotate", str(path), tenant]) == 0
    return path


def _spec(base: Path, ring: Path) -> dict[str, Any]:
    return {"type": "fs", "base_path": str(base),
            "serde": {"type": "aesgcm", "key_provider": "keyring", "keyring_path": str(ring),
                      "keyring_reload_interval_s": RELOAD_S}}


@pytest.fixture
def wrapper(tmp_path: Path, ring: Path) -> Iterator[Any]:
    adapter = create_l2_adapter(_spec(tmp_path / "l2", ring), L1Manager(64 << 20))
    yield adapter
    adapter.close()


def _store(adapter: Any, keys: list[ObjectKey], seed: int = 0) -> None:
    objs = [kv_object(SHAPE, torch.bfloat16, seed=seed + i) for i in range(len(keys))]
    assert store_sync(adapter, keys, objs).is_successful()


def _hits(adapter: Any, keys: list[ObjectKey]) -> list[bool]:
    outs = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in keys]
    bitmap = load_sync(adapter, keys, outs)
    return [bitmap.test(i) for i in range(len(keys))]


def _path(adapter: Any, key: ObjectKey) -> Path:
    return Path(adapter.inner_adapter.base_path) / key_file_name(key)


def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(RELOAD_S)


def _aesgcm_frame(adapter: Any, key: ObjectKey) -> bytes:
    return _path(adapter, key).read_bytes()[FRAME_HEADER_BYTES:]


def _key_version(adapter: Any, key: ObjectKey) -> int:
    return int(struct.unpack_from(">I", _aesgcm_frame(adapter, key), 2)[0])


def test_forget_makes_every_object_of_the_tenant_a_kept_miss(wrapper: Any, ring: Path) -> None:
    _store(wrapper, ALICE)
    _store(wrapper, BOB, seed=10)
    assert _hits(wrapper, ALICE + BOB) == [True] * 6
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    _until(lambda: _hits(wrapper, ALICE) == [False] * 3, "alice's objects missing")
    assert _hits(wrapper, BOB) == [True] * 3, "other tenants keep hitting"
    assert set(wrapper.metrics()["rejections"]) == {"unkeyed"}
    assert all(_path(wrapper, k).exists() for k in ALICE), "a load never deletes"
    assert not _store_ok(wrapper, [make_key(chunk=b"\x77" * 32, salt="alice")])


def _store_ok(adapter: Any, keys: list[ObjectKey]) -> bool:
    objs = [kv_object(SHAPE, torch.bfloat16) for _ in keys]
    return bool(store_sync(adapter, keys, objs).is_successful())


def test_no_key_left_in_the_ring_decrypts_a_forgotten_tenants_object(wrapper: Any, ring: Path
                                                                       ) -> None:
    _store(wrapper, ALICE)
    assert main(["keys", "rotate", str(ring), "bob"]) == 0
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    remaining = read_keyring_file(ring)
    secrets = [s for keys in remaining.tenants.values() for s in keys.secrets.values()]
    assert len(secrets) == 2
    names = [*remaining.tenants, "alice", ""]
    for key in ALICE:
        frame = memoryview(_aesgcm_frame(wrapper, key))
        header = frame_v3.read_header(frame, NBYTES)
        for secret in secrets:
            for name in names:  # the frame's own tenant, every tenant left, and none
                out = memoryview(bytearray(NBYTES))
                aead = AESGCM(derive_key(secret, name, header.key_len))
                with pytest.raises(InvalidTag):
                    frame_v3.open_into(aead, header, frame, out, key)


def test_a_second_process_picks_up_forget_without_a_restart(tmp_path: Path, wrapper: Any,
                                                            ring: Path) -> None:
    _store(wrapper, ALICE[:1])
    _store(wrapper, BOB[:1], seed=10)
    before, after, _reasons = read_across_a_change(
        _spec(tmp_path / "l2", ring), [ALICE[0], BOB[0]], LAYOUT,
        lambda: main(["tenant", "forget", str(ring), "alice"]), [False, True])
    assert (before, after) == ([True, True], [False, True])


def test_scrub_reclaims_forgotten_objects_only_with_the_flag(
        tmp_path: Path, wrapper: Any, ring: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store(wrapper, ALICE)
    _store(wrapper, BOB, seed=10)
    assert main(["tenant", "forget", str(ring), "alice"]) == 0
    capsys.readouterr()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(tmp_path / "l2", ring)))
    files = lambda: sorted(p.name for p in (tmp_path / "l2").rglob("*") if p.is_file())  # noqa: E731
    before = files()
    assert main(["scrub", f"@{spec}", "--decode", "--delete", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"] == {"ok": 3, "unkeyed": 3} and report["unkeyed_deleted"] == 0
    assert files() == before, "without --delete-unkeyed nothing is deleted"
    assert main(["scrub", f"@{spec}", "--delete-unkeyed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["unkeyed_deleted"] == 3
    assert not any(_path(wrapper, k).exists() for k in ALICE)
    assert all(_path(wrapper, k).exists() for k in BOB)
    assert _hits(wrapper, BOB) == [True] * 3


def test_scrub_delete_unkeyed_keeps_objects_of_versions_not_yet_distributed(
        tmp_path: Path, wrapper: Any, ring: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A reader whose keyring is behind (a version newer than any it holds) deletes nothing."""
    stale = tmp_path / "stale.json"
    stale.write_bytes(ring.read_bytes())
    stale.chmod(0o600)
    assert main(["keys", "rotate", str(ring), "alice"]) == 0
    _until(lambda: _store_ok(wrapper, ALICE[:1]) and _key_version(wrapper, ALICE[0]) == 2,
           "alice writing with version 2")
    capsys.readouterr()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_spec(tmp_path / "l2", stale)))
    assert main(["scrub", f"@{spec}", "--delete-unkeyed", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdicts"] == {"foreign": 1} and report["unkeyed_deleted"] == 0
    assert _path(wrapper, ALICE[0]).exists()


def test_rotation_and_retirement_under_a_running_reader_writer(wrapper: Any, ring: Path) -> None:
    old, new = ALICE[:2], ALICE[2:]
    _store(wrapper, old)
    assert [_key_version(wrapper, k) for k in old] == [1, 1]
    assert main(["keys", "rotate", str(ring), "alice"]) == 0

    def writes_version_2() -> bool:
        _store(wrapper, new, seed=5)
        return _key_version(wrapper, new[0]) == 2

    _until(writes_version_2, "new frames written with version 2")
    assert _hits(wrapper, old + new) == [True] * 3, "old versions still read after rotation"
    assert main(["keys", "retire", str(ring), "alice", "1"]) == 0
    _until(lambda: _hits(wrapper, old) == [False, False], "version-1 objects missing")
    assert _hits(wrapper, new) == [True]
    assert all(_path(wrapper, k).exists() for k in old), "retired objects are kept by loads"
