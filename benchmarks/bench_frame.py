"""Cost of the stored-object frame on the wrapper path: framed vs unframed store + load.

A Llama-3-8B chunk (32 layers x 2 (K, V) x 256 tokens x 8 KV heads x 128, bf16: 32 MiB) goes
through two ``create_l2_adapter({"type": "fs", ..., "serde": S})`` adapters, one with the
stored-object frame (the default) and one with ``"serde_frame": false``. Several distinct chunks
rotate (``--chunks``, default 8 = 256 MiB) so the working set is far above the CPU cache (DRAM
regime). A repeat stores every chunk, then loads every chunk back, one task each; the two modes
take turns chunk by chunk (who goes first alternates between repeats), so a slow spell of a
shared machine hits both. The wall-time overhead (``overhead_median``) is ``framed / unframed - 1``
of the median store plus the median load over all repeats, a ratio of medians (the range: the
same ratio per repeat); the CPU overhead (``cpu_overhead_median``) is the median over repeats of
``framed / unframed - 1`` of the process's CPU time (every thread) during the store and load tasks
of each mode; the checksum's own speed (XXH3-64 over the
same chunks) is reported against ``memcpy`` measured in the same run.

L1 objects are reused buffers (the L1 manager's pool) whose pages are resident, like LMCache's
pinned L1 pool; ``--fresh-l1`` allocates each afresh, and the first write to a fresh 32 MiB
object page-faults for about as long as the rest of a load: a slower base that makes the frame
look cheaper than it is.

Run: ``python benchmarks/bench_frame.py [--serde identity --serde fp8] [--chunks 8]
[--repeats 7] [--dir DIR] [--fresh-l1] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, load_sync, store_sync
from lmserde.l2.serde.stored_frame import payload_checksum

GOAL = 0.05
LLAMA3_8B_CHUNK = MemoryLayoutDesc([[32, 2, 256, 8 * 128]], [torch.bfloat16])


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512vbmi", "vaes", "vpclmulqdq", "sha_ni")
    return " ".join(f for f in wanted if f in flags) or "none of avx2/avx512"


def _keys(n: int) -> list[ObjectKey]:
    nonce = os.urandom(8)
    return [ObjectKey(nonce + i.to_bytes(4, "big"), "bench-frame", 0) for i in range(n)]


def _store(adapter: object, l1: L1Manager, key: ObjectKey, chunk: torch.Tensor,
           pooled: bool) -> tuple[float, float]:
    """Wall and process CPU seconds of one store task of ``chunk`` (an L1 object filled outside
    the timing)."""
    (error, obj), = l1.reserve_write([key], pooled, LLAMA3_8B_CHUNK).values()
    assert error is L1Error.SUCCESS
    obj.raw_data[: chunk.numel()].copy_(chunk)
    l1.finish_write_and_reserve_read([key])
    start, cpu = time.perf_counter(), time.process_time()
    ok = store_sync(adapter, [key], [obj]).is_successful()  # type: ignore[arg-type]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    l1.finish_read([key])  # a pooled (temporary) object goes back to the pool here
    if not pooled:
        l1.delete([key])
    if not ok:
        raise RuntimeError("store failed")
    return seconds, cpu


def _load(adapter: object, l1: L1Manager, key: ObjectKey, pooled: bool) -> tuple[float, float]:
    """Wall and process CPU seconds of one load task of ``key`` into an L1 object (a reused buffer when
    ``pooled``: its pages are resident, as in LMCache's pinned L1 pool; else a fresh allocation,
    whose first write page-faults)."""
    (error, dst), = l1.reserve_write([key], pooled, LLAMA3_8B_CHUNK).values()
    assert error is L1Error.SUCCESS
    start, cpu = time.perf_counter(), time.process_time()
    hit = load_sync(adapter, [key], [dst]).test(0)  # type: ignore[arg-type]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    l1.finish_write_and_delete([key])
    if not hit:
        raise RuntimeError("load missed")
    return seconds, cpu


def _round(adapters: dict[bool, object], l1: L1Manager, chunks: list[torch.Tensor],
           framed_first: bool, pooled: bool) -> dict[bool, dict[str, Any]]:
    """Store every chunk through both adapters, then load every chunk back from both; the two
    modes take turns chunk by chunk (``framed_first`` picks who starts), so a slow spell of the
    machine hits both. Per mode: the store and load seconds of each chunk and the process's CPU
    time (every thread) during that mode's store and load tasks."""
    out: dict[bool, dict[str, Any]] = {m: {"store": [], "load": [], "cpu": 0.0} for m in adapters}
    keys = {m: _keys(len(chunks)) for m in adapters}
    order = (True, False) if framed_first else (False, True)
    for i, chunk in enumerate(chunks):
        for m in order:
            wall, cpu = _store(adapters[m], l1, keys[m][i], chunk, pooled)
            out[m]["store"].append(wall)
            out[m]["cpu"] += cpu
    for i in range(len(chunks)):
        for m in order:
            wall, cpu = _load(adapters[m], l1, keys[m][i], pooled)
            out[m]["load"].append(wall)
            out[m]["cpu"] += cpu
    for m, adapter in adapters.items():
        adapter.delete(keys[m])  # type: ignore[attr-defined]
    return out


def _checksum_vs_memcpy(chunks: list[torch.Tensor]) -> tuple[float, float]:
    dst = torch.empty_like(chunks[0])
    copy, hashing = [], []
    for _ in range(3):
        for chunk in chunks:
            start = time.perf_counter()
            dst.copy_(chunk)
            copy.append(time.perf_counter() - start)
            start = time.perf_counter()
            payload_checksum(chunk)
            hashing.append(time.perf_counter() - start)
    nbytes = chunks[0].numel()
    return nbytes / statistics.median(copy) / 1e9, nbytes / statistics.median(hashing) / 1e9


def _store_load_ms(stores: list[float], loads: list[float]) -> float:
    """Median store + median load, in milliseconds."""
    return (statistics.median(stores) + statistics.median(loads)) * 1e3


def measure(serde: dict, chunks: list[torch.Tensor], repeats: int, workdir: str,
            pooled: bool = True) -> dict:
    l1 = L1Manager(4 * LLAMA3_8B_CHUNK.nbytes + (256 << 20))
    adapters = {
        framed: create_l2_adapter({"type": "fs", "base_path": os.path.join(workdir, str(framed)),
                                   "serde": serde, "serde_frame": framed}, l1)
        for framed in (True, False)
    }
    rounds = []
    try:
        _round(adapters, l1, chunks[:2], True, pooled)  # warm-up: page cache, pools, plans
        rounds = [_round(adapters, l1, chunks, r % 2 == 0, pooled) for r in range(repeats)]
    finally:
        for adapter in adapters.values():
            adapter.close()
    every = {m: {op: [t for r in rounds for t in r[m][op]] for op in ("store", "load")}
             for m in (True, False)}
    framed_ms = _store_load_ms(every[True]["store"], every[True]["load"])
    unframed_ms = _store_load_ms(every[False]["store"], every[False]["load"])
    per_round = [_store_load_ms(r[True]["store"], r[True]["load"])
                 / _store_load_ms(r[False]["store"], r[False]["load"]) - 1.0 for r in rounds]
    cpu_ratios = [r[True]["cpu"] / r[False]["cpu"] - 1.0 for r in rounds]
    return {
        "serde": serde["type"],
        "overhead_median": framed_ms / unframed_ms - 1.0,
        "overhead_range": [min(per_round), max(per_round)],
        "cpu_overhead_median": statistics.median(cpu_ratios),
        "cpu_overhead_range": [min(cpu_ratios), max(cpu_ratios)],
        "framed_ms_per_chunk": framed_ms,
        "unframed_ms_per_chunk": unframed_ms,
        "framed_store_ms": statistics.median(every[True]["store"]) * 1e3,
        "unframed_store_ms": statistics.median(every[False]["store"]) * 1e3,
        "framed_load_ms": statistics.median(every[True]["load"]) * 1e3,
        "unframed_load_ms": statistics.median(every[False]["load"]) * 1e3,
        "bytes_per_object": FRAME_HEADER_BYTES,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serde", action="append", help="serde type (repeatable); default "
                        "identity and fp8 when installed")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the fs adapters write (default: a "
                        "temporary directory)")
    parser.add_argument("--fresh-l1", action="store_true", help="allocate every L1 object "
                        "afresh (its first write page-faults: a slower base that hides part of "
                        "the frame's cost) instead of reusing resident buffers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    serdes = args.serde or ["identity"]
    if not args.serde:
        try:
            import lmserde_fp8  # noqa: F401
            serdes.append("fp8")
        except ImportError:
            pass
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randn(LLAMA3_8B_CHUNK.shapes[0], generator=gen).to(torch.bfloat16)
              .reshape(-1).view(torch.uint8) for _ in range(args.chunks)]
    workdir = tempfile.mkdtemp(prefix="lmserde-bench-frame-", dir=args.dir)
    try:
        rows = [measure({"type": s}, chunks, args.repeats, workdir, not args.fresh_l1)
                for s in serdes]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    memcpy_gbs, xxh3_gbs = _checksum_vs_memcpy(chunks)
    report = {"chunk_mib": LLAMA3_8B_CHUNK.nbytes >> 20, "chunks": args.chunks,
              "repeats": args.repeats, "l1": "fresh" if args.fresh_l1 else "pooled",
              "cpu_flags": _cpu_flags(), "memcpy_gbs": memcpy_gbs,
              "xxh3_gbs": xxh3_gbs, "goal": GOAL, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"stored-object frame on the wrapper path: fs, {args.chunks} x {report['chunk_mib']} MiB "
          f"Llama-3-8B bf16 chunks, {args.repeats} repeats, {report['l1']} L1 objects (CPU flags: "
          f"{report['cpu_flags']})")
    print(f"  XXH3-64 checksum {xxh3_gbs:.2f} GB/s = {xxh3_gbs / memcpy_gbs:.2f}x memcpy "
          f"({memcpy_gbs:.2f} GB/s) in this run; {FRAME_HEADER_BYTES} bytes per object")
    for row in rows:
        lo, hi = row["overhead_range"]
        verdict = "meets" if row["overhead_median"] <= GOAL else "misses"
        print(f"  {row['serde']:<10} store+load {row['framed_ms_per_chunk']:7.2f} ms framed vs "
              f"{row['unframed_ms_per_chunk']:7.2f} ms unframed per chunk: overhead "
              f"{row['overhead_median']:+.1%} [{lo:+.1%}, {hi:+.1%}] (store "
              f"{row['framed_store_ms']:.2f} vs {row['unframed_store_ms']:.2f} ms, load "
              f"{row['framed_load_ms']:.2f} vs {row['unframed_load_ms']:.2f} ms), CPU time "
              f"{row['cpu_overhead_median']:+.1%} (goal <= {GOAL:.0%} -> {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
