"""Cost of the stored-object frame on the wrapper path: framed vs unframed store + load.

A Llama-3-8B chunk (32 layers x 2 (K, V) x 256 tokens x 8 KV heads x 128, bf16: 32 MiB) goes
through two ``create_l2_adapter({"type": "fs", ..., "serde": S})`` adapters, one with the
stored-object frame (the default) and one with ``"serde_frame": false``. Several distinct chunks
rotate (``--chunks``, default 8 = 256 MiB) so the working set is far above the CPU cache (DRAM
regime). The measurement is :func:`lmserde.bench.frame_overhead.measure_frame_overhead` (the one
``lmserde bench`` runs): after a warm-up round, each of ``--repeats`` rounds stores every chunk,
then loads every chunk back, one task each, the two modes taking turns chunk by chunk (who goes
first alternates between rounds), over pooled L1 objects with resident pages, every object of a
round written before the round's first store (a store's source is in DRAM, as an L1 object
written by the GPU some time before its L2 store is; ``--hot-sources`` writes each one just
before its store instead, so its source is still in the CPU cache). The wall-time
overhead (judged against the goal) is the paired one: the median over chunks and rounds of the
framed minus the unframed store + load of the same chunk in the same round, over the median
unframed store + load; also printed, the ratio of medians ``framed / unframed - 1`` of the median
store plus the median load over all rounds (the range: that ratio per round), which repeated runs
spread more widely. The CPU overhead is the median over rounds
of the same ratio of the process's CPU time (every thread) during each mode's tasks. The
checksum's own speed (XXH3-64 over the same chunks) is reported against ``memcpy`` measured in
the same run.

``--frame-key`` measures the authenticated frame instead (a fresh key file as the adapter's
``frame_key_path``: an AES-256-GMAC over every stored object replaces the checksum), against the
same unframed baseline; its goal is 10 %. It also prints the MAC's floor: AES-256-GMAC over
the stored object once for its store and once for its load, at the speed one thread reaches over
the same chunks in this run, as a share of the unframed store + load. That is what the MAC adds
where it cannot overlap other work (where the second core, or the memory bandwidth both share,
is busy); with the floor above the goal, no arrangement of the MAC on one thread can meet it.

Run: ``python benchmarks/bench_frame.py [--serde identity --serde fp8] [--chunks 8]
[--repeats 7] [--dir DIR] [--hot-sources] [--frame-key] [--json]``.
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
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde import MemoryLayoutDesc
from lmserde.bench.frame_overhead import measure_frame_overhead
from lmserde.frame_checksum import tensor_bytes
from lmserde.l2 import FRAME_HEADER_BYTES
from lmserde.l2.serde.authenticated_frame import AUTH_HEADER_BYTES
from lmserde.l2.serde.stored_frame import payload_checksum
from lmserde.tenant_keys import write_master_key

GOAL = 0.05
AUTH_GOAL = 0.10
LLAMA3_8B_CHUNK = MemoryLayoutDesc([[32, 2, 256, 8 * 128]], [torch.bfloat16])


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    wanted = ("avx2", "avx512f", "avx512vbmi", "vaes", "vpclmulqdq", "sha_ni")
    return " ".join(f for f in wanted if f in flags) or "none of avx2/avx512"


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


def _gmac_speed(chunks: list[torch.Tensor]) -> float:
    """GB/s of one thread's AES-256-GMAC (``cryptography``, as the authenticated frame calls
    it: empty plaintext, the bytes as associated data) over the chunks in rotation."""
    gmac = AESGCM(os.urandom(32))
    nonce = os.urandom(12)
    seconds = []
    for _ in range(3):
        for chunk in chunks:
            start = time.perf_counter()
            gmac.encrypt(nonce, b"", tensor_bytes(chunk).cast("B"))
            seconds.append(time.perf_counter() - start)
    return chunks[0].numel() / statistics.median(seconds) / 1e9


def mac_floor(row: dict, gmac_gbs: float) -> tuple[float, float]:
    """The MAC's floor for one measured serde: milliseconds of one thread's GMAC over the
    stored object for its store and again for its load, and that over the unframed store +
    load."""
    floor_ms = 2 * row["framed_object_bytes"] / (gmac_gbs * 1e9) * 1e3
    return floor_ms, floor_ms / row["unframed_ms"]


def measure(serde: dict, chunks: list[torch.Tensor], repeats: int, workdir: str, *,
            cold_sources: bool = True, frame_key: str | None = None) -> dict:
    """One serde, framed vs unframed, paired round by round (:mod:`lmserde.bench.frame_overhead`,
    the measurement ``lmserde bench`` runs too); with ``frame_key`` the framed side writes
    authenticated frames."""
    spec = {"type": "fs", "base_path": workdir}
    if frame_key is not None:
        spec["frame_key_path"] = frame_key
    return measure_frame_overhead(spec, serde, chunks, repeats, layout=LLAMA3_8B_CHUNK,
                                  cold_sources=cold_sources)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serde", action="append", help="serde type (repeatable); default "
                        "identity and fp8 when installed")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where the fs adapters write (default: a "
                        "temporary directory)")
    parser.add_argument("--hot-sources", action="store_true", help="write each L1 object just "
                        "before its store (its source in the CPU cache) instead of all of a "
                        "round's objects first")
    parser.add_argument("--frame-key", action="store_true", help="authenticated frames (a fresh "
                        "frame key file) instead of the plain frame")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    goal = AUTH_GOAL if args.frame_key else GOAL
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
        frame_key = (str(write_master_key(os.path.join(workdir, "frame.key")))
                     if args.frame_key else None)
        rows = [measure({"type": s}, chunks, args.repeats, os.path.join(workdir, s),
                        cold_sources=not args.hot_sources, frame_key=frame_key) for s in serdes]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    memcpy_gbs, xxh3_gbs = _checksum_vs_memcpy(chunks)
    gmac_gbs = _gmac_speed(chunks) if args.frame_key else None
    if gmac_gbs is not None:
        for row in rows:
            row["mac_floor_ms"], row["mac_floor_overhead"] = mac_floor(row, gmac_gbs)
    report = {"chunk_mib": LLAMA3_8B_CHUNK.nbytes >> 20, "chunks": args.chunks,
              "repeats": args.repeats, "l1": "pooled",
              "sources": "hot" if args.hot_sources else "cold",
              "cpu_flags": _cpu_flags(), "memcpy_gbs": memcpy_gbs,
              "xxh3_gbs": xxh3_gbs, "gmac_gbs": gmac_gbs, "goal": goal,
              "frame": "authenticated" if args.frame_key else "plain", "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['frame']} stored-object frame on the wrapper path: fs, {args.chunks} x "
          f"{report['chunk_mib']} MiB Llama-3-8B bf16 chunks, {args.repeats} repeats, "
          f"{report['l1']} L1 objects, "
          f"{report['sources']} sources (CPU flags: "
          f"{report['cpu_flags']})")
    print(f"  XXH3-64 checksum {xxh3_gbs:.2f} GB/s = {xxh3_gbs / memcpy_gbs:.2f}x memcpy "
          f"({memcpy_gbs:.2f} GB/s) in this run; "
          f"{AUTH_HEADER_BYTES if args.frame_key else FRAME_HEADER_BYTES} bytes per object")
    for row in rows:
        lo, hi = row["overhead_range"]
        verdict = "meets" if row["paired_overhead"] <= goal else "misses"
        print(f"  {row['serde']:<10} store+load {row['framed_ms']:7.2f} ms framed vs "
              f"{row['unframed_ms']:7.2f} ms unframed per chunk: overhead "
              f"{row['paired_overhead']:+.1%} paired ({row['paired_extra_ms']:+.2f} ms); ratio "
              f"of medians {row['overhead']:+.1%} [{lo:+.1%}, {hi:+.1%}] (store "
              f"{row['framed_store_ms']:.2f} vs {row['unframed_store_ms']:.2f} ms, load "
              f"{row['framed_load_ms']:.2f} vs {row['unframed_load_ms']:.2f} ms), CPU time "
              f"{row['cpu_overhead']:+.1%} (goal <= {goal:.0%} -> {verdict})")
        if gmac_gbs is not None:
            print(f"             MAC floor: AES-256-GMAC of the "
                  f"{row['framed_object_bytes'] / 2**20:.1f} MiB stored object on store and on "
                  f"load, one thread at {gmac_gbs:.1f} GB/s: {row['mac_floor_ms']:.2f} ms = "
                  f"{row['mac_floor_overhead']:+.1%} of unframed (the overhead where the MAC "
                  "cannot overlap other work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
