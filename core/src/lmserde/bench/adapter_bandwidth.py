"""The bandwidth of the adapter a bench run stores through, measured on it: store and load of raw
chunk bytes, no serde, no frame.

``lmserde bench --adapter SPEC`` recommends for *that* adapter: its measured load bandwidth
replaces the fixed example tiers, and the ``auto`` policy's replay uses both directions. Each
round stores every chunk (one task each, awaited before the next), then loads every chunk back
into a fresh L1 object; the first round warms the adapter (connections, page cache) and is not
counted. Every counted store and load is one sample of ``bytes / seconds``; the reported
bandwidth is the median sample, with its sign-test interval
(:func:`~lmserde.bench.median_interval.median_interval`, the same as the frame line's).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lmserde.bench.breakeven import DEFAULT_TIERS, GB, Tier
from lmserde.bench.data_path import BENCH_MODEL_NAME, DataPathError, reserve_l1_object
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S
from lmserde.bench.median_interval import MedianInterval, median_interval
from lmserde.keys import ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.memory import MemoryLayoutDesc

__all__ = ["AdapterBandwidth", "measure_adapter_bandwidth", "adapter_bandwidth_steps",
           "describe_adapter_bandwidth", "recommendation_tiers", "MIN_BANDWIDTH_ROUNDS"]

#: Least counted rounds (the interval needs samples: 4 chunks x 3 rounds = 12 per direction).
MIN_BANDWIDTH_ROUNDS = 3


@dataclass(frozen=True)
class AdapterBandwidth:
    """Measured store and load bandwidth (bytes/s) of one adapter, on objects of ``object_bytes``."""

    adapter: str
    object_bytes: int
    store: MedianInterval
    load: MedianInterval

    def to_json(self) -> dict[str, Any]:
        """GB/s (1e9 B/s) medians and intervals, the interval's coverage, the sample count."""
        def direction(m: MedianInterval) -> dict[str, Any]:
            return {"gbps": m.median / 1e9, "interval_gbps": [m.low / 1e9, m.high / 1e9],
                    "coverage": m.coverage, "samples": m.samples}

        return {"adapter": self.adapter, "object_bytes": self.object_bytes,
                "store": direction(self.store), "load": direction(self.load)}


def recommendation_tiers(given: Sequence[Tier] | None,
                         bandwidth: AdapterBandwidth | None) -> list[Tier]:
    """The tiers a run recommends for: the measured adapter's (at its load bandwidth), then the
    ``given`` ones; without a measurement, the given tiers or the example ones."""
    if bandwidth is None:
        return list(given or DEFAULT_TIERS)
    store = bandwidth.store.median / GB
    measured = Tier(f"{bandwidth.adapter} adapter, measured", bandwidth.load.median / GB,
                    f"load bandwidth measured on this adapter (store {store:.3g} GB/s)")
    return [measured, *(given or ())]


def adapter_bandwidth_steps(rounds: int, chunks: int) -> int:
    """Progress steps :func:`measure_adapter_bandwidth` reports (one per store and per load)."""
    return (rounds + 1) * chunks * 2


def _plain_spec(adapter_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec without serde and frame settings (raw bytes straight to the adapter)."""
    spec = {k: v for k, v in adapter_spec.items() if k not in ("serde", "serde_frame")}
    if "base_path" in spec:
        spec["base_path"] = os.path.join(str(spec["base_path"]), "bandwidth")
    return spec


def measure_adapter_bandwidth(
    adapter_spec: Mapping[str, Any], chunks: Sequence[torch.Tensor], rounds: int, *,
    timeout: float = DEFAULT_TIMEOUT_S, on_step: Callable[[], None] | None = None,
) -> AdapterBandwidth:
    """Store and load ``chunks`` (1-D ``uint8`` tensors of one size) through the adapter
    ``adapter_spec`` describes, ``rounds`` counted rounds after one warm-up round (see the module
    docstring). :class:`~lmserde.bench.data_path.DataPathError` when a store fails or a load
    misses; ``ValueError`` for no chunks, chunks of different sizes or ``rounds < 1``."""
    if rounds < 1 or not chunks:
        raise ValueError("measure_adapter_bandwidth needs at least one round and one chunk")
    nbytes = chunks[0].numel()
    if any(c.dtype != torch.uint8 or c.dim() != 1 or c.numel() != nbytes for c in chunks):
        raise ValueError("measure_adapter_bandwidth: chunks must be 1-D uint8 tensors of one size")
    layout = MemoryLayoutDesc([[nbytes]], [torch.uint8])
    l1 = L1Manager(2 * len(chunks) * nbytes + (16 << 20))
    spec = _plain_spec(adapter_spec)
    if "base_path" in spec:
        os.makedirs(spec["base_path"], exist_ok=True)
    adapter = create_l2_adapter(spec, l1)
    stores: list[float] = []
    loads: list[float] = []
    try:
        for r in range(rounds + 1):
            s, lo = _round(adapter, str(spec.get("type")), l1, layout, chunks, timeout, on_step)
            if r:  # round 0 warms up
                stores += s
                loads += lo
    finally:
        adapter.close()
    return AdapterBandwidth(str(adapter_spec.get("type")), nbytes,
                            median_interval([nbytes / t for t in stores]),
                            median_interval([nbytes / t for t in loads]))


def _round(adapter: Any, adapter_type: str, l1: L1Manager, layout: MemoryLayoutDesc,
           chunks: Sequence[torch.Tensor], timeout: float,
           on_step: Callable[[], None] | None) -> tuple[list[float], list[float]]:
    """Seconds of each store, then of each load, of one round (fresh keys)."""
    nonce = os.urandom(8)
    keys = [ObjectKey(nonce + i.to_bytes(4, "big"), BENCH_MODEL_NAME, 0)
            for i in range(len(chunks))]
    stores, loads = [], []
    for key, chunk in zip(keys, chunks):
        obj = reserve_l1_object(l1, key, layout)
        obj.raw_data[:chunk.numel()].copy_(chunk)
        l1.finish_write_and_reserve_read([key])
        start = time.perf_counter()
        try:
            ok = store_sync(adapter, [key], [obj], timeout).is_successful()
        finally:
            stores.append(max(time.perf_counter() - start, 1e-9))
            l1.finish_read([key])
            l1.delete([key])
        if not ok:
            raise DataPathError(f"store of raw bytes through the {adapter_type} adapter failed")
        if on_step:
            on_step()
    for key in keys:
        dst = reserve_l1_object(l1, key, layout)
        start = time.perf_counter()
        try:
            hit = load_sync(adapter, [key], [dst], timeout).test(0)
        finally:
            loads.append(max(time.perf_counter() - start, 1e-9))
            l1.finish_write_and_delete([key])
        if not hit:
            raise DataPathError(f"load of raw bytes through the {adapter_type} adapter missed")
        if on_step:
            on_step()
    adapter.delete(keys)
    return stores, loads


def describe_adapter_bandwidth(data: Mapping[str, Any] | None) -> str | None:
    """One line for the report (from :meth:`AdapterBandwidth.to_json`), ``None`` when not
    measured."""
    if not data:
        return None

    def direction(d: Mapping[str, Any]) -> str:
        lo, hi = d["interval_gbps"]
        coverage = math.floor(d["coverage"] * 100 + 1e-9)  # "at least" that
        return (f"{_gbps(d['gbps'])} ({coverage}% interval {_gbps(lo)} to {_gbps(hi)}, "
                f"{d['samples']} objects)")

    return (f"measured on the {data['adapter']} adapter with {data['object_bytes'] / 2**20:.2f} "
            f"MiB objects of raw bytes: store {direction(data['store'])}, load "
            f"{direction(data['load'])}; the recommendation uses the measured load bandwidth")


def _gbps(value: float) -> str:
    return f"{value:.3g} GB/s" if value >= 1 else f"{value * 1000:.3g} MB/s"
