"""Cost of ``read_also``: loading fp8 objects through a tier that now writes another config.

The same fp8 objects (Llama-3-8B-sized chunks, 32 MiB of bf16 each; several, so the working set is
well above the CPU caches) are loaded, in the same run from the same ``fs`` directory, by:

* ``fp8``: a wrapper whose own serde is ``fp8`` (the baseline: the objects are its own);
* ``fp8 + read_also [identity]``: the same, with a ``read_also`` config listed (what a tier pays
  on its *own* objects for listing one: the load buffer holds the larger bound);
* ``[fp8, zstd] + read_also [fp8]``: a tier switched to ``fp8`` + ``zstd``; every object is
  refused by the new config's frame check, its header is read again, and ``fp8``'s own processor
  decodes it (the read_also path).

Each row's adapter is built once and warmed up (one untimed pass); rows rotate order within each
repeat; the ratios are the medians of the per-repeat ratios to the ``fp8`` row (with their
range), of wall time and of CPU time (every thread of the process: the steadier measure on a
shared machine). Throughput counts KV bytes.

Run: ``python benchmarks/bench_read_also.py [--object-mib 32] [--objects 6] [--repeats 5]
[--dir /dev/shm] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync

FP8: dict[str, Any] = {"type": "fp8"}
ROWS: dict[str, dict[str, Any]] = {
    "fp8": {"serde": FP8},
    "fp8 + read_also [identity]": {"serde": FP8, "read_also": [{"type": "identity"}]},
    "[fp8, zstd] + read_also [fp8]": {"serde": [FP8, {"type": "zstd"}], "read_also": [FP8]},
}


def _layout(object_mib: int) -> MemoryLayoutDesc:
    tokens = object_mib * (1 << 20) // (2 * 8 * 128 * 2 * 32)  # [32 layers, 2, tokens, 8, 128]
    return MemoryLayoutDesc([[32, 2, tokens, 8, 128]], [torch.bfloat16])


def _load_seconds(adapter: Any, keys: list[ObjectKey], dsts: list[TensorMemoryObj]
                  ) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of the process) to load ``keys`` one task each."""
    start, cpu = time.perf_counter(), time.process_time()
    for key, dst in zip(keys, dsts):  # one object per task, as a serving engine loads
        if not load_sync(adapter, [key], [dst]).test(0):
            raise RuntimeError(f"{adapter.serde_type}: a load missed")
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--object-mib", type=int, default=32)
    parser.add_argument("--objects", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="parent of the fs tier (default: tmp)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    layout = _layout(args.object_mib)
    base = tempfile.mkdtemp(prefix="lmserde-read-also-", dir=args.dir)
    try:
        l1 = L1Manager(4 * args.object_mib << 20)
        keys = [ObjectKey(i.to_bytes(8, "little"), "bench", 0, 0, "") for i in range(args.objects)]
        gen = torch.Generator().manual_seed(0)
        srcs = [TensorMemoryObj.allocate(layout) for _ in keys]
        for src in srcs:
            src.get_tensor(0).copy_(torch.randn(layout.shapes[0], generator=gen)
                                    .to(torch.bfloat16))
        writer = create_l2_adapter({"type": "fs", "base_path": base, "serde": FP8}, l1)
        for key, src in zip(keys, srcs):
            assert store_sync(writer, [key], [src]).is_successful()
        writer.close()
        dsts = [TensorMemoryObj.allocate(layout) for _ in keys]
        seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in ROWS}
        names = list(ROWS)
        adapters = {name: create_l2_adapter({"type": "fs", "base_path": base, **ROWS[name]}, l1)
                    for name in names}
        try:
            for name in names:  # warm-up: threads started, L1 temporaries pooled, files cached
                _load_seconds(adapters[name], keys, dsts)
            for repeat in range(args.repeats):
                order = names[repeat % len(names):] + names[:repeat % len(names)]
                for name in order:
                    seconds[name].append(_load_seconds(adapters[name], keys, dsts))
        finally:
            for adapter in adapters.values():
                adapter.close()
        kv_bytes = args.objects * layout.nbytes
        result: dict[str, Any] = {"object_mib": args.object_mib, "objects": args.objects,
                                  "repeats": args.repeats, "rows": {}}
        for name in names:
            ratios = [s[0] / b[0] for s, b in zip(seconds[name], seconds["fp8"])]
            cpu_ratios = [s[1] / b[1] for s, b in zip(seconds[name], seconds["fp8"])]
            result["rows"][name] = {
                "load_gb_s": kv_bytes / statistics.median(s[0] for s in seconds[name]) / 1e9,
                "ratio_to_fp8": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "cpu_ratio_to_fp8": statistics.median(cpu_ratios),
                "cpu_ratio_range": [min(cpu_ratios), max(cpu_ratios)],
            }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"loads of {args.objects} fp8 objects of {args.object_mib} MiB KV, "
          f"{args.repeats} repeats (median; ratios to the fp8 row, with their range; CPU time "
          "counts every thread, the steadier measure on a shared machine)")
    for name, row in result["rows"].items():
        low, high = row["ratio_range"]
        cpu_low, cpu_high = row["cpu_ratio_range"]
        print(f"  {name:<32} {row['load_gb_s']:6.2f} GB/s   wall x{row['ratio_to_fp8']:.3f} "
              f"[{low:.3f}, {high:.3f}]   cpu x{row['cpu_ratio_to_fp8']:.3f} "
              f"[{cpu_low:.3f}, {cpu_high:.3f}]")


if __name__ == "__main__":
    main()
