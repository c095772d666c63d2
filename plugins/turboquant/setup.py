"""Build of lmserde-turboquant: metadata lives in pyproject.toml; this file adds the C codec.

``lmserde_turboquant._native`` is compiled with the machine's C compiler by the build shared with
lmserde-fp8 (``lmserde_native_build.py``, same flags). Without a compiler the install still
succeeds with a loud warning and the package uses its pure-torch codec (bit-identical bytes,
slower); ``LMSERDE_REQUIRE_NATIVE=1`` makes that an error. ``LMSERDE_TURBOQUANT_NO_EXTENSION=1``
skips the compilation.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmserde_native_build import native_setup_kwargs

setup(**native_setup_kwargs("lmserde-turboquant", "lmserde_turboquant._native", ["csrc/native.c"],
                            depends=["csrc/native_avx2_rows.h"],
                            skip_env="LMSERDE_TURBOQUANT_NO_EXTENSION"))
