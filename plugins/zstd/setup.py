"""Build of lmserde-zstd: metadata lives in pyproject.toml; this file only adds the C kernel.

``lmserde_zstd._planes`` is compiled with the machine's C compiler by the build shared with the
other plugins (``lmserde_native_build.py``, same flags): the byte-plane split/merge
(``csrc/planes.c``) and the literal-only zstd frames (``csrc/literal_frames.c``) with zstd's
Huffman coder, vendored unchanged from zstd 1.5.7 (``csrc/third_party/zstd``, BSD licence).
Without a compiler the install still succeeds with a loud warning and the package uses its torch
split/merge and libzstd through ``zstandard``/``pyzstd`` (it reads every frame; it writes slower
ones); ``LMSERDE_REQUIRE_NATIVE=1`` makes that an error. ``LMSERDE_ZSTD_NO_EXTENSION=1`` skips
the compilation.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmserde_native_build import native_setup_kwargs

ZSTD = "csrc/third_party/zstd/lib"
SOURCES = [
    "csrc/planes.c",
    "csrc/literal_frames.c",
    f"{ZSTD}/common/debug.c",
    f"{ZSTD}/common/entropy_common.c",
    f"{ZSTD}/common/error_private.c",
    f"{ZSTD}/common/fse_decompress.c",
    f"{ZSTD}/compress/fse_compress.c",
    f"{ZSTD}/compress/hist.c",
    f"{ZSTD}/compress/huf_compress.c",
    f"{ZSTD}/decompress/huf_decompress.c",
    f"{ZSTD}/decompress/huf_decompress_amd64.S",  # empty unless x86-64 (BMI2 chosen at run time)
]
HEADERS = ["csrc/planes_kernels.h"]

setup(**native_setup_kwargs("lmserde-zstd", "lmserde_zstd._planes", SOURCES,
                            skip_env="LMSERDE_ZSTD_NO_EXTENSION", depends=HEADERS))
