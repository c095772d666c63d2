"""The L1 object cache: per-key reserve/finish/read locks, temporary objects, a temp-buffer pool."""

from lmserde.l1.buffer_pool import BufferPool, BufferPoolStats
from lmserde.l1.errors import L1Error
from lmserde.l1.manager import (
    DEFAULT_POOL_BYTES,
    DeleteListener,
    L1Manager,
    L1Result,
    WriteListener,
)

__all__ = [
    "DEFAULT_POOL_BYTES",
    "BufferPool",
    "BufferPoolStats",
    "L1Error",
    "L1Manager",
    "L1Result",
    "WriteListener",
    "DeleteListener",
]
