"""Store + load throughput through the ``redis`` L2 adapter against raw redis-py on the same bytes.

Starts a throwaway ``redis-server`` on a loopback port and moves the same KV chunks through:

* ``raw redis-py``: hand-written pipelines of ``SET`` (values sent from the objects' buffers)
  and ``GET`` (copied into the destination objects), ``--batch`` keys per pipeline; the baseline;
* ``adapter``: ``RedisL2Adapter`` tasks of ``--batch`` keys, one task in flight (like for like);
* ``adapter, N in flight``: the same with ``--in-flight`` tasks submitted before waiting (what a
  store controller does; uses the adapter's I/O threads);
* ``adapter + fp8``: the serde wrapper with the fp8 plugin (half the bytes on the wire; the
  throughput counts logical KV bytes), when lmserde-fp8 is installed.

The overhead ratio is the row's time over the raw redis-py time for the same work (1.00 = no
overhead; below 1 = faster than the baseline). Numbers are medians over ``--repeats`` rounds in
which the paths take turns.

Run: ``python benchmarks/bench_redis.py [--chunk-kib 1024] [--chunks 64] [--batch 16]
[--in-flight 4] [--repeats 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, get_registered_serde_types
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, wait_for_load, wait_for_store
from lmserde_redis.local_server import LocalRedisServer, RedisServerNotFoundError


@dataclass
class Row:
    name: str
    store_gbps: float
    load_gbps: float
    store_ratio: float = 1.0
    load_ratio: float = 1.0


def _objects(count: int, chunk_bytes: int, seed: int) -> tuple[list[TensorMemoryObj], MemoryLayoutDesc]:
    elems = chunk_bytes // 2
    layout = MemoryLayoutDesc([[elems]], [torch.bfloat16])
    gen = torch.Generator().manual_seed(seed)
    objs = []
    for _ in range(count):
        obj = TensorMemoryObj.allocate(layout)
        obj.tensor.copy_(torch.randn(elems, generator=gen).to(torch.bfloat16))
        objs.append(obj)
    return objs, layout


def _batches(n: int, size: int) -> list[range]:
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def _interleaved_medians(
    paths: dict[str, tuple[Callable[[], None], Callable[[], None]]], repeats: int,
) -> dict[str, tuple[float, float]]:
    """Median store and load seconds per path; paths take turns within every round, so a slow
    spell of a shared machine hits all of them alike instead of skewing one ratio."""
    samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in paths}
    for round_ in range(repeats + 1):  # round 0 warms up connections and allocations
        for name, (store, load) in paths.items():
            for run, bucket in ((store, samples[name][0]), (load, samples[name][1])):
                start = time.perf_counter()
                run()
                if round_:
                    bucket.append(time.perf_counter() - start)
    return {n: (statistics.median(s), statistics.median(ld)) for n, (s, ld) in samples.items()}


def _raw_rows(url: str, keys: list[bytes], srcs: list[TensorMemoryObj],
              dsts: list[TensorMemoryObj], batch: int) -> tuple[Callable[[], None], Callable[[], None]]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=30)

    def store() -> None:
        for chunk in _batches(len(keys), batch):
            pipe = client.pipeline(transaction=False)
            for i in chunk:
                pipe.set(keys[i], memoryview(srcs[i].byte_array).cast("B"))
            pipe.execute()

    def load() -> None:
        for chunk in _batches(len(keys), batch):
            pipe = client.pipeline(transaction=False)
            for i in chunk:
                pipe.get(keys[i])
            for i, value in zip(chunk, pipe.execute()):
                memoryview(dsts[i].byte_array).cast("B")[:] = value

    return store, load


def _adapter_rows(adapter: Any, keys: list[ObjectKey], srcs: list[TensorMemoryObj],
                  dsts: list[TensorMemoryObj], batch: int, in_flight: int
                  ) -> tuple[Callable[[], None], Callable[[], None]]:
    chunks = _batches(len(keys), batch)

    def store() -> None:
        for start in range(0, len(chunks), in_flight):
            tasks = [adapter.submit_store_task([keys[i] for i in c], [srcs[i] for i in c])
                     for c in chunks[start:start + in_flight]]
            results: dict[int, Any] = {}
            for task in tasks:
                result = (results.pop(task) if task in results
                          else wait_for_store(adapter, task, others=results))
                if not result.is_successful():
                    raise SystemExit("a benchmark store failed")

    def load() -> None:
        for start in range(0, len(chunks), in_flight):
            tasks = [(adapter.submit_load_task([keys[i] for i in c], [dsts[i] for i in c]), len(c))
                     for c in chunks[start:start + in_flight]]
            for task, n in tasks:
                if wait_for_load(adapter, task).count() != n:
                    raise SystemExit("a benchmark load missed")

    return store, load


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunk-kib", type=int, default=1024)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    chunk_bytes = args.chunk_kib * 1024
    srcs, _ = _objects(args.chunks, chunk_bytes, seed=0)
    dsts, _ = _objects(args.chunks, chunk_bytes, seed=1)
    total = args.chunks * chunk_bytes
    keys = [ObjectKey(ObjectKey.IntHash2Bytes(i), "bench", 0) for i in range(args.chunks)]

    try:
        server = LocalRedisServer(extra_args=["--maxmemory", "0"])
    except RedisServerNotFoundError as exc:
        print(f"bench_redis: {exc}", file=sys.stderr)
        return 1
    rows: list[Row] = []
    with server:
        paths: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
            "raw redis-py": _raw_rows(server.url, [b"raw:" + k.chunk_hash for k in keys], srcs,
                                      dsts, args.batch),
        }
        variants: list[tuple[str, dict[str, Any], int]] = [
            ("adapter", {}, 1),
            (f"adapter, {args.in_flight} in flight", {}, args.in_flight),
        ]
        if "fp8" in get_registered_serde_types():
            variants.append((f"adapter + fp8, {args.in_flight} in flight",
                             {"serde": {"type": "fp8"}}, args.in_flight))
        adapters = []
        try:
            for name, extra, in_flight in variants:
                l1 = L1Manager(4 * args.batch * in_flight * chunk_bytes)
                adapter = create_l2_adapter({"type": "redis", "url": server.url,
                                             "namespace": name, "batch_keys": args.batch,
                                             **extra}, l1)
                adapters.append(adapter)
                paths[name] = _adapter_rows(adapter, keys, srcs, dsts, args.batch, in_flight)
            timings = _interleaved_medians(paths, args.repeats)
        finally:
            for adapter in adapters:
                adapter.close()
        base_store, base_load = timings["raw redis-py"]
        for name, (t_store, t_load) in timings.items():
            rows.append(Row(name, total / t_store / 1e9, total / t_load / 1e9,
                            t_store / base_store, t_load / base_load))

    if args.json:
        print(json.dumps({"chunk_bytes": chunk_bytes, "chunks": args.chunks, "batch": args.batch,
                          "rows": [asdict(r) for r in rows]}, indent=2))
        return 0
    print(f"redis L2 throughput: {args.chunks} chunks x {args.chunk_kib} KiB, {args.batch} keys "
          f"per round trip, median of {args.repeats} interleaved rounds")
    print("(GB/s of KV bytes; ratio = time / raw redis-py time for the same work)")
    print(f"{'path':34} {'store GB/s':>10} {'ratio':>6} {'load GB/s':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r.name:34} {r.store_gbps:10.2f} {r.store_ratio:6.2f} {r.load_gbps:10.2f} "
              f"{r.load_ratio:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
