"""What native code core itself runs: the stored-object checksum kernel.

``lmserde._checksum_copy`` (C: XXH3 hashing fused with copies, the frame header's fast path) is
compiled when core is installed with a compiler; without it the same results come from Python
and the ``xxhash`` package, slower. :func:`describe_core_kernel` reports which, in the shape of a
plugin's native status (``backend``, ``simd``, ``reason``), for ``lmserde plugins`` and ``lmserde
info``. It imports the extension only (no torch), so listing plugins stays cheap.
"""

from __future__ import annotations

import importlib

__all__ = ["CORE_KERNEL_MODULE", "describe_core_kernel"]

#: The extension module of core's checksum kernel.
CORE_KERNEL_MODULE = "lmserde._checksum_copy"


def describe_core_kernel() -> dict[str, object]:
    """``{"name", "backend": "native", "simd": level}`` when the kernel is compiled (its SIMD
    level: ``avx512``, ``avx2``, ``sse2`` or ``portable``), else ``{"name", "backend": "python",
    "reason": ...}``. Never raises."""
    name = "stored-object checksum kernel"
    try:
        kernel = importlib.import_module(CORE_KERNEL_MODULE)
        simd = str(kernel.simd_level())
    except Exception as exc:  # not compiled (no compiler at install) or not loadable here
        return {"name": name, "backend": "python",
                "reason": f"{CORE_KERNEL_MODULE} is not available ({type(exc).__name__}: {exc}); "
                          "the same results come from Python and xxhash, slower"}
    return {"name": name, "backend": "native", "simd": simd}
