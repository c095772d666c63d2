"""The compressed payload: one blosc2 chunk (shuffle + zstd in one cache-blocked pass).

Why blosc2: it shuffles and compresses each block (a few hundred KiB) while the block is in the
CPU cache, so the byte planes are never written out to memory; it is fuzzed upstream (OSS-Fuzz),
and its decoder writes straight into the caller's buffer. The measurement behind the choice is in
``docs/plugins/zstd.md``.

Safety on read: python-blosc2's ``decompress2`` trusts the chunk header's decompressed size as the
destination size, so :func:`decompress_into` checks the chunk header (sizes and element size)
against the frame and the destination *before* the C decoder runs; the source view it passes is
exactly the payload, so the decoder cannot read past it.
"""

from __future__ import annotations

import blosc2
import numpy as np

from lmserde_zstd.frame import FrameError, Shuffle

__all__ = ["MAX_CHUNK_BYTES", "compress", "decompress_into"]

#: Inputs larger than this do not fit one blosc2 chunk; the serializer stores them raw.
MAX_CHUNK_BYTES = int(blosc2.MAX_BUFFERSIZE)
_CHUNK_HEADER = 32  # blosc2's extended chunk header
_TYPESIZE_OFFSET = 3  # byte 3 of a blosc2 chunk header: typesize

_FILTERS = {
    Shuffle.NONE: blosc2.Filter.NOFILTER,
    Shuffle.BYTE: blosc2.Filter.SHUFFLE,
    Shuffle.BIT: blosc2.Filter.BITSHUFFLE,
}

# python-blosc2 holds the GIL inside its C calls unless told otherwise; releasing it is what lets
# the processor's worker threads compress separate chunks in parallel. It is safe: the buffers
# are pinned (buffer protocol) for the duration of the call.
blosc2.set_releasegil(True)


def compress(data: np.ndarray, *, level: int, shuffle: Shuffle, element_size: int,
             nthreads: int) -> bytes:
    """``data`` (1-D ``uint8``, at most :data:`MAX_CHUNK_BYTES`) as one blosc2 chunk."""
    return blosc2.compress2(
        data, codec=blosc2.Codec.ZSTD, clevel=level, filters=[_FILTERS[shuffle]],
        typesize=element_size, nthreads=nthreads,
    )


def decompress_into(payload: memoryview, out: np.ndarray, *, element_size: int,
                    nthreads: int) -> None:
    """Decode the blosc2 chunk ``payload`` into ``out`` (1-D ``uint8``), exactly filling it.

    Raises :class:`~lmserde_zstd.frame.FrameError` when the chunk is not a well-formed chunk of
    ``out.nbytes`` bytes; the C decoder only runs once the chunk's own sizes agree.
    """
    if len(payload) < _CHUNK_HEADER:
        raise FrameError(
            f"zstd frame: compressed payload of {len(payload)} bytes is shorter than a blosc2 "
            f"chunk header ({_CHUNK_HEADER} bytes)"
        )
    nbytes, cbytes, _blocksize = blosc2.get_cbuffer_sizes(payload)
    if nbytes != out.nbytes or cbytes != len(payload):
        raise FrameError(
            f"zstd frame: blosc2 chunk header says {nbytes} bytes compressed to {cbytes}, the frame "
            f"says {out.nbytes} bytes in a {len(payload)}-byte payload"
        )
    if payload[_TYPESIZE_OFFSET] != element_size:
        raise FrameError(
            f"zstd frame: blosc2 chunk element size {payload[_TYPESIZE_OFFSET]} differs from the "
            f"frame's {element_size}"
        )
    try:
        blosc2.decompress2(payload, dst=out, nthreads=nthreads)
    except (ValueError, RuntimeError) as exc:
        raise FrameError(f"zstd frame: corrupt compressed payload ({exc})") from None
