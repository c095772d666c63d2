"""A/B of the zstd serde's level-1 setting on bf16: accelerated (the default since session 7:
planes that compress 2x or more are coded with the fast strategy accelerated to almost no match
search, Huffman literals kept on, through pyzstd) against unaccelerated (python-zstandard, the
setting before), interleaved chunk by chunk in one process so that both see the same machine.

Full Llama-3-8B-shaped chunks (32 MiB of Gaussian bf16), ``--buffers`` rotated (a working set
above the CPU cache), ``--repeats`` passes; medians of encode and decode time of the codec alone
(one thread), the ratio of each, and a bit-exact round-trip check.

Run: ``python benchmarks/zstd_level1_ab.py [--buffers 4] [--repeats 7] [--dtype bf16|fp16|fp8]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import zstandard
from lmserde_zstd import plane_codec

DTYPES = {"bf16": (torch.bfloat16, 2), "fp16": (torch.float16, 2), "fp8": (torch.float8_e4m3fn, 1)}
CHUNK_VALUES = 32 * 2 * 256 * 8 * 128


def _unaccelerated_state() -> plane_codec._State:
    """Per-thread state whose "accelerated" compressor is the unaccelerated one."""
    state = plane_codec._State()
    state.compressors[(1, True)] = zstandard.ZstdCompressor(
        compression_params=plane_codec._params(1)).compress
    return state


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buffers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = parser.parse_args(argv)
    dtype, element_size = DTYPES[args.dtype]
    gen = torch.Generator().manual_seed(11)
    chunks = [torch.randn(CHUNK_VALUES, generator=gen).to(dtype).view(torch.uint8).numpy()
              for _ in range(args.buffers)]
    states = {"unaccelerated": _unaccelerated_state(), "accelerated": plane_codec._State()}
    outs = {k: [np.empty(c.size + 4096, np.uint8) for c in chunks] for k in states}
    back = [np.empty(c.size, np.uint8) for c in chunks]
    enc: dict[str, list[float]] = {k: [] for k in states}
    dec: dict[str, list[float]] = {k: [] for k in states}
    sizes: dict[str, int] = {}
    saved = plane_codec._state
    try:
        for _ in range(args.repeats):
            for i, chunk in enumerate(chunks):
                for name, state in states.items():
                    plane_codec._state = state
                    start = time.perf_counter()
                    n = plane_codec.compress_into(chunk, outs[name][i], element_size=element_size,
                                                  level=1)
                    enc[name].append(time.perf_counter() - start)
                    assert n is not None
                    sizes[name] = n
                    start = time.perf_counter()
                    plane_codec.decompress_into(memoryview(outs[name][i])[:n], back[i],
                                                element_size=element_size)
                    dec[name].append(time.perf_counter() - start)
                    if not np.array_equal(back[i], chunk):
                        raise SystemExit(f"{name}: the round trip is not bit-exact")
    finally:
        plane_codec._state = saved
    nbytes = chunks[0].size
    for name in states:
        e, d = statistics.median(enc[name]), statistics.median(dec[name])
        print(f"{args.dtype} {name:>13}: ratio {nbytes / sizes[name]:.4f}  encode {e * 1e3:6.2f} ms"
              f" = {nbytes / e / 1e9:.2f} GB/s  decode {d * 1e3:6.2f} ms = {nbytes / d / 1e9:.2f} GB/s")
    gain_e = statistics.median(enc["unaccelerated"]) / statistics.median(enc["accelerated"]) - 1
    gain_d = statistics.median(dec["unaccelerated"]) / statistics.median(dec["accelerated"]) - 1
    print(f"accelerated vs unaccelerated: encode {gain_e:+.1%}, decode {gain_d:+.1%} (speed)")


if __name__ == "__main__":
    main()
