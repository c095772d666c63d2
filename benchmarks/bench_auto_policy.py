"""What the ``auto`` policy's decision and bookkeeping cost per object, against a 32 MiB store +
load through ``fs`` with ``fp8`` measured in the same run (the goal: at most 1 %).

Per object the ``auto`` serde calls :meth:`~lmserde.adaptive.AutoPolicy.decide` once, and
``observe_store`` and ``observe_load`` at most once (once per candidate group of a task: once
per object when tasks hold one object, the most it costs). This times that triple over ``--objects``
objects (nanoseconds per object, median of ``--repeats`` runs), with ``fp8`` as the only
candidate (the issue's setting) and with three candidates; then the store + load of a
Llama-3-8B chunk (32 layers x 2 x 256 tokens x 8 KV heads x 128, bf16: 32 MiB) through
``create_l2_adapter({"type": "fs", ..., "serde": {"type": "fp8"}})`` — the measurement of
:func:`lmserde.bench.frame_overhead.measure_frame_overhead` (its framed median store + median
load) — and a plain 32 MiB ``memcpy`` for scale. Reported: ns per object and its share of the
store + load.

Then the whole of it on the real data path, paired: the same chunks stored and loaded through
``fs`` with ``{"type": "auto", "candidates": [{"type": "fp8"}]}`` and with plain ``fp8``, the
two taking turns chunk by chunk (:func:`lmserde.bench.frame_overhead.paired_rounds`; one
warm-up round, then ``--rounds`` counted ones). Reported: the median over every chunk of every
round of auto's store + load minus plain fp8's, over plain fp8's median store + load, with the
median's sign-test interval; when the interval reaches 0 the cost is within noise. Also the
process CPU time of each side's tasks per round (less exposed to other jobs of a shared
machine than wall time), auto over plain fp8, median over rounds. Everything
``auto`` adds is in it: the decision, the measurements on both paths, the policy's re-rankings.

Run: ``python benchmarks/bench_auto_policy.py [--objects 200000] [--repeats 5] [--chunks 4]
[--rounds 12] [--json]``. Exits 1 when the policy's share is over the goal, or when the paired interval lies
wholly above it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from lmserde import MemoryLayoutDesc
from lmserde.adaptive import AutoPolicy, Candidate
from lmserde.bench.frame_overhead import measure_frame_overhead, paired_rounds
from lmserde.bench.median_interval import median_interval

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


def _auto_versus_fp8(chunks: list[torch.Tensor], rounds: int, workdir: str) -> dict[str, Any]:
    """auto (fp8 the only candidate) against plain fp8 on fs, paired (see the docstring)."""
    serdes = {True: {"type": "auto", "candidates": [{"type": "fp8"}]}, False: {"type": "fp8"}}
    specs = {m: {"type": "fs", "base_path": f"{workdir}/{'auto' if m else 'fp8'}",
                 "serde": serde} for m, serde in serdes.items()}
    done = paired_rounds(specs, chunks, rounds, LLAMA3_8B_CHUNK)
    both = {m: {op: [t for r in done for t in r[m][op]] for op in ("store", "load")}
            for m in serdes}
    plain_ms = (statistics.median(both[False]["store"])
                + statistics.median(both[False]["load"])) * 1e3
    extra = median_interval([(r[True]["store"][i] + r[True]["load"][i] - r[False]["store"][i]
                              - r[False]["load"][i]) * 1e3
                             for r in done for i in range(len(chunks))])
    cpu = [r[True]["cpu"] / r[False]["cpu"] - 1.0 for r in done if r[False]["cpu"] > 0]
    return {"fp8_ms": plain_ms, "paired_extra_ms": extra.median,
            "cpu_overhead": statistics.median(cpu) if cpu else None,
            "cpu_overhead_range": [min(cpu), max(cpu)] if cpu else None,
            "paired_overhead": extra.median / plain_ms,
            "paired_overhead_interval": [extra.low / plain_ms, extra.high / plain_ms],
            "interval_coverage": extra.coverage, "pairs": extra.samples,
            "within_noise": extra.includes_zero}


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
    parser.add_argument("--rounds", type=int, default=12,
                        help="counted rounds of the paired auto vs fp8 measurement")
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
        versus = _auto_versus_fp8(chunks, args.rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    store_load_ms = path["framed_ms"]
    result = {
        "objects": args.objects, "repeats": args.repeats,
        "store_load_ms_fs_fp8_32mib": store_load_ms, "memcpy_ms_32mib": _memcpy_ms(9),
        "ns_per_object": ns,
        "share_of_store_load": {name: v / (store_load_ms * 1e6) for name, v in ns.items()},
        "auto_fp8_vs_fp8_fs_32mib": versus,
        "goal": GOAL,
    }
    over = (any(v > GOAL for v in result["share_of_store_load"].values())
            or versus["paired_overhead_interval"][0] > GOAL)
    if args.json:
        print(json.dumps(result, indent=2))
        return 1 if over else 0
    print(f"auto policy: decide + observe_store + observe_load per object, median of "
          f"{args.repeats} runs of {args.objects} objects")
    print(f"  32 MiB store + load through fs with fp8: {store_load_ms:.2f} ms "
          f"(memcpy of 32 MiB: {result['memcpy_ms_32mib']:.2f} ms)")
    for name, value in ns.items():
        share = result["share_of_store_load"][name]
        verdict = "ok" if share <= GOAL else "OVER THE GOAL"
        print(f"  {name}: {value:.0f} ns per object = {share:.4%} of the store + load "
              f"(goal <= {GOAL:.0%}: {verdict})")
    lo, hi = versus["paired_overhead_interval"]
    noise = "within noise; " if versus["within_noise"] else ""
    print(f"  auto (fp8 the only candidate) vs fp8, 32 MiB store + load through fs, paired: "
          f"{versus['paired_extra_ms']:+.3f} ms = {versus['paired_overhead']:+.2%} of "
          f"{versus['fp8_ms']:.2f} ms ({noise}{versus['interval_coverage']:.0%} interval "
          f"{lo:+.2%} to {hi:+.2%}, {versus['pairs']} pairs)")
    if versus["cpu_overhead"] is not None:
        low, high = versus["cpu_overhead_range"]
        print(f"  the same, process CPU time per round: {versus['cpu_overhead']:+.2%} "
              f"(median of {args.rounds} rounds; range {low:+.2%} to {high:+.2%})")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
