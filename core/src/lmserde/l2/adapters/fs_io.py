"""File writes and reads of the ``fs`` adapter, including the head-last write.

A head-last write (see :mod:`lmserde.l2.contract.head_last`) writes everything after an object's
head first, then asks for the head and writes it at offset 0: the frame's payload checksum runs
on other threads while the body goes to the file.
"""

from __future__ import annotations

import os

from lmserde.l2.contract.head_last import DeferredHead

__all__ = ["read_exact", "write_all", "write_head_last"]


def write_all(fd: int, view: memoryview) -> None:
    """Write all of ``view`` at the file position (retrying short writes)."""
    offset, total = 0, len(view)
    while offset < total:
        offset += os.write(fd, view[offset:])


def read_exact(fd: int, view: memoryview) -> int:
    """Read up to ``len(view)`` bytes; returns how many were read (short at end of file)."""
    offset, total = 0, len(view)
    while offset < total:
        n = os.readv(fd, [view[offset:]])
        if n == 0:
            break
        offset += n
    return offset


def write_head_last(fd: int, view: memoryview, head: DeferredHead) -> None:
    """Write ``view`` to the empty file ``fd``: the body at offset ``head.head_bytes``, then
    ``head.finish_head()`` (which fills the head in ``view``), then the head at offset 0."""
    size = head.head_bytes
    if len(view) < size:
        raise ValueError(f"an object of {len(view)} bytes has no room for a {size}-byte head")
    os.lseek(fd, size, os.SEEK_SET)
    write_all(fd, view[size:])
    head.finish_head()
    offset = 0
    while offset < size:
        offset += os.pwrite(fd, view[offset:size], offset)
