"""File writes and reads of the ``fs`` adapter, including the head-last write.

A head-last write (see :mod:`lmserde.l2.contract.head_last`) writes everything after an object's
head first, then asks for the head and writes it at offset 0: the frame's payload checksum runs
on other threads while the body goes to the file.

Only regular files are objects. What else may stand at a key's path — a symlink (never
followed), a FIFO, a socket, a device, a directory — is reported by :func:`entry_kind`, and
:func:`open_object_file` opens without following a link and without waiting for a FIFO's
writer, so no entry can make a load block.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import stat

from lmserde.l2.contract.head_last import DeferredHead

__all__ = ["EntryKind", "clear_foreign_entry", "entry_kind", "open_object_file", "read_exact",
           "write_all", "write_head_last"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class EntryKind(enum.Enum):
    """What stands at a path, seen without following a symlink."""

    ABSENT = "absent"
    FILE = "file"  #: a regular file: the only kind that holds an object
    DIRECTORY = "directory"
    OTHER = "other"  #: a symlink, FIFO, socket or device


def entry_kind(path: str) -> EntryKind:
    """The kind of entry at ``path`` (``lstat``: a symlink is ``OTHER`` wherever it points)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return EntryKind.ABSENT
    if stat.S_ISREG(mode):
        return EntryKind.FILE
    return EntryKind.DIRECTORY if stat.S_ISDIR(mode) else EntryKind.OTHER


def clear_foreign_entry(path: str) -> EntryKind:
    """The kind of entry at ``path`` (see :func:`entry_kind`), removing it first when it is
    ``OTHER`` — a symlink, FIFO, socket or device is never an object, so a writer replaces it
    (the kind returned is still ``OTHER``). Directories are left alone."""
    kind = entry_kind(path)
    if kind is EntryKind.OTHER:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return kind


def open_object_file(path: str) -> tuple[int, int] | None:
    """``(descriptor, size in bytes)`` of the regular file at ``path``, opened read-only (the
    size from the same ``fstat`` that checked the kind); ``None`` when nothing is there or what
    is there is not a regular file (a symlink is not followed, a FIFO is not waited on). Other
    ``OSError`` (permissions, I/O errors) propagate."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | _NOFOLLOW | _NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # symlink, socket, directory
            return None
        raise
    try:
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info.st_size


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
