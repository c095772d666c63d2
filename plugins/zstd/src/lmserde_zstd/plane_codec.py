"""Codec 2, ``planes``: byte planes, zstd on the planes that pay, the others stored as they are.

Why: in a float the sign/exponent byte is redundant and the mantissa bytes are close to random
(bf16 KV: about 3.3 and 7.97 bits of entropy per byte). Compressing every byte (codec 1, blosc2)
spends most of the time searching matches in random bytes; here the input is split into byte
planes (:mod:`lmserde_zstd.planes`, native), a small sample of each plane is compressed to decide
whether the plane is worth coding, and only those planes go through libzstd. Level 1 uses
zstd's fast strategy with a 64-entry hash table and a 7-byte minimum match (on KV exponent
planes about 2.5x faster than zstd level 1 and slightly smaller). A plane whose sample
compresses 2x or more (bf16 and fp32 exponents) is coded with that setting accelerated so far
that it barely searches for matches, Huffman-coded literals kept on (zstd's experimental
literal-compression mode, which ``pyzstd`` passes on): zstd then works as a Huffman coder of the
plane's bytes, whose redundancy is their skewed distribution, not repeats, and a bf16 chunk
encodes 14-22 % faster at the same ratio. Where pyzstd cannot take that setting (libzstd older
than 1.5, or a pyzstd that refuses the parameter) the plane gets the unaccelerated setting
(same format, slower). Levels 2-9 are zstd's own levels. The measurements are in
``docs/plugins/zstd.md``.

Two bindings of libzstd (both release the GIL; the frames are plain zstd frames, so either
decodes the other's): ``zstandard`` encodes (its build measured faster than pyzstd's where
both run the same setting) except the accelerated planes, and ``pyzstd`` decodes — its bundled
libzstd is built with zstd's x86-64 assembly Huffman decoder, which ``zstandard``'s build leaves
out, and restores a bf16 exponent plane about 16 % faster.

Payload (after the frame header), for element size ``E`` (1, 2, 4 or 8), raw length ``N``,
``P = N // E`` elements and ``N % E`` tail bytes::

    E table entries of 16 bytes:  method (u8: 0 raw, 1 zstd), 7 zero bytes, stored length (u64)
    table trailer, 8 bytes:       CRC-32 of the entries (u32), 4 zero bytes
    the stored planes in plane order (plane p = byte p of every element), then the tail bytes

A raw plane is its ``P`` bytes; a zstd plane is one zstd frame (content size ``P`` in its header,
no dictionary) shorter than ``P``. The payload length must equal the table, the stored lengths
and the tail exactly. Decoding checks all of that, and each zstd frame's header (content size
``P``, window at most 2 MiB, no dictionary, exactly one frame) before libzstd runs, and libzstd
refuses a frame that decodes to other than its ``P`` bytes: nothing is allocated from a length
the frame claims beyond the plane's own size.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable

import numpy as np
import pyzstd
import zstandard

from lmserde_zstd import planes as plane_ops
from lmserde_zstd.frame import FrameError

__all__ = [
    "ELEMENT_SIZES",
    "METHOD_RAW",
    "METHOD_ZSTD",
    "MIN_PLANE_SAVING",
    "compress_into",
    "decompress_into",
    "plane_element_size",
    "table_size",
]

ELEMENT_SIZES = plane_ops.ELEMENT_SIZES
METHOD_RAW = 0
METHOD_ZSTD = 1
_ENTRY = struct.Struct("<B7sQ")
_TRAILER = struct.Struct("<I4s")
#: A plane is coded when compressing its sample saves at least this share of the sample.
MIN_PLANE_SAVING = 1 / 32
_SAMPLE_WINDOWS = 4
_SAMPLE_ELEMENTS = 16384  # per window
_MAX_WINDOW = 1 << 21  # largest zstd window a reader accepts (writers cap every level to it)


def table_size(element_size: int) -> int:
    """Bytes of the plane table (entries and trailer) for ``element_size`` planes."""
    return element_size * _ENTRY.size + _TRAILER.size


def plane_element_size(itemsize: int) -> int:
    """The element size to split with: the largest of 8, 4, 2, 1 dividing ``itemsize``
    (16-byte complex values split as two 8-byte halves)."""
    return next(e for e in (8, 4, 2, 1) if itemsize % e == 0)


#: zstd's ``ZSTD_c_literalCompressionMode`` (``ZSTD_c_experimentalParam5`` in zstd.h, the same
#: number since zstd 1.4) and its ``ZSTD_ps_enable``: keep Huffman-coded literals when the fast
#: strategy is accelerated (zstd switches them off then by default).
_LITERAL_COMPRESSION_MODE = 1002
_PS_ENABLE = 1
#: The fast strategy's acceleration (``targetLength``) at level 1: a match search that starts
#: every 4097 bytes finds almost nothing, which leaves zstd a Huffman coder of the plane's bytes.
_LEVEL1_ACCELERATION = 4096
#: Level 1 accelerates a plane whose sample compresses at least this much: exponent planes of bf16
#: and fp32 (about 3x), where the unaccelerated match finder spends its time on short repeats that
#: save nothing. Planes that compress less (the fp16 top plane 1.4x, fp8 codes 1.2x) have no such
#: repeats, and there pyzstd's build of libzstd measured 3-20 % slower than python-zstandard's.
_ACCELERATE_MIN_RATIO = 2.0

Compress = Callable[[np.ndarray], bytes]


def _params(level: int) -> zstandard.ZstdCompressionParameters:
    """python-zstandard's parameters for ``level``. Level 1's is the tuned fast setting: used as
    it is for planes that are not accelerated (or when pyzstd cannot take the acceleration), and
    the base of :func:`_level1_pyzstd_options`."""
    if level == 1:
        return zstandard.ZstdCompressionParameters.from_level(
            1, strategy=zstandard.STRATEGY_FAST, hash_log=6, window_log=17, min_match=7,
            write_checksum=0, write_dict_id=0)
    # zstd's level 9 would use a 4 MiB window; readers accept at most _MAX_WINDOW
    window_log = min(zstandard.ZstdCompressionParameters.from_level(level).window_log,
                     _MAX_WINDOW.bit_length() - 1)
    return zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log,
                                                          write_checksum=0, write_dict_id=0)


def _level1_pyzstd_options() -> dict[int, int]:
    """Accelerated level 1 through pyzstd: level 1's setting (:func:`_params`) accelerated to
    almost no match search, Huffman literals kept on (see ``docs/plugins/zstd.md``: a bf16
    exponent plane compresses about 20 % faster, to the same size)."""
    p, tuned = pyzstd.CParameter, _params(1)
    return {p.strategy: tuned.strategy, p.hashLog: tuned.hash_log, p.minMatch: tuned.min_match,
            p.windowLog: tuned.window_log, p.targetLength: _LEVEL1_ACCELERATION,
            p.checksumFlag: 0, p.contentSizeFlag: 1, p.dictIDFlag: 0,
            _LITERAL_COMPRESSION_MODE: _PS_ENABLE}


def _level1_pyzstd() -> Compress | None:
    """The accelerated level-1 compressor through pyzstd (which passes zstd's experimental
    parameter on), or ``None`` when this pyzstd's libzstd is older than 1.5 or refuses the
    setting; the caller then uses python-zstandard with :func:`_params`. Any setting gives valid
    zstd frames: this choice affects only speed and size, never what decodes."""
    if tuple(pyzstd.zstd_version_info[:2]) < (1, 5):
        return None
    try:
        compressor = pyzstd.ZstdCompressor(_level1_pyzstd_options())
    except (pyzstd.ZstdError, ValueError, TypeError, OverflowError):
        return None
    flush = pyzstd.ZstdCompressor.FLUSH_FRAME
    return lambda data: compressor.compress(data, flush)


def make_compressor(level: int, *, accelerated: bool = False) -> Compress:
    """A one-frame compressor for ``level`` (content size recorded, no checksum, no dictionary
    id, window at most :data:`_MAX_WINDOW`); not thread-safe. ``accelerated`` (level 1 only):
    the accelerated setting with Huffman literals when pyzstd takes it."""
    if accelerated and level == 1:
        found = _level1_pyzstd()
        if found is not None:
            return found
    return zstandard.ZstdCompressor(compression_params=_params(level)).compress


class _State(threading.local):
    """Per-thread compressors and scratch planes (zstd contexts are not thread-safe)."""

    def __init__(self) -> None:
        self.compressors: dict[tuple[int, bool], Compress] = {}
        self.scratch = np.empty(0, dtype=np.uint8)

    def compressor(self, level: int, *, accelerated: bool = False) -> Compress:
        key = (level, accelerated and level == 1)
        found = self.compressors.get(key)
        if found is None:
            found = self.compressors[key] = make_compressor(level, accelerated=key[1])
        return found

    def scratch_planes(self, count: int, plane_bytes: int) -> list[np.ndarray]:
        need = count * plane_bytes
        if self.scratch.size < need:
            self.scratch = np.empty(need, dtype=np.uint8)
        return [self.scratch[i * plane_bytes:(i + 1) * plane_bytes] for i in range(count)]


_state = _State()


def _compress_plane(compress: Compress, plane: np.ndarray, out: np.ndarray,
                    start: int, limit: int) -> int | None:
    """Write ``plane`` as one zstd frame (content size recorded) at ``out[start:]``, ending before
    ``limit``; returns its length, or ``None`` when it does not fit.

    (One-shot compression and a copy measured a few percent faster than streaming into ``out``.)
    """
    packed = compress(plane)
    if start + len(packed) > limit:
        return None
    out[start:start + len(packed)] = np.frombuffer(packed, dtype=np.uint8)
    return len(packed)


def _sample_ratios(data: np.ndarray, element_size: int, count: int,
                   compress: Compress) -> list[float]:
    """Per plane: how much a sample (up to 4 windows of 16 Ki elements, spread over the input)
    compresses (sample bytes / compressed bytes)."""
    width = min(_SAMPLE_ELEMENTS, -(-count // _SAMPLE_WINDOWS))
    starts = sorted({i * (count - width) // max(1, _SAMPLE_WINDOWS - 1)
                     for i in range(_SAMPLE_WINDOWS)})
    sample = np.empty((element_size, width * len(starts)), dtype=np.uint8)
    for k, start in enumerate(starts):
        window = data[start * element_size:(start + width) * element_size]
        plane_ops.split(window, element_size, [row[k * width:(k + 1) * width] for row in sample])
    return [sample.shape[1] / len(compress(row)) for row in sample]


def _worth_coding(ratio: float) -> bool:
    """Does a plane whose sample compresses ``ratio``-fold save :data:`MIN_PLANE_SAVING`?"""
    return ratio * (1 - MIN_PLANE_SAVING) >= 1


def compress_into(data: np.ndarray, out: np.ndarray, *, element_size: int, level: int) -> int | None:
    """Write the payload for ``data`` (1-D ``uint8``) into ``out`` (1-D ``uint8``, writable).

    Returns the payload length, or ``None`` when the payload would not fit in ``out`` (the caller
    then stores the input raw). ``element_size`` is 1, 2, 4 or 8; ``level`` 1-9.
    """
    if element_size not in ELEMENT_SIZES:
        raise ValueError(f"zstd planes: element size must be one of {ELEMENT_SIZES}")
    n, cap = data.size, out.size
    count = n // element_size
    tail = n - count * element_size
    pos = table_size(element_size)
    if count == 0 or pos + tail > cap:
        return None
    state = _state
    compress = state.compressor(level)
    ratios = _sample_ratios(data, element_size, count, compress)
    coded = [_worth_coding(r) for r in ratios]
    # Raw planes before the first coded one are split straight into their place in ``out``.
    targets: list[np.ndarray | None] = [None] * element_size
    direct = 0
    while direct < element_size and not coded[direct] and pos + (direct + 1) * count <= cap:
        targets[direct] = out[pos + direct * count:pos + (direct + 1) * count]
        direct += 1
    scratch = iter(state.scratch_planes(element_size - direct, count))
    planes = [t if t is not None else next(scratch) for t in targets]
    plane_ops.split(data, element_size, planes)

    table = bytearray(table_size(element_size))
    for p, plane in enumerate(planes):
        packed = None
        if coded[p]:  # a zstd frame shorter than the plane, written in place
            plane_compress = (state.compressor(level, accelerated=True)
                              if ratios[p] >= _ACCELERATE_MIN_RATIO else compress)
            packed = _compress_plane(plane_compress, plane, out, pos, min(cap, pos + count - 1))
        if packed is not None:
            method, length = METHOD_ZSTD, packed
        else:
            method, length = METHOD_RAW, count
            if pos + length > cap:
                return None
            if p >= direct:
                out[pos:pos + length] = plane
        _ENTRY.pack_into(table, p * _ENTRY.size, method, bytes(7), length)
        pos += length
    if pos + tail > cap:
        return None
    out[pos:pos + tail] = data[count * element_size:]
    entries = element_size * _ENTRY.size
    _TRAILER.pack_into(table, entries, zlib.crc32(table[:entries]), bytes(4))
    out[:len(table)] = np.frombuffer(bytes(table), dtype=np.uint8)
    return pos + tail


def _read_table(payload: memoryview, element_size: int, count: int,
                tail: int) -> list[tuple[int, int]]:
    """The checked ``(method, stored length)`` of every plane."""
    size = table_size(element_size)
    if len(payload) < size:
        raise FrameError(f"zstd planes: payload of {len(payload)} bytes is shorter than its "
                         f"plane table ({size} bytes)")
    table = bytes(payload[:size])
    entries = element_size * _ENTRY.size
    crc, reserved = _TRAILER.unpack_from(table, entries)
    if crc != zlib.crc32(table[:entries]) or reserved != bytes(4):
        raise FrameError("zstd planes: plane table checksum mismatch (the table is damaged)")
    found = []
    total = size + tail
    for p in range(element_size):
        method, zero, length = _ENTRY.unpack_from(table, p * _ENTRY.size)
        if zero != bytes(7):
            raise FrameError(f"zstd planes: plane {p}: reserved bytes are not zero")
        if method == METHOD_RAW and length != count:
            raise FrameError(f"zstd planes: raw plane {p} holds {length} bytes, not {count}")
        if method == METHOD_ZSTD and not 0 < length < count:
            raise FrameError(f"zstd planes: zstd plane {p} of {length} bytes is not shorter than "
                             f"the {count} bytes it restores")
        if method not in (METHOD_RAW, METHOD_ZSTD):
            raise FrameError(f"zstd planes: plane {p}: unknown method {method}")
        found.append((method, length))
        total += length
    if total != len(payload):
        raise FrameError(f"zstd planes: table, planes and tail make {total} bytes, the payload "
                         f"has {len(payload)}")
    return found


def _decode_plane(frame: memoryview, size: int, plane: int) -> bytes:
    """Decode ``frame``, which must be exactly one zstd frame restoring ``size`` bytes.

    Checked before libzstd runs: the frame header names ``size`` as the content size, a window of
    at most 2 MiB and no dictionary, and the frame spans the stored plane exactly (no second
    frame, no trailing bytes). libzstd (through ``pyzstd``) then refuses a frame that decodes to
    more or fewer bytes than its header says, so nothing larger than ``size`` is allocated.
    """
    try:
        params = zstandard.get_frame_parameters(frame)
        frame_size = pyzstd.get_frame_size(frame)
    except (zstandard.ZstdError, pyzstd.ZstdError) as exc:
        raise FrameError(f"zstd planes: plane {plane}: bad zstd frame header ({exc})") from None
    if params.content_size != size:
        raise FrameError(f"zstd planes: plane {plane}: zstd frame says {params.content_size} "
                         f"bytes, the plane has {size}")
    if params.window_size > _MAX_WINDOW or params.dict_id:
        raise FrameError(f"zstd planes: plane {plane}: zstd frame needs a {params.window_size}-byte "
                         "window or a dictionary; this writer uses neither")
    if frame_size != len(frame):
        raise FrameError(f"zstd planes: plane {plane}: the stored plane holds {len(frame)} bytes, "
                         f"its zstd frame {frame_size}")
    try:
        decoded = pyzstd.decompress(frame)
    except pyzstd.ZstdError as exc:
        raise FrameError(f"zstd planes: plane {plane}: corrupt zstd frame ({exc})") from None
    if len(decoded) != size:
        raise FrameError(f"zstd planes: plane {plane}: zstd frame decoded to {len(decoded)} "
                         f"bytes, not {size}")
    return decoded


def decompress_into(payload: memoryview, out: np.ndarray, *, element_size: int) -> None:
    """Decode ``payload`` into ``out`` (1-D ``uint8``), exactly filling it; :class:`FrameError`
    when the payload is malformed or does not restore exactly ``out.size`` bytes."""
    if element_size not in ELEMENT_SIZES:
        raise FrameError(f"zstd planes: element size {element_size} is not one of {ELEMENT_SIZES}")
    n = out.size
    count = n // element_size
    tail = n - count * element_size
    table = _read_table(payload, element_size, count, tail)
    pos = table_size(element_size)
    sources: list[np.ndarray] = []
    for p, (method, length) in enumerate(table):
        stored = payload[pos:pos + length]
        pos += length
        if method == METHOD_RAW:
            sources.append(np.frombuffer(stored, dtype=np.uint8))
        else:
            sources.append(np.frombuffer(_decode_plane(stored, count, p), dtype=np.uint8))
    plane_ops.merge(sources, element_size, out)  # (one plane: a plain copy)
    if tail:
        out[count * element_size:] = np.frombuffer(payload[pos:pos + tail], dtype=np.uint8)
