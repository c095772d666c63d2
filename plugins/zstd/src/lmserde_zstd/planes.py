"""Byte-plane split and merge: plane ``p`` holds byte ``p`` of every element.

The native kernel (``lmserde_zstd._planes``, ``csrc/planes.c``: SSE2 on x86-64, a scalar loop
elsewhere) is used when it was built; otherwise a torch strided copy (on the same memory, no
conversion) writes the same bytes, several times slower. ``LMSERDE_ZSTD_NATIVE=0`` (read at
import) or :func:`set_native_enabled` turns the native kernel off; :func:`native_status` says
which runs. Element sizes: 1, 2, 4, 8. A native merge into a destination of
``_planes.STREAM_MIN_BYTES`` (2 MiB) or more writes it with non-temporal stores, from its first
64-byte cache line on: such a destination does not stay in the cache anyway, and ordinary stores
would first read every line of it from memory (the measurement is in ``docs/plugins/zstd.md``).

Both functions take ``uint8`` numpy arrays (contiguous) and check every length before a byte
moves: a call can neither read nor write outside the arrays it is given. The same holds for
:func:`encode_planes` / :func:`decode_planes`, the split and merge fused with literal-only zstd
frames (native only; ``csrc/literal_frames.c``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import torch
from lmserde import NativeExtension

__all__ = ["ELEMENT_SIZES", "PLANES_KERNEL", "decode_planes", "encode_planes", "is_literal_frame",
           "literal_frames_available", "merge", "native_available", "native_status",
           "set_native_enabled", "split"]

#: Element sizes the split supports.
ELEMENT_SIZES = (1, 2, 4, 8)


#: The kernel and its switch (``LMSERDE_ZSTD_NATIVE=0`` turns it off at import).
PLANES_KERNEL = NativeExtension("lmserde_zstd._planes", distribution="lmserde-zstd",
                                simd=lambda module: str(module.simd()),
                                switch_env="LMSERDE_ZSTD_NATIVE",
                                switch_setter="set_native_enabled")


def native_available() -> bool:
    """True when the native kernel is built, importable and enabled."""
    return PLANES_KERNEL.available()


def set_native_enabled(enabled: bool) -> None:
    """Use (or stop using) the native kernel process-wide; the torch path writes the same bytes."""
    PLANES_KERNEL.set_enabled(enabled)


def native_status() -> dict[str, Any]:
    """What this process runs, in the vocabulary the plugins share: ``backend`` (``"native"`` or
    ``"torch"``), ``simd`` (``"sse2"`` or ``"scalar"``; ``None`` when not built), ``built`` and, on
    the torch backend, the ``reason``."""
    return PLANES_KERNEL.status()


def _tensor(array: np.ndarray) -> torch.Tensor:
    """``array``'s memory as a tensor (read-only arrays too: the fallback only reads those)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "the given NumPy array is not writable"
        return torch.from_numpy(array)


def _check(element_size: int, count: int, planes: Sequence[np.ndarray]) -> None:
    if element_size not in ELEMENT_SIZES:
        raise ValueError(f"element size must be one of {ELEMENT_SIZES}, got {element_size}")
    if len(planes) != element_size:
        raise ValueError(f"expected {element_size} planes, got {len(planes)}")
    for p, plane in enumerate(planes):
        if plane.dtype != np.uint8 or plane.ndim != 1 or plane.size < count:
            raise ValueError(f"plane {p} must be a 1-D uint8 array of at least {count} bytes")


def split(src: np.ndarray, element_size: int, planes: Sequence[np.ndarray]) -> int:
    """``planes[p][i] = src[i * element_size + p]`` for the ``len(src) // element_size`` whole
    elements of ``src`` (1-D ``uint8``); returns that element count. Trailing partial-element
    bytes of ``src`` are not read; each plane must hold at least the element count."""
    count = src.size // element_size
    _check(element_size, count, planes)
    if native_available():
        return int(PLANES_KERNEL.require().split(src, element_size, planes))
    grid = _tensor(src[:count * element_size]).view(count, element_size)
    for p, plane in enumerate(planes):
        _tensor(plane[:count]).copy_(grid[:, p])
    return count


def merge(planes: Sequence[np.ndarray], element_size: int, dst: np.ndarray) -> int:
    """The inverse of :func:`split`: ``dst[i * element_size + p] = planes[p][i]`` for the
    ``len(dst) // element_size`` whole elements of ``dst`` (1-D ``uint8``, writable); returns that
    count. Trailing partial-element bytes of ``dst`` are not written."""
    count = dst.size // element_size
    _check(element_size, count, planes)
    if native_available():
        return int(PLANES_KERNEL.require().merge(planes, element_size, dst))
    grid = _tensor(dst[:count * element_size]).view(count, element_size)
    for p, plane in enumerate(planes):
        grid[:, p].copy_(_tensor(plane[:count]))
    return count


def literal_frames_available() -> bool:
    """True when :func:`encode_planes` and :func:`decode_planes` can run (the native kernel is
    built and enabled; there is no fallback for them: without them the codec uses libzstd)."""
    return native_available()


def _literal_kernel() -> ModuleType:
    if not native_available():
        raise RuntimeError("literal-only zstd frames need the native kernel lmserde_zstd._planes "
                           f"({native_status().get('reason', 'not available')})")
    return PLANES_KERNEL.require()


def encode_planes(src: np.ndarray, element_size: int, dests: Sequence[np.ndarray],
                  coded: Sequence[bool]) -> list[int]:
    """Split ``src`` (1-D ``uint8``) into its ``element_size`` planes, plane ``p`` into
    ``dests[p]``: as it is (the element count of bytes), or where ``coded[p]``, as a literal-only
    zstd frame (``csrc/literal_frames.c``: zstd's Huffman coder, blocks of 128 KiB, readable by
    any zstd decoder) in at most ``len(dests[p])`` bytes. Returns the bytes written per plane; -1
    for a coded plane whose frame did not fit (its bytes are then nowhere: call again uncoded)."""
    mask = sum(1 << p for p, flag in enumerate(coded) if flag)
    return list(_literal_kernel().encode_planes(src, element_size, list(dests), mask))


def is_literal_frame(frame: memoryview | np.ndarray, size: int) -> bool:
    """Whether ``frame`` is exactly a literal-only zstd frame as :func:`encode_planes` writes it,
    restoring ``size`` bytes (headers and lengths checked, nothing decoded)."""
    return bool(_literal_kernel().is_literal_frame(frame, size))


def decode_planes(sources: Sequence[memoryview | np.ndarray], element_size: int,
                  framed: Sequence[bool], dst: np.ndarray) -> int:
    """Merge the planes into ``dst`` (1-D ``uint8``, writable) like :func:`merge`, where
    ``sources[p]`` is a literal-only frame (:func:`is_literal_frame`) when ``framed[p]``, else the
    plane's bytes; each frame is decoded block by block and merged from the cache. Returns the
    element count; ``ValueError`` for a frame of another shape or a corrupt Huffman stream."""
    mask = sum(1 << p for p, flag in enumerate(framed) if flag)
    return int(_literal_kernel().decode_planes(list(sources), element_size, mask, dst))
