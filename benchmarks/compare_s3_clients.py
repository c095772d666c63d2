"""Which Python S3 client should ``lmserde-s3`` use? Raw put/get throughput of candidate clients.

Moves ``--objects`` objects of ``--mib`` MiB each (all in flight at once) through a local
S3-compatible server (moto, started here in its own process) with:

* ``boto3``: ``put_object``/``get_object`` from a thread pool (one thread per object in flight);
* ``aiobotocore``: the same calls as coroutines on one asyncio loop (``asyncio.gather``);
* ``obstore``: Rust ``object_store`` through its async API (``put_async``/``get_async``).

Prints median MB/s of store and load over ``--repeats`` rounds in which the clients take turns.
Not run by ``nox -s bench`` (it needs all three clients); the numbers and the choice are recorded in
docs/plugins/s3.md. A client that is not installed is skipped with a note.

Run: ``python benchmarks/compare_s3_clients.py [--mib 32] [--objects 4] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from lmserde_s3.local_server import TEST_CREDENTIALS, LocalS3Server

BUCKET = "compare"


def _boto3(endpoint: str, payloads: list[bytes], n: int) -> tuple[Callable[[], None], ...]:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint,
                          config=Config(max_pool_connections=n, s3={"addressing_style": "path"}))
    pool = ThreadPoolExecutor(n)
    names = [f"boto3/{i}" for i in range(n)]

    def store() -> None:
        list(pool.map(lambda i: client.put_object(Bucket=BUCKET, Key=names[i], Body=payloads[i]),
                      range(n)))

    def load() -> None:
        def get(i: int) -> None:
            body = client.get_object(Bucket=BUCKET, Key=names[i])["Body"]
            buf = bytearray(len(payloads[i]))
            view, off = memoryview(buf), 0
            for chunk in body.iter_chunks(1 << 20):
                view[off:off + len(chunk)] = chunk
                off += len(chunk)
            assert off == len(buf)
        list(pool.map(get, range(n)))

    return store, load, pool.shutdown


def _aiobotocore(endpoint: str, payloads: list[bytes], n: int) -> tuple[Callable[[], None], ...]:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    loop = asyncio.new_event_loop()
    ctx = get_session().create_client("s3", endpoint_url=endpoint, config=AioConfig(
        max_pool_connections=n, s3={"addressing_style": "path"}))
    client = loop.run_until_complete(ctx.__aenter__())
    names = [f"aiobotocore/{i}" for i in range(n)]

    async def put_all() -> None:
        await asyncio.gather(*(client.put_object(Bucket=BUCKET, Key=names[i], Body=payloads[i])
                               for i in range(n)))

    async def get_one(i: int) -> None:
        response = await client.get_object(Bucket=BUCKET, Key=names[i])
        async with response["Body"] as body:
            data = await body.read()
        assert len(data) == len(payloads[i])

    async def get_all() -> None:
        await asyncio.gather(*(get_one(i) for i in range(n)))

    def close() -> None:
        loop.run_until_complete(ctx.__aexit__(None, None, None))
        loop.close()

    return (lambda: loop.run_until_complete(put_all()),
            lambda: loop.run_until_complete(get_all()), close)


def _obstore(endpoint: str, payloads: list[bytes], n: int) -> tuple[Callable[[], None], ...]:
    import obstore
    from obstore.store import S3Store

    store_ = S3Store(BUCKET, endpoint=endpoint, region="us-east-1",
                     access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                     secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                     client_options={"allow_http": True}, virtual_hosted_style_request=False)
    loop = asyncio.new_event_loop()
    names = [f"obstore/{i}" for i in range(n)]

    async def put_all() -> None:
        await asyncio.gather(*(obstore.put_async(store_, names[i], payloads[i]) for i in range(n)))

    async def get_one(i: int) -> None:
        result = await obstore.get_async(store_, names[i])
        data = await result.bytes_async()
        assert len(memoryview(data)) == len(payloads[i])

    async def get_all() -> None:
        await asyncio.gather(*(get_one(i) for i in range(n)))

    return (lambda: loop.run_until_complete(put_all()),
            lambda: loop.run_until_complete(get_all()), loop.close)


CLIENTS = {"boto3": _boto3, "aiobotocore": _aiobotocore, "obstore": _obstore}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--objects", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.update(TEST_CREDENTIALS)
    payloads = [os.urandom(args.mib << 20) for _ in range(args.objects)]
    total_mb = args.objects * (args.mib << 20) / 1e6
    with LocalS3Server() as server:
        server.create_bucket(BUCKET)
        paths = {}
        for name, build in CLIENTS.items():
            try:
                paths[name] = build(server.endpoint_url, payloads, args.objects)
            except ImportError as exc:
                print(f"{name}: not installed ({exc}); skipped", file=sys.stderr)
        samples: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in paths}
        for round_ in range(args.repeats + 1):  # round 0 warms up connections
            for name, (store, load, _close) in paths.items():
                for run, bucket in ((store, samples[name][0]), (load, samples[name][1])):
                    start = time.perf_counter()
                    run()
                    if round_:
                        bucket.append(time.perf_counter() - start)
        for _store, _load, close in paths.values():
            close()
    print(f"{args.objects} x {args.mib} MiB in flight, median of {args.repeats} "
          f"(MB/s against a local moto server)")
    print(f"{'client':<12} {'store MB/s':>11} {'load MB/s':>10}")
    for name, (stores, loads) in samples.items():
        print(f"{name:<12} {total_mb / statistics.median(stores):>11.0f} "
              f"{total_mb / statistics.median(loads):>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
