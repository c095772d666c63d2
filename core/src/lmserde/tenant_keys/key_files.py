"""Creating key material: new master key files and new keyring versions.

Files are created with mode 0600 and never overwritten in place: a master key file that already
exists is refused, and a keyring is replaced atomically (written beside it, then renamed).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from lmserde.tenant_keys.errors import KeyFileError
from lmserde.tenant_keys.keyring import Keyring, parse_keyring
from lmserde.tenant_keys.secret_file import read_secret_file

__all__ = [
    "MASTER_KEY_BYTES", "write_master_key", "add_keyring_version", "set_keyring_current",
]

MASTER_KEY_BYTES = 32
_PRIVATE = 0o600


def _create_private(path: Path, data: bytes) -> None:
    """Create ``path`` exclusively with mode 0600 and write ``data`` durably."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, _PRIVATE)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, _PRIVATE)  # the umask may have removed owner bits
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def _replace_private(path: Path, data: bytes) -> None:
    """Atomically replace (or create) ``path`` with a 0600 file holding ``data``."""
    staging = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        _create_private(staging, data)
        os.replace(staging, path)
    except OSError as exc:
        staging.unlink(missing_ok=True)
        raise KeyFileError(f"cannot write keyring file {path}: {exc.strerror or exc}") from None


def write_master_key(path: str | os.PathLike[str]) -> Path:
    """Write ``MASTER_KEY_BYTES`` fresh random bytes to the new file ``path`` (mode 0600).

    ``KeyFileError`` if ``path`` exists (a key is never overwritten) or cannot be created.
    """
    p = Path(path)
    try:
        _create_private(p, secrets.token_bytes(MASTER_KEY_BYTES))
    except FileExistsError:
        raise KeyFileError(
            f"refusing to overwrite existing file {p}: overwriting a master key makes every "
            "frame encrypted with it unreadable. Choose a new path, or delete the old key "
            "yourself."
        ) from None
    except OSError as exc:
        raise KeyFileError(f"cannot create master key file {p}: {exc.strerror or exc}") from None
    return p


def add_keyring_version(
    path: str | os.PathLike[str], tenant: str, *, activate: bool = True
) -> int:
    """Add a fresh random root secret as ``tenant``'s next version in the keyring ``path``
    (created if missing) and return the new version.

    With ``activate`` the new version becomes current at once; without it the key is only staged
    (decrypts, but is not used for writing) so it can reach every server before a later
    ``activate`` switch. The file is replaced atomically with mode 0600.
    """
    p = Path(path)
    if p.exists():
        keyring = parse_keyring(read_secret_file(p, what="keyring file"), source=str(p))
    else:
        keyring = Keyring()
    updated = keyring.with_new_version(
        tenant, secrets.token_bytes(MASTER_KEY_BYTES), activate=activate
    )
    _replace_private(p, updated.dumps())
    return max(updated.tenant(tenant).secrets)


def set_keyring_current(path: str | os.PathLike[str], tenant: str, version: int) -> None:
    """Make the existing ``version`` the one ``tenant``'s new frames use (atomic rewrite)."""
    p = Path(path)
    keyring = parse_keyring(read_secret_file(p, what="keyring file"), source=str(p))
    _replace_private(p, keyring.with_current(tenant, version).dumps())
