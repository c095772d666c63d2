"""Which keyed MAC authenticates the stored-object frame: throughput of the candidates.

Candidates (every one from a well-kept library, none hand-written):

- ``blake3``: keyed BLAKE3 (the ``blake3`` package, Rust bindings; SIMD, ``max_threads`` for its
  own multithreading), one thread and ``max_threads=AUTO`` (when ``blake3`` is installed: it is
  not a dependency of lmserde);
- ``gmac``: AES-256-GMAC, ``cryptography``'s ``AESGCM.encrypt(nonce, b"", payload)`` (empty
  plaintext, the payload as associated data: GHASH with VPCLMULQDQ where OpenSSL has it);
- ``poly1305``: ``cryptography``'s ``Poly1305`` (a one-time key per message: a real frame would
  derive one per object);
- ``hmac-sha256``: ``cryptography``'s HMAC-SHA256 (OpenSSL, SHA-NI where the CPU has it);
- ``xxh3`` (unkeyed, the plain frame's checksum) and ``memcpy`` as the yardsticks.

Each candidate hashes ``--chunks`` distinct 32 MiB buffers in rotation (DRAM regime: the working
set is far above the CPU caches), ``--repeats`` rounds; the result is the median GB/s per
candidate. Buffers go in as ``memoryview``s of CPU tensors, so a candidate that copies its input
pays for it here.

Run: ``python benchmarks/mac_candidates.py [--chunks 8] [--repeats 7] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import xxhash
from bench_frame import _cpu_flags  # the same CPU flags line as the frame benchmark
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.poly1305 import Poly1305
from lmserde.frame_checksum import tensor_bytes

try:
    import blake3
except ImportError:  # not a dependency of lmserde: `pip install blake3` to compare it too
    blake3 = None

CHUNK_BYTES = 32 << 20


def candidates() -> dict[str, Callable[[memoryview], object]]:
    """Name -> a function that MACs (or hashes, or copies) one buffer."""
    key = os.urandom(32)
    gcm = AESGCM(key)
    nonce = os.urandom(12)
    sink = torch.empty(CHUNK_BYTES, dtype=torch.uint8)

    def memcpy(buf: memoryview) -> object:
        with warnings.catch_warnings():  # a read-only view: torch warns, and only reads it here
            warnings.simplefilter("ignore", UserWarning)
            sink.copy_(torch.frombuffer(buf, dtype=torch.uint8))
        return None

    def hmac_sha256(buf: memoryview) -> bytes:
        mac = hmac.HMAC(key, hashes.SHA256())
        mac.update(buf)
        return mac.finalize()

    found: dict[str, Callable[[memoryview], object]] = {
        "memcpy (torch copy_)": memcpy,
        "xxh3 (unkeyed)": lambda buf: xxhash.xxh3_64_intdigest(buf),
        "aes-256-gmac": lambda buf: gcm.encrypt(nonce, b"", buf),
        "poly1305": lambda buf: Poly1305.generate_tag(key, buf),
        "hmac-sha256": hmac_sha256,
    }
    if blake3 is not None:
        found["blake3 keyed, 1 thread"] = lambda buf: blake3.blake3(buf, key=key).digest(16)
        found["blake3 keyed, AUTO threads"] = lambda buf: blake3.blake3(
            buf, key=key, max_threads=blake3.blake3.AUTO).digest(16)
    return found


def measure(chunks: int, repeats: int) -> dict[str, float]:
    """Median GB/s of each candidate over ``repeats`` rounds of ``chunks`` rotating buffers."""
    buffers = [torch.randint(0, 256, (CHUNK_BYTES,), dtype=torch.uint8) for _ in range(chunks)]
    views = [tensor_bytes(b).cast("B") for b in buffers]  # in place, as the frame reads them
    results: dict[str, float] = {}
    for name, fn in candidates().items():
        fn(views[0])  # warm-up (library init, page faults of the sink)
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            for view in views:
                fn(view)
            rates.append(chunks * CHUNK_BYTES / (time.perf_counter() - start) / 1e9)
        results[name] = statistics.median(rates)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = measure(args.chunks, args.repeats)
    if args.json:
        print(json.dumps({"cpu_flags": _cpu_flags(), "gb_per_s": results}, indent=2))
        return 0
    print(f"keyed MAC candidates, {args.chunks} x 32 MiB rotating buffers, median of "
          f"{args.repeats} rounds; CPU flags: {_cpu_flags()}; {os.cpu_count()} CPUs")
    for name, rate in results.items():
        print(f"  {name:<28} {rate:6.2f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
