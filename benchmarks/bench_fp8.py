"""fp8 serde benchmark: codec speed against memcpy and torch's cast, serde throughput with one and two
workers, and round-trip error of the scaling modes on KV data whose values leave the fp8 range.

    python benchmarks/bench_fp8.py                 # what `nox -s bench` runs
    python benchmarks/bench_fp8.py --quick         # fewer repeats, smaller processor batches
    python benchmarks/bench_fp8.py --json out.json

Speeds are GB/s of unquantized KV bytes (source bytes for encode, destination bytes for decode);
memcpy is torch ``copy_`` of the same chunk. Every timed variant is measured in the same
interleaved rounds (so machine noise hits all of them alike) and reported as the median. torch runs
single-threaded throughout; the codec never uses more than the calling thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, create_serde_processor
from lmserde.testing import wait_for_result
from lmserde_fp8 import dequantize_into, fast_path_available, kernel, quantize_into

FLOAT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FP8_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


_SCRATCH: list[torch.Tensor] = []


def _evict_caches() -> None:
    """Write 64 MiB of scratch memory, pushing every benchmark buffer out of the CPU caches."""
    if not _SCRATCH:
        _SCRATCH.append(torch.empty(64 << 20, dtype=torch.uint8))
    _SCRATCH[0].fill_(1)


def _median_seconds(fns: dict[str, Callable[[], Any]], repeats: int, inner: int, *,
                    cold: bool = False) -> dict[str, float]:
    """Median seconds per call of each function (see :func:`_sample_seconds`)."""
    samples = _sample_seconds(fns, repeats, inner, cold=cold)
    return {name: statistics.median(values) for name, values in samples.items()}


def _sample_seconds(fns: dict[str, Callable[[], Any]], repeats: int, inner: int, *,
                    cold: bool = False) -> dict[str, list[float]]:
    """Seconds per call of each function in each of ``repeats`` interleaved rounds.

    Warm (default): each timed batch follows an untimed call, so the function's buffers are as
    cached as they get. Cold: caches are evicted before every timed call.
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            total = 0.0
            if not cold:
                fn()
            for _ in range(inner):
                if cold:
                    _evict_caches()
                start = time.perf_counter()
                fn()
                total += time.perf_counter() - start
            samples[name].append(total / inner)
    return samples


def _kv_like(numel: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(numel, generator=gen) * torch.exp(0.5 * torch.randn(numel, generator=gen))
    return x.to(dtype)


def _codec_fns(x: torch.Tensor, copy_dst: torch.Tensor, codes: torch.Tensor,
               cast_codes: torch.Tensor, y: torch.Tensor, fp8: torch.dtype) -> dict[str, Callable[[], Any]]:
    return {
        "memcpy": lambda: copy_dst.copy_(x),
        "encode": lambda: quantize_into(x, codes, fp8),
        "decode": lambda: dequantize_into(codes, y, fp8),
        "cast_encode": lambda: cast_codes.copy_(x),
        "cast_decode": lambda: y.copy_(cast_codes),
    }


def bench_codec(size: int, repeats: int, *, cold: bool = False,
                dtypes: tuple[str, ...] = tuple(FLOAT_DTYPES)) -> list[dict[str, Any]]:
    """Single-thread encode/decode of one ``size``-byte chunk: native codec, torch cast, memcpy."""
    rows = []
    for dname in dtypes:
        dtype = FLOAT_DTYPES[dname]
        n = size // dtype.itemsize
        x = _kv_like(n, dtype)
        copy_dst = torch.empty_like(x)
        for fname, fp8 in FP8_DTYPES.items():
            codes = torch.empty(n, dtype=torch.uint8)
            cast_codes = torch.empty(n, dtype=fp8)
            y = torch.empty_like(x)
            quantize_into(x, codes, fp8)
            assert torch.equal(codes, x.to(fp8).view(torch.uint8)), "codec differs from torch's cast"
            samples = _sample_seconds(_codec_fns(x, copy_dst, codes, cast_codes, y, fp8), repeats,
                                      inner=3, cold=cold)
            t = {k: statistics.median(v) for k, v in samples.items()}
            best = {k: min(v) for k, v in samples.items()}
            gbps = {k: size / v / 1e9 for k, v in t.items()}

            def ratio(base: str, other: str, samples: dict[str, list[float]] = samples) -> float:
                # median over rounds of the per-round ratio: the two runs of a round are adjacent
                # in time, so load that comes and goes affects both alike
                return statistics.median(b / o for b, o in zip(samples[base], samples[other]))

            rows.append({
                "src": dname, "fp8": fname, "memcpy_gbps": gbps["memcpy"],
                "encode_gbps": gbps["encode"], "decode_gbps": gbps["decode"],
                "cast_encode_gbps": gbps["cast_encode"], "cast_decode_gbps": gbps["cast_decode"],
                "encode_vs_memcpy": ratio("memcpy", "encode"),
                "decode_vs_memcpy": ratio("memcpy", "decode"),
                "encode_vs_cast": ratio("cast_encode", "encode"),
                "decode_vs_cast": ratio("cast_decode", "decode"),
                "best_memcpy_gbps": size / best["memcpy"] / 1e9,
                "best_encode_gbps": size / best["encode"] / 1e9,
                "best_decode_gbps": size / best["decode"] / 1e9,
            })
    return rows


def bench_torch_codec(size: int, repeats: int) -> list[dict[str, Any]]:
    """The pure-torch fallback (used when the extension is not built), bf16 only."""
    rows = []
    x = _kv_like(size // 2, torch.bfloat16)
    codes = torch.empty(x.numel(), dtype=torch.uint8)
    y = torch.empty_like(x)
    copy_dst = torch.empty_like(x)
    was = kernel.fast_path_available()
    kernel.set_fast_path_enabled(False)
    try:
        for fname, fp8 in FP8_DTYPES.items():
            fns = _codec_fns(x, copy_dst, codes, codes.view(fp8), y, fp8)
            t = _median_seconds({k: fns[k] for k in ("memcpy", "encode", "decode")},
                                max(3, repeats // 3), inner=1)
            rows.append({"src": "bf16", "fp8": fname, "encode_gbps": size / t["encode"] / 1e9,
                         "decode_gbps": size / t["decode"] / 1e9,
                         "encode_vs_memcpy": t["memcpy"] / t["encode"],
                         "decode_vs_memcpy": t["memcpy"] / t["decode"]})
    finally:
        kernel.set_fast_path_enabled(was)
    return rows


def _objects(size: int, dtype: torch.dtype, count: int) -> list[TensorMemoryObj]:
    numel = size // dtype.itemsize
    shape = [2, 8, numel // (2 * 8 * 1024), 1024] if numel % (2 * 8 * 1024) == 0 else [numel]
    layout = MemoryLayoutDesc([shape], [dtype])
    objs = []
    for i in range(count):
        obj = TensorMemoryObj.allocate(layout)
        obj.raw_data.copy_(_kv_like(numel, dtype, seed=i).view(torch.uint8))
        objs.append(obj)
    return objs


def _processor_seconds(proc: Any, srcs: list[TensorMemoryObj], workers: int, repeats: int
                       ) -> dict[str, list[float]]:
    """Seconds per round to copy (one-thread memcpy), serialize and deserialize all ``srcs``; the
    serde work is split into ``workers`` tasks submitted at once."""
    layout = srcs[0].get_layout()
    size = proc.estimate_serialized_size(layout)
    blobs = [TensorMemoryObj.from_tensor(torch.empty(size, dtype=torch.uint8)) for _ in srcs]
    outs = [TensorMemoryObj.allocate(layout) for _ in srcs]
    keys = [ObjectKey(bytes([i]) * 32, "bench", 0x01010101) for i in range(len(srcs))]
    parts = [list(range(w, len(srcs), workers)) for w in range(workers)]
    copies = [torch.empty_like(s.raw_data) for s in srcs]

    def memcpy() -> None:
        for src, copy in zip(srcs, copies):
            copy.copy_(src.raw_data)

    def run(serialize: bool) -> None:
        tasks = []
        for part in parts:
            if serialize:
                for i in part:
                    blobs[i].reset_used_size()
                tasks.append(proc.submit_serialize([srcs[i] for i in part], [blobs[i] for i in part],
                                                   [keys[i] for i in part]))
            else:
                tasks.append(proc.submit_deserialize([blobs[i] for i in part], [outs[i] for i in part],
                                                     [keys[i] for i in part]))
        for task in tasks:
            assert wait_for_result(proc, task, serialize=serialize)

    return _sample_seconds({"memcpy": memcpy, "ser": lambda: run(True), "de": lambda: run(False)},
                           repeats, inner=1)


def bench_processor(size: int, count: int, repeats: int) -> list[dict[str, Any]]:
    """Serde throughput through AsyncSerdeProcessor with max_workers 1 and 2."""
    rows = []
    for dname, dtype in FLOAT_DTYPES.items():
        srcs = _objects(size, dtype, count)
        total = size * count
        for fname in FP8_DTYPES:
            for scaling in ("none", "per_tensor", "per_token"):
                if scaling != "none" and dname != "bf16":
                    continue
                for workers in (1, 2):
                    proc = create_serde_processor({"type": "fp8", "fp8_dtype": f"float8_{fname}",
                                                   "scaling": scaling, "max_workers": workers})
                    try:
                        t = _processor_seconds(proc, srcs, workers, repeats)
                    finally:
                        proc.close()
                    med = {k: statistics.median(v) for k, v in t.items()}
                    rows.append({
                        "src": dname, "fp8": fname, "scaling": scaling, "workers": workers,
                        "memcpy_gbps": total / med["memcpy"] / 1e9,
                        "serialize_gbps": total / med["ser"] / 1e9,
                        "deserialize_gbps": total / med["de"] / 1e9,
                        "serialize_vs_memcpy": statistics.median(
                            m / x for m, x in zip(t["memcpy"], t["ser"])),
                        "deserialize_vs_memcpy": statistics.median(
                            m / x for m, x in zip(t["memcpy"], t["de"])),
                    })
    return rows


# -- round-trip error --------------------------------------------------------------------------


def _datasets() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(K, V) pairs, [layers, tokens, hidden] bf16."""
    gen = torch.Generator().manual_seed(1)
    layers, tokens, hidden = 4, 256, 1024
    v = torch.randn(layers, tokens, hidden, generator=gen) * 0.2
    k = torch.randn(layers, tokens, hidden, generator=gen) * 0.5
    bias = torch.zeros(hidden)
    bias[torch.randperm(hidden, generator=gen)[:8]] = torch.tensor(
        [1800.0, -1500.0, 1200.0, -900.0, 700.0, -600.0, 520.0, 480.0])
    out = {
        "randn (K 0.5, V 0.2)": (k.to(torch.bfloat16), v.to(torch.bfloat16)),
        "large key-bias channels (8 of 1024 at 480..1800)": ((k + bias).to(torch.bfloat16),
                                                             v.to(torch.bfloat16)),
        "tiny values (std 3e-4)": ((k * 6e-4).to(torch.bfloat16), (v * 1.5e-3).to(torch.bfloat16)),
    }
    token_scale = torch.exp2(torch.randint(-8, 8, (1, tokens, 1), generator=gen).float())
    out["token magnitudes spread over 2^-8..2^8"] = ((k * token_scale).to(torch.bfloat16),
                                                       (v * token_scale).to(torch.bfloat16))
    try:  # the lmserde bench generator's Qwen-like shape (QKV-bias key offsets, small V)
        from lmserde.bench import SyntheticKVGenerator, get_model_shape

        chunk = SyntheticKVGenerator(get_model_shape("qwen2.5-7b"), layers=4, tokens=256).chunk(0)
        out["lmserde.bench qwen2.5-7b synthetic chunk"] = (
            chunk.keys.reshape(chunk.keys.shape[0], chunk.keys.shape[1], -1),
            chunk.values.reshape(chunk.values.shape[0], chunk.values.shape[1], -1))
    except (ImportError, ValueError):
        pass
    return out


def _round_trip(x: torch.Tensor, fp8_name: str, scaling: str) -> torch.Tensor:
    proc = create_serde_processor({"type": "fp8", "fp8_dtype": f"float8_{fp8_name}", "scaling": scaling})
    try:
        src = TensorMemoryObj.from_tensor(x.contiguous())
        blob = TensorMemoryObj.from_tensor(torch.empty(proc.estimate_serialized_size(src.get_layout()),
                                                       dtype=torch.uint8))
        key = ObjectKey(b"\x00" * 32, "bench", 0x01010101)
        assert wait_for_result(proc, proc.submit_serialize([src], [blob], [key]), serialize=True)
        out = TensorMemoryObj.allocate(src.get_layout())
        assert wait_for_result(proc, proc.submit_deserialize([blob], [out], [key]), serialize=False)
        return out.tensor.clone()
    finally:
        proc.close()


def bench_error() -> list[dict[str, Any]]:
    rows = []
    for name, (k, v) in _datasets().items():
        for fp8_name in FP8_DTYPES:
            for scaling in ("none", "per_tensor", "per_token"):
                row: dict[str, Any] = {"data": name, "fp8": fp8_name, "scaling": scaling}
                for label, x in (("K", k), ("V", v)):
                    y = _round_trip(x, fp8_name, scaling).float()
                    xf = x.float()
                    row[f"{label}_rel_err"] = float((xf - y).norm() / xf.norm())
                    # mean over tokens of each token row's relative error: small tokens count too
                    per_token = (xf - y).norm(dim=-1) / xf.norm(dim=-1).clamp_min(1e-30)
                    row[f"{label}_token_err"] = float(per_token.mean())
                    row[f"{label}_zeroed"] = float(((y == 0) & (xf != 0)).float().mean())
                    fmax = 448.0 if fp8_name == "e4m3fn" else 57344.0
                    row[f"{label}_saturated"] = float((xf.abs() > fmax * 1.0625).float().mean()) \
                        if scaling == "none" else 0.0
                rows.append(row)
    return rows


# -- output ------------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=float, default=8.0, help="chunk size (default 8 MiB)")
    parser.add_argument("--repeats", type=int, default=21, help="timed rounds per variant (median)")
    parser.add_argument("--chunks", type=int, default=8, help="chunks per processor batch")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and chunks")
    parser.add_argument("--skip-error", action="store_true", help="skip the round-trip error table")
    parser.add_argument("--json", help="also write the results as JSON to this path")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.chunks = 7, 4
    torch.set_num_threads(1)
    size = int(args.size_mib * (1 << 20)) // 4096 * 4096

    print(f"fp8 serde benchmark: torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, native codec "
          f"{'on' if fast_path_available() else 'OFF'} (SIMD level {kernel.simd_level()}), "
          f"chunk {size / (1 << 20):g} MiB, {args.repeats} rounds, medians")
    results: dict[str, Any] = {"size_bytes": size, "torch": torch.__version__,
                               "native": fast_path_available(), "simd_level": kernel.simd_level()}

    codec = bench_codec(size, args.repeats)
    results["codec"] = codec
    print("\nCodec, one thread (GB/s of unquantized bytes, medians; x = median of the per-round "
          "speed ratios)")
    print(_table(
        ["src", "fp8", "memcpy", "encode", "enc/memcpy", "enc/cast", "decode", "dec/memcpy", "dec/cast",
         "cast enc", "cast dec"],
        [[r["src"], r["fp8"], f"{r['memcpy_gbps']:.1f}", f"{r['encode_gbps']:.1f}",
          f"{r['encode_vs_memcpy']:.2f}x", f"{r['encode_vs_cast']:.1f}x", f"{r['decode_gbps']:.1f}",
          f"{r['decode_vs_memcpy']:.2f}x", f"{r['decode_vs_cast']:.1f}x", f"{r['cast_encode_gbps']:.2f}",
          f"{r['cast_decode_gbps']:.2f}"] for r in codec]))

    print("\nThe same rounds, fastest round of each variant (GB/s; ratio of the fastest times)")
    print(_table(
        ["src", "fp8", "memcpy", "encode", "enc/memcpy", "decode", "dec/memcpy"],
        [[r["src"], r["fp8"], f"{r['best_memcpy_gbps']:.1f}", f"{r['best_encode_gbps']:.1f}",
          f"{r['best_encode_gbps'] / r['best_memcpy_gbps']:.2f}x", f"{r['best_decode_gbps']:.1f}",
          f"{r['best_decode_gbps'] / r['best_memcpy_gbps']:.2f}x"] for r in codec]))

    cold = bench_codec(size, max(3, args.repeats // 2), cold=True, dtypes=("bf16",))
    results["codec_cold"] = cold
    print("\nCodec, one thread, caches evicted before every call (bf16)")
    print(_table(
        ["src", "fp8", "memcpy", "encode", "enc/memcpy", "decode", "dec/memcpy"],
        [[r["src"], r["fp8"], f"{r['memcpy_gbps']:.1f}", f"{r['encode_gbps']:.1f}",
          f"{r['encode_vs_memcpy']:.2f}x", f"{r['decode_gbps']:.1f}", f"{r['decode_vs_memcpy']:.2f}x"]
         for r in cold]))

    fallback = bench_torch_codec(size, args.repeats)
    results["torch_codec"] = fallback
    print("\nPure-torch fallback codec (no extension), bf16, one thread")
    print(_table(["src", "fp8", "encode", "enc/memcpy", "decode", "dec/memcpy"],
                 [[r["src"], r["fp8"], f"{r['encode_gbps']:.2f}", f"{r['encode_vs_memcpy']:.2f}x",
                   f"{r['decode_gbps']:.2f}", f"{r['decode_vs_memcpy']:.2f}x"] for r in fallback]))

    proc_rows = bench_processor(size, args.chunks, max(3, args.repeats // 3))
    results["processor"] = proc_rows
    print(f"\nSerde through AsyncSerdeProcessor, batches of {args.chunks} chunks "
          f"(x = ratio to one-thread memcpy of the same batch)")
    print(_table(["src", "fp8", "scaling", "workers", "memcpy", "serialize", "ser/memcpy",
                  "deserialize", "de/memcpy"],
                 [[r["src"], r["fp8"], r["scaling"], str(r["workers"]), f"{r['memcpy_gbps']:.1f}",
                   f"{r['serialize_gbps']:.1f}",
                   f"{r['serialize_vs_memcpy']:.2f}x", f"{r['deserialize_gbps']:.1f}",
                   f"{r['deserialize_vs_memcpy']:.2f}x"] for r in proc_rows]))

    if not args.skip_error:
        errors = bench_error()
        results["error"] = errors
        print("\nRound-trip error, bf16 KV [4 layers, 256 tokens, 1024 hidden] (err: relative L2 "
              "error of the tensor; token err: mean over token rows of each row's relative error; "
              "zeroed: nonzero values decoded as 0; saturated: |x| beyond the fp8 range)")
        print(_table(["data", "fp8", "scaling", "K err", "K token err", "V err", "V token err",
                      "K zeroed", "V zeroed", "K saturated"],
                     [[r["data"], r["fp8"], r["scaling"], f"{r['K_rel_err']:.4f}",
                       f"{r['K_token_err']:.4f}", f"{r['V_rel_err']:.4f}", f"{r['V_token_err']:.4f}",
                       f"{r['K_zeroed']:.2%}", f"{r['V_zeroed']:.2%}", f"{r['K_saturated']:.2%}"]
                      for r in errors]))
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
