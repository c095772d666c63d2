"""Build of lmserde-fp8: metadata lives in pyproject.toml; this file only adds the optional C codec.

``lmserde_fp8._fastcodec`` is compiled with the machine's C compiler. The build is optional: when
the compiler is missing or fails, installation continues and the package runs its pure-torch
fallback (bit-identical, slower). Set ``LMSERDE_FP8_NO_EXTENSION=1`` to skip the compilation.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Add optimisation flags on GCC/Clang and never let a compiler problem fail the install."""

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix":
            # never -ffast-math: the kernels rely on IEEE rounding; SIMD is chosen at run time
            ext.extra_compile_args = [*ext.extra_compile_args, "-O3", "-std=c11"]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"lmserde-fp8: building {ext.name} failed ({exc}); using the pure-torch codec")


extensions = []
if os.environ.get("LMSERDE_FP8_NO_EXTENSION", "") not in ("1", "true", "yes"):
    extensions.append(
        Extension("lmserde_fp8._fastcodec", sources=["csrc/fastcodec.c"], optional=True)
    )

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
