"""Store + load throughput through the ``s3`` L2 adapter against raw boto3 on the same bytes.

Starts a throwaway S3-compatible server (moto, in its own process) on a loopback port and moves
the same KV chunks through:

* ``raw boto3, N in flight``: ``put_object`` of the objects' bytes and ``get_object`` read into
  the destination objects, from ``N`` threads; the baseline of the rows with ``N`` in flight;
* ``adapter, N in flight``: ``S3L2Adapter`` store/load tasks of one key each, ``N`` submitted
  before waiting (what a store controller does);
* ``adapter + fp8``: the serde wrapper with the fp8 plugin (half the bytes on the wire; the
  throughput counts logical KV bytes), when lmserde-fp8 is installed.

Every store round writes fresh object names (a store of an existing key would be skipped by the
adapter's conditional write). Ratios are a row's time over raw boto3's time for the same work
with the same number in flight (1.00 = no overhead). Numbers are medians over ``--repeats``
rounds in which the paths take turns. moto is pure Python, so absolute numbers are the local
server's, not S3's; the ratios show what the adapter adds on top of the client.

Run: ``python benchmarks/bench_s3.py [--chunk-mib 8] [--chunks 8] [--in-flight 4]
[--repeats 3] [--json]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, get_registered_serde_types
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, wait_for_load, wait_for_store
from lmserde_s3.local_server import TEST_CREDENTIALS, LocalS3Server, MotoNotInstalledError

BUCKET = "bench"
Path = tuple[Callable[[], None], Callable[[], None]]


@dataclass
class Row:
    name: str
    in_flight: int
    store_mbps: float
    load_mbps: float
    store_ratio: float = 1.0
    load_ratio: float = 1.0


def _objects(count: int, chunk_bytes: int, seed: int) -> list[TensorMemoryObj]:
    elems = chunk_bytes // 2
    layout = MemoryLayoutDesc([[elems]], [torch.bfloat16])
    gen = torch.Generator().manual_seed(seed)
    objs = []
    for _ in range(count):
        obj = TensorMemoryObj.allocate(layout)
        obj.tensor.copy_(torch.randn(elems, generator=gen).to(torch.bfloat16))
        objs.append(obj)
    return objs


def _interleaved_medians(paths: dict[str, Path], repeats: int) -> dict[str, tuple[float, float]]:
    """Median store and load seconds per path; paths take turns within every round."""
    samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in paths}
    for round_ in range(repeats + 1):  # round 0 warms up connections and allocations
        for name, (store, load) in paths.items():
            for run, bucket in ((store, samples[name][0]), (load, samples[name][1])):
                start = time.perf_counter()
                run()
                if round_:
                    bucket.append(time.perf_counter() - start)
    return {n: (statistics.median(s), statistics.median(ld)) for n, (s, ld) in samples.items()}


def _raw_path(endpoint: str, srcs: list[TensorMemoryObj], dsts: list[TensorMemoryObj],
              in_flight: int, label: str) -> tuple[Path, Callable[[], None]]:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, config=Config(
        max_pool_connections=in_flight, retries={"max_attempts": 3, "mode": "standard"}))
    pool = ThreadPoolExecutor(in_flight)
    rounds = itertools.count()
    names: list[str] = []

    def store() -> None:
        r = next(rounds)
        names[:] = [f"raw/{label}/{r}/{i}" for i in range(len(srcs))]

        def put(i: int) -> None:
            body = bytes(memoryview(srcs[i].byte_array).cast("B"))
            client.put_object(Bucket=BUCKET, Key=names[i], Body=body, IfNoneMatch="*")
        list(pool.map(put, range(len(srcs))))

    def load() -> None:
        def get(i: int) -> None:
            body = client.get_object(Bucket=BUCKET, Key=names[i])["Body"]
            view, off = memoryview(dsts[i].byte_array).cast("B"), 0
            for chunk in body.iter_chunks(1 << 20):
                view[off:off + len(chunk)] = chunk
                off += len(chunk)
            if off != len(view):
                raise SystemExit("a raw load was short")
        list(pool.map(get, range(len(dsts))))

    def close() -> None:
        pool.shutdown()
        client.close()

    return (store, load), close


def _adapter_path(adapter: Any, srcs: list[TensorMemoryObj], dsts: list[TensorMemoryObj],
                  in_flight: int) -> Path:
    rounds = itertools.count()
    keys: list[ObjectKey] = []

    def store() -> None:
        r = next(rounds)
        keys[:] = [ObjectKey(ObjectKey.IntHash2Bytes(r << 20 | i), "bench", 0)
                   for i in range(len(srcs))]
        for start in range(0, len(keys), in_flight):
            tasks = [adapter.submit_store_task([keys[i]], [srcs[i]])
                     for i in range(start, min(start + in_flight, len(keys)))]
            results: dict[int, Any] = {}
            for task in tasks:
                result = (results.pop(task) if task in results
                          else wait_for_store(adapter, task, others=results))
                if not result.is_successful():
                    raise SystemExit("a benchmark store failed")

    def load() -> None:
        for start in range(0, len(keys), in_flight):
            tasks = [adapter.submit_load_task([keys[i]], [dsts[i]])
                     for i in range(start, min(start + in_flight, len(keys)))]
            for task in tasks:
                if wait_for_load(adapter, task).count() != 1:
                    raise SystemExit("a benchmark load missed")

    return store, load


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunk-mib", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    os.environ.update(TEST_CREDENTIALS)
    chunk_bytes = args.chunk_mib << 20
    srcs = _objects(args.chunks, chunk_bytes, seed=0)
    dsts = _objects(args.chunks, chunk_bytes, seed=1)
    total = args.chunks * chunk_bytes
    try:
        server = LocalS3Server()
    except MotoNotInstalledError as exc:
        print(f"bench_s3: {exc}", file=sys.stderr)
        return 1
    rows: list[Row] = []
    closers: list[Callable[[], None]] = []
    with server:
        server.create_bucket(BUCKET)
        paths: dict[str, Path] = {}
        baseline_of: dict[str, str] = {}
        levels = sorted({1, args.in_flight})
        try:
            for n in levels:
                raw_name = f"raw boto3, {n} in flight"
                paths[raw_name], close = _raw_path(server.endpoint_url, srcs, dsts, n, str(n))
                closers.append(close)
                variants: list[tuple[str, dict[str, Any]]] = [(f"adapter, {n} in flight", {})]
                if "fp8" in get_registered_serde_types() and n > 1:
                    variants.append((f"adapter + fp8, {n} in flight", {"serde": {"type": "fp8"}}))
                baseline_of[raw_name] = raw_name
                for name, extra in variants:
                    adapter = create_l2_adapter(
                        {"type": "s3", "bucket": BUCKET, "endpoint_url": server.endpoint_url,
                         "prefix": name.replace(" ", "-").replace(",", ""), "max_in_flight": n,
                         **extra}, L1Manager(4 * n * chunk_bytes))
                    closers.append(adapter.close)
                    paths[name] = _adapter_path(adapter, srcs, dsts, n)
                    baseline_of[name] = raw_name
            timings = _interleaved_medians(paths, args.repeats)
        finally:
            for close in closers:
                close()
        for name, (t_store, t_load) in timings.items():
            base_store, base_load = timings[baseline_of[name]]
            n = int(name.split(", ")[1].split()[0])
            rows.append(Row(name, n, total / t_store / 1e6, total / t_load / 1e6,
                            t_store / base_store, t_load / base_load))

    if args.json:
        print(json.dumps({"chunk_bytes": chunk_bytes, "chunks": args.chunks,
                          "rows": [asdict(r) for r in rows]}, indent=2))
        return 0
    print(f"s3 L2 throughput against a local moto server: {args.chunks} chunks x "
          f"{args.chunk_mib} MiB, median of {args.repeats} interleaved rounds")
    print("(MB/s of KV bytes; ratio = time / raw boto3 time with as many in flight)")
    print(f"{'path':30} {'store MB/s':>10} {'ratio':>6} {'load MB/s':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r.name:30} {r.store_mbps:10.0f} {r.store_ratio:6.2f} {r.load_mbps:10.0f} "
              f"{r.load_ratio:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
