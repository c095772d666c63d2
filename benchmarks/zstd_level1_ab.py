"""A/B of the zstd serde's level 1 on one dtype: literal-only frames (the default where the native
kernel is built: planes Huffman coding serves are coded by zstd's Huffman coder alone, fused with
the split and, on decode, with the merge) against libzstd's tuned level 1 on every coded plane
(what a writer without the native kernel does), interleaved chunk by chunk in one process so
that both see the same machine.

Full Llama-3-8B-shaped chunks (32 MiB of Gaussian values), ``--buffers`` rotated (a working set
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
from lmserde_zstd import plane_codec, planes

DTYPES = {"bf16": (torch.bfloat16, 2), "fp16": (torch.float16, 2), "fp8": (torch.float8_e4m3fn, 1)}
CHUNK_VALUES = 32 * 2 * 256 * 8 * 128
#: LITERAL_SLACK per arm: -1 makes no literal frame "within the slack", so libzstd codes all.
ARMS = {"libzstd": -1.0, "literal": plane_codec.LITERAL_SLACK}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buffers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = parser.parse_args(argv)
    if not planes.literal_frames_available():
        raise SystemExit(f"the native kernel is not available: {planes.native_status()}")
    dtype, element_size = DTYPES[args.dtype]
    gen = torch.Generator().manual_seed(11)
    chunks = [torch.randn(CHUNK_VALUES, generator=gen).to(dtype).view(torch.uint8).numpy()
              for _ in range(args.buffers)]
    outs = {k: [np.empty(c.size + 4096, np.uint8) for c in chunks] for k in ARMS}
    back = [np.empty(c.size, np.uint8) for c in chunks]
    enc: dict[str, list[float]] = {k: [] for k in ARMS}
    dec: dict[str, list[float]] = {k: [] for k in ARMS}
    sizes: dict[str, int] = {}
    try:
        for _ in range(args.repeats):
            for i, chunk in enumerate(chunks):
                for name, slack in ARMS.items():
                    plane_codec.LITERAL_SLACK = slack
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
        plane_codec.LITERAL_SLACK = ARMS["literal"]
    nbytes = chunks[0].size
    for name in ARMS:
        e, d = statistics.median(enc[name]), statistics.median(dec[name])
        print(f"{args.dtype} {name:>8}: ratio {nbytes / sizes[name]:.4f}  encode {e * 1e3:6.2f} ms"
              f" = {nbytes / e / 1e9:.2f} GB/s  decode {d * 1e3:6.2f} ms = {nbytes / d / 1e9:.2f} GB/s")
    gain_e = statistics.median(enc["libzstd"]) / statistics.median(enc["literal"]) - 1
    gain_d = statistics.median(dec["libzstd"]) / statistics.median(dec["literal"]) - 1
    print(f"literal-only vs libzstd level 1: encode {gain_e:+.1%}, decode {gain_d:+.1%} (speed)")


if __name__ == "__main__":
    main()
