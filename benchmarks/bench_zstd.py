"""Ratio and speed of the ``zstd`` serde on full Llama-3-8B KV chunks, both codecs, against memcpy.

Every row moves full chunks (32 layers x 256 tokens x 8 KV heads x 128, K and V: 32 MiB in bf16,
64 MiB in fp32) from the bench's synthetic generator through a rotating set of ``--buffers``
chunks (a working set larger than the last-level cache). Each row runs once per codec
(``--codecs``, default ``planes,blosc2``: the default codec 2 and the 0.1 codec, before/after in
the same run):

* ``memcpy``: one copy of each chunk (the reference);
* ``<codec> bf16`` / ``fp16`` / ``fp32``: the serializer and deserializer alone, one thread;
* ``<codec> fp8 codes``: the same on the chunks cast to fp8 (e4m3) first;
* ``<codec> [fp8, zstd]``: the chain, quantize then compress (the fp8 cast included in the time);
* ``<codec> proc xN``: all chunks submitted at once to ``AsyncSerdeProcessor`` with
  ``max_workers`` N (separate chunks in parallel), to show scaling across workers;
* ``sha256 threads xN``: the reference for that scaling, N threads hashing the chunks (hashlib
  releases the GIL): what N threads of GIL-free C code get on this machine right now.

Speeds are input (raw KV) bytes per second, the median over ``--repeats`` passes. Each row shows
wall-clock GB/s and GB/s per CPU-second (process CPU time: on a shared machine, closer to what a
dedicated core gives than wall time). Goal: ratio >= 1.4x on bf16, encode >= 1 GB/s and decode
>= 2 GB/s per thread.

Run: ``python benchmarks/bench_zstd.py [--buffers 3] [--repeats 3] [--workers 1,2]
[--codecs planes,blosc2] [--json]``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from lmserde import ObjectKey, TensorMemoryObj, create_serde_processor
from lmserde.bench import SyntheticKVGenerator, get_model_shape
from lmserde.l2 import create_serde_chain
from lmserde.testing import wait_for_result
from lmserde_zstd import ZstdDeserializer, ZstdSerializer, planes

KEY = ObjectKey(b"\x01" * 32, "bench/llama-3-8b", 0x01010101, 0, "bench")


@dataclass
class Row:
    name: str
    ratio: float
    encode_gbps: float
    decode_gbps: float
    encode_cpu_gbps: float
    decode_cpu_gbps: float
    encode_vs_memcpy: float = 0.0
    decode_vs_memcpy: float = 0.0


def _timed(fn: Callable[[], None], repeats: int) -> tuple[float, float]:
    """Median (wall seconds, process CPU seconds) of ``repeats`` calls after one warm-up."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def _chunks(dtype: torch.dtype, count: int) -> list[TensorMemoryObj]:
    gen = SyntheticKVGenerator(get_model_shape("llama-3-8b"), dtype=dtype)
    return [TensorMemoryObj.from_tensor(gen.chunk(i).fused()) for i in range(count)]


def _row(name: str, srcs: list[TensorMemoryObj], ser: ZstdSerializer | None, des: ZstdDeserializer | None,
         repeats: int, *, proc: object = None, raw_bytes: int | None = None) -> Row:
    """Serializer/deserializer pair (or a chain processor's pair) over ``srcs``, one thread."""
    if proc is not None:
        ser, des = proc.serializer, proc.deserializer  # type: ignore[attr-defined]
    assert ser is not None and des is not None
    layout = srcs[0].get_layout()
    size = ser.estimate_serialized_size(layout)
    dsts = [TensorMemoryObj.from_tensor(torch.empty(size, dtype=torch.uint8)) for _ in srcs]
    outs = [TensorMemoryObj.allocate(layout) for _ in srcs]
    written = [0] * len(srcs)

    def encode() -> None:
        for i, (s, d) in enumerate(zip(srcs, dsts)):
            d.reset_used_size()
            written[i] = ser.serialize(s, d, KEY)
            d.set_used_size(written[i])

    def decode() -> None:
        for d, o in zip(dsts, outs):
            des.deserialize(d, o, KEY)

    enc_wall, enc_cpu = _timed(encode, repeats)
    dec_wall, dec_cpu = _timed(decode, repeats)
    if proc is None:
        for s, o in zip(srcs, outs):
            assert bytes(s.byte_array) == bytes(o.byte_array), f"{name}: not bit-exact"
    n = raw_bytes if raw_bytes is not None else sum(s.get_size() for s in srcs)
    return Row(name, n / sum(written), n / enc_wall / 1e9, n / dec_wall / 1e9,
               n / enc_cpu / 1e9, n / dec_cpu / 1e9)


def _memcpy(srcs: list[TensorMemoryObj], repeats: int) -> Row:
    dsts = [torch.empty(s.get_size(), dtype=torch.uint8) for s in srcs]

    def copy() -> None:
        for s, d in zip(srcs, dsts):
            ctypes.memmove(d.data_ptr(), s.raw_data.data_ptr(), s.get_size())

    wall, cpu = _timed(copy, repeats)
    n = sum(s.get_size() for s in srcs)
    return Row("memcpy", 1.0, n / wall / 1e9, n / wall / 1e9, n / cpu / 1e9, n / cpu / 1e9)


def _processor(codec: str, srcs: list[TensorMemoryObj], workers: int, repeats: int) -> Row:
    proc = create_serde_processor({"type": "zstd", "codec": codec, "max_workers": workers})
    try:
        layout = srcs[0].get_layout()
        size = ZstdSerializer().estimate_serialized_size(layout)
        dsts = [TensorMemoryObj.from_tensor(torch.empty(size, dtype=torch.uint8)) for _ in srcs]
        outs = [TensorMemoryObj.allocate(layout) for _ in srcs]
        keys = [ObjectKey(bytes([i + 1]) * 32, "bench/m", 0x01010101, 0, "b") for i in range(len(srcs))]

        def encode() -> None:
            for d in dsts:
                d.reset_used_size()
            tasks = [proc.submit_serialize([s], [d], [k]) for s, d, k in zip(srcs, dsts, keys)]
            assert all(wait_for_result(proc, t, serialize=True) for t in tasks)

        def decode() -> None:
            tasks = [proc.submit_deserialize([d], [o], [k]) for d, o, k in zip(dsts, outs, keys)]
            assert all(wait_for_result(proc, t, serialize=False) for t in tasks)

        enc_wall, enc_cpu = _timed(encode, repeats)
        dec_wall, dec_cpu = _timed(decode, repeats)
        n = sum(s.get_size() for s in srcs)
        return Row(f"{codec} proc x{workers} bf16", n / sum(d.get_size() for d in dsts),
                   n / enc_wall / 1e9, n / dec_wall / 1e9, n / enc_cpu / 1e9, n / dec_cpu / 1e9)
    finally:
        proc.close()


def _sha256_threads(srcs: list[TensorMemoryObj], workers: int, repeats: int) -> Row:
    """N threads hashing separate chunks: the scaling this machine allows GIL-free code."""
    arrays = [s.raw_data.numpy() for s in srcs]

    def hash_all() -> None:
        def work(k: int) -> None:
            for a in arrays[k::workers]:
                hashlib.sha256(a).digest()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    wall, cpu = _timed(hash_all, repeats)
    n = sum(s.get_size() for s in srcs)
    return Row(f"sha256 threads x{workers}", 1.0, n / wall / 1e9, n / wall / 1e9, n / cpu / 1e9,
               n / cpu / 1e9)


def _cpu() -> str:
    """The CPU model and the SIMD flags that matter here (from /proc/cpuinfo, where there is one)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU unknown"
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.startswith("model name")), "CPU")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                  if line.startswith("flags")), [])
    simd = [f for f in ("sse2", "avx2", "bmi2", "avx512f", "avx512bw", "avx512vbmi") if f in flags]
    return f"{model}, {len(re.findall(r'^processor', info, re.M))} CPUs, {' '.join(simd)}"


def run(buffers: int, repeats: int, workers: list[int], codecs: list[str]) -> list[Row]:
    torch.set_num_threads(1)
    bf16 = _chunks(torch.bfloat16, buffers)
    fp16 = _chunks(torch.float16, buffers)
    fp32 = _chunks(torch.float32, buffers)
    codes = [TensorMemoryObj.from_tensor(c.tensor.to(torch.float8_e4m3fn).view(torch.uint8)
                                         .reshape(-1).contiguous()) for c in bf16]
    des = ZstdDeserializer()
    base = _memcpy(bf16, repeats)
    rows = [base]
    for codec in codecs:
        ser = ZstdSerializer(codec=codec)
        rows += [_row(f"{codec} bf16", bf16, ser, des, repeats),
                 _row(f"{codec} fp16", fp16, ser, des, repeats),
                 _row(f"{codec} fp32", fp32, ser, des, repeats),
                 _row(f"{codec} fp8 codes", codes, ser, des, repeats)]
        chain = create_serde_chain([{"type": "fp8"}, {"type": "zstd", "codec": codec}])
        try:
            rows.append(_row(f"{codec} [fp8, zstd] bf16", bf16, None, None, repeats, proc=chain))
        finally:
            chain.close()
        rows += [_processor(codec, bf16, w, repeats) for w in workers]
    rows += [_sha256_threads(bf16, w, repeats) for w in workers]
    for r in rows[1:]:
        r.encode_vs_memcpy = r.encode_gbps / base.encode_gbps
        r.decode_vs_memcpy = r.decode_gbps / base.decode_gbps
    base.encode_vs_memcpy = base.decode_vs_memcpy = 1.0
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--buffers", type=int, default=3, help="32 MiB chunks rotated (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="timed passes; medians (default 3)")
    p.add_argument("--workers", default="1,2", help="max_workers values for the processor rows")
    p.add_argument("--codecs", default="planes,blosc2", help="codecs to measure (default both)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    rows = run(args.buffers, args.repeats, [int(w) for w in args.workers.split(",") if w],
               [c for c in args.codecs.split(",") if c])
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        return
    print(f"# {_cpu()}; plane split: {'native' if planes.native_available() else 'numpy'}")
    print(f"{'':24} {'ratio':>6} {'enc GB/s':>9} {'dec GB/s':>9} {'enc/CPU-s':>10} "
          f"{'dec/CPU-s':>10} {'enc vs memcpy':>14} {'dec vs memcpy':>14}")
    for r in rows:
        print(f"{r.name:24} {r.ratio:5.3f}x {r.encode_gbps:9.2f} {r.decode_gbps:9.2f} "
              f"{r.encode_cpu_gbps:10.2f} {r.decode_cpu_gbps:10.2f} {r.encode_vs_memcpy:13.0%} "
              f"{r.decode_vs_memcpy:13.0%}")


if __name__ == "__main__":
    main()
