"""Build of lmserde: metadata lives in pyproject.toml; this file only adds the C kernel.

``lmserde._checksum_copy`` (the stored-object frame's payload checksum fused with a copy, see
``csrc/checksum_copy.c``, and the frame header's fast path, ``csrc/frame_header.c``) is compiled
with the machine's C compiler by the build shared with the native plugins
(``lmserde_native_build.py``, same flags). Without a compiler the install still succeeds with a
loud warning and lmserde hashes payloads with the ``xxhash`` package and codes headers in Python
instead (the same bytes, a slower store and load); ``LMSERDE_REQUIRE_NATIVE=1`` makes that an
error. ``LMSERDE_CORE_NO_EXTENSION=1`` skips the compilation.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmserde_native_build import native_setup_kwargs

setup(**native_setup_kwargs("lmserde", "lmserde._checksum_copy",
                            ["csrc/checksum_copy.c", "csrc/frame_header.c"],
                            skip_env="LMSERDE_CORE_NO_EXTENSION",
                            depends=["csrc/third_party/xxhash/xxhash.h", "csrc/frame_header.h"]))
