"""Build of lmserde-turboquant: metadata lives in pyproject.toml; this file adds the optional C codec.

``lmserde_turboquant._native`` is compiled with the machine's C compiler. The build is optional:
when the compiler is missing or fails, installation continues and the package uses its pure-torch
codec (bit-identical bytes, slower). Set ``LMSERDE_TURBOQUANT_NO_EXTENSION=1`` to skip it.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Add the flags the codec needs on GCC/Clang; never let a compiler problem fail the install."""

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix":
            # IEEE rounding everywhere: no fast-math, no fused multiply-add contraction.
            # The AVX2 path is selected at run time, so no -march flag is needed.
            ext.extra_compile_args = [*ext.extra_compile_args, "-O3", "-std=gnu11",
                                      "-ffp-contract=off", "-fno-fast-math"]
        try:
            super().build_extension(ext)
        except Exception as exc:  # any compiler failure means "use the fallback"
            print(f"lmserde-turboquant: building {ext.name} failed ({exc}); "
                  "using the pure-torch codec")


extensions = []
if os.environ.get("LMSERDE_TURBOQUANT_NO_EXTENSION", "") not in ("1", "true", "yes"):
    extensions.append(
        Extension(
            "lmserde_turboquant._native",
            sources=["csrc/native.c"],
            depends=["csrc/native_avx2_rows.h"],
            optional=True,
        )
    )

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
