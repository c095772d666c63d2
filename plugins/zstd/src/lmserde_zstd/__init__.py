"""lmserde-zstd: the ``zstd`` serde, lossless compression of KV-cache bytes.

Byte shuffle + zstd in one cache-blocked pass (blosc2), in a small self-describing frame
(:mod:`lmserde_zstd.frame`); incompressible input is stored raw. The serde is :data:`ZSTD_SPEC`
(entry point ``zstd`` in group ``lmcache.serde``).
"""

from __future__ import annotations

from lmserde_zstd.frame import HEADER_SIZE, FrameError, FrameHeader, Shuffle
from lmserde_zstd.serde import DEFAULT_MIN_SAVING, ZstdDeserializer, ZstdSerializer
from lmserde_zstd.spec import ZSTD_OPTIONS, ZSTD_SPEC, create_zstd_processor

__version__ = "0.3.0"

__all__ = [
    "DEFAULT_MIN_SAVING",
    "HEADER_SIZE",
    "FrameError",
    "FrameHeader",
    "Shuffle",
    "ZSTD_OPTIONS",
    "ZSTD_SPEC",
    "ZstdDeserializer",
    "ZstdSerializer",
    "create_zstd_processor",
    "__version__",
]
