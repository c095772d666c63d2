"""What the stored-object frame costs on the real data path: framed vs unframed, measured paired.

Two adapters are built from one spec, one with the stored-object frame (``"serde_frame": true``)
and one without (an adapter with a ``base_path`` gets a sub-directory per mode), over one
:class:`~lmserde.l1.L1Manager` whose objects are pooled buffers with resident pages (like
LMCache's pinned L1 pool; a freshly allocated destination page-faults on its first write for about
as long as the rest of a load, a slower base that would make the frame look cheaper than it is).
A round writes every chunk into an L1 object of each mode, then stores them through both
adapters, the two modes taking turns chunk by chunk (who goes first alternates between rounds),
then loads every chunk back the same way, so a slow spell of a shared machine hits both modes
alike. Writing them all first puts each store's source in DRAM, as for an L1 object a GPU wrote
some time before its L2 store (``cold_sources=False``: each object is written just before its
store, its source still in the CPU cache). The first round warms the adapters, pools and page
cache and is not counted.

Two estimates of the overhead are reported. The **paired overhead** (the headline): the median,
over every chunk of every counted round, of the framed store + load minus the unframed store +
load of that chunk in that round (measured back to back), over the median unframed store + load.
Each difference compares two operations a few milliseconds apart, so a slow spell or an outlier
(a page-cache stall of a shared machine) mostly cancels or is left out; repeated runs of the
paired estimate spread about half as widely as the ratio of medians on a noisy 2-vCPU VM. Its
95 % interval is the median's sign-test interval over those differences; when it reaches 0 the
report says the frame's cost is within noise (a single run cannot tell its sign). The
**ratio of medians**: ``framed / unframed - 1`` of the median store plus the median load over all
counted rounds; its range is the same ratio per round. The CPU overhead is
the median over rounds of ``framed / unframed - 1`` of the process's CPU time (every thread)
during each mode's tasks. ``lmserde bench`` runs this with ``identity`` on full-size chunks of
the bench's model, ``benchmarks/bench_frame.py`` (``nox -s bench``) with ``identity`` and ``fp8``.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from lmserde.bench.data_path import BENCH_MODEL_NAME, DataPathError, reserve_l1_object
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S
from lmserde.bench.median_interval import median_interval
from lmserde.keys import ObjectKey
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.l2.serde.frame_keys import FRAME_KEY_OPTIONS
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES
from lmserde.memory import MemoryLayoutDesc, MemoryObj

__all__ = ["describe_frame_overhead", "frame_overhead_steps", "full_size_chunks",
           "measure_frame_overhead", "paired_rounds"]

_MODES = (True, False)  # framed, unframed


def frame_overhead_steps(rounds: int, chunks: int) -> int:
    """Progress steps :func:`measure_frame_overhead` reports (one per store and per load)."""
    return (rounds + 1) * chunks * len(_MODES) * 2


def full_size_chunks(parts: Sequence[torch.Tensor], nbytes: int) -> list[torch.Tensor]:
    """One byte tensor of ``nbytes`` per part: the part's bytes repeated (the frame's cost does
    not depend on the bytes, only on their number: a bench run on a sample of a model's layers
    still measures the frame on a full chunk)."""
    out = []
    for part in parts:
        raw = part.contiguous().view(torch.uint8).reshape(-1)
        copies = -(-nbytes // raw.numel())
        out.append(raw.repeat(copies)[:nbytes].clone())
    return out


def _mode_spec(adapter_spec: Mapping[str, Any], serde: Any, framed: bool) -> dict[str, Any]:
    """The spec of one mode; a frame key (authenticated frames) applies to the framed one only."""
    spec = {**adapter_spec, "serde": serde, "serde_frame": framed}
    if not framed:
        for option in FRAME_KEY_OPTIONS:
            spec.pop(option, None)
    if "base_path" in spec:
        spec["base_path"] = os.path.join(str(spec["base_path"]),
                                         "frame-framed" if framed else "frame-unframed")
    return spec


class _Rounds:
    """The two adapters, the L1 manager and the keys of one measurement."""

    def __init__(self, specs: Mapping[bool, Mapping[str, Any]], layout: MemoryLayoutDesc,
                 chunks: int, timeout: float, on_step: Callable[[], None] | None,
                 cold_sources: bool) -> None:
        self.layout, self.timeout, self.on_step = layout, timeout, on_step
        self.cold_sources = cold_sources
        # every chunk of both modes may be pooled at once, plus the wrapper's temporaries; the
        # pool keeps them all (a bounded pool would evict the framed temporaries' odd size and
        # charge their page faults to the frame)
        capacity = 4 * (chunks + 1) * layout.nbytes + (64 << 20)
        self.l1 = L1Manager(capacity, temp_pool_bytes=capacity)
        self.adapters: dict[bool, Any] = {}
        #: Bytes the adapter reported for each mode's latest store (the stored object's size).
        self.stored_bytes: dict[bool, int] = {}
        for framed in _MODES:
            self.adapters[framed] = create_l2_adapter(specs[framed], self.l1)

    def close(self) -> None:
        for adapter in self.adapters.values():
            adapter.close()

    def _step(self) -> None:
        if self.on_step:
            self.on_step()

    def fill(self, key: ObjectKey, chunk: torch.Tensor) -> MemoryObj:
        """A pooled L1 object for ``key`` holding ``chunk``'s bytes, ready to be stored (untimed)."""
        obj = reserve_l1_object(self.l1, key, self.layout, pooled=True)
        obj.raw_data[:chunk.numel()].copy_(chunk)
        self.l1.finish_write_and_reserve_read([key])
        return obj

    def store(self, framed: bool, key: ObjectKey, obj: MemoryObj) -> tuple[float, float]:
        """Wall and process CPU seconds of one store task of the filled object ``obj``."""
        start, cpu = time.perf_counter(), time.process_time()
        try:
            result = store_sync(self.adapters[framed], [key], [obj], self.timeout)
            ok = result.is_successful()
            self.stored_bytes[framed] = result.bytes_transferred()
        finally:
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            self.l1.finish_read([key])  # the pooled object goes back to the pool
        if not ok:
            raise DataPathError(f"store through the {'framed' if framed else 'unframed'} "
                                "adapter failed")
        self._step()
        return seconds, cpu

    def load(self, framed: bool, key: ObjectKey) -> tuple[float, float]:
        """Wall and process CPU seconds of one load task into a pooled L1 object."""
        dst = reserve_l1_object(self.l1, key, self.layout, pooled=True)
        start, cpu = time.perf_counter(), time.process_time()
        try:
            hit = load_sync(self.adapters[framed], [key], [dst], self.timeout).test(0)
        finally:
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            self.l1.finish_write_and_delete([key])
        if not hit:
            raise DataPathError(f"load through the {'framed' if framed else 'unframed'} "
                                "adapter missed")
        self._step()
        return seconds, cpu

    def round(self, chunks: Sequence[torch.Tensor], framed_first: bool) -> dict[bool, Any]:
        """Store every chunk through both modes, then load every chunk back, taking turns."""
        out: dict[bool, Any] = {m: {"store": [], "load": [], "bytes": [], "cpu": 0.0}
                                for m in _MODES}
        nonce = os.urandom(8)
        keys = {m: [ObjectKey(nonce + bytes([m]) + i.to_bytes(3, "big"), BENCH_MODEL_NAME, 0)
                    for i in range(len(chunks))] for m in _MODES}
        order = _MODES if framed_first else _MODES[::-1]
        filled: dict[tuple[bool, int], MemoryObj] = {}
        if self.cold_sources:  # every object written before the first store: sources in DRAM
            filled = {(m, i): self.fill(keys[m][i], chunk)
                      for i, chunk in enumerate(chunks) for m in order}
        for i, chunk in enumerate(chunks):
            for m in order:
                obj = filled.pop((m, i), None)
                if obj is None:  # hot source: written into L1 just before its store
                    obj = self.fill(keys[m][i], chunk)
                wall, cpu = self.store(m, keys[m][i], obj)
                out[m]["store"].append(wall)
                out[m]["bytes"].append(self.stored_bytes[m])
                out[m]["cpu"] += cpu
        for i in range(len(chunks)):
            for m in order:
                wall, cpu = self.load(m, keys[m][i])
                out[m]["load"].append(wall)
                out[m]["cpu"] += cpu
        for m, adapter in self.adapters.items():
            adapter.delete(keys[m])
        return out


def _ms(stores: list[float], loads: list[float]) -> float:
    return (statistics.median(stores) + statistics.median(loads)) * 1e3


def measure_frame_overhead(
    adapter_spec: Mapping[str, Any], serde: Any, chunks: Sequence[torch.Tensor], rounds: int, *,
    layout: MemoryLayoutDesc | None = None, cold_sources: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S, on_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Store + load of ``chunks`` (1-D ``uint8`` tensors of one size: the objects' bytes) through
    ``serde``, framed and unframed, over ``rounds`` counted rounds after one warm-up round.
    ``layout``: the objects' layout (default: one ``uint8`` tensor of the chunk's size; a
    quantizing serde needs the real one). ``cold_sources``: write every L1 object of a round
    before its first store (the default), else each just before its store.

    Returns ``serde`` (its type), ``bytes_per_object``, ``chunk_bytes``, ``rounds``,
    ``framed_ms`` / ``unframed_ms`` (median store + median load per chunk), ``paired_extra_ms``
    (the median over chunks and rounds of framed minus unframed store + load) and
    ``paired_overhead`` (that over ``unframed_ms``), ``pairs`` (how many differences),
    ``paired_extra_ms_interval`` / ``paired_overhead_interval`` (the median's sign-test interval,
    :mod:`lmserde.bench.median_interval`), ``paired_interval_coverage`` (its confidence, 95 %
    from 6 pairs on) and ``within_noise`` (the interval reaches 0), ``overhead`` (the ratio of
    medians) and
    ``overhead_range`` (that ratio per round), ``framed_store_ms`` / ``unframed_store_ms`` /
    ``framed_load_ms`` / ``unframed_load_ms`` (medians), and ``cpu_overhead`` /
    ``cpu_overhead_range``, and ``framed_object_bytes`` / ``unframed_object_bytes`` (the median
    size the adapter reported storing per chunk, the frame included). Raises
    :class:`~lmserde.bench.data_path.DataPathError` when a store fails or a load misses.
    """
    if rounds < 1 or not chunks:
        raise ValueError("measure_frame_overhead needs at least one round and one chunk")
    nbytes = chunks[0].numel()
    if any(c.dtype != torch.uint8 or c.dim() != 1 or c.numel() != nbytes for c in chunks):
        raise ValueError("measure_frame_overhead: chunks must be 1-D uint8 tensors of one size")
    layout = layout or MemoryLayoutDesc([[nbytes]], [torch.uint8])
    if layout.nbytes != nbytes:
        raise ValueError(f"measure_frame_overhead: a {layout.nbytes}-byte layout for "
                         f"{nbytes}-byte chunks")
    done = paired_rounds({m: _mode_spec(adapter_spec, serde, m) for m in _MODES}, chunks,
                         rounds, layout, cold_sources=cold_sources, timeout=timeout,
                         on_step=on_step)
    every = {m: {op: [t for r in done for t in r[m][op]] for op in ("store", "load")}
             for m in _MODES}
    framed_ms = _ms(every[True]["store"], every[True]["load"])
    unframed_ms = _ms(every[False]["store"], every[False]["load"])
    per_round = [_ms(r[True]["store"], r[True]["load"]) / _ms(r[False]["store"], r[False]["load"])
                 - 1.0 for r in done]
    cpu = [r[True]["cpu"] / r[False]["cpu"] - 1.0 for r in done if r[False]["cpu"] > 0]
    paired = median_interval([
        (r[True]["store"][i] + r[True]["load"][i] - r[False]["store"][i] - r[False]["load"][i])
        * 1e3 for r in done for i in range(len(chunks))])
    serde_type = serde.get("type") if isinstance(serde, Mapping) else str(serde)
    return {
        "serde": serde_type, "bytes_per_object": FRAME_HEADER_BYTES, "chunk_bytes": nbytes,
        "rounds": rounds, "framed_ms": framed_ms, "unframed_ms": unframed_ms,
        "paired_extra_ms": paired.median,
        "paired_overhead": paired.median / unframed_ms,
        "pairs": paired.samples,
        "paired_extra_ms_interval": [paired.low, paired.high],
        "paired_overhead_interval": [paired.low / unframed_ms, paired.high / unframed_ms],
        "paired_interval_coverage": paired.coverage,
        "within_noise": paired.includes_zero,
        "overhead": framed_ms / unframed_ms - 1.0,
        "overhead_range": [min(per_round), max(per_round)],
        "framed_store_ms": statistics.median(every[True]["store"]) * 1e3,
        "unframed_store_ms": statistics.median(every[False]["store"]) * 1e3,
        "framed_load_ms": statistics.median(every[True]["load"]) * 1e3,
        "unframed_load_ms": statistics.median(every[False]["load"]) * 1e3,
        "cpu_overhead": statistics.median(cpu) if cpu else None,
        "cpu_overhead_range": [min(cpu), max(cpu)] if cpu else None,
        "framed_object_bytes": int(statistics.median(b for r in done for b in r[True]["bytes"])),
        "unframed_object_bytes": int(statistics.median(
            b for r in done for b in r[False]["bytes"])),
    }


def paired_rounds(
    specs: Mapping[bool, Mapping[str, Any]], chunks: Sequence[torch.Tensor], rounds: int,
    layout: MemoryLayoutDesc, *, cold_sources: bool = True, timeout: float = DEFAULT_TIMEOUT_S,
    on_step: Callable[[], None] | None = None,
) -> list[dict[bool, Any]]:
    """The paired rounds of :func:`measure_frame_overhead` for any two adapter specs
    (``specs[True]`` and ``specs[False]``, each built with its serde over one L1 manager):
    one warm-up round, then ``rounds`` counted ones, the two taking turns chunk by chunk. Per
    counted round and spec: ``store`` and ``load`` (wall seconds per chunk, in chunk order),
    ``bytes`` (what each store reported storing) and ``cpu`` (process CPU seconds of its
    tasks)."""
    paired = _Rounds(specs, layout, len(chunks), timeout, on_step, cold_sources)
    try:
        paired.round(chunks, True)  # warm-up: page cache, pools, plans
        return [paired.round(chunks, r % 2 == 1) for r in range(rounds)]
    finally:
        paired.close()


def describe_frame_overhead(frame: Mapping[str, Any] | None) -> str | None:
    """One line for the report, or ``None`` when it was not measured.

    It reports the paired estimate with its interval (:mod:`lmserde.bench.median_interval`);
    when that interval reaches 0 the line says the frame's cost is within noise instead of
    giving a signed percentage a rerun could flip.
    """
    if not frame:
        return None
    lo, hi = frame["paired_overhead_interval"]
    coverage = math.floor(frame["paired_interval_coverage"] * 100 + 1e-9)  # "at least" that
    interval = (f"{coverage}% interval {lo:+.1%} to {hi:+.1%}, "
                f"{frame['pairs']} pairs in {frame['rounds']} rounds")
    head = (f"stored-object frame: {frame['bytes_per_object']} bytes per object; store + load "
            f"of a {frame['chunk_bytes'] / 2**20:.1f} MiB chunk through {frame['serde']}: "
            f"{frame['unframed_ms']:.2f} ms unframed, ")
    if frame["within_noise"]:
        return head + (f"the frame's cost is within noise (paired median "
                       f"{frame['paired_extra_ms']:+.2f} ms, {frame['paired_overhead']:+.1%}; "
                       f"{interval})")
    return head + (f"framed {frame['paired_extra_ms']:+.2f} ms ({frame['paired_overhead']:+.1%} "
                   f"paired; {interval})")
