"""The optional native kernels (``lmserde_fp8._fastcodec``) and the switch that enables them.

The extension is built by the package's own setuptools build with the machine's C compiler; when it
is missing, everything runs on the pure-torch codec, which writes identical bytes. Setting the
environment variable ``LMSERDE_FP8_FAST=0`` (read at import) or calling
:func:`set_fast_path_enabled` turns the native path off.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from lmserde import NativeExtension

__all__ = [
    "AVX2",
    "AVX512_VBMI",
    "BEST",
    "FASTCODEC",
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

#: The extension and its switch (``LMSERDE_FP8_FAST=0`` turns it off at import).
FASTCODEC = NativeExtension(
    "lmserde_fp8._fastcodec", distribution="lmserde-fp8",
    simd=lambda module: SIMD_NAMES.get(int(module.simd_level()), str(module.simd_level())),
    switch_env="LMSERDE_FP8_FAST", switch_setter="set_fast_path_enabled")


def fast_path_available() -> bool:
    """True when the native kernels are built, importable and enabled."""
    return FASTCODEC.available()


def set_fast_path_enabled(enabled: bool) -> None:
    """Enable or disable the native kernels process-wide (the torch codec writes the same bytes)."""
    FASTCODEC.set_enabled(enabled)


def native_module() -> ModuleType:
    """The extension module; ``RuntimeError`` when it was not built."""
    return FASTCODEC.require()


def simd_level() -> int:
    """Highest native kernel level on this CPU: 2 = AVX-512 VBMI, 1 = AVX2 + F16C, 0 = portable C,
    -1 = not built. Every level writes the same bytes."""
    module = FASTCODEC.module
    return -1 if module is None else int(module.simd_level())


def native_status() -> dict[str, Any]:
    """What this process runs: ``backend`` (``"native"`` or ``"torch"``), ``simd`` (the
    instruction level of the native kernels: ``"avx512_vbmi"``, ``"avx2"``, ``"scalar"``; ``None``
    when not built), ``built`` and, on the torch backend, the ``reason``."""
    return FASTCODEC.status()


def log_fallback_once() -> None:
    """Log once per process (a warning) that the fp8 serde runs the slow pure-torch codec.

    Called when an fp8 processor is built, off the data path; silent when the native kernels
    run, and at INFO level when they were turned off on purpose.
    """
    FASTCODEC.log_fallback_once(_log, "the fp8 serde runs its pure-torch codec")
