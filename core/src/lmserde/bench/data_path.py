"""The real data path: L1 -> serde wrapper -> L2 adapter, drop from L1, load back through it.

Each chunk is written into an :class:`~lmserde.l1.L1Manager` as a regular object, stored through
the adapter an ``--adapter`` spec describes (with the serde as its ``serde``), dropped from L1,
then loaded back into a fresh L1 object. Every store and every load is one task of one chunk,
submitted and awaited one at a time, so its wall time is that chunk's end-to-end latency.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lmserde.bench.chunk_objects import ChunkForm, chunk_layout, fill_object, read_kv
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S
from lmserde.bench.kv_chunk import KVChunk
from lmserde.keys import ObjectKey
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.memory import TensorMemoryObj

__all__ = ["DataPathError", "DataPathResult", "run_data_path", "reserve_l1_object",
           "BENCH_MODEL_NAME"]

#: ``ObjectKey.model_name`` of the bench's objects.
BENCH_MODEL_NAME = "lmserde-bench"


class DataPathError(RuntimeError):
    """A store or load through the adapter failed (the message says which and why)."""


@dataclass
class DataPathResult:
    """Per-chunk latencies of every repeat, stored sizes, the decoded chunks of the last repeat,
    the wrapper's stage latencies when it reports them, and for split-tier placement the bytes
    each store kept in L1 (K) beside ``stored_bytes`` (V, in L2)."""

    store_seconds: list[float] = field(default_factory=list)
    load_seconds: list[float] = field(default_factory=list)
    stored_bytes: list[int] = field(default_factory=list)
    decoded: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    stage_p50_seconds: dict[str, float] = field(default_factory=dict)
    placement: str = "kv_together"
    l1_kept_bytes: list[int] = field(default_factory=list)


def reserve_l1_object(l1: L1Manager, key: ObjectKey, layout: Any, *,
                      pooled: bool = False) -> TensorMemoryObj:
    """A write-reserved L1 object for ``key``: a regular object, or with ``pooled`` a temporary
    from the L1 manager's buffer pool (resident pages). :class:`DataPathError` when refused."""
    result = l1.reserve_write([key], pooled, layout)
    error, obj = result[key]
    if error is not L1Error.SUCCESS or not isinstance(obj, TensorMemoryObj):
        raise DataPathError(f"L1 reservation of a {layout.nbytes}-byte chunk failed: {error.name}")
    return obj


def _stage_p50(adapter: Any) -> dict[str, float]:
    metrics = getattr(adapter, "metrics", None)
    if not callable(metrics):
        return {}
    try:
        snapshot = metrics()
    except Exception:  # metrics are informational
        return {}
    latency = snapshot.get("latency_seconds", {}) if isinstance(snapshot, Mapping) else {}
    return {stage: float(s["p50"]) for stage, s in latency.items()
            if isinstance(s, Mapping) and s.get("count")}


def _l1_kept(adapter: Any) -> int | None:
    """K bytes a split-tier adapter has kept in L1 so far (``None`` for other adapters)."""
    accounting = getattr(adapter, "accounting", None)
    if not callable(accounting):
        return None
    return int(accounting()["l1_k_bytes_stored"])


def run_data_path(
    adapter_spec: Mapping[str, Any],
    serde_config: Any,
    chunks: Sequence[KVChunk],
    form: ChunkForm,
    repeat: int,
    *,
    on_step: Callable[[], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> DataPathResult:
    """Store and load every chunk ``repeat`` times through ``adapter_spec`` + ``serde_config``.

    Keys are fresh random hashes on every repeat (an adapter holding older objects never
    short-circuits a store). Raises :class:`DataPathError` for a failed store or a load miss,
    ``ValueError`` when the adapter cannot be built (e.g. an upper-bound serde on an adapter
    that cannot report stored sizes).
    """
    first = chunks[0]
    layout = chunk_layout(form, first.num_layers, first.num_tokens,
                          first.num_heads * first.head_dim, first.dtype)
    # room for every chunk plus generous serialized temporaries
    capacity = 4 * len(chunks) * layout.nbytes + (64 << 20)
    l1 = L1Manager(capacity)
    adapter = create_l2_adapter({**adapter_spec, "serde": serde_config}, l1)
    result = DataPathResult()
    kept = _l1_kept(adapter)
    if kept is not None:
        result.placement = "kv_split_tier"
    try:
        for r in range(repeat):
            nonce = os.urandom(8)
            keys = [ObjectKey(nonce + i.to_bytes(4, "big"), BENCH_MODEL_NAME, 0)
                    for i in range(len(chunks))]
            stored: list[int] = []
            l1_kept: list[int] = []
            for key, chunk in zip(keys, chunks):
                obj = reserve_l1_object(l1, key, layout)
                fill_object(obj, chunk, form)
                l1.finish_write_and_reserve_read([key])
                start = time.perf_counter()
                try:
                    outcome = store_sync(adapter, [key], [obj], timeout)
                finally:
                    elapsed = time.perf_counter() - start
                    l1.finish_read([key])
                    l1.delete([key])  # dropped from L1: the load below must come from L2
                if not outcome.is_successful():
                    raise DataPathError(f"store through the {adapter_spec['type']} adapter failed")
                result.store_seconds.append(elapsed)
                stored.append(outcome.bytes_transferred())
                if kept is not None:
                    now = _l1_kept(adapter) or 0
                    l1_kept.append(now - kept)
                    kept = now
                if on_step:
                    on_step()
            decoded = []
            for key, chunk in zip(keys, chunks):
                dst = reserve_l1_object(l1, key, layout)
                start = time.perf_counter()
                try:
                    bitmap = load_sync(adapter, [key], [dst], timeout)
                    elapsed = time.perf_counter() - start
                    if not bitmap.test(0):
                        raise DataPathError(
                            f"load through the {adapter_spec['type']} adapter missed a chunk it "
                            "had stored (the serde could not decode it)"
                        )
                    if r == repeat - 1:
                        k, v = read_kv(dst, form, chunk.num_heads)
                        decoded.append((k.clone(), v.clone()))
                finally:
                    l1.finish_write_and_delete([key])
                result.load_seconds.append(elapsed)
                if on_step:
                    on_step()
            adapter.delete(keys)
            result.stored_bytes = stored
            result.l1_kept_bytes = l1_kept
            result.decoded = decoded
        result.stage_p50_seconds = _stage_p50(adapter)
    finally:
        adapter.close()
    return result
