"""What the ``auto`` policy's decision and bookkeeping cost per object, against a 32 MiB store +
load through ``fs`` with ``fp8`` measured in the same run (the goal: at most 1 %).

Per object the ``auto`` serde calls :meth:`~lmserde.adaptive.AutoPolicy.decide` once,
``observe_store`` once and ``observe_load`` once. This times that triple over ``--objects``
objects (nanoseconds per object, median of ``--repeats`` runs), with ``fp8`` as the only
candidate (the issue's setting) and with three candidates; then the store + load of a
Llama-3-8B chunk (32 layers x 2 x 256 tokens x 8 KV heads x 128, bf16: 32 MiB) through
``create_l2_adapter({"type": "fs", ..., "serde": {"type": "fp8"}})`` — the measurement of
:func:`lmserde.bench.frame_overhead.measure_frame_overhead` (its framed median store + median
load) — and a plain 32 MiB ``memcpy`` for scale. Reported: ns per object and its share of the
store + load.

Run: ``python benchmarks/bench_auto_policy.py [--objects 200000] [--repeats 5] [--chunks 4]
[--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time

import torch
from lmserde import MemoryLayoutDesc
from lmserde.adaptive import AutoPolicy, Candidate
from lmserde.bench.frame_overhead import measure_frame_overhead

GOAL = 0.01
LLAMA3_8B_CHUNK = MemoryLayoutDesc([[32, 2, 256, 8 * 128]], [torch.bfloat16])
RAW = LLAMA3_8B_CHUNK.nbytes


def _per_object_ns(candidates: list[Candidate], objects: int) -> float:
    """Nanoseconds of decide + observe_store + observe_load per object (one run)."""
    policy = AutoPolicy(candidates, name="bench", emit_events=False)
    stored = RAW // 2
    start = time.perf_counter_ns()
    for k in range(objects):
        i = policy.decide()
        jitter = 1e-4 * (k % 7)
        policy.observe_store(i, RAW, stored, 0.004 + jitter, 0.010 + jitter)
        policy.observe_load(i, RAW, stored, 0.003 + jitter, 0.008 + jitter)
    return (time.perf_counter_ns() - start) / objects


def _memcpy_ms(repeats: int) -> float:
    src = torch.empty(RAW, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        import lmserde_fp8  # noqa: F401
    except ImportError:
        print("bench_auto_policy: needs lmserde-fp8 installed", file=sys.stderr)
        return 1
    sets = {
        "fp8 only": [Candidate("fp8", lossy=True)],
        "identity, fp8, fp8+zstd": [Candidate("identity", lossy=False),
                                    Candidate("fp8", lossy=True),
                                    Candidate("fp8+zstd", lossy=True)],
    }
    ns = {name: statistics.median(_per_object_ns(c, args.objects) for _ in range(args.repeats))
          for name, c in sets.items()}
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.randn(LLAMA3_8B_CHUNK.shapes[0], generator=gen).to(torch.bfloat16)
              .reshape(-1).view(torch.uint8) for _ in range(args.chunks)]
    workdir = tempfile.mkdtemp(prefix="lmserde-bench-auto-")
    try:
        path = measure_frame_overhead({"type": "fs", "base_path": workdir}, {"type": "fp8"},
                                      chunks, args.repeats, layout=LLAMA3_8B_CHUNK)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    store_load_ms = path["framed_ms"]
    result = {
        "objects": args.objects, "repeats": args.repeats,
        "store_load_ms_fs_fp8_32mib": store_load_ms, "memcpy_ms_32mib": _memcpy_ms(9),
        "ns_per_object": ns,
        "share_of_store_load": {name: v / (store_load_ms * 1e6) for name, v in ns.items()},
        "goal": GOAL,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"auto policy: decide + observe_store + observe_load per object, median of "
          f"{args.repeats} runs of {args.objects} objects")
    print(f"  32 MiB store + load through fs with fp8: {store_load_ms:.2f} ms "
          f"(memcpy of 32 MiB: {result['memcpy_ms_32mib']:.2f} ms)")
    for name, value in ns.items():
        share = result["share_of_store_load"][name]
        verdict = "ok" if share <= GOAL else "OVER THE GOAL"
        print(f"  {name}: {value:.0f} ns per object = {share:.4%} of the store + load "
              f"(goal <= {GOAL:.0%}: {verdict})")
    return 0 if all(v <= GOAL for v in result["share_of_store_load"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
