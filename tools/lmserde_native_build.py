"""The one native-extension build of the lmserde distributions that ship C code: the core (its
payload-checksum kernel) and the fp8, turboquant and zstd plugins.

This file is the one source: core and each native plugin have a symbolic link to it beside
their ``setup.py`` (``lmserde_native_build.py -> ../../tools/lmserde_native_build.py``), and
their ``MANIFEST.in`` includes it. setuptools follows the link when it writes the sdist, so each
sdist carries the helper as a regular file and builds on its own, out of this repository
(``tools/dists.py check`` and ``tests/plugins/test_native_build.py`` hold both). A shared
build-time requirement was not chosen: it would have to be published to an index before any of
them could be built in an isolated build environment, for some sixty lines of code.

What it guarantees, for every distribution alike:

* the same compiler flags (:data:`COMPILE_ARGS`): ``-O3``, C11 with GNU extensions, IEEE
  arithmetic (no fast-math, no fused multiply-add contraction) — the codecs' bytes depend on
  rounding; SIMD levels are chosen at run time, so no ``-march``; symbols hidden except the
  module's init function, so vendored C libraries (zstd's Huffman coder in lmserde-zstd) can
  neither clash with nor bind to another copy loaded in the process;
* a compiler problem never passes silently: the install still succeeds (the distribution then
  runs its pure-Python fallback, same results, slower) but a warning naming the extension and
  the reason is printed (pip shows build output with ``-v``; ``lmserde info TYPE`` shows a
  plugin's afterwards, ``lmserde.frame_checksum.checksum_kernel()`` the core's);
* with ``LMSERDE_REQUIRE_NATIVE=1`` (CI sets it) a missing extension fails the build instead,
  as does the distribution's own skip switch (``LMSERDE_<PLUGIN>_NO_EXTENSION=1``,
  ``LMSERDE_CORE_NO_EXTENSION=1`` for the core).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from setuptools import Extension
from setuptools.command.build_ext import build_ext

__all__ = ["COMPILE_ARGS", "REQUIRE_ENV", "NativeBuildError", "native_required",
           "native_setup_kwargs"]

#: Flags added on GCC/Clang (compiler type ``unix``).
COMPILE_ARGS: tuple[str, ...] = ("-O3", "-std=gnu11", "-ffp-contract=off", "-fno-fast-math",
                                 "-fvisibility=hidden")
#: Set to 1 to turn "extension not built" from a warning into a build error.
REQUIRE_ENV = "LMSERDE_REQUIRE_NATIVE"

_TRUE = ("1", "true", "yes", "on")


class NativeBuildError(RuntimeError):
    """The extension was not built although :data:`REQUIRE_ENV` asks for it."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def native_required() -> bool:
    """Whether :data:`REQUIRE_ENV` makes a missing extension an error."""
    return _flag(REQUIRE_ENV)


def _not_built(distribution: str, module: str, reason: str) -> None:
    message = (
        f"{distribution}: the native extension {module} was NOT built ({reason}). "
        f"{distribution} will run its pure-Python fallback instead: the same results, several "
        "times slower. Install a C compiler (gcc or clang) and the Python headers, then reinstall. "
        f"Set {REQUIRE_ENV}=1 to make this an error."
    )
    if native_required():
        raise NativeBuildError(f"{message} ({REQUIRE_ENV} is set)")
    bar = "!" * 78
    print(f"\n{bar}\nWARNING: {message}\n{bar}\n", file=sys.stderr, flush=True)


def _build_ext_class(distribution: str) -> type[build_ext]:
    class NativeBuildExt(build_ext):
        """Adds :data:`COMPILE_ARGS`; a failed build warns (or fails with the switch set)."""

        def build_extension(self, ext: Extension) -> None:
            if self.compiler.compiler_type == "unix":
                ext.extra_compile_args = [*ext.extra_compile_args, *COMPILE_ARGS]
                # assembly sources (``.S``, run through the C preprocessor by the compiler
                # driver), e.g. zstd's Huffman decoder vendored by lmserde-zstd
                if ".S" not in self.compiler.src_extensions:
                    self.compiler.src_extensions.append(".S")
            try:
                super().build_extension(ext)
            except Exception as exc:  # any compiler or linker failure
                _not_built(distribution, ext.name, f"{type(exc).__name__}: {exc}")

    return NativeBuildExt


def native_setup_kwargs(
    distribution: str, module: str, sources: Sequence[str], *, skip_env: str,
    depends: Sequence[str] = (),
) -> dict[str, Any]:
    """``setup()`` keyword arguments building the C extension ``module`` from ``sources``.

    ``skip_env`` names the plugin's switch that skips the compilation (a warning, or an error
    with :data:`REQUIRE_ENV` set).
    """
    if _flag(skip_env):
        _not_built(distribution, module, f"skipped: {skip_env} is set")
        return {"ext_modules": []}
    extension = Extension(module, sources=list(sources), depends=list(depends))
    return {"ext_modules": [extension], "cmdclass": {"build_ext": _build_ext_class(distribution)}}
