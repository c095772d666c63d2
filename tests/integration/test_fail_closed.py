"""Fail-closed L2: with the stored-object frame, a load is the right bytes or a miss.

A corruption campaign runs every shipped serde (and chains) through ``create_l2_adapter`` on
``fs``: each stored file is damaged in every region (header fields, payload start/middle/end),
truncated, extended, zeroed, randomised, replaced by another key's file or by the file another
configuration wrote. Every damaged key must be a miss (never a hit with other bytes), counted by
reason; an object whose damage the load proves (:data:`DAMAGE_REASONS`) is deleted from L2, one
that may be another reader's (:data:`NOT_MINE_REASONS`: another key, config, frame version, no
frame at all) is left in place, and the next store of the genuine object replaces whatever is
there: one store heals the key.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    Serializer,
    as_byte_tensor,
)
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    FRAME_HEADER_BYTES,
    REJECT_REASONS,
    FSL2Adapter,
    L2AdapterInterface,
    L2StoreResult,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    key_file_name,
)
from lmserde.l2.serde.stored_frame import DAMAGE_REASONS
from lmserde.l2.serde.wrapper import UNHEALTHY_AFTER_FAILURES
from lmserde.spec import SerdeSizeContract
from shipped_serdes import KV, shipped_serdes

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_aesgcm")
pytest.importorskip("lmserde_turboquant")
pytest.importorskip("lmserde_asym_k16_v8")



_serdes = shipped_serdes


SERDE_NAMES = list(_serdes("").keys())


@pytest.fixture
def master_key(tmp_path: Path) -> str:
    path = tmp_path / "master.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return str(path)


def _adapter(base: Path, serde: Any, l1: L1Manager, **extra: Any) -> L2AdapterInterface:
    return create_l2_adapter({"type": "fs", "base_path": str(base), "serde": serde, **extra}, l1)


Damage = Callable[[bytes, bytes], bytes]


def _flip(offset: int) -> Damage:
    def damage(data: bytes, _other: bytes) -> bytes:
        out = bytearray(data)
        out[offset % len(out)] ^= 0x04
        return bytes(out)
    return damage


def _campaign(payload_len: int) -> dict[str, Damage]:
    """Named damages of one stored object (``other`` is another key's stored object)."""
    header_fields = {"magic": 1, "version": 4, "flags": 5, "length": 9, "checksum": 17,
                     "config": 25, "key": 33, "layout": 41, "header-crc": 61}
    damages: dict[str, Damage] = {f"flip-{name}": _flip(off) for name, off in header_fields.items()}
    for name, off in (("start", 0), ("middle", payload_len // 2), ("end", payload_len - 1)):
        damages[f"flip-payload-{name}"] = _flip(FRAME_HEADER_BYTES + off)
    rng = random.Random(1234)
    damages.update({
        "truncate-empty": lambda d, _o: b"",
        "truncate-header": lambda d, _o: d[:FRAME_HEADER_BYTES - 1],
        "truncate-one": lambda d, _o: d[:-1],
        "truncate-half": lambda d, _o: d[: len(d) // 2],
        "append-one": lambda d, _o: d + b"\0",
        "append-64": lambda d, _o: d + bytes(64),
        "zeroed": lambda d, _o: bytes(len(d)),
        "random": lambda d, _o: bytes(rng.getrandbits(8) for _ in range(len(d))),
        "other-key": lambda _d, o: o,
        "random-flips": lambda d, _o: _random_flips(d, rng),
    })
    return damages


def _random_flips(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(8):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


@pytest.mark.parametrize("name", SERDE_NAMES)
def test_corruption_campaign_gives_zero_wrong_hits(name: str, tmp_path: Path, master_key: str,
                                                   l1: L1Manager, cache: Cache) -> None:
    serde, layout = _serdes(master_key)[name]
    base = tmp_path / "l2"
    wrapper = _adapter(base, serde, l1)
    try:
        victim, other = key_of(1, salt="tenant-a"), key_of(2, salt="tenant-a")
        objs = objects_for(layout, 2)
        assert cache.store(wrapper, [victim, other], objs).is_successful()
        bitmap, clean = cache.load(wrapper, [victim], layout)
        assert bitmap.to_list() == [True]
        good = (base / key_file_name(victim)).read_bytes()
        other_bytes = (base / key_file_name(other)).read_bytes()
        damages = _campaign(len(good) - FRAME_HEADER_BYTES)
        path = base / key_file_name(victim)
        for label, damage in damages.items():
            damaged = damage(good, other_bytes)
            path.write_bytes(damaged)
            before = dict(wrapper.metrics()["rejections"])
            bitmap, data = cache.load(wrapper, [victim], layout)
            assert bitmap.to_list() == [False], f"{name}: '{label}' was served as a hit"
            after = wrapper.metrics()["rejections"]
            refused = {r for r in after if after[r] != before.get(r, 0)}
            if refused & DAMAGE_REASONS:  # proven damage: removed by the load
                assert not path.exists(), f"{label}: damage ({refused}) not removed"
            else:  # another reader's object, or one the inner adapter did not load: untouched
                assert path.read_bytes() == damaged, f"{label}: ({refused}) was changed"
            assert refused <= set(REJECT_REASONS)
            # one store of the genuine object heals the key, whatever was there
            assert cache.store(wrapper, [victim], objs[:1]).is_successful()
            bitmap, data = cache.load(wrapper, [victim], layout)
            assert bitmap.to_list() == [True], f"{label}: one store did not heal the key"
            assert torch.equal(data[0], clean[0]), f"{label}: the repaired object differs"
            good = path.read_bytes()
        metrics = wrapper.metrics()
        rejected = metrics["rejections"]
        assert set(rejected) <= set(REJECT_REASONS)
        assert metrics["repaired"] == sum(n for r, n in rejected.items() if r in DAMAGE_REASONS)
        assert rejected.get("key", 0) >= 1  # another key's object is refused for that reason
        assert rejected.get("foreign", 0) >= 1  # no lmserde frame at all (zeroed, random)
        assert rejected.get("checksum", 0) + rejected.get("decode", 0) >= 1  # payload damage
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_a_changed_config_is_a_config_miss_then_repaired(tmp_path: Path, l1: L1Manager,
                                                          cache: Cache) -> None:
    base = tmp_path / "l2"
    key = key_of(7)
    obj = objects_for(KV, 1)
    old = _adapter(base, {"type": "fp8", "fp8_dtype": "float8_e4m3fn"}, l1)
    try:
        assert cache.store(old, [key], obj).is_successful()
    finally:
        old.close()
    new = _adapter(base, {"type": "fp8", "fp8_dtype": "float8_e5m2"}, l1)
    try:
        bitmap, _ = cache.load(new, [key], KV)
        assert bitmap.to_list() == [False]
        assert new.metrics()["rejections"] == {"config": 1}
        assert new.metrics()["repaired"] == 0  # another config's object is not deleted ...
        assert (base / key_file_name(key)).exists()
        assert cache.store(new, [key], obj).is_successful()  # ... but one store replaces it
        assert cache.load(new, [key], KV)[0].to_list() == [True]
    finally:
        new.close()


def test_a_changed_worker_count_keeps_old_objects(tmp_path: Path, l1: L1Manager,
                                                  cache: Cache) -> None:
    base = tmp_path / "l2"
    key = key_of(8)
    obj = objects_for(KV, 1)
    first = _adapter(base, {"type": "fp8", "max_workers": 1}, l1)
    try:
        assert cache.store(first, [key], obj).is_successful()
    finally:
        first.close()
    second = _adapter(base, {"type": "fp8", "max_workers": 3}, l1)
    try:
        assert cache.load(second, [key], KV)[0].to_list() == [True]
    finally:
        second.close()


def test_an_object_moved_to_another_key_is_a_key_miss(tmp_path: Path, l1: L1Manager,
                                                      cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "identity"}, l1)
    try:
        a, b = key_of(1, salt="t1"), key_of(1, salt="t2")
        assert cache.store(wrapper, [a], objects_for(KV, 1)).is_successful()
        os.link(base / key_file_name(a), base / key_file_name(b))
        bitmap, _ = cache.load(wrapper, [a, b], [KV, KV])
        assert bitmap.to_list() == [True, False]
        assert wrapper.metrics()["rejections"] == {"key": 1}
    finally:
        wrapper.close()


def test_a_load_into_another_layout_is_a_layout_miss(tmp_path: Path, l1: L1Manager,
                                                     cache: Cache) -> None:
    base = tmp_path / "l2"
    same_size = MemoryLayoutDesc([[6, 2, 16, 256]], [torch.bfloat16])
    wrapper = _adapter(base, {"type": "identity"}, l1)
    try:
        key = key_of(3)
        assert cache.store(wrapper, [key], objects_for(KV, 1)).is_successful()
        assert cache.load(wrapper, [key], same_size)[0].to_list() == [False]
        assert wrapper.metrics()["rejections"] == {"layout": 1}
    finally:
        wrapper.close()


def test_frame_off_stores_raw_serde_bytes(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "fp8"}, l1, serde_frame=False)
    try:
        assert not wrapper.framed
        key = key_of(4)
        objs = objects_for(KV, 1)
        assert cache.store(wrapper, [key], objs).is_successful()
        assert (base / key_file_name(key)).stat().st_size == KV.nbytes // 2
        bitmap, data = cache.load(wrapper, [key], KV)
        assert bitmap.to_list() == [True]
        expected = layout_bytes(objs[0]).view(torch.bfloat16).float()
        assert torch.allclose(data[0].view(torch.bfloat16).float(), expected, rtol=0.07, atol=1e-2)
    finally:
        wrapper.close()


def test_framed_objects_are_larger_by_exactly_the_header(tmp_path: Path, l1: L1Manager,
                                                         cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "fp8"}, l1)
    try:
        key = key_of(5)
        result = cache.store(wrapper, [key], objects_for(KV, 1))
        assert result.bytes_transferred() == KV.nbytes // 2 + FRAME_HEADER_BYTES
        assert (base / key_file_name(key)).stat().st_size == KV.nbytes // 2 + FRAME_HEADER_BYTES
        assert wrapper.report_status()["serde_framed"] is True
    finally:
        wrapper.close()


def test_serde_frame_option_is_validated() -> None:
    with pytest.raises(ValueError, match="serde_frame"):
        create_l2_adapter({"type": "memory", "serde": {"type": "identity"},
                           "serde_frame": "no"}, L1Manager(1 << 20))
    with pytest.raises(ValueError, match="serde_frame"):
        create_l2_adapter({"type": "memory", "serde_frame": False})


def _keys(n: int) -> list[ObjectKey]:
    return [key_of(100 + i) for i in range(n)]


def test_rejections_are_per_key_in_a_batch(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "identity"}, l1)
    try:
        keys = _keys(4)
        objs = objects_for(KV, 4)
        assert cache.store(wrapper, keys, objs).is_successful()
        path = base / key_file_name(keys[1])
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
        bitmap, loaded = cache.load(wrapper, keys, KV)
        assert bitmap.to_list() == [True, False, True, True]
        for i in (0, 2, 3):
            assert torch.equal(loaded[i], layout_bytes(objs[i]))
        assert wrapper.metrics()["rejections"] == {"checksum": 1}
        assert int((loaded[1] != 0xA5).sum()) == 0  # refused before decoding: never written
    finally:
        wrapper.close()


def test_a_long_damaged_payload_decoded_while_hashing_is_zeroed(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    """Over one checksum segment (4 MiB) the serde decodes while the segments are hashed; what it
    decoded from damaged bytes is zeroed before the miss is reported."""
    big = MemoryLayoutDesc([[2, 4, 256, 1280]], [torch.bfloat16])  # 5 MiB: two segments
    wrapper = _adapter(tmp_path, {"type": "identity"}, l1)
    try:
        keys = _keys(2)
        objs = objects_for(big, 2)
        assert cache.store(wrapper, keys, objs).is_successful()
        path = tmp_path / key_file_name(keys[0])
        data = bytearray(path.read_bytes())
        data[-7] ^= 0x40  # in the second segment
        path.write_bytes(bytes(data))
        bitmap, loaded = cache.load(wrapper, keys, big)
        assert bitmap.to_list() == [False, True]
        assert torch.equal(loaded[1], layout_bytes(objs[1]))
        assert wrapper.metrics()["rejections"] == {"checksum": 1}
        assert int(loaded[0].count_nonzero()) == 0  # decoded meanwhile, then zeroed
    finally:
        wrapper.close()


class _ShortWriter(Serializer):
    """Declares EXACT but writes one byte less than its estimate (or more, with ``extra``)."""

    def __init__(self, delta: int) -> None:
        self.delta = delta

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        n = src.get_size() + self.delta
        as_byte_tensor(dst)[: min(n, dst.get_size())].zero_()
        return n

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes


class _NeverDecodes(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        raise AssertionError("nothing is stored, so nothing is decoded")


@pytest.mark.parametrize("frame", [True, False])
def test_an_exact_serde_writing_less_than_its_estimate_stores_nothing(
        frame: bool, tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    proc = AsyncSerdeProcessor(_ShortWriter(-1), _NeverDecodes(), serde_type="short")
    wrapper = SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), proc, l1,
                                    size_contract=SerdeSizeContract.EXACT, frame=frame)
    try:
        key = key_of(1)
        assert cache.store(wrapper, [key], objects_for(KV, 1)) == L2StoreResult(False, 0)
        assert not (tmp_path / key_file_name(key)).exists()
        assert wrapper.metrics()["failures"] == {"output_contract": 1}
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


def test_health_turns_false_while_stores_keep_failing_and_recovers(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    proc = AsyncSerdeProcessor(_ShortWriter(-1), _NeverDecodes(), serde_type="short")
    wrapper = SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), proc, l1,
                                    size_contract=SerdeSizeContract.EXACT)
    try:
        for i in range(UNHEALTHY_AFTER_FAILURES - 1):
            assert not cache.store(wrapper, [key_of(i)], objects_for(KV, 1)).is_successful()
            assert wrapper.report_status()["is_healthy"] is True
        assert not cache.store(wrapper, [key_of(99)], objects_for(KV, 1)).is_successful()
        status = wrapper.report_status()
        assert status["is_healthy"] is False
        assert status["serde_consecutive_failures"]["store"] == UNHEALTHY_AFTER_FAILURES
        proc.serializer.delta = 0  # the serde behaves again: the next good store heals
        assert cache.store(wrapper, [key_of(100)], objects_for(KV, 1)).is_successful()
        assert wrapper.report_status()["is_healthy"] is True
    finally:
        wrapper.close()


def test_health_turns_false_while_loads_keep_refusing_objects(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    wrapper = _adapter(tmp_path, {"type": "identity"}, l1)
    try:
        keys = _keys(UNHEALTHY_AFTER_FAILURES)
        good = objects_for(KV, 1)
        for key in keys:  # framed objects with a damaged header: proven damage, every time
            assert cache.store(wrapper, [key], good).is_successful()
            path = tmp_path / key_file_name(key)
            data = bytearray(path.read_bytes())
            data[20] ^= 0x01
            path.write_bytes(bytes(data))
            assert cache.load(wrapper, [key], KV)[0].to_list() == [False]
        assert wrapper.report_status()["is_healthy"] is False
        assert wrapper.metrics()["rejections"] == {"format": UNHEALTHY_AFTER_FAILURES}
        assert cache.store(wrapper, keys[:1], objects_for(KV, 1)).is_successful()
        assert cache.load(wrapper, keys[:1], KV)[0].to_list() == [True]
        assert wrapper.report_status()["is_healthy"] is True
    finally:
        wrapper.close()
