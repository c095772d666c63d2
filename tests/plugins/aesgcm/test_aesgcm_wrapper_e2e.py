"""End to end: the aesgcm serde on the fs L2 adapter through the serde wrapper and an L1Manager.

Stores KV objects, reloads them bit-exactly, and shows that a tampered file, or a file copied
under another key, misses alone while the other keys of the same load still hit. By default every
stored file is the wrapper's stored-object frame header (``FRAME_HEADER_BYTES``) followed by the
aesgcm frame; with ``"serde_frame": false`` (the mode for an L2 shared with LMCache) the file is
the aesgcm frame alone and only the serde's own checks stand between a damaged file and the KV.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from aesgcm_objects import kv_object, make_key, obj_bytes
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, key_file_name, load_sync, store_sync
from lmserde.l2.serde.stored_frame import parse_header

SHAPE = [2, 4, 16, 64]
NBYTES = 2 * 4 * 16 * 64 * 2
KEYS = [make_key(chunk=bytes([i]) * 32, salt="alice") for i in range(3)]
SENTINEL = 0xAA  # what _load fills every destination with before loading


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


@pytest.fixture
def make_adapter(tmp_path: Path, master_key_file: Path, l1: L1Manager) -> Iterator[Any]:
    adapters: list[Any] = []

    def make(*, frame: bool = True, **serde: Any) -> Any:
        adapter = create_l2_adapter(
            {"type": "fs", "base_path": str(tmp_path / "l2"),
             "serde": {"type": "aesgcm", "master_key_path": str(master_key_file), **serde},
             "serde_frame": frame},
            l1,
        )
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def _objects() -> list[TensorMemoryObj]:
    return [kv_object(SHAPE, torch.bfloat16, seed=i) for i in range(len(KEYS))]


def _load(adapter: Any, l1: L1Manager) -> tuple[list[bool], list[TensorMemoryObj]]:
    layout = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
    outs = [TensorMemoryObj.allocate(layout, zero=True) for _ in KEYS]
    for out in outs:
        out.raw_data.fill_(SENTINEL)
    bitmap = load_sync(adapter, KEYS, outs)
    assert l1.memory_used_bytes() == 0, "serde temporaries leaked"
    return [bitmap.test(i) for i in range(len(KEYS))], outs


def _path(adapter: Any, key: ObjectKey) -> Path:
    return Path(adapter.inner_adapter.base_path) / key_file_name(key)


def _untouched(out: TensorMemoryObj) -> bool:
    """No byte of the stored object reached ``out``: it still holds the sentinel everywhere."""
    return bool((out.raw_data == SENTINEL).all())


def _zeroed(out: TensorMemoryObj) -> bool:
    return int(out.raw_data.count_nonzero()) == 0


@pytest.mark.parametrize(("frame_version", "overhead"), [(3, 50), (2, 42), (1, 29)])
def test_store_and_load_round_trip(make_adapter: Any, l1: L1Manager, frame_version: int,
                                   overhead: int) -> None:
    adapter = make_adapter(frame_version=frame_version)
    objs = _objects()
    result = store_sync(adapter, KEYS, objs)
    stored_bytes = FRAME_HEADER_BYTES + NBYTES + overhead  # stored-object frame + aesgcm frame
    assert result.is_successful() and result.bytes_transferred() == 3 * stored_bytes
    for key, obj in zip(KEYS, objs):
        stored = _path(adapter, key).read_bytes()
        assert len(stored) == stored_bytes and stored[FRAME_HEADER_BYTES] == frame_version
        assert parse_header(stored).payload_length == NBYTES + overhead
        assert obj_bytes(obj)[:64] not in stored, "plaintext reached the disk"
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, True]
    for obj, out in zip(objs, outs):
        assert torch.equal(obj.raw_data, out.raw_data)
    assert adapter.metrics()["rejections"] == {}


@pytest.mark.parametrize("frame_version, head_last", [(1, True), (2, False), (3, False)])
def test_only_checksummed_frames_are_written_head_last(make_adapter: Any, frame_version: int,
                                                       head_last: bool) -> None:
    """aesgcm v2 and v3 authenticate their bytes, so their frames carry no checksum and need no
    head-last write; v1's frames are checksummed while ``fs`` writes them."""
    adapter = make_adapter(frame_version=frame_version)
    calls: list[int] = []
    real = adapter.inner_adapter.submit_store_task_head_last

    def spy(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    adapter.inner_adapter.submit_store_task_head_last = spy
    assert store_sync(adapter, KEYS, _objects()).is_successful()
    assert bool(calls) is head_last


@pytest.mark.parametrize("where", [0, 25, 5000, -1], ids=["version", "iv", "body", "tag"])
def test_tampered_file_misses_alone(make_adapter: Any, l1: L1Manager, where: int) -> None:
    """A flipped bit in the aesgcm frame (``where``: offset in it) is refused by the stored frame.

    The payload checksum catches it before the serde runs, so no byte reaches the destination; a
    serde that authenticates its own bytes skips that checksum, and then the serde refuses it
    (``decode``) and zeroes the destination. Either way the refused file is deleted.
    """
    adapter = make_adapter()
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    path = _path(adapter, KEYS[1])
    data = bytearray(path.read_bytes())
    data[where + FRAME_HEADER_BYTES if where >= 0 else where] ^= 0x10
    path.write_bytes(bytes(data))
    hits, outs = _load(adapter, l1)
    assert hits == [True, False, True]
    assert torch.equal(outs[0].raw_data, objs[0].raw_data)
    assert torch.equal(outs[2].raw_data, objs[2].raw_data)
    assert not torch.equal(outs[1].raw_data, objs[1].raw_data)
    reason = "checksum" if adapter.framer.checksum else "decode"
    if reason == "checksum":
        assert _untouched(outs[1]), "a key refused by the frame must not be written"
    else:
        assert _zeroed(outs[1]), "a missed key must not keep plaintext"
    metrics = adapter.metrics()
    assert metrics["rejections"] == {reason: 1} and metrics["repaired"] == 1
    assert not path.exists(), "the refused object is deleted (self-repair)"


@pytest.mark.parametrize("where", [0, 25, 5000, -1], ids=["version", "iv", "body", "tag"])
def test_tampered_file_misses_alone_without_the_stored_frame(make_adapter: Any, l1: L1Manager,
                                                            where: int) -> None:
    """LMCache-shared mode: the serde's own contract — refused, and the destination zeroed."""
    adapter = make_adapter(frame=False)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    path = _path(adapter, KEYS[1])
    data = bytearray(path.read_bytes())
    assert len(data) == NBYTES + 50 and data[0] == 3  # the aesgcm frame alone
    data[where] ^= 0x10
    path.write_bytes(bytes(data))
    hits, outs = _load(adapter, l1)
    assert hits == [True, False, True]
    assert torch.equal(outs[0].raw_data, objs[0].raw_data)
    assert torch.equal(outs[2].raw_data, objs[2].raw_data)
    assert _zeroed(outs[1]), "a missed key must not keep plaintext"
    assert adapter.metrics()["rejections"] == {"decode": 1}


def test_damaged_v2_object_is_a_miss_that_stays(make_adapter: Any, l1: L1Manager) -> None:
    """A version-2 frame names no key id, and its stored frame carries no payload checksum: a
    failed authentication cannot tell damage from another fleet's key, so the object is not
    deleted (issue 27: "not mine" is never a deletion). Nothing of it is served."""
    adapter = make_adapter(frame_version=2)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    path = _path(adapter, KEYS[1])
    data = bytearray(path.read_bytes())
    data[FRAME_HEADER_BYTES + 5000] ^= 0x10
    path.write_bytes(bytes(data))
    hits, outs = _load(adapter, l1)
    assert hits == [True, False, True]
    assert _zeroed(outs[1]), "a missed key must not keep plaintext"
    metrics = adapter.metrics()
    assert "decode" not in metrics["rejections"] and metrics["repaired"] == 0
    assert path.read_bytes() == bytes(data), "left in place"


def test_truncated_file_misses_alone(make_adapter: Any, l1: L1Manager) -> None:
    adapter = make_adapter()
    assert store_sync(adapter, KEYS, _objects()).is_successful()
    path = _path(adapter, KEYS[2])
    path.write_bytes(path.read_bytes()[:-1])
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, False]
    assert _untouched(outs[2])
    assert adapter.metrics()["rejections"] == {"length": 1}  # shorter than its header says


@pytest.mark.parametrize("frame_version", [3, 2, 1])
def test_file_moved_to_another_key_is_refused_by_the_stored_frame(
    make_adapter: Any, l1: L1Manager, frame_version: int
) -> None:
    """The stored frame binds every object to its key, whatever the aesgcm frame version. An
    object framed for another key is not this key's ("key" is a not-mine refusal, issue 27):
    a miss, left in place, and the next store of the key replaces it."""
    adapter = make_adapter(frame_version=frame_version)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    shutil.copyfile(_path(adapter, KEYS[0]), _path(adapter, KEYS[2]))
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, False], "a file copied under another key must not be served"
    assert _untouched(outs[2]), "a key refused by the frame must not be written"
    assert adapter.metrics()["rejections"] == {"key": 1}
    assert adapter.metrics()["repaired"] == 0 and _path(adapter, KEYS[2]).exists()
    assert _path(adapter, KEYS[0]).exists()
    assert store_sync(adapter, KEYS[2:], objs[2:]).is_successful()  # a replacing store
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, True]
    assert torch.equal(outs[2].raw_data, objs[2].raw_data)


def test_v3_file_moved_to_another_key_misses_without_the_stored_frame(
    make_adapter: Any, l1: L1Manager
) -> None:
    """LMCache-shared mode: aesgcm frame v3 binds itself to its key (the serde refuses it)."""
    adapter = make_adapter(frame=False)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    shutil.copyfile(_path(adapter, KEYS[0]), _path(adapter, KEYS[2]))
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, False], "a frame copied under another key must not be served"
    assert _zeroed(outs[2])
    assert adapter.metrics()["rejections"] == {"decode": 1}


def test_v1_file_moved_to_another_key_is_served_without_the_stored_frame(
    make_adapter: Any, l1: L1Manager
) -> None:
    """What LMCache-shared mode gives up: nothing binds a v1 frame to its key (LMCache's format)."""
    adapter = make_adapter(frame_version=1, frame=False)
    objs = _objects()
    assert store_sync(adapter, KEYS, objs).is_successful()
    shutil.copyfile(_path(adapter, KEYS[0]), _path(adapter, KEYS[2]))
    hits, outs = _load(adapter, l1)
    assert hits == [True, True, True]
    assert torch.equal(outs[2].raw_data, objs[0].raw_data)
    assert adapter.metrics()["rejections"] == {}


def test_other_master_key_misses_everything(make_adapter: Any, l1: L1Manager,
                                            tmp_path: Path) -> None:
    adapter = make_adapter()
    assert store_sync(adapter, KEYS, _objects()).is_successful()
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32))
    other.chmod(0o600)
    stranger = create_l2_adapter(
        {"type": "fs", "base_path": adapter.inner_adapter.base_path,
         "serde": {"type": "aesgcm", "master_key_path": str(other)}}, l1)
    try:
        hits, outs = _load(stranger, l1)
    finally:
        stranger.close()
    assert hits == [False, False, False]
    assert all(int(o.raw_data.count_nonzero()) == 0 for o in outs)


def test_chained_after_another_serde(tmp_path: Path, master_key_file: Path,
                                     l1: L1Manager) -> None:
    """aesgcm as the last stage of a chain encrypts the previous stage's output."""
    adapter = create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "chain"),
         "serde": [{"type": "identity"},
                   {"type": "aesgcm", "master_key_path": str(master_key_file)}]},
        l1,
    )
    try:
        objs = _objects()
        result = store_sync(adapter, KEYS, objs)
        # one stored-object frame around the chain's output (the aesgcm v3 frame)
        stored_bytes = FRAME_HEADER_BYTES + NBYTES + 50
        assert result.is_successful() and result.bytes_transferred() == 3 * stored_bytes
        stored = (tmp_path / "chain" / key_file_name(KEYS[0])).read_bytes()
        assert len(stored) == stored_bytes and stored[FRAME_HEADER_BYTES] == 3
        hits, outs = _load(adapter, l1)
        assert hits == [True, True, True]
        assert all(torch.equal(o.raw_data, r.raw_data) for o, r in zip(objs, outs))
    finally:
        adapter.close()


def _misses_and_keeps(reader: Any, writer: Any, l1: L1Manager) -> None:
    """``reader`` misses every one of ``writer``'s objects, before any decode, and keeps them."""
    before = [_path(writer, k).read_bytes() for k in KEYS]
    hits, outs = _load(reader, l1)
    assert hits == [False] * len(KEYS)
    assert all(_untouched(o) for o in outs), "missed before any decrypt: nothing was written"
    metrics = reader.metrics()
    # the size is exact (plaintext + 29, 42 or 50): another version's larger object is more than
    # the reader's config can write: not its object (``foreign``), kept
    assert metrics["rejections"] == {"foreign": len(KEYS)} and metrics["repaired"] == 0, metrics
    assert [_path(writer, k).read_bytes() for k in KEYS] == before


@pytest.mark.parametrize(("written", "read"), [(2, 3), (1, 3), (1, 2)])
def test_switching_to_a_longer_frame_version_keeps_reading_the_stored_objects(
        make_adapter: Any, l1: L1Manager, written: int, read: int) -> None:
    """``frame_version`` is no identity option and the deserializer reads every version: after a
    switch to a version with more overhead (the upgrade of the default from 2 to 3) the wrapper
    loads each object at its stored size and it hits."""
    writer = make_adapter(frame_version=written)
    assert store_sync(writer, KEYS, _objects()).is_successful()
    writer.close()
    reader = make_adapter(frame_version=read)
    hits, outs = _load(reader, l1)
    assert hits == [True] * len(KEYS)
    assert [obj_bytes(o) for o in outs] == [obj_bytes(o) for o in _objects()]
    assert reader.metrics()["rejections"] == {}
    assert all(_path(reader, k).read_bytes()[FRAME_HEADER_BYTES] == written for k in KEYS)


@pytest.mark.parametrize(("written", "read"), [(3, 1), (3, 2), (2, 1)])
def test_switching_to_a_shorter_frame_version_misses_then_the_next_store_rewrites(
        make_adapter: Any, l1: L1Manager, written: int, read: int) -> None:
    """Back to a version with less overhead (a rollback), the newer objects are larger than the
    configured serde writes: a miss, kept (see docs/plugins/aesgcm.md). The next store of the
    key replaces it with the configured version, which then hits."""
    writer = make_adapter(frame_version=written)
    assert store_sync(writer, KEYS, _objects()).is_successful()
    writer.close()
    reader = make_adapter(frame_version=read)
    _misses_and_keeps(reader, writer, l1)
    assert store_sync(reader, KEYS, _objects()).is_successful()
    assert all(_path(reader, k).read_bytes()[FRAME_HEADER_BYTES] == read for k in KEYS)
    hits, outs = _load(reader, l1)
    assert hits == [True] * len(KEYS)
    assert [obj_bytes(o) for o in outs] == [obj_bytes(o) for o in _objects()]
