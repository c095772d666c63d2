"""Authenticated frames (``frame_key_path`` / ``frame_keyring_path``): forgeries are misses.

An attacker who can write the storage but holds no frame key copies a genuine object to another
key, tenant, model, rank or config and recomputes every unkeyed field (fingerprints, header
checksum; a plain frame's payload checksum stays right since the payload is unchanged). Under a
plain frame that is a hit; under an authenticated frame it is a miss, reason ``auth``, for every
shipped serde and chain, the forged object left in place (not provably damage) and the genuine
one still hitting. Also: a frame lacking the protection its reader's config requires is refused
(a plain frame under a frame key; a cleared checksum flag), a tenant the ring does not hold is
``unkeyed`` and a key version newer than it holds ``foreign``, and the options are validated at
config time.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import L2AdapterInterface, create_l2_adapter, key_file_name
from lmserde.l2.serde.authenticated_frame import AUTH_HEADER_BYTES
from lmserde.l2.serde.payload_checksum import xxh3_64
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, key_fingerprint
from lmserde.tenant_keys import add_keyring_version, write_master_key
from shipped_serdes import KV, shipped_serdes

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_aesgcm")
pytest.importorskip("lmserde_turboquant")
pytest.importorskip("lmserde_asym_k16_v8")
pytest.importorskip("lmserde_zstd")



def _serdes(master_key: str) -> dict[str, tuple[Any, MemoryLayoutDesc]]:
    """Every shipped serde, preset family and chain (as the fail-closed campaign), plus zstd."""
    return {**shipped_serdes(master_key), "zstd": ({"type": "zstd"}, KV),
            "fp8+zstd": ([{"type": "fp8"}, {"type": "zstd"}], KV)}


SERDE_NAMES = list(_serdes("").keys())


def _private_file(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def master_key(tmp_path: Path) -> str:
    return _private_file(tmp_path / "aes.key", os.urandom(32))


@pytest.fixture
def frame_key(tmp_path: Path) -> str:
    return str(write_master_key(tmp_path / "frame.key"))


def _adapter(base: Path, serde: Any, l1: L1Manager, **extra: Any) -> L2AdapterInterface:
    return create_l2_adapter({"type": "fs", "base_path": str(base), "serde": serde, **extra}, l1)


def _rehead(data: bytes, *, key: ObjectKey | None = None, config_id: int | None = None,
            flags_clear: int = 0) -> bytes:
    """``data`` with the header's key or config fingerprint replaced (or flag bits cleared) and
    the header checksum recomputed: all an attacker without a key can do."""
    out = bytearray(data)
    if key is not None:
        struct.pack_into("<Q", out, 32, key_fingerprint(key))
    if config_id is not None:
        struct.pack_into("<Q", out, 24, config_id)
    out[5] &= ~flags_clear & 0xFF
    struct.pack_into("<I", out, 60, xxh3_64(bytes(out[:60])) & 0xFFFFFFFF)
    return bytes(out)


VICTIM = key_of(1, salt="tenant-a")
#: Where a forger moves the victim's object: the key another request will load.
MOVES: dict[str, ObjectKey] = {
    "chunk": key_of(2, salt="tenant-a"),
    "tenant": key_of(1, salt="tenant-b"),
    "model": key_of(1, salt="tenant-a", model="other/model"),
    "rank": ObjectKey(VICTIM.chunk_hash, VICTIM.model_name, 0x01010102, 0, VICTIM.cache_salt),
    "group": ObjectKey(VICTIM.chunk_hash, VICTIM.model_name, VICTIM.kv_rank, 1,
                       VICTIM.cache_salt),
}


def _forge_move(base: Path, wrapper: L2AdapterInterface, target: ObjectKey) -> bytes:
    forged = _rehead((base / key_file_name(VICTIM)).read_bytes(), key=target)
    (base / key_file_name(target)).write_bytes(forged)
    return forged


def _rejections(wrapper: L2AdapterInterface) -> dict[str, int]:
    return dict(wrapper.metrics()["rejections"])  # type: ignore[attr-defined]


def test_a_plain_frame_serves_a_forged_move(tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    """The attack works without a frame key (what the authenticated frame is for)."""
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "fp8"}, l1)
    try:
        assert cache.store(wrapper, [VICTIM], objects_for(KV, 1)).is_successful()
        _forge_move(base, wrapper, MOVES["tenant"])
        assert cache.load(wrapper, [MOVES["tenant"]], KV)[0].to_list() == [True]
    finally:
        wrapper.close()


@pytest.mark.parametrize("name", SERDE_NAMES)
def test_forged_moves_are_auth_misses_for_every_serde(name: str, tmp_path: Path, master_key: str,
                                                      frame_key: str, l1: L1Manager,
                                                      cache: Cache) -> None:
    serde, layout = _serdes(master_key)[name]
    base = tmp_path / "l2"
    wrapper = _adapter(base, serde, l1, frame_key_path=frame_key)
    try:
        objs = objects_for(layout, 1)
        assert cache.store(wrapper, [VICTIM], objs).is_successful()
        hit, genuine = cache.load(wrapper, [VICTIM], layout)
        assert hit.to_list() == [True]
        stored = (base / key_file_name(VICTIM)).read_bytes()
        assert stored[4] == 2 and len(stored) > AUTH_HEADER_BYTES  # an authenticated frame
        for move, target in MOVES.items():
            forged = _forge_move(base, wrapper, target)
            before = _rejections(wrapper)
            bitmap, _ = cache.load(wrapper, [target], layout)
            assert bitmap.to_list() == [False], f"{name}: a forged {move} move was a hit"
            after = _rejections(wrapper)
            assert after.get("auth", 0) == before.get("auth", 0) + 1, (move, after)
            # not provably damage: kept for whoever can read it; the next store replaces it
            assert (base / key_file_name(target)).read_bytes() == forged
        bitmap, data = cache.load(wrapper, [VICTIM], layout)
        assert bitmap.to_list() == [True] and torch.equal(data[0], genuine[0])
        assert wrapper.metrics()["repaired"] == 0  # type: ignore[attr-defined]
        assert l1.memory_used_bytes() == 0
    finally:
        wrapper.close()


@pytest.mark.parametrize("name", SERDE_NAMES)
def test_an_object_under_another_frame_key_is_an_auth_miss(
        name: str, tmp_path: Path, master_key: str, frame_key: str, l1: L1Manager,
        cache: Cache) -> None:
    serde, layout = _serdes(master_key)[name]
    base = tmp_path / "l2"
    other_key = str(write_master_key(tmp_path / "other-frame.key"))
    writer = _adapter(base, serde, l1, frame_key_path=other_key)
    try:
        assert cache.store(writer, [VICTIM], objects_for(layout, 1)).is_successful()
    finally:
        writer.close()
    reader = _adapter(base, serde, l1, frame_key_path=frame_key)
    try:
        assert cache.load(reader, [VICTIM], layout)[0].to_list() == [False]
        assert _rejections(reader) == {"auth": 1}
        assert (base / key_file_name(VICTIM)).exists()  # another fleet's object: kept
        assert cache.store(reader, [VICTIM], objects_for(layout, 1)).is_successful()
        assert cache.load(reader, [VICTIM], layout)[0].to_list() == [True]  # one store heals
    finally:
        reader.close()


#: Two configurations of one serde whose objects have the same length.
CONFIG_PAIRS = {
    "fp8": ({"type": "fp8"}, {"type": "fp8", "fp8_dtype": "float8_e5m2"}),
    "zstd": ({"type": "zstd", "level": 1}, {"type": "zstd", "level": 3}),
}


@pytest.mark.parametrize("pair", list(CONFIG_PAIRS))
def test_a_forged_config_fingerprint_is_an_auth_miss(pair: str, tmp_path: Path, frame_key: str,
                                                     l1: L1Manager, cache: Cache) -> None:
    first, second = CONFIG_PAIRS[pair]
    base = tmp_path / "l2"
    writer = _adapter(base, first, l1, frame_key_path=frame_key)
    try:
        assert cache.store(writer, [VICTIM], objects_for(KV, 1)).is_successful()
    finally:
        writer.close()
    reader = _adapter(base, second, l1, frame_key_path=frame_key)
    try:
        path = base / key_file_name(VICTIM)
        assert cache.load(reader, [VICTIM], KV)[0].to_list() == [False]
        assert _rejections(reader) == {"config": 1}  # unforged: sorted as another config
        path.write_bytes(_rehead(path.read_bytes(), config_id=reader.framer.config_id))
        assert cache.load(reader, [VICTIM], KV)[0].to_list() == [False]
        assert _rejections(reader) == {"config": 1, "auth": 1}
        assert path.exists()
    finally:
        reader.close()


def test_a_plain_frame_under_a_frame_key_is_refused(tmp_path: Path, frame_key: str,
                                                    l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    plain = _adapter(base, {"type": "fp8"}, l1)
    try:
        assert cache.store(plain, [VICTIM], objects_for(KV, 1)).is_successful()
    finally:
        plain.close()
    keyed = _adapter(base, {"type": "fp8"}, l1, frame_key_path=frame_key)
    try:
        assert cache.load(keyed, [VICTIM], KV)[0].to_list() == [False]
        assert _rejections(keyed) == {"auth": 1}
        assert (base / key_file_name(VICTIM)).exists()
    finally:
        keyed.close()
    plain = _adapter(base, {"type": "fp8"}, l1)  # and a plain reader does not read frame v2
    try:
        keyed = _adapter(base, {"type": "fp8"}, l1, frame_key_path=frame_key)
        try:
            assert cache.store(keyed, [VICTIM], objects_for(KV, 1)).is_successful()
        finally:
            keyed.close()
        assert cache.load(plain, [VICTIM], KV)[0].to_list() == [False]
        assert _rejections(plain) == {"foreign": 1}
    finally:
        plain.close()


@pytest.mark.parametrize("serde", [{"type": "identity"}, {"type": "fp8"}, {"type": "zstd"}])
def test_a_cleared_checksum_flag_is_refused(serde: dict[str, Any], tmp_path: Path, l1: L1Manager,
                                            cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, serde, l1)
    try:
        assert cache.store(wrapper, [VICTIM], objects_for(KV, 1)).is_successful()
        path = base / key_file_name(VICTIM)
        damaged = bytearray(_rehead(path.read_bytes(), flags_clear=0x01))
        damaged[FRAME_HEADER_BYTES + 5] ^= 0x10  # and the payload is no longer the checked one
        path.write_bytes(bytes(damaged))
        assert cache.load(wrapper, [VICTIM], KV)[0].to_list() == [False]
        assert _rejections(wrapper) == {"checksum": 1}
    finally:
        wrapper.close()


def test_an_authenticating_serde_still_skips_the_checksum(tmp_path: Path, master_key: str,
                                                          l1: L1Manager, cache: Cache) -> None:
    base = tmp_path / "l2"
    wrapper = _adapter(base, {"type": "aesgcm", "master_key_path": master_key}, l1)
    try:
        assert cache.store(wrapper, [VICTIM], objects_for(KV, 1)).is_successful()
        assert (base / key_file_name(VICTIM)).read_bytes()[5] & 0x01 == 0
        assert cache.load(wrapper, [VICTIM], KV)[0].to_list() == [True]
    finally:
        wrapper.close()


def _keyring(path: Path, tenants: dict[str, dict[int, bytes]], current: dict[str, int]) -> str:
    import base64
    doc = {"lmserde_aesgcm_keyring": 1, "tenants": {
        name: {"current": current[name],
               "keys": {str(v): base64.b64encode(s).decode() for v, s in keys.items()}}
        for name, keys in tenants.items()}}
    return _private_file(path, json.dumps(doc).encode())


def test_keyring_versions_tenants_and_unknown_keys(tmp_path: Path, l1: L1Manager,
                                                   cache: Cache) -> None:
    base = tmp_path / "l2"
    ring = tmp_path / "frame.keyring"
    add_keyring_version(ring, "tenant-a")
    add_keyring_version(ring, "tenant-b")
    a, b, c = key_of(1, salt="tenant-a"), key_of(1, salt="tenant-b"), key_of(1, salt="tenant-c")
    wrapper = _adapter(base, {"type": "fp8"}, l1, frame_keyring_path=str(ring))
    try:
        assert cache.store(wrapper, [a, b], objects_for(KV, 2)).is_successful()
        assert cache.load(wrapper, [a, b], [KV, KV])[0].to_list() == [True, True]
        # a tenant the ring has no key for: nothing is stored
        assert not cache.store(wrapper, [c], objects_for(KV, 1)).is_successful()
        assert not (base / key_file_name(c)).exists()
        status = wrapper.report_status()
        assert status["serde_frame_mode"].startswith("authenticated (AES-256-GMAC; keyring")
        secret_text = ring.read_text()
        assert all(v not in repr(status) for v in json.loads(secret_text)["tenants"]["tenant-a"]
                   ["keys"].values())
    finally:
        wrapper.close()
    add_keyring_version(ring, "tenant-a")  # rotate: v2 is current, v1 still reads
    doc = json.loads(ring.read_text())
    del doc["tenants"]["tenant-b"]  # tenant-b forgotten
    _private_file(ring, json.dumps(doc).encode())
    wrapper = _adapter(base, {"type": "fp8"}, l1, frame_keyring_path=str(ring))
    try:
        assert cache.load(wrapper, [a, b], [KV, KV])[0].to_list() == [True, False]
        assert _rejections(wrapper) == {"unkeyed": 1}  # its key is gone: scrub may reclaim it
        assert (base / key_file_name(b)).exists()  # not ours to read, not damage
        assert cache.store(wrapper, [a], objects_for(KV, 1)).is_successful()
        assert struct.unpack_from("<I", (base / key_file_name(a)).read_bytes(), 16)[0] == 2
    finally:
        wrapper.close()
    doc = json.loads(ring.read_text())
    # v2 removed by mistake: newer than every version held (as if not yet distributed): foreign
    del doc["tenants"]["tenant-a"]["keys"]["2"]
    doc["tenants"]["tenant-a"]["current"] = 1
    _private_file(ring, json.dumps(doc).encode())
    wrapper = _adapter(base, {"type": "fp8"}, l1, frame_keyring_path=str(ring))
    try:
        assert cache.load(wrapper, [a], KV)[0].to_list() == [False]
        assert _rejections(wrapper) == {"foreign": 1}
    finally:
        wrapper.close()


def test_a_single_frame_key_still_keys_each_tenant_apart(tmp_path: Path, frame_key: str,
                                                         l1: L1Manager, cache: Cache) -> None:
    from lmserde.l2.serde.frame_keys import FrameKeyOptions

    keys = FrameKeyOptions(key_path=frame_key).open()
    assert keys.mac_key("tenant-a", 0) != keys.mac_key("tenant-b", 0)
    assert keys.mac_key("tenant-a", 0) == keys.mac_key("tenant-a", 0)


Spec = dict[str, Any]
BAD_SPECS: dict[str, tuple[Callable[[str], Spec], str]] = {
    "both": (lambda k: {"frame_key_path": k, "frame_keyring_path": k}, "exclude each other"),
    "not-a-string": (lambda k: {"frame_key_path": 5}, "'frame_key_path' must be a path"),
    "empty": (lambda k: {"frame_keyring_path": ""}, "'frame_keyring_path' must be a path"),
    "missing-file": (lambda k: {"frame_key_path": k + ".missing"},
                     "option 'frame_key_path': cannot open"),
    "unframed": (lambda k: {"frame_key_path": k, "serde_frame": False}, "framed adapter"),
    "keyring-is-not-one": (lambda k: {"frame_keyring_path": k}, "option 'frame_keyring_path'"),
    "interval-without-keyring": (lambda k: {"frame_key_path": k,
                                            "frame_keyring_reload_interval_s": 1},
                                 "only applies with 'frame_keyring_path'"),
    "interval-negative": (lambda k: {"frame_keyring_path": k,
                                     "frame_keyring_reload_interval_s": -1},
                          "'frame_keyring_reload_interval_s' must be a number of seconds"),
    "interval-not-a-number": (lambda k: {"frame_keyring_path": k,
                                         "frame_keyring_reload_interval_s": "5"},
                              "'frame_keyring_reload_interval_s' must be a number of seconds"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_frame_key_options_are_validated(case: str, tmp_path: Path, frame_key: str,
                                         l1: L1Manager) -> None:
    make, message = BAD_SPECS[case]
    spec = {"type": "fs", "base_path": str(tmp_path / "l2"), "serde": {"type": "fp8"},
            **make(frame_key)}
    with pytest.raises(ValueError, match=message):
        create_l2_adapter(spec, l1)
    assert not (tmp_path / "l2").exists()  # refused before the adapter opened anything


def test_a_frame_key_needs_a_serde(tmp_path: Path, frame_key: str) -> None:
    with pytest.raises(ValueError, match="need a 'serde'"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "frame_key_path": frame_key})


def test_a_world_readable_frame_key_is_refused(tmp_path: Path, l1: L1Manager) -> None:
    path = tmp_path / "open.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o644)
    with pytest.raises(ValueError, match="frame_key_path.*chmod 600"):
        _adapter(tmp_path / "l2", {"type": "fp8"}, l1, frame_key_path=str(path))


@pytest.mark.parametrize("adapter", ["fs", "memory"])
def test_large_objects_authenticate_on_both_store_paths(adapter: str, tmp_path: Path,
                                                        frame_key: str, l1: L1Manager,
                                                        cache: Cache) -> None:
    """fs writes heads last (the MAC runs while it writes), memory seals before the store."""
    big = MemoryLayoutDesc([[4, 2, 256, 1024]], [torch.bfloat16])  # 4 MiB: over one segment
    spec = {"type": adapter, "serde": {"type": "identity"}, "frame_key_path": frame_key}
    if adapter == "fs":
        spec["base_path"] = str(tmp_path / "l2")
    wrapper = create_l2_adapter(spec, l1)
    try:
        keys = [key_of(i, salt="t") for i in range(3)]
        objs = objects_for(big, 3)
        assert cache.store(wrapper, keys, objs).is_successful()
        bitmap, data = cache.load(wrapper, keys, big)
        assert bitmap.to_list() == [True] * 3
        for got, obj in zip(data, objs):
            assert torch.equal(got, cache_bytes(obj))
    finally:
        wrapper.close()


def cache_bytes(obj: Any) -> torch.Tensor:
    from datapath_driver import layout_bytes
    return layout_bytes(obj)
