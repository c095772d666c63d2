"""Build of lmserde-fp8: metadata lives in pyproject.toml; this file only adds the C codec.

``lmserde_fp8._fastcodec`` is compiled with the machine's C compiler by the build shared with
lmserde-turboquant (``lmserde_native_build.py``, same flags). Without a compiler the install
still succeeds with a loud warning and the package runs its pure-torch codec (bit-identical,
slower); ``LMSERDE_REQUIRE_NATIVE=1`` makes that an error. ``LMSERDE_FP8_NO_EXTENSION=1`` skips
the compilation.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lmserde_native_build import native_setup_kwargs

setup(**native_setup_kwargs("lmserde-fp8", "lmserde_fp8._fastcodec", ["csrc/fastcodec.c"],
                            skip_env="LMSERDE_FP8_NO_EXTENSION"))
