"""LMCache-side keys, layouts and memory objects for the interop tests (imports ``lmcache``)."""

from __future__ import annotations

from typing import Any

import torch


def make_l1_manager(size: int) -> Any:
    from lmcache.v1.distributed.config import L1ManagerConfig, L1MemoryManagerConfig
    from lmcache.v1.distributed.l1_manager import L1Manager

    return L1Manager(L1ManagerConfig(memory_config=L1MemoryManagerConfig(
        size_in_bytes=size, use_lazy=False, shm_name="")))


def lmcache_key(i: int, salt: str = "") -> Any:
    from lmcache.v1.distributed.api import ObjectKey

    return ObjectKey(chunk_hash=i.to_bytes(8, "big") * 4, model_name="acme/llm",
                     kv_rank=0x01010000, object_group_id=0, cache_salt=salt)


def lmcache_layout(shapes: list[list[int]], dtypes: list[torch.dtype]) -> Any:
    from lmcache.v1.distributed.api import MemoryLayoutDesc

    return MemoryLayoutDesc(shapes=[torch.Size(s) for s in shapes], dtypes=list(dtypes))


def reserve_objects(l1: Any, keys: list[Any], layout: Any) -> list[Any]:
    """Write-locked LMCache memory objects of ``layout`` (release with ``release``)."""
    from lmcache.v1.distributed.error import L1Error

    results = l1.reserve_write(keys, [False] * len(keys), layout)
    objs = []
    for key in keys:
        error, obj = results[key]
        assert error == L1Error.SUCCESS, f"L1 reserve failed: {error}"
        objs.append(obj)
    return objs


def fill_seeded(obj: Any, seed: int) -> None:
    """Fill every group of ``obj`` with seeded normal values."""
    gen = torch.Generator().manual_seed(seed)
    for g, (shape, dtype) in enumerate(zip(obj.get_shapes(), obj.get_dtypes())):
        obj.get_tensor(g).copy_(torch.randn(list(shape), generator=gen).to(dtype))


def release(l1: Any, keys: list[Any]) -> None:
    l1.finish_write_and_delete(keys)


def wait_store(adapter: Any, task_id: int, timeout: float = 30.0) -> Any:
    """Poll an LMCache adapter until store ``task_id`` completes; returns its ``L2StoreResult``."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = adapter.pop_completed_store_tasks()
        if task_id in done:
            return done[task_id]
        time.sleep(0.005)
    raise AssertionError(f"store task {task_id} did not complete within {timeout} s")


def wait_load(adapter: Any, task_id: int, n: int, timeout: float = 30.0) -> list[bool]:
    """Poll an LMCache adapter until load ``task_id`` completes; returns the per-key hits."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bitmap = adapter.query_load_result(task_id)
        if bitmap is not None:
            return [bool(bitmap.test(i)) for i in range(n)]
        time.sleep(0.005)
    raise AssertionError(f"load task {task_id} did not complete within {timeout} s")
