"""Creating and editing key material: new master key files, keyring versions added, made
current, retired, and tenants forgotten.

Files are created with mode 0600 and never overwritten in place: a master key file that already
exists is refused, and a keyring is replaced atomically (written beside it with mode 0600,
fsynced, renamed over it, and the directory fsynced), so a process reading it sees the old or the
new keyring, never a mix. Edits of one keyring are serialized (an exclusive ``flock`` on its
directory from the read to the rename), so two edits at once (``tenant forget`` while ``keys
rotate`` runs) both take effect: the later one never writes back a keyring read before the
earlier one, which would bring a forgotten tenant's keys back. Edits keep the file's kind (plain
or wrapped keyring).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

from lmserde.tenant_keys.errors import KeyFileError, KeyringError
from lmserde.tenant_keys.keyring import (
    KEYRING_FORMAT_FIELD,
    WRAPPED_KEYRING_FORMAT_FIELD,
    Keyring,
    parse_keyring,
)
from lmserde.tenant_keys.secret_file import read_secret_file

__all__ = [
    "MASTER_KEY_BYTES", "write_master_key", "add_keyring_version", "set_keyring_current",
    "read_keyring_file", "edit_keyring_file", "forget_tenant", "retire_key_versions",
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
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _edit_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive edit lock of the keyring ``path``: a ``flock`` on its directory (the
    file itself is replaced by each edit, so it cannot carry the lock; nothing is left behind).
    ``KeyFileError`` when the directory cannot be locked."""
    try:
        fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise KeyFileError(f"cannot open the directory of keyring file {path} to lock it: "
                           f"{exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise KeyFileError(f"cannot lock the directory of keyring file {path} for an edit: "
                               f"{exc.strerror or exc}") from None
        yield
    finally:
        os.close(fd)  # releases the lock


def read_keyring_file(path: str | os.PathLike[str]) -> Keyring:
    """The keyring (plain or wrapped) in ``path``; ``KeyFileError``/``KeyringError`` if unusable."""
    p = Path(path)
    return parse_keyring(read_secret_file(p, what="keyring file"), source=str(p),
                         formats=(KEYRING_FORMAT_FIELD, WRAPPED_KEYRING_FORMAT_FIELD))


def edit_keyring_file(
    path: str | os.PathLike[str], edit: Callable[[Keyring], Keyring], *,
    create: str | None = None,
) -> Keyring:
    """Replace the keyring in ``path`` by ``edit(keyring)`` atomically (mode 0600, same kind) and
    return the new keyring. Edits of one keyring are serialized (the module docstring): another
    edit in flight, in this process or another, finishes before this one reads the file.
    Whatever ``edit`` raises leaves the file as it was. A missing file is an error unless
    ``create`` names the kind (format field) of the empty keyring to start from.
    """
    p = Path(path)
    with _edit_lock(p):
        if create is not None and not p.exists():
            keyring = Keyring(format_field=create)
        else:
            keyring = read_keyring_file(p)
        updated = edit(keyring)
        _replace_private(p, updated.dumps())
    return updated


def forget_tenant(path: str | os.PathLike[str], tenant: str) -> None:
    """Remove every key of ``tenant`` from the keyring ``path`` (crypto-shredding);
    ``UnknownTenantError`` if it holds none."""
    edit_keyring_file(path, lambda keyring: keyring.without_tenant(tenant))


def retire_key_versions(
    path: str | os.PathLike[str], tenant: str, *, versions: tuple[int, ...] = (),
    before: int | None = None,
) -> tuple[int, ...]:
    """Remove ``versions`` of ``tenant`` (and, with ``before``, every version below it) from the
    keyring ``path``; return the versions removed. The current version is never removed
    (``KeyringError``: rotate first)."""
    removed: list[int] = []

    def edit(keyring: Keyring) -> Keyring:
        held = keyring.tenant(tenant).secrets
        chosen = set(versions) | ({v for v in held if v < before} if before is not None else set())
        removed.extend(sorted(chosen))
        return keyring.without_versions(tenant, chosen)

    edit_keyring_file(path, edit)
    return tuple(removed)


def _new_master_key() -> bytes:
    """``MASTER_KEY_BYTES`` random bytes whose last byte is not a newline: a key file ending in
    one draws the "written by an editor?" warning of :func:`read_master_key_file`, which a key
    made here must not (1 key in 256 would). Redrawing costs 0.006 bits of the 256."""
    while True:
        key = secrets.token_bytes(MASTER_KEY_BYTES)
        if not key.endswith(b"\n"):
            return key


def write_master_key(path: str | os.PathLike[str]) -> Path:
    """Write ``MASTER_KEY_BYTES`` fresh random bytes, the last one never a newline, to the new
    file ``path`` (mode 0600).

    ``KeyFileError`` if ``path`` exists (a key is never overwritten) or cannot be created.
    """
    p = Path(path)
    try:
        _create_private(p, _new_master_key())
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
    def edit(keyring: Keyring) -> Keyring:
        if keyring.wrapped:
            raise KeyringError(
                f"keyring {path} holds wrapped keys: new versions come from its key management "
                "service (`lmserde kms rotate`), not from local random bytes"
            )
        return keyring.with_new_version(
            tenant, secrets.token_bytes(MASTER_KEY_BYTES), activate=activate
        )

    updated = edit_keyring_file(path, edit, create=KEYRING_FORMAT_FIELD)
    return max(updated.tenant(tenant).secrets)


def set_keyring_current(path: str | os.PathLike[str], tenant: str, version: int) -> None:
    """Make the existing ``version`` the one ``tenant``'s new frames use (atomic rewrite)."""
    edit_keyring_file(path, lambda keyring: keyring.with_current(tenant, version))
