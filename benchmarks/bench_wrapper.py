"""Cost of the serde wrapper: ``fs`` through ``SerdeL2AdapterWrapper`` + ``identity`` vs ``fs`` alone.

All rows move the same objects, in the same run, through the same kind of ``fs`` adapter (fresh
directories under ``--dir``), with the same number of tasks in flight:

* ``fs direct``: the adapter stores the caller's objects and loads into the caller's objects;
* ``fs + wrapper(identity)``: every store reserves temporaries in an ``L1Manager``, copies the
  object into them (``identity``), stores them and releases them; every load reads into
  temporaries sized from ``get_object_sizes`` and copies them into the caller's objects;
* ``fs + hand-written copy``: the reference for the serde's own work: the driver copies each
  object into a reused staging buffer before storing it, and out of one after loading it (one
  ``memmove`` each way, no L1, no threads of its own). The wrapper with ``identity`` does the
  same copies, so the gap between this row and the wrapper row is the wrapper's own cost.

Rows rotate order within each repeat; throughputs are the median repeat's, ratios the median of
the per-repeat ratios (with their range). Throughput counts KV bytes (what the caller moves).
Overheads compare store + load times: ``wrapper / direct - 1``, and the wrapper's own cost
``wrapper / hand-written copy - 1``. On memory-speed storage an extra copy is as expensive as the
I/O itself, so the first ratio mostly measures ``identity``'s copy; with real storage (``--dir``
on a disk, ``--fsync``) it shrinks. The temp-buffer pool hit rate of the wrapper's L1 shows
whether steady traffic stopped allocating. CPU time (all threads of the process) is reported
beside wall time: on a shared machine it is the steadier measure of cost.

Run: ``python benchmarks/bench_wrapper.py [--object-mib 1] [--batch 8] [--tasks 24] [--depth 4]
[--repeats 5] [--dir /dev/shm] [--fsync] [--json]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.events import consume_fd
from lmserde.l1 import L1Manager
from lmserde.l2 import L2AdapterInterface, create_l2_adapter

GOAL = 0.15


@dataclass
class Timing:
    store_s: float
    load_s: float
    cpu_s: float  # CPU time of the whole process (every thread) for store + load

    @property
    def total_s(self) -> float:
        return self.store_s + self.load_s


def _wait(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if poller.poll(30_000):
        consume_fd(fd)
    else:
        raise TimeoutError("no completion within 30 s")


def _run_stores(adapter: L2AdapterInterface, batches: list[tuple[list, list]], depth: int) -> None:
    pending: set[int] = set()
    queue = list(batches)
    while queue or pending:
        while queue and len(pending) < depth:
            keys, objs = queue.pop(0)
            pending.add(adapter.submit_store_task(keys, objs))
        done = adapter.pop_completed_store_tasks()
        if not done:
            _wait(adapter.get_store_event_fd())
            continue
        for task, result in done.items():
            if not result.is_successful():
                raise RuntimeError(f"store task {task} failed")
            pending.discard(task)


def _run_loads(adapter: L2AdapterInterface, batches: list[tuple[list, list]], depth: int) -> None:
    pending: dict[int, int] = {}
    queue = list(batches)
    while queue or pending:
        while queue and len(pending) < depth:
            keys, objs = queue.pop(0)
            pending[adapter.submit_load_task(keys, objs)] = len(keys)
        finished = False
        for task in list(pending):
            bitmap = adapter.query_load_result(task)
            if bitmap is not None:
                if bitmap.count() != pending.pop(task):
                    raise RuntimeError(f"load task {task} missed keys")
                finished = True
        if not finished:
            _wait(adapter.get_load_event_fd())


class _Staging:
    """Reused staging buffers for the hand-written copy row (one per object in flight)."""

    def __init__(self, layout: MemoryLayoutDesc, count: int) -> None:
        self.free = [TensorMemoryObj.allocate(layout, zero=True) for _ in range(count)]

    @staticmethod
    def copy(dst: TensorMemoryObj, src: TensorMemoryObj) -> None:
        ctypes.memmove(dst.raw_data.data_ptr(), src.raw_data.data_ptr(), src.get_size())


def _run_copying_stores(adapter: L2AdapterInterface, batches: list[tuple[list, list]],
                        depth: int, staging: _Staging) -> None:
    pending: dict[int, list[TensorMemoryObj]] = {}
    queue = list(batches)
    while queue or pending:
        while queue and len(pending) < depth:
            keys, objs = queue.pop(0)
            bufs = [staging.free.pop() for _ in objs]
            for buf, obj in zip(bufs, objs):
                staging.copy(buf, obj)
            pending[adapter.submit_store_task(keys, bufs)] = bufs
        done = adapter.pop_completed_store_tasks()
        if not done:
            _wait(adapter.get_store_event_fd())
            continue
        for task, result in done.items():
            if not result.is_successful():
                raise RuntimeError(f"store task {task} failed")
            staging.free.extend(pending.pop(task))


def _run_copying_loads(adapter: L2AdapterInterface, batches: list[tuple[list, list]],
                       depth: int, staging: _Staging) -> None:
    pending: dict[int, tuple[list, list]] = {}
    queue = list(batches)
    while queue or pending:
        while queue and len(pending) < depth:
            keys, objs = queue.pop(0)
            bufs = [staging.free.pop() for _ in objs]
            pending[adapter.submit_load_task(keys, bufs)] = (bufs, objs)
        finished = False
        for task in list(pending):
            bitmap = adapter.query_load_result(task)
            if bitmap is None:
                continue
            bufs, objs = pending.pop(task)
            if bitmap.count() != len(objs):
                raise RuntimeError(f"load task {task} missed keys")
            for buf, obj in zip(bufs, objs):
                staging.copy(obj, buf)
            staging.free.extend(bufs)
            finished = True
        if not finished:
            _wait(adapter.get_load_event_fd())


def _measure(adapter: L2AdapterInterface, keys: list[ObjectKey], srcs: list[TensorMemoryObj],
             dsts: list[TensorMemoryObj], batch: int, depth: int,
             staging: _Staging | None = None) -> Timing:
    stores = [(keys[i:i + batch], srcs[i:i + batch]) for i in range(0, len(keys), batch)]
    loads = [(keys[i:i + batch], dsts[i:i + batch]) for i in range(0, len(keys), batch)]
    for dst in dsts[:2]:  # checked below: must be filled by this row's loads
        dst.raw_data.zero_()
    cpu_start = time.process_time()
    start = time.perf_counter()
    if staging is None:
        _run_stores(adapter, stores, depth)
    else:
        _run_copying_stores(adapter, stores, depth, staging)
    middle = time.perf_counter()
    if staging is None:
        _run_loads(adapter, loads, depth)
    else:
        _run_copying_loads(adapter, loads, depth, staging)
    end = time.perf_counter()
    cpu = time.process_time() - cpu_start
    for src, dst in zip(srcs[:2], dsts[:2]):
        if not torch.equal(src.raw_data, dst.raw_data):
            raise RuntimeError("a loaded object differs from the stored one")
    return Timing(middle - start, end - middle, cpu)


def _default_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--object-mib", type=float, default=1.0, help="size of one KV object")
    parser.add_argument("--batch", type=int, default=8, help="keys per task")
    parser.add_argument("--tasks", type=int, default=24, help="store (and load) tasks per repeat")
    parser.add_argument("--depth", type=int, default=4, help="tasks in flight")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--io-workers", type=int, default=2)
    parser.add_argument("--fsync", action="store_true", help="fsync every stored file")
    parser.add_argument("--dir", default=_default_dir(),
                        help="where the fs adapters write (default: /dev/shm if present: "
                             "memory-speed storage, the wrapper's worst case and the least noise)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    elems = max(int(args.object_mib * (1 << 20)) // 2 // 1024, 1)
    layout = MemoryLayoutDesc([[elems, 2, 512]], [torch.bfloat16])
    n = args.batch * args.tasks
    gen = torch.Generator().manual_seed(0)
    srcs = []
    for _ in range(n):
        obj = TensorMemoryObj.allocate(layout)
        obj.raw_data.copy_(torch.randint(0, 256, (obj.raw_data.numel(),), generator=gen,
                                         dtype=torch.uint8))
        srcs.append(obj)
    dsts = [TensorMemoryObj.allocate(layout, zero=True) for _ in range(n)]
    workdir = tempfile.mkdtemp(prefix="lmserde-bench-wrapper-", dir=args.dir)
    l1 = L1Manager(4 * args.depth * args.batch * layout.nbytes + (64 << 20))
    staging = _Staging(layout, args.depth * args.batch)
    results: dict[str, list[Timing]] = {"direct": [], "wrapper": [], "copy": []}
    try:
        for repeat in range(args.repeats + 1):  # repeat 0 warms up caches, threads, the pool
            modes = ["direct", "copy", "wrapper"]
            for mode in modes[repeat % 3:] + modes[:repeat % 3]:  # rotate: no row always first
                base = os.path.join(workdir, f"{mode}-{repeat}")
                spec: dict = {"type": "fs", "base_path": base, "io_workers": args.io_workers,
                              "fsync": args.fsync}
                if mode == "wrapper":
                    spec["serde"] = {"type": "identity"}
                adapter = create_l2_adapter(spec, l1)
                keys = [ObjectKey(ObjectKey.IntHash2Bytes(repeat * n + i), "bench/model", 0)
                        for i in range(n)]
                try:
                    timing = _measure(adapter, keys, srcs, dsts, args.batch, args.depth,
                                      staging if mode == "copy" else None)
                finally:
                    adapter.close()
                shutil.rmtree(base)
                if repeat:
                    results[mode].append(timing)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    total_bytes = n * layout.nbytes

    def row(mode: str) -> dict[str, float]:
        runs = sorted(results[mode], key=lambda t: t.total_s)
        t = runs[len(runs) // 2]  # the median repeat
        return {"store_gbps": total_bytes / t.store_s / 1e9,
                "load_gbps": total_bytes / t.load_s / 1e9,
                "store_load_gbps": 2 * total_bytes / t.total_s / 1e9,
                "cpu_s_per_gb": statistics.median(r.cpu_s for r in runs) / (2 * total_bytes / 1e9)}

    def spread(over: str, base: str, *, cpu: bool = False) -> list[float]:
        """[min, median, max] over repeats of ``over / base - 1`` (paired within a repeat)."""
        ratios = [(a.cpu_s / b.cpu_s if cpu else a.total_s / b.total_s) - 1
                  for a, b in zip(results[over], results[base])]
        return [min(ratios), statistics.median(ratios), max(ratios)]

    pool = l1.pool_stats()
    report = {
        "object_bytes": layout.nbytes, "objects": n, "batch": args.batch, "depth": args.depth,
        "repeats": args.repeats, "fsync": args.fsync, "dir": args.dir,
        "direct": row("direct"), "wrapper": row("wrapper"), "copy": row("copy"),
        "overhead_vs_direct": spread("wrapper", "direct")[1],
        "overhead_vs_direct_spread": spread("wrapper", "direct"),
        "copy_vs_direct": spread("copy", "direct")[1],
        "wrapper_own_cost": spread("wrapper", "copy")[1],
        "wrapper_own_cost_spread": spread("wrapper", "copy"),
        "cpu_overhead_vs_direct": spread("wrapper", "direct", cpu=True)[1],
        "cpu_copy_vs_direct": spread("copy", "direct", cpu=True)[1],
        "cpu_wrapper_own_cost": spread("wrapper", "copy", cpu=True)[1],
        "cpu_wrapper_own_cost_spread": spread("wrapper", "copy", cpu=True),
        "goal": GOAL,
        "pool_hit_rate": pool.hit_rate, "pool_hits": pool.hits, "pool_misses": pool.misses,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"fs store+load, {n} objects of {layout.nbytes / (1 << 20):.2f} MiB, batch {args.batch},"
          f" {args.depth} tasks in flight, median of {args.repeats} repeats")
    print(f"{'path':<28}{'store GB/s':>12}{'load GB/s':>12}{'store+load GB/s':>18}"
          f"{'CPU s/GB':>10}")
    for label, mode in (("fs direct", "direct"), ("fs + hand-written copy", "copy"),
                        ("fs + wrapper(identity)", "wrapper")):
        r = report[mode]
        print(f"{label:<28}{r['store_gbps']:>12.2f}{r['load_gbps']:>12.2f}"
              f"{r['store_load_gbps']:>18.2f}{r['cpu_s_per_gb']:>10.3f}")
    lo, _, hi = report["overhead_vs_direct_spread"]
    print(f"wrapper(identity) vs direct:     {report['overhead_vs_direct'] * 100:+.1f}% "
          f"(per repeat {lo * 100:+.1f}% .. {hi * 100:+.1f}%); the copy alone costs "
          f"{report['copy_vs_direct'] * 100:+.1f}%")
    lo, _, hi = report["wrapper_own_cost_spread"]
    verdict = "within" if report["wrapper_own_cost"] < GOAL else "ABOVE"
    print(f"wrapper's own cost (vs the copy): {report['wrapper_own_cost'] * 100:+.1f}% "
          f"(per repeat {lo * 100:+.1f}% .. {hi * 100:+.1f}%), {verdict} the "
          f"{GOAL * 100:.0f}% goal")
    lo, _, hi = report["cpu_wrapper_own_cost_spread"]
    print(f"CPU time: wrapper vs direct {report['cpu_overhead_vs_direct'] * 100:+.1f}%, copy vs "
          f"direct {report['cpu_copy_vs_direct'] * 100:+.1f}%, wrapper's own cost "
          f"{report['cpu_wrapper_own_cost'] * 100:+.1f}% (per repeat {lo * 100:+.1f}% .. "
          f"{hi * 100:+.1f}%)")
    print(f"temp-buffer pool: hit rate {pool.hit_rate * 100:.1f}% ({pool.hits} hits, "
          f"{pool.misses} misses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
