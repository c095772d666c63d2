"""Which lossless coder should back the ``zstd`` serde? Measures the candidates side by side.

The measurement behind the choice recorded in ``docs/plugins/zstd.md``. Not run by ``nox -s bench``
(some candidates need libraries the plugin does not depend on; those missing are skipped)::

    pip install pyzstd zipnn   # optional
    python benchmarks/zstd_candidates.py [--buffers 3] [--repeats 3] [--only "llama bf16"] [--json]

Inputs: full Llama-3-8B-shaped chunks (32 layers x 256 tokens x 8 KV heads x 128, K and V) from
the bench's synthetic generator in bf16, fp16 and fp32, the same chunks as fp8 (e4m3) codes, and
plain Gaussian bf16. ``--buffers`` chunks of each are rotated (a working set larger than the CPU
cache). Every candidate runs on one thread; each number is the median over ``--repeats`` passes
over all buffers, timed in process CPU seconds (the development machine is shared, so wall time
would measure the neighbours; CPU time still includes every helper thread a library starts).
Decode writes into a preallocated buffer where the library allows it (otherwise the copy out of
the returned ``bytes`` is part of the time) and includes the plane merge.

Candidates:

* ``blosc2 zstd1+shuffle`` / ``+bitshuffle`` / ``lz4+shuffle``: blosc2's cache-blocked shuffle and
  codec in one pass (``typesize`` = element size);
* ``zstandard zstd1 plain``: libzstd on the raw bytes;
* ``zstandard zstd1 planes`` / ``pyzstd zstd1 planes``: the bytes split into byte planes (byte
  ``i`` of every element together, by torch), each plane compressed by libzstd;
* ``zstandard hi-plane only``: only the most significant byte plane (sign/exponent) compressed,
  the others stored as they are (torch split);
* ``split + zstd <setting> top plane``: the plugin's native split (``lmserde_zstd.planes``), the
  top plane compressed by libzstd at ``<setting>`` (level 1; the negative levels -1, -3, -5,
  which turn zstd's Huffman coding of literals off; ``tuned``: the fast strategy with a
  64-entry hash table, a 7-byte minimum match and a 128 KiB window: level 1 for planes with
  repeats, and without the native kernel), decoded straight into a scratch plane and merged
  natively; ``split + literal-only top plane``: the same with the top plane coded by zstd's
  Huffman coder alone into a literal-only zstd frame (``lmserde_zstd.planes.encode_planes``, not
  fused with the split here);
* ``lmserde planes (codec 2)``: the serde's default codec end to end (per-plane sample decision;
  at level 1 planes Huffman coding serves are literal-only frames fused with the split and merge,
  others the tuned setting);
* ``zipnn``: ZipNN's byte grouping plus Huffman coding of the exponent plane.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from lmserde.bench import SyntheticKVGenerator, get_model_shape

Encode = Callable[[torch.Tensor], Any]
Decode = Callable[[Any, torch.Tensor], None]


@dataclass
class Row:
    data: str
    candidate: str
    ratio: float
    encode_gbps: float
    decode_gbps: float


def _planes(flat: torch.Tensor, itemsize: int) -> torch.Tensor:
    return flat.view(-1, itemsize).t().contiguous()


def _merge(planes: torch.Tensor, out: torch.Tensor, itemsize: int) -> None:
    out.view(-1, itemsize).copy_(planes.t())


def _native_candidates(itemsize: int) -> dict[str, tuple[Encode, Decode]]:
    """The plugin's split/merge with libzstd on the top plane, and codec 2 itself."""
    import numpy as np
    import zstandard
    from lmserde_zstd import plane_codec, planes

    found: dict[str, tuple[Encode, Decode]] = {}
    outputs: dict[int, np.ndarray] = {}  # per input buffer: where its planes / payload go
    scratch = np.empty(0, dtype=np.uint8)  # the decoded top plane, reused
    decoder = zstandard.ZstdDecompressor()

    def out_for(x: torch.Tensor) -> np.ndarray:
        key = x.data_ptr()
        if key not in outputs or outputs[key].size < x.numel():
            outputs[key] = np.empty(x.numel(), dtype=np.uint8)
        return outputs[key]

    def top_plane(compress: Callable[[Any], bytes]) -> tuple[Encode, Decode]:
        def enc(x: torch.Tensor) -> Any:
            out = out_for(x)
            count = x.numel() // itemsize
            parts = [out[p * count:(p + 1) * count] for p in range(itemsize)]
            planes.split(x.numpy(), itemsize, parts)
            return compress(parts[-1]), parts[:-1]

        def dec(c: Any, out: torch.Tensor) -> None:
            count = out.numel() // itemsize
            if scratch.size < count:
                scratch.resize(count, refcheck=False)
            top = scratch[:count]
            with decoder.stream_reader(c[0], read_size=len(c[0])) as reader:
                reader.readinto(top)
            planes.merge([*c[1], top], itemsize, out.numpy())
        return enc, dec

    levels: dict[str, Callable[[Any], bytes]] = {
        f"L{lvl}": zstandard.ZstdCompressor(
            compression_params=zstandard.ZstdCompressionParameters.from_level(lvl)).compress
        for lvl in (1, -1, -3, -5)}
    levels["tuned"] = zstandard.ZstdCompressor(compression_params=plane_codec._params(1)).compress
    if planes.literal_frames_available():
        frame_out = np.empty(0, dtype=np.uint8)

        def literal_frame(plane: np.ndarray) -> bytes:
            nonlocal frame_out
            if frame_out.size < plane.size:
                frame_out = np.empty(plane.size, dtype=np.uint8)
            n = planes.encode_planes(plane, 1, [frame_out[:plane.size]], [True])[0]
            assert n > 0
            return frame_out[:n].tobytes()

        levels["literal-only"] = literal_frame
    for name, compress in levels.items():
        label = "split + literal-only top plane" if name == "literal-only" else \
            f"split + zstd {name} top plane"
        found[label] = top_plane(compress)

    def codec2_enc(x: torch.Tensor) -> Any:
        out = out_for(x)
        length = plane_codec.compress_into(x.numpy(), out, element_size=itemsize, level=1)
        assert length is not None
        return memoryview(out)[:length]

    def codec2_dec(c: Any, out: torch.Tensor) -> None:
        plane_codec.decompress_into(c, out.numpy(), element_size=itemsize)

    found["lmserde planes (codec 2)"] = (codec2_enc, codec2_dec)
    return found


def _candidates(itemsize: int) -> dict[str, tuple[Encode, Decode]]:
    import blosc2
    import zstandard

    found: dict[str, tuple[Encode, Decode]] = _native_candidates(itemsize)

    def blosc(codec: Any, filt: Any, split: Any = blosc2.SplitMode.AUTO_SPLIT
              ) -> tuple[Encode, Decode]:
        cparams = {"codec": codec, "clevel": 1, "filters": [filt], "typesize": itemsize,
                   "nthreads": 1, "splitmode": split}

        def enc(x: torch.Tensor) -> Any:
            return blosc2.compress2(x.numpy(), **cparams)

        def dec(c: Any, out: torch.Tensor) -> None:
            blosc2.decompress2(c, dst=out.numpy(), nthreads=1)
        return enc, dec

    found["blosc2 zstd1+shuffle"] = blosc(blosc2.Codec.ZSTD, blosc2.Filter.SHUFFLE)
    found["blosc2 zstd1+shuffle split"] = blosc(blosc2.Codec.ZSTD, blosc2.Filter.SHUFFLE,
                                                blosc2.SplitMode.ALWAYS_SPLIT)
    found["blosc2 zstd1+bitshuffle"] = blosc(blosc2.Codec.ZSTD, blosc2.Filter.BITSHUFFLE)
    found["blosc2 lz4+shuffle"] = blosc(blosc2.Codec.LZ4, blosc2.Filter.SHUFFLE)

    zc = zstandard.ZstdCompressor(level=1)
    zd = zstandard.ZstdDecompressor()

    def plain_enc(x: torch.Tensor) -> Any:
        return zc.compress(x.numpy())

    def plain_dec(c: Any, out: torch.Tensor) -> None:
        out.copy_(torch.frombuffer(bytearray(zd.decompress(c)), dtype=torch.uint8))

    found["zstandard zstd1 plain"] = (plain_enc, plain_dec)

    def lib_planes(compress: Callable[[Any], bytes], decompress: Callable[[bytes], bytes]
                   ) -> tuple[Encode, Decode]:
        def enc(x: torch.Tensor) -> Any:
            planes = _planes(x, itemsize)
            return [compress(planes[i].numpy()) for i in range(itemsize)]

        def dec(c: Any, out: torch.Tensor) -> None:
            planes = torch.empty(itemsize, out.numel() // itemsize, dtype=torch.uint8)
            for i, part in enumerate(c):
                planes[i].copy_(torch.frombuffer(bytearray(decompress(part)), dtype=torch.uint8))
            _merge(planes, out, itemsize)
        return enc, dec

    if itemsize > 1:
        found["zstandard zstd1 planes"] = lib_planes(zc.compress, zd.decompress)
        try:
            import pyzstd
        except ImportError:
            pass
        else:
            found["pyzstd zstd1 planes"] = lib_planes(lambda b: pyzstd.compress(b, 1),
                                                      pyzstd.decompress)

        def hi_enc(x: torch.Tensor) -> Any:
            planes = _planes(x, itemsize)
            return zc.compress(planes[-1].numpy()), planes[:-1].clone()

        def hi_dec(c: Any, out: torch.Tensor) -> None:
            planes = torch.empty(itemsize, out.numel() // itemsize, dtype=torch.uint8)
            planes[-1].copy_(torch.frombuffer(bytearray(zd.decompress(c[0])), dtype=torch.uint8))
            planes[:-1].copy_(c[1])
            _merge(planes, out, itemsize)
        found["zstandard hi-plane only"] = (hi_enc, hi_dec)

    try:
        from zipnn import ZipNN
    except ImportError:
        return found
    dtype_name = {1: "uint8", 2: "bfloat16", 4: "float32"}[itemsize]
    zn = ZipNN(bytearray_dtype=dtype_name, threads=1)

    def zipnn_enc(x: torch.Tensor) -> Any:
        return zn.compress(x.numpy().tobytes())

    def zipnn_dec(c: Any, out: torch.Tensor) -> None:
        out.copy_(torch.frombuffer(bytearray(zn.decompress(c)), dtype=torch.uint8))

    found["zipnn"] = (zipnn_enc, zipnn_dec)
    return found


def _size(c: Any) -> int:
    if isinstance(c, (bytes, bytearray, memoryview)):
        return len(c)
    if not isinstance(c, (list, tuple, torch.Tensor)):  # a numpy plane
        return int(c.nbytes)
    if isinstance(c, torch.Tensor):
        return c.numel() * c.element_size()
    return sum(_size(part) for part in c)


def measure(name: str, buffers: list[torch.Tensor], itemsize: int, repeats: int) -> list[Row]:
    rows = []
    nbytes = sum(b.numel() for b in buffers)
    outs = [torch.empty_like(b) for b in buffers]
    for cand, (enc, dec) in _candidates(itemsize).items():
        try:
            packed = [enc(b) for b in buffers]  # warm-up, and the sizes
        except Exception as exc:  # a candidate that cannot handle this input is reported
            print(f"{name:>14} {cand:<26} failed: {type(exc).__name__}: {exc}")
            continue
        enc_s, dec_s = [], []
        for _ in range(repeats):
            t0 = time.process_time()
            packed = [enc(b) for b in buffers]
            enc_s.append(time.process_time() - t0)
            t0 = time.process_time()
            for c, o in zip(packed, outs):
                dec(c, o)
            dec_s.append(time.process_time() - t0)
        for b, o in zip(buffers, outs):
            if not torch.equal(b, o):
                raise SystemExit(f"{cand} on {name}: round trip is not bit-exact")
        row = Row(name, cand, nbytes / sum(_size(c) for c in packed),
                  nbytes / statistics.median(enc_s) / 1e9, nbytes / statistics.median(dec_s) / 1e9)
        print(f"{name:>14} {cand:<26} {row.ratio:6.3f}x  enc {row.encode_gbps:5.2f} GB/s  "
              f"dec {row.decode_gbps:5.2f} GB/s", flush=True)
        rows.append(row)
    return rows


def _inputs(count: int) -> dict[str, tuple[list[torch.Tensor], int]]:
    shape = get_model_shape("llama-3-8b")
    bf16 = [SyntheticKVGenerator(shape, dtype=torch.bfloat16).chunk(i).fused() for i in range(count)]
    fp16 = [SyntheticKVGenerator(shape, dtype=torch.float16).chunk(i).fused() for i in range(count)]
    fp32 = [SyntheticKVGenerator(shape, dtype=torch.float32).chunk(i).fused() for i in range(count)]
    gen = torch.Generator().manual_seed(0)
    gauss = [torch.randn(b.numel(), generator=gen).to(torch.bfloat16) for b in bf16]

    def flat(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t.reshape(-1).view(torch.uint8) for t in ts]
    fp8 = [t.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1).clone() for t in bf16]
    return {
        "llama bf16": (flat(bf16), 2),
        "gaussian bf16": (flat(gauss), 2),
        "llama fp16": (flat(fp16), 2),
        "llama fp32": (flat(fp32), 4),
        "llama fp8 codes": (fp8, 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--buffers", type=int, default=3, help="chunks of each kind, rotated")
    p.add_argument("--repeats", type=int, default=3, help="passes; numbers are medians")
    p.add_argument("--only", default="", help="comma-separated input names to run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows: list[Row] = []
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    for name, (buffers, itemsize) in _inputs(args.buffers).items():
        if wanted and name not in wanted:
            continue
        rows += measure(name, buffers, itemsize, args.repeats)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
