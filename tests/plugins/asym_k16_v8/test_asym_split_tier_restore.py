"""Re-prefill through ``asym_k16_v8_v_only`` in split-tier placement (issue 27, item 2).

A second prefill of a prefix stores the same key with slightly different bits. Before store
generations, K in L1 was replaced while ``fs`` skipped the existing V child, and loads were hits
with K of one store and V of another (147 of 323 hits in a 4-thread race). Every hit must be the
bit-exact K and the fp8-exact V (the codec's own decode of that store's V) of one store.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import lmserde.l1 as l1
import lmserde.l2 as l2
import torch
from lmserde.l2 import SharedStores
from lmserde.memory import MemoryObj
from lmserde_asym_k16_v8 import AsymCodec
from test_asym_wrapper import NUMEL, SHAPE, key, kv_object, sentinel_object

CODEC = AsymCodec()


def expected(obj: MemoryObj) -> tuple[bytes, bytes]:
    """What a hit of ``obj``'s store loads: K bytes as stored, V as the codec decodes it."""
    k, v = obj.get_tensor(0), obj.get_tensor(1)
    blob = torch.empty(CODEC.estimate(0, NUMEL), dtype=torch.uint8)
    n = CODEC.encode_into(blob, None, v)
    v_out = torch.empty(SHAPE, dtype=torch.bfloat16)
    CODEC.decode_into(blob[:n], AsymCodec.locate(blob[:n]), None, v_out)
    return as_bytes(k), as_bytes(v_out)


def as_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(torch.uint8).reshape(-1).numpy())


def test_restore_replaces_both_halves(tmp_path: Path) -> None:
    manager = l1.L1Manager(64 << 20)
    split = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv"),
         "serde": {"type": "asym_k16_v8_v_only"}}, manager)
    try:
        a = key(50)
        d1, d2 = kv_object(51), kv_object(52)
        assert l2.store_sync(split, [a], [d1]).is_successful()
        assert l2.store_sync(split, [a], [d2]).is_successful()  # re-prefill, other bits
        out = sentinel_object()
        assert l2.load_sync(split, [a], [out]).count() == 1
        assert (as_bytes(out.get_tensor(0)), as_bytes(out.get_tensor(1))) == expected(d2)
    finally:
        split.close()
    assert manager.memory_used_bytes() == 0


def test_racing_restores_hit_one_store_or_miss(tmp_path: Path) -> None:
    """Four threads re-store two keys with new data each time and load after each store."""
    manager = l1.L1Manager(64 << 20)
    split = l2.create_l2_adapter(
        {"type": "fs", "base_path": str(tmp_path / "kv"),
         "serde": {"type": "asym_k16_v8_v_only"}}, manager)
    keys = [key(60), key(61)]
    seeds = itertools.count(7000)
    by_k: dict[bytes, bytes] = {}  # K bytes of every store -> its V as the codec decodes it
    lock = threading.Lock()
    errors: list[str] = []
    counts = {"hits": 0, "mixed": 0, "stored": 0}
    stores = SharedStores(split)
    deadline = time.monotonic() + 2.5

    def worker(index: int) -> None:
        try:
            n = index
            while time.monotonic() < deadline:
                k = keys[n % 2]
                n += 1
                with lock:
                    seed = next(seeds)
                obj = kv_object(seed)
                k_bytes, v_decoded = expected(obj)
                with lock:
                    by_k[k_bytes] = v_decoded  # known before any load can hit it
                if stores.store([k], [obj]).is_successful():
                    with lock:
                        counts["stored"] += 1
                out = sentinel_object()
                if l2.load_sync(split, [k], [out]).count() == 1:
                    got_k, got_v = as_bytes(out.get_tensor(0)), as_bytes(out.get_tensor(1))
                    with lock:
                        counts["hits"] += 1
                        if by_k.get(got_k) != got_v:
                            counts["mixed"] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(f"worker {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert counts["mixed"] == 0, f"hits with K and V of different stores: {counts}"
        assert counts["hits"] > 0 and counts["stored"] > 0, f"the race never hit: {counts}"
        assert split.metrics()["rejections"] == {}, "no V child was read under a wrong key"
    finally:
        split.close()
    assert manager.memory_used_bytes() == 0
