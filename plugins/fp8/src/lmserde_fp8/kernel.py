"""The optional native kernels (``lmserde_fp8._fastcodec``) and the switch that enables them.

The extension is built by the package's own setuptools build with the machine's C compiler; when it
is missing, everything runs on the pure-torch codec, which writes identical bytes. Setting the
environment variable ``LMSERDE_FP8_FAST=0`` (read at import) or calling
:func:`set_fast_path_enabled` turns the native path off.
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType
from typing import Any

__all__ = [
    "AVX2",
    "AVX512_VBMI",
    "BEST",
    "PORTABLE",
    "fast_path_available",
    "log_fallback_once",
    "native_module",
    "native_status",
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


#: Instruction-level names of the kernel levels (the ``simd`` of :func:`native_status`).
SIMD_NAMES = {PORTABLE: "scalar", AVX2: "avx2", AVX512_VBMI: "avx512_vbmi"}

_log = logging.getLogger("lmserde_fp8")
_import_error: str | None = None


def _load() -> ModuleType | None:
    global _import_error
    try:
        from lmserde_fp8 import _fastcodec  # type: ignore[attr-defined]
    except ImportError as exc:
        _import_error = f"{type(exc).__name__}: {exc}"
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


def native_status() -> dict[str, Any]:
    """What this process runs: ``backend`` (``"native"`` or ``"torch"``), ``simd`` (the
    instruction level of the native kernels: ``"avx512_vbmi"``, ``"avx2"``, ``"scalar"``; ``None``
    when not built), ``built`` and, on the torch backend, the ``reason``."""
    if _module is None:
        return {"backend": "torch", "simd": None, "built": False,
                "reason": "the native extension lmserde_fp8._fastcodec is not built "
                          f"({_import_error}); reinstall lmserde-fp8 with a C compiler"}
    simd = SIMD_NAMES.get(simd_level(), str(simd_level()))
    if not _enabled:
        return {"backend": "torch", "simd": simd, "built": True,
                "reason": "disabled (LMSERDE_FP8_FAST=0 or set_fast_path_enabled(False))"}
    return {"backend": "native", "simd": simd, "built": True}


_fallback_logged = False
_fallback_lock = threading.Lock()


def log_fallback_once() -> None:
    """Log once per process (a warning) that the fp8 serde runs the slow pure-torch codec.

    Called when an fp8 processor is built, off the data path; silent when the native kernels
    run, and at INFO level when they were turned off on purpose.
    """
    global _fallback_logged
    status = native_status()
    if status["backend"] == "native":
        return
    with _fallback_lock:
        if _fallback_logged:
            return
        _fallback_logged = True
    level = logging.WARNING if not status["built"] else logging.INFO
    _log.log(level, "lmserde-fp8: the fp8 serde runs its pure-torch codec (the same bytes, "
             "several times slower): %s", status["reason"])
