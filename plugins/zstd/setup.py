"""Build of lmserde-zstd: metadata lives in pyproject.toml; this file only adds the C kernel.

``lmserde_zstd._planes`` (byte-plane split/merge, ``csrc/planes.c``) is compiled with the
machine's C compiler by the build shared with the other plugins (``lmserde_native_build.py``, same
flags). Without a compiler the install still succeeds with a loud warning and the package uses
its torch split/merge (the same bytes, slower); ``LMSERDE_REQUIRE_NATIVE=1`` makes that an error.
``LMSERDE_ZSTD_NO_EXTENSION=1`` skips the compilation.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmserde_native_build import native_setup_kwargs

setup(**native_setup_kwargs("lmserde-zstd", "lmserde_zstd._planes", ["csrc/planes.c"],
                            skip_env="LMSERDE_ZSTD_NO_EXTENSION"))
