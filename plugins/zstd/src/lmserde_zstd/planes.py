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
moves: a call can neither read nor write outside the arrays it is given.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
import torch

__all__ = ["ELEMENT_SIZES", "merge", "native_available", "native_status", "set_native_enabled",
           "split"]

#: Element sizes the split supports.
ELEMENT_SIZES = (1, 2, 4, 8)


_import_error: str | None = None


def _load() -> ModuleType | None:
    global _import_error
    try:
        from lmserde_zstd import _planes  # type: ignore[attr-defined]
    except ImportError as exc:
        _import_error = f"{type(exc).__name__}: {exc}"
        return None
    return _planes


_native: ModuleType | None = _load()
_enabled = os.environ.get("LMSERDE_ZSTD_NATIVE", "1").strip().lower() not in ("0", "false", "no")


def native_available() -> bool:
    """True when the native kernel is built, importable and enabled."""
    return _native is not None and _enabled


def set_native_enabled(enabled: bool) -> None:
    """Use (or stop using) the native kernel process-wide; the torch path writes the same bytes."""
    global _enabled
    _enabled = bool(enabled)


def native_status() -> dict[str, Any]:
    """What this process runs, in the vocabulary the plugins share: ``backend`` (``"native"`` or
    ``"torch"``), ``simd`` (``"sse2"`` or ``"scalar"``; ``None`` when not built), ``built`` and, on
    the torch backend, the ``reason``."""
    if _native is None:
        return {"backend": "torch", "simd": None, "built": False,
                "reason": "the native extension lmserde_zstd._planes is not built "
                          f"({_import_error}); reinstall lmserde-zstd with a C compiler"}
    simd = str(_native.simd())
    if not _enabled:
        return {"backend": "torch", "simd": simd, "built": True,
                "reason": "disabled (LMSERDE_ZSTD_NATIVE=0 or set_native_enabled(False))"}
    return {"backend": "native", "simd": simd, "built": True}


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
        assert _native is not None
        return int(_native.split(src, element_size, planes))
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
        assert _native is not None
        return int(_native.merge(planes, element_size, dst))
    grid = _tensor(dst[:count * element_size]).view(count, element_size)
    for p, plane in enumerate(planes):
        grid[:, p].copy_(_tensor(plane[:count]))
    return count
