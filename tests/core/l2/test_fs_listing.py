"""``fs`` lists its keys from file names; hashed names through a sidecar; foreign files skipped."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lmserde import ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, create_l2_adapter, key_file_name, load_sync, store_sync
from lmserde.l2.adapters.fs_names import (
    MAX_READABLE_NAME,
    is_hashed_name,
    parse_readable_name,
    readable_name,
    sidecar_name,
)
from lmserde.testing import adapter_key as key

KEYS = st.builds(
    ObjectKey,
    chunk_hash=st.binary(max_size=120),
    model_name=st.text(st.characters(exclude_characters="@"), max_size=80),
    kv_rank=st.integers(-(2**40), 2**40),
    object_group_id=st.integers(0, 2**40),
    cache_salt=st.text(st.characters(exclude_characters="@/\\\x00"), max_size=128),
)


def _bytes(n: int, fill: int = 7) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((n,), fill, dtype=torch.uint8))


def _long_key(i: int) -> ObjectKey:
    key_ = ObjectKey(ObjectKey.IntHash2Bytes(i), "org/" + "very-long-model-" * 16, 7, 1, "tenant")
    assert len(readable_name(key_)) > MAX_READABLE_NAME
    return key_


@settings(max_examples=400)
@given(KEYS)
def test_readable_names_parse_back_to_their_key(k: ObjectKey) -> None:
    assert parse_readable_name(readable_name(k)) == k


@settings(max_examples=300)
@given(st.text(max_size=60).map(lambda t: t + ".data"))
def test_any_other_name_parses_to_nothing_or_to_the_key_that_names_it(name: str) -> None:
    parsed = parse_readable_name(name)
    assert parsed is None or readable_name(parsed) == name


@pytest.mark.parametrize("name", [
    "m@1@0@ab.data", "m@+1@0@ab.data", "m@01@0@ab.data", "m@1@0@AB.data", "m@1@0@abc.data",
    "m@1@-1@ab.data", "m@1@0@ab@.data", "m%2@1@0@ab.data", "m%40x@1@0@ab.data", "m@1@0.data",
    "m@1@0@ab@s@t.data", "m@1@0@ab", "m%2f@1@0@ab.data", "m@1@0@ab@a%2Fb.data",
])
def test_non_canonical_or_invalid_names_are_rejected(name: str) -> None:
    expected = {"m@1@0@ab.data": ObjectKey(b"\xab", "m", 1)}
    assert parse_readable_name(name) == expected.get(name)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(KEYS, min_size=1, max_size=6, unique=True), st.data())
def test_stored_keys_are_listed_and_deleted_keys_are_not(keys: list[ObjectKey],
                                                         data: st.DataObject) -> None:
    keys = [*keys, _long_key(len(keys))]  # at least one hashed name
    with tempfile.TemporaryDirectory() as base:
        fs = FSL2Adapter(base)
        try:
            assert store_sync(fs, keys, [_bytes(i + 1) for i in range(len(keys))]).is_successful()
            assert sorted(fs.list_l2_keys(), key=repr) == sorted(keys, key=repr)
            gone = data.draw(st.lists(st.sampled_from(keys), unique=True), label="deleted")
            fs.delete(gone)
            assert sorted(fs.list_l2_keys(), key=repr) == sorted(set(keys) - set(gone), key=repr)
            names = set(os.listdir(base))
            for k in gone:
                name = key_file_name(k)
                assert name not in names and sidecar_name(name) not in names
        finally:
            fs.close()


def test_hashed_names_get_a_sidecar_removed_on_delete(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        long_key = _long_key(0)
        name = key_file_name(long_key)
        assert is_hashed_name(name)
        store_sync(fs, [long_key, key(1)], [_bytes(10), _bytes(3)])
        sidecar = tmp_path / sidecar_name(name)
        assert sidecar.read_text() == readable_name(long_key)
        assert set(fs.list_l2_keys()) == {long_key, key(1)}
        fs.delete([long_key])
        assert not sidecar.exists() and not (tmp_path / name).exists()
        assert fs.list_l2_keys() == [key(1)]
    finally:
        fs.close()


def test_hashed_files_without_sidecar_load_but_are_not_listed_until_stored_again(
    tmp_path: Path,
) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        long_key = _long_key(0)
        store_sync(fs, [long_key], [_bytes(10, 4)])
        os.unlink(tmp_path / sidecar_name(key_file_name(long_key)))  # as before sidecars existed
        scan = fs.scan_objects()
        assert scan.keys == [] and scan.hashed_without_sidecar == 1
        dst = _bytes(10, 0)
        assert load_sync(fs, [long_key], [dst]).to_list() == [True]
        result = store_sync(fs, [long_key], [_bytes(10, 5)])  # skipped, but the sidecar returns
        assert result.is_successful() and result.bytes_transferred() == 0
        assert fs.list_l2_keys() == [long_key]
        assert (tmp_path / key_file_name(long_key)).read_bytes() == b"\x04" * 10
    finally:
        fs.close()


def test_foreign_names_are_skipped_and_counted(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        store_sync(fs, [key(0), key(1, "s")], [_bytes(5), _bytes(6)])
        (tmp_path / "README").write_text("hello")
        (tmp_path / "x@y.data").write_bytes(b"1")
        (tmp_path / "m@+1@0@ab.data").write_bytes(b"1")  # parses, but no key names it so
        (tmp_path / "subdir").mkdir()
        (tmp_path / "link.data").symlink_to(tmp_path / key_file_name(key(0)))
        os.symlink(tmp_path / key_file_name(key(0)), tmp_path / key_file_name(key(2)))
        orphan = "h-" + "0" * 64 + ".data"
        (tmp_path / orphan).write_bytes(b"1")  # hashed, no sidecar
        wrong = "h-" + "1" * 64 + ".data"
        (tmp_path / wrong).write_bytes(b"1")
        (tmp_path / sidecar_name(wrong)).write_text(readable_name(_long_key(5)))  # not its name
        (tmp_path / sidecar_name("h-" + "2" * 64 + ".data")).write_text("x")  # orphan sidecar
        scan = fs.scan_objects()
        assert set(scan.keys) == {key(0), key(1, "s")}
        assert (scan.skipped_names, scan.hashed_without_sidecar, scan.total_bytes) == (6, 2, 11)
        status = fs.report_status()
        assert status["list_skipped_names"] == 6
        assert status["last_scan"] == {"objects": 2, "bytes": 11, "skipped_names": 6,
                                       "hashed_without_sidecar": 2}
    finally:
        fs.close()


def test_listing_by_model(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path)
    try:
        other = ObjectKey(b"\x01", "model/b", 0)
        store_sync(fs, [key(0), other, _long_key(1)], [_bytes(1), _bytes(2), _bytes(3)])
        assert fs.list_l2_keys(model_name="model/b") == [other]
        assert fs.list_l2_keys(key(0).model_name) == [key(0)]
        assert fs.report_status()["last_scan"]["objects"] == 1
    finally:
        fs.close()


def test_a_serde_wrapped_fs_lists_the_original_keys(tmp_path: Path) -> None:
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "identity"}}, L1Manager(1 << 24))
    try:
        keys = [key(0), _long_key(1)]
        assert store_sync(adapter, keys, [_bytes(16), _bytes(32)]).is_successful()
        assert set(adapter.list_l2_keys()) == set(keys)
    finally:
        adapter.close()


# -- naming: lmcache (LMCache 0.5.6's file names, for a directory shared with LMCache) --------


def test_lmcache_names_follow_lmcache_0_5_6() -> None:
    from lmserde.l2.adapters.fs_names import lmcache_file_name

    plain = ObjectKey(b"\xab\xcd", "meta-llama/Llama-3-8B", 0x01010000, 2)
    assert lmcache_file_name(plain) == "meta-llama-SEP-Llama-3-8B@0x01010000@2@abcd.data"
    salted = ObjectKey(b"\x01", "m", 5, 0, "tenant-a")
    assert lmcache_file_name(salted) == "m@0x00000005@0@01@tenant-a.data"
    with pytest.raises(ValueError, match="-SEP-"):
        lmcache_file_name(ObjectKey(b"\x01", "a-SEP-b", 0))


@given(st.builds(ObjectKey, st.binary(min_size=1, max_size=32),
                 st.text(st.characters(blacklist_characters="@\x00", codec="utf-8"), max_size=40),
                 st.integers(0, 2**31 - 1), st.integers(0, 255),
                 st.text(st.characters(blacklist_characters="@/\\\x00", codec="utf-8"),
                         max_size=20)))
def test_lmcache_names_round_trip(key: ObjectKey) -> None:
    from lmserde.l2.adapters.fs_names import lmcache_file_name, parse_lmcache_name

    try:
        name = lmcache_file_name(key)
    except ValueError:
        return  # a model holding "-SEP-", or too long a name: refused, never a wrong file
    assert "/" not in name and parse_lmcache_name(name) == key


def test_fs_with_lmcache_naming_stores_lists_and_deletes(tmp_path: Path) -> None:
    fs = FSL2Adapter(tmp_path, naming="lmcache")
    try:
        keys = [ObjectKey(b"\x07" * 8, "org/model", 0x01010000, 0, "t"), key(1)]
        assert store_sync(fs, keys, [_bytes(4), _bytes(5)]).is_successful()
        assert (tmp_path / "org-SEP-model@0x01010000@0@0707070707070707@t.data").stat().st_size == 4
        assert set(fs.list_l2_keys()) == set(keys)
        fs.delete(keys[:1])
        assert fs.list_l2_keys() == keys[1:]
        assert fs.naming == "lmcache"
    finally:
        fs.close()
    with pytest.raises(ValueError, match="naming"):
        FSL2Adapter(tmp_path, naming="posix")
