"""Codec 2, ``planes``: byte planes, the planes that pay coded, the others stored as they are.

Why: in a float the sign/exponent byte is redundant and the mantissa bytes are close to random
(bf16 KV: about 3.3 and 7.97 bits of entropy per byte). Compressing every byte (codec 1, blosc2)
spends most of the time searching matches in random bytes; here the input is split into byte
planes, a small sample of each plane is compressed to decide whether the plane is worth coding,
and only those planes are coded. Every coded plane is one zstd frame, written one of two ways:

* **literal-only** (level 1, native kernel, :func:`lmserde_zstd.planes.encode_planes`): zstd's
  Huffman coder alone, on 128 KiB blocks, fused with the split; for planes whose redundancy is
  their byte distribution (exponent planes, fp8 codes), chosen when it codes the sample within
  :data:`LITERAL_SLACK` of libzstd's size. Decoded natively block by block, fused with the merge.
* **libzstd** (python-zstandard encodes, pyzstd decodes: its build has zstd's x86-64 assembly
  Huffman decoder): planes with repeats, levels 2-9, and writers without the native kernel.
  Level 1 is zstd's fast strategy with a 64-entry hash table and a 7-byte minimum match (on KV
  exponent planes about 2.5x faster than zstd level 1 and slightly smaller).

The frames are plain zstd frames: any zstd decoder reads either kind, and a reader without the
native kernel decodes literal-only frames with libzstd. The measurements are in
``docs/plugins/zstd.md``.

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


#: At level 1, a plane worth coding is written as a literal-only frame (zstd's Huffman coder alone,
#: :func:`lmserde_zstd.planes.encode_planes`) when that codes its sample at most this much larger
#: than zstd's level 1 does: the plane's redundancy is then its skewed byte distribution, not
#: repeats (exponent planes), and skipping the match search codes it about twice as fast.
LITERAL_SLACK = 1 / 32

Compress = Callable[[np.ndarray], bytes]


def _params(level: int) -> zstandard.ZstdCompressionParameters:
    """python-zstandard's parameters for ``level``: level 1 is the tuned fast setting, levels 2-9
    zstd's own with the window capped to what readers accept."""
    if level == 1:
        return zstandard.ZstdCompressionParameters.from_level(
            1, strategy=zstandard.STRATEGY_FAST, hash_log=6, window_log=17, min_match=7,
            write_checksum=0, write_dict_id=0)
    # zstd's level 9 would use a 4 MiB window; readers accept at most _MAX_WINDOW
    window_log = min(zstandard.ZstdCompressionParameters.from_level(level).window_log,
                     _MAX_WINDOW.bit_length() - 1)
    return zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log,
                                                          write_checksum=0, write_dict_id=0)


def make_compressor(level: int) -> Compress:
    """A one-frame compressor for ``level`` (content size recorded, no checksum, no dictionary
    id, window at most :data:`_MAX_WINDOW`); not thread-safe."""
    return zstandard.ZstdCompressor(compression_params=_params(level)).compress


class _State(threading.local):
    """Per-thread compressors and scratch planes (zstd contexts are not thread-safe)."""

    def __init__(self) -> None:
        self.compressors: dict[int, Compress] = {}
        self.scratch = np.empty(0, dtype=np.uint8)
        self.sample_frame = np.empty(0, dtype=np.uint8)

    def compressor(self, level: int) -> Compress:
        found = self.compressors.get(level)
        if found is None:
            found = self.compressors[level] = make_compressor(level)
        return found

    def scratch_planes(self, count: int, plane_bytes: int) -> list[np.ndarray]:
        need = count * plane_bytes
        if self.scratch.size < need:
            self.scratch = np.empty(need, dtype=np.uint8)
        return [self.scratch[i * plane_bytes:(i + 1) * plane_bytes] for i in range(count)]

    def literal_size(self, row: np.ndarray) -> int | None:
        """Bytes of ``row`` as a literal-only frame, ``None`` when not shorter than the row."""
        if self.sample_frame.size < row.size:
            self.sample_frame = np.empty(row.size, dtype=np.uint8)
        size = plane_ops.encode_planes(row, 1, [self.sample_frame[:row.size - 1]], [True])[0]
        return None if size < 0 else size


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


def _sample(data: np.ndarray, element_size: int, count: int) -> np.ndarray:
    """Per plane (row): a sample of up to 4 windows of 16 Ki elements, spread over the input."""
    width = min(_SAMPLE_ELEMENTS, -(-count // _SAMPLE_WINDOWS))
    starts = sorted({i * (count - width) // max(1, _SAMPLE_WINDOWS - 1)
                     for i in range(_SAMPLE_WINDOWS)})
    sample = np.empty((element_size, width * len(starts)), dtype=np.uint8)
    for k, start in enumerate(starts):
        window = data[start * element_size:(start + width) * element_size]
        plane_ops.split(window, element_size, [row[k * width:(k + 1) * width] for row in sample])
    return sample


def _worth_coding(ratio: float) -> bool:
    """Does a plane whose sample compresses ``ratio``-fold save :data:`MIN_PLANE_SAVING`?"""
    return ratio * (1 - MIN_PLANE_SAVING) >= 1


# How a plane is written: as it is, as a zstd frame from libzstd, or as a literal-only zstd frame.
_RAW, _ZSTD, _LITERAL = "raw", "zstd", "literal"


def _choose_ways(data: np.ndarray, element_size: int, count: int, level: int,
                 state: _State) -> list[str]:
    """How to write each plane, from how its sample compresses: raw unless zstd saves
    :data:`MIN_PLANE_SAVING`; at level 1 with the native kernel, literal-only when that comes
    within :data:`LITERAL_SLACK` of zstd's size."""
    compress = state.compressor(level)
    literal_ok = level == 1 and plane_ops.literal_frames_available()
    ways = []
    for row in _sample(data, element_size, count):
        zstd_size = len(compress(row))
        if not _worth_coding(row.size / zstd_size):
            ways.append(_RAW)
            continue
        literal = state.literal_size(row) if literal_ok else None
        ways.append(_LITERAL if literal is not None and literal <= zstd_size * (1 + LITERAL_SLACK)
                    else _ZSTD)
    return ways


class _Misfit(Exception):
    """A literal-only frame did not fit where it had to go (its plane is then written again)."""


def _write_planes(data: np.ndarray, out: np.ndarray, element_size: int, count: int,
                  ways: list[str], compress: Compress, state: _State) -> int | None:
    """Write the planes after the table, as ``ways`` says; returns where they end, ``None`` when
    they do not fit in ``out``. Planes whose place is known before the split (every plane before
    them has a fixed length) are written straight into it, the others into scratch and copied."""
    cap = out.size
    start = table_size(element_size)
    pos, fixed = start, True
    targets: list[np.ndarray | None] = []
    for way in ways:
        if fixed and way == _RAW and pos + count <= cap:
            targets.append(out[pos:pos + count])
            pos += count
        elif fixed and way == _LITERAL:
            targets.append(out[pos:min(cap, pos + count - 1)])
            fixed = False
        else:
            targets.append(None)
            fixed = False
    scratch = iter(state.scratch_planes(sum(t is None for t in targets), count))
    planes = [t if t is not None else next(scratch) for t in targets]
    literal = [way == _LITERAL for way in ways]
    if any(literal):
        for p in range(element_size):
            if literal[p] and targets[p] is None:
                planes[p] = planes[p][:count - 1]  # a frame shorter than the plane
        written = plane_ops.encode_planes(data, element_size, planes, literal)
    else:
        plane_ops.split(data, element_size, planes)
        written = [count] * element_size

    table = bytearray(table_size(element_size))
    pos = start
    for p, plane in enumerate(planes):
        method, length = METHOD_RAW, count
        if ways[p] == _LITERAL:
            if written[p] < 0:
                raise _Misfit
            method, length = METHOD_ZSTD, written[p]
            if targets[p] is None:
                if pos + length > cap:
                    raise _Misfit
                out[pos:pos + length] = plane[:length]
        elif ways[p] == _ZSTD and (packed := _compress_plane(
                compress, plane, out, pos, min(cap, pos + count - 1))) is not None:
            method, length = METHOD_ZSTD, packed
        elif targets[p] is None:  # raw, written to scratch
            if pos + count > cap:
                return None
            out[pos:pos + count] = plane
        _ENTRY.pack_into(table, p * _ENTRY.size, method, bytes(7), length)
        pos += length
    entries = element_size * _ENTRY.size
    _TRAILER.pack_into(table, entries, zlib.crc32(table[:entries]), bytes(4))
    out[:len(table)] = np.frombuffer(bytes(table), dtype=np.uint8)
    return pos


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
    if count == 0 or table_size(element_size) + tail > cap:
        return None
    state = _state
    compress = state.compressor(level)
    ways = _choose_ways(data, element_size, count, level, state)
    try:
        end = _write_planes(data, out, element_size, count, ways, compress, state)
    except _Misfit:  # the sample misjudged a plane: write it with libzstd (or raw) instead
        ways = [_ZSTD if way == _LITERAL else way for way in ways]
        end = _write_planes(data, out, element_size, count, ways, compress, state)
    if end is None or end + tail > cap:
        return None
    out[end:end + tail] = data[count * element_size:]
    return end + tail


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


def _check_frame(frame: memoryview, size: int, plane: int) -> None:
    """Check, before anything decodes it, that ``frame`` is exactly one zstd frame restoring
    ``size`` bytes: its header names ``size`` as the content size, a window of at most 2 MiB and
    no dictionary, and the frame spans the stored plane exactly (no second frame, no trailing
    bytes); :class:`FrameError` otherwise."""
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


def _decode_plane(frame: memoryview, size: int, plane: int) -> bytes:
    """Decode ``frame``, which :func:`_check_frame` passed, with libzstd (through ``pyzstd``);
    libzstd refuses a frame that decodes to more or fewer bytes than its header says, so nothing
    larger than ``size`` is allocated."""
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
    when the payload is malformed or does not restore exactly ``out.size`` bytes.

    A zstd plane that is a literal-only frame is decoded by the native kernel block by block,
    merged from the cache (when it is built); any other zstd plane by libzstd first."""
    if element_size not in ELEMENT_SIZES:
        raise FrameError(f"zstd planes: element size {element_size} is not one of {ELEMENT_SIZES}")
    n = out.size
    count = n // element_size
    tail = n - count * element_size
    table = _read_table(payload, element_size, count, tail)
    pos = table_size(element_size)
    literal_ok = plane_ops.literal_frames_available()
    sources: list[memoryview | np.ndarray] = []
    framed: list[bool] = []
    for p, (method, length) in enumerate(table):
        stored = payload[pos:pos + length]
        pos += length
        if method == METHOD_RAW:
            sources.append(np.frombuffer(stored, dtype=np.uint8))
            framed.append(False)
        else:
            _check_frame(stored, count, p)
            literal = literal_ok and plane_ops.is_literal_frame(stored, count)
            sources.append(stored if literal else
                           np.frombuffer(_decode_plane(stored, count, p), dtype=np.uint8))
            framed.append(literal)
    if any(framed):
        try:
            plane_ops.decode_planes(sources, element_size, framed, out)
        except ValueError as exc:
            raise FrameError(f"zstd planes: {exc}") from None
    else:
        plane_ops.merge(sources, element_size, out)  # (one plane: a plain copy)
    if tail:
        out[count * element_size:] = np.frombuffer(payload[pos:pos + tail], dtype=np.uint8)
