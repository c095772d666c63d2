"""The optional native kernels (``lmserde_fp8._fastcodec``) and the switch that enables them.

The extension is built by the package's own setuptools build with the machine's C compiler; when it
is missing, everything runs on the pure-torch codec, which writes identical bytes. Setting the
environment variable ``LMSERDE_FP8_FAST=0`` (read at import) or calling
:func:`set_fast_path_enabled` turns the native path off.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = [
    "AVX2",
    "AVX512_VBMI",
    "BEST",
    "PORTABLE",
    "fast_path_available",
    "native_module",
    "set_fast_path_enabled",
    "simd_level",
]

#: Kernel level: the fastest this CPU runs (see :func:`simd_level`).
BEST = 99
#: Kernel level: the portable scalar C implementation.
PORTABLE = 0
#: Kernel level: AVX2 + F16C (x86-64).
AVX2 = 1
#: Kernel level: AVX2 plus AVX-512 VBMI, used to encode bfloat16 divided by a general scale through
#: 128-entry code tables (about 3x the float32 division path; same bytes).
AVX512_VBMI = 2


def _load() -> ModuleType | None:
    try:
        from lmserde_fp8 import _fastcodec  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fastcodec


_module: ModuleType | None = _load()
_enabled: bool = os.environ.get("LMSERDE_FP8_FAST", "1").strip().lower() not in ("0", "false", "no")


def fast_path_available() -> bool:
    """True when the native kernels are built, importable and enabled."""
    return _module is not None and _enabled


def set_fast_path_enabled(enabled: bool) -> None:
    """Enable or disable the native kernels process-wide (the torch codec writes the same bytes)."""
    global _enabled
    _enabled = bool(enabled)


def native_module() -> ModuleType:
    """The extension module; ``RuntimeError`` when it was not built."""
    if _module is None:
        raise RuntimeError(
            "the lmserde_fp8 native codec is not built (no C compiler at install time?); "
            "reinstall lmserde-fp8 with a C compiler available, or use the torch codec"
        )
    return _module


def simd_level() -> int:
    """Highest native kernel level on this CPU: 2 = AVX-512 VBMI, 1 = AVX2 + F16C, 0 = portable C,
    -1 = not built. Every level writes the same bytes."""
    return -1 if _module is None else int(_module.simd_level())
