"""Cost of the stored-object frame on the wrapper path: framed vs unframed store + load.

A Llama-3-8B chunk (32 layers x 2 (K, V) x 256 tokens x 8 KV heads x 128, bf16: 32 MiB) goes
through ``create_l2_adapter({"type": "fs", ..., "serde": S})`` twice per repeat, once with the
stored-object frame (the default) and once with ``"serde_frame": false``, in alternating order.
Several distinct chunks rotate (``--chunks``, default 8 = 256 MiB) so the working set is far
above the CPU cache (DRAM regime). Each chunk is stored (one task), dropped, then loaded back
(one task); a repeat's time is the sum over its chunks. The overhead is
``framed / unframed - 1`` of store + load, median over repeats (with the range), in wall time and
in CPU time of the whole process (every thread: the steadier measure on a shared machine); the
checksum's own speed (XXH3-64 over the same chunks) is reported against ``memcpy`` measured in the
same run.

Run: ``python benchmarks/bench_frame.py [--serde identity --serde fp8] [--chunks 8]
[--repeats 7] [--dir DIR] [--json]``.
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


def _round(adapter: object, l1: L1Manager, chunks: list[torch.Tensor]) -> tuple[float, float]:
    """Store then load every chunk once; the summed wall time of the tasks and the process's
    CPU time over the round."""
    cpu_start = time.process_time()
    nonce = os.urandom(8)
    keys = [ObjectKey(nonce + i.to_bytes(4, "big"), "bench-frame", 0) for i in range(len(chunks))]
    total = 0.0
    for key, chunk in zip(keys, chunks):
        (error, obj), = l1.reserve_write([key], False, LLAMA3_8B_CHUNK).values()
        assert error is L1Error.SUCCESS
        obj.raw_data[: chunk.numel()].copy_(chunk)
        l1.finish_write_and_reserve_read([key])
        start = time.perf_counter()
        ok = store_sync(adapter, [key], [obj]).is_successful()  # type: ignore[arg-type]
        total += time.perf_counter() - start
        l1.finish_read([key])
        l1.delete([key])
        if not ok:
            raise RuntimeError("store failed")
    for key in keys:
        (error, dst), = l1.reserve_write([key], False, LLAMA3_8B_CHUNK).values()
        assert error is L1Error.SUCCESS
        start = time.perf_counter()
        hit = load_sync(adapter, [key], [dst]).test(0)  # type: ignore[arg-type]
        total += time.perf_counter() - start
        l1.finish_write_and_delete([key])
        if not hit:
            raise RuntimeError("load missed")
    cpu = time.process_time() - cpu_start
    adapter.delete(keys)  # type: ignore[attr-defined]
    return total, cpu


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


def measure(serde: dict, chunks: list[torch.Tensor], repeats: int, workdir: str) -> dict:
    l1 = L1Manager(4 * LLAMA3_8B_CHUNK.nbytes + (256 << 20))
    adapters = {
        framed: create_l2_adapter({"type": "fs", "base_path": os.path.join(workdir, str(framed)),
                                   "serde": serde, "serde_frame": framed}, l1)
        for framed in (True, False)
    }
    ratios, cpu_ratios, times = [], [], {True: [], False: []}
    try:
        for framed in (True, False):  # warm-up: page cache, pools, plans
            _round(adapters[framed], l1, chunks[:2])
        for r in range(repeats):
            order = (True, False) if r % 2 == 0 else (False, True)
            t = {framed: _round(adapters[framed], l1, chunks) for framed in order}
            times[True].append(t[True][0])
            times[False].append(t[False][0])
            ratios.append(t[True][0] / t[False][0] - 1.0)
            cpu_ratios.append(t[True][1] / t[False][1] - 1.0)
    finally:
        for adapter in adapters.values():
            adapter.close()
    return {
        "serde": serde["type"],
        "overhead_median": statistics.median(ratios),
        "overhead_range": [min(ratios), max(ratios)],
        "cpu_overhead_median": statistics.median(cpu_ratios),
        "cpu_overhead_range": [min(cpu_ratios), max(cpu_ratios)],
        "framed_ms_per_chunk": statistics.median(times[True]) / len(chunks) * 1e3,
        "unframed_ms_per_chunk": statistics.median(times[False]) / len(chunks) * 1e3,
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
        rows = [measure({"type": s}, chunks, args.repeats, workdir) for s in serdes]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    memcpy_gbs, xxh3_gbs = _checksum_vs_memcpy(chunks)
    report = {"chunk_mib": LLAMA3_8B_CHUNK.nbytes >> 20, "chunks": args.chunks,
              "repeats": args.repeats, "cpu_flags": _cpu_flags(), "memcpy_gbs": memcpy_gbs,
              "xxh3_gbs": xxh3_gbs, "goal": GOAL, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"stored-object frame on the wrapper path: fs, {args.chunks} x {report['chunk_mib']} MiB "
          f"Llama-3-8B bf16 chunks, {args.repeats} repeats (CPU flags: {report['cpu_flags']})")
    print(f"  XXH3-64 checksum {xxh3_gbs:.2f} GB/s = {xxh3_gbs / memcpy_gbs:.2f}x memcpy "
          f"({memcpy_gbs:.2f} GB/s) in this run; {FRAME_HEADER_BYTES} bytes per object")
    for row in rows:
        lo, hi = row["overhead_range"]
        verdict = "meets" if row["overhead_median"] <= GOAL else "misses"
        print(f"  {row['serde']:<10} store+load {row['framed_ms_per_chunk']:7.2f} ms framed vs "
              f"{row['unframed_ms_per_chunk']:7.2f} ms unframed per chunk: overhead "
              f"{row['overhead_median']:+.1%} [{lo:+.1%}, {hi:+.1%}], CPU time "
              f"{row['cpu_overhead_median']:+.1%} (goal <= {GOAL:.0%} -> {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
