"""Reading secret files (master keys, keyrings) safely.

A secret file is read whole, as raw bytes, from a regular file that only its owner may read or
write. The permission check runs on the opened file (``fstat``), so a symlink (as in Kubernetes
Secret mounts) is judged by its target. Contents never appear in messages.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from lmserde.tenant_keys.errors import KeyFileError

__all__ = [
    "MIN_MASTER_KEY_BYTES",
    "MAX_SECRET_FILE_BYTES",
    "read_secret_file",
    "read_master_key_file",
]

MIN_MASTER_KEY_BYTES = 16
MAX_SECRET_FILE_BYTES = 1 << 20
_GROUP_OTHER_ACCESS = 0o066

_log = logging.getLogger("lmserde.tenant_keys")


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _fix_hint(path: Path, mode: int) -> str:
    return (
        f"{path} is accessible by group or others (mode {stat.S_IMODE(mode):04o}). Make it "
        f"private with `chmod 600 {path}` (Kubernetes: give the Secret volume `defaultMode: "
        "0400`), or set the option `allow_insecure_key_permissions: true` to accept it."
    )


def read_secret_file(
    path: str | os.PathLike[str], *, what: str, allow_insecure_permissions: bool = False
) -> bytes:
    """The bytes of the secret file ``path``; ``KeyFileError`` if it is unusable.

    ``what`` names the file in messages ("master key file", "keyring file"). Refused: a path that
    cannot be opened, a non-regular file (a FIFO, device or directory is refused without waiting
    for a writer: the file is opened non-blocking and checked with ``fstat``), a file over
    ``MAX_SECRET_FILE_BYTES`` and, unless ``allow_insecure_permissions``, a file that group or
    others may read or write (POSIX only).
    """
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the type check
        # below refuses it at once. Regular files ignore the flag.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise KeyFileError(f"cannot open {what} {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(
                f"{what} {p} is not a regular file ({_file_kind(st.st_mode)}); point the option "
                "at the key file itself"
            )
        if os.name == "posix" and st.st_mode & _GROUP_OTHER_ACCESS:
            if not allow_insecure_permissions:
                raise KeyFileError(f"refusing {what}: {_fix_hint(p, st.st_mode)}")
            _log.warning("%s %s is accessible by group or others (mode %04o); accepted because "
                         "allow_insecure_key_permissions is set", what, p,
                         stat.S_IMODE(st.st_mode))
        if st.st_size > MAX_SECRET_FILE_BYTES:
            raise KeyFileError(
                f"{what} {p} is {st.st_size} bytes, larger than the {MAX_SECRET_FILE_BYTES}-byte "
                "limit; is this the right file?"
            )
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_SECRET_FILE_BYTES:
                raise KeyFileError(f"{what} {p} grew past {MAX_SECRET_FILE_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_master_key_file(
    path: str | os.PathLike[str], *, allow_insecure_permissions: bool = False
) -> bytes:
    """The raw master key in ``path``, exactly as LMCache reads it (no trimming, no decoding).

    Refused with ``KeyFileError``: everything :func:`read_secret_file` refuses, and a key shorter
    than ``MIN_MASTER_KEY_BYTES``. A trailing newline is kept (so keys match LMCache's) but logs a
    warning, since it usually means the key was written by an editor or ``echo``.
    """
    p = Path(path)
    key = read_secret_file(
        p, what="master key file", allow_insecure_permissions=allow_insecure_permissions
    )
    if len(key) < MIN_MASTER_KEY_BYTES:
        raise KeyFileError(
            f"master key file {p} holds {len(key)} bytes; at least {MIN_MASTER_KEY_BYTES} are "
            "required. Create a new one with `lmserde keygen PATH` (32 random bytes)."
        )
    if key.endswith(b"\n"):
        _log.warning(
            "master key file %s ends with a newline; the newline is part of the key (as in "
            "LMCache), so every server must use the byte-identical file. Keys made with "
            "`lmserde keygen` are raw random bytes.", p
        )
    return key
