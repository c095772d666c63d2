"""Build of lmserde-zstd: metadata lives in pyproject.toml; this file only adds the optional C kernel.

``lmserde_zstd._planes`` (byte-plane split/merge, ``csrc/planes.c``) is compiled with the machine's
C compiler. The build is optional: when the compiler is missing or fails, installation continues
and the package uses its numpy split/merge, which writes identical bytes (slower). Set
``LMSERDE_ZSTD_NO_EXTENSION=1`` to skip the compilation.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Add optimisation flags on GCC/Clang and never let a compiler problem fail the install."""

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix":
            ext.extra_compile_args = [*ext.extra_compile_args, "-O3", "-std=c11"]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"lmserde-zstd: building {ext.name} failed ({exc}); using the numpy split/merge")


extensions = []
if os.environ.get("LMSERDE_ZSTD_NO_EXTENSION", "") not in ("1", "true", "yes"):
    extensions.append(Extension("lmserde_zstd._planes", sources=["csrc/planes.c"], optional=True))

setup(ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
