"""What hashing the payload inside a serde's own pass costs: serialize and deserialize of a
32 MiB Llama-3-8B bf16 chunk into a plain byte buffer vs into a framed payload (whose bound
hasher the serde feeds), interleaved in one process.

``identity`` copies with the core's fused copy-and-hash kernel when framed (``memmove``
otherwise); ``fp8`` (``scaling: none``) feeds its codes to the hasher from its codec loop. The
payload starts ``--page-distance`` bytes past the L1 object's offset in a 4 KiB page, on store
(the object is the source) and on load (it is the destination), as in the serde wrapper, whose
payload sits 64 bytes into a temporary allocated like the object: a store's destination is
then a little ahead of its source, which is where the checksum kernel's 4K-aliasing path
works. Several distinct sources and buffers rotate (DRAM regime). With ``--simd``, the framed
runs are repeated at each lower SIMD level of the checksum kernel. Reported: the unhashed
medians and the hashed runs' extra milliseconds (serialize / deserialize).

Run: ``python benchmarks/bench_payload_hash.py [--serde identity --serde fp8] [--repeats 6]
[--page-distance 64] [--simd]``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from collections.abc import Callable

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, frame_checksum
from lmserde.l2.serde.payload_views import byte_view
from lmserde.serde_build import resolve_serde

LLAMA3_8B_CHUNK = MemoryLayoutDesc([[32, 2, 256, 8 * 128]], [torch.bfloat16])
ROTATE = 6
KEY = ObjectKey(b"bench-payload-hash", "bench", 0)


def _page_offset(t: torch.Tensor) -> int:
    return t.data_ptr() % 4096


def _payload(area: torch.Tensor, peer: torch.Tensor, distance: int, n: int,
             framed: bool) -> TensorMemoryObj:
    """A byte object of ``n`` bytes in ``area``, ``distance`` bytes past ``peer``'s page offset."""
    start = (_page_offset(peer) + distance - _page_offset(area)) % 4096
    return byte_view(area[start:start + n], hashing=framed)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(serde: str, repeats: int, distance: int, levels: list[str]) -> dict[str, dict]:
    """Median serialize / deserialize milliseconds per mode (``plain`` and one per level)."""
    built = resolve_serde({"type": serde}).build_pair()
    serializer, deserializer = built.pair.serializer, built.pair.deserializer
    gen = torch.Generator().manual_seed(0)
    nbytes = LLAMA3_8B_CHUNK.nbytes
    sources = [TensorMemoryObj.over(
        torch.randn(nbytes // 2, generator=gen).to(torch.bfloat16).view(torch.uint8),
        LLAMA3_8B_CHUNK) for _ in range(ROTATE)]
    dests = [TensorMemoryObj.over(torch.zeros(nbytes, dtype=torch.uint8), LLAMA3_8B_CHUNK)
             for _ in range(ROTATE)]
    areas = [torch.zeros(nbytes + 8192, dtype=torch.uint8) for _ in range(ROTATE)]
    size = int(serializer.estimate_serialized_size(LLAMA3_8B_CHUNK))
    modes = ["plain", *levels]
    times: dict[str, dict[str, list[float]]] = {m: {"ser": [], "de": []} for m in modes}
    kernel = frame_checksum._kernel
    best = kernel.simd_level() if kernel is not None else None
    try:
        for r in range(repeats):
            for i in range(ROTATE):
                order = modes if (r + i) % 2 else modes[::-1]
                for k, mode in enumerate(order):
                    if mode != "plain" and kernel is not None:
                        kernel.set_simd_level(mode)
                    framed = mode != "plain"
                    area = areas[(i + k) % ROTATE]
                    out = _payload(area, sources[i].raw_data, distance, size, framed)
                    times[mode]["ser"].append(_timed(
                        lambda out=out, i=i: serializer.serialize(sources[i], out, KEY)))
                    dst = dests[(i + k + 3) % ROTATE]
                    inp = _payload(area, dst.raw_data, distance, size, framed)
                    # the serialized bytes, moved to the load's page distance (may overlap)
                    ctypes.memmove(inp.raw_data.data_ptr(), out.raw_data.data_ptr(), size)
                    times[mode]["de"].append(_timed(
                        lambda inp=inp, dst=dst: deserializer.deserialize(inp, dst, KEY)))
    finally:
        if best is not None:
            kernel.set_simd_level(best)
        if built.owner is not None:
            built.owner.close()
    return {m: {op: statistics.median(v) * 1e3 for op, v in t.items()} for m, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serde", action="append", help="identity and/or fp8 (default both)")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--page-distance", type=int, default=64)
    parser.add_argument("--simd", action="store_true", help="also each lower SIMD level")
    args = parser.parse_args(argv)
    kernel = frame_checksum._kernel
    if kernel is None:
        print("lmserde was built without its checksum kernel: serdes cannot hash in their pass")
        return 1
    order = ["sse2", "avx2", "avx512"]
    best = kernel.simd_level()
    levels = order[:order.index(best) + 1][::-1] if args.simd else [best]
    for serde in args.serde or ["identity", "fp8"]:
        found = measure(serde, args.repeats, args.page_distance, levels)
        plain = found["plain"]
        extra = ", ".join(
            f"{m}: {found[m]['ser'] - plain['ser']:+.2f} / {found[m]['de'] - plain['de']:+.2f}"
            for m in levels)
        print(f"{serde:<9} serialize {plain['ser']:.2f} ms, deserialize {plain['de']:.2f} ms "
              f"unhashed; hashed in the pass ({args.page_distance} bytes page distance) "
              f"{extra} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
