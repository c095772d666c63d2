"""The ``keyring`` key provider: per-tenant root secrets with versions, from a keyring file."""

from __future__ import annotations

import os

from lmserde.tenant_keys.keyring import Keyring
from lmserde.tenant_keys.keyring_watch import DEFAULT_RELOAD_INTERVAL_S, KeyringWatch
from lmserde.tenant_keys.provider import KeyProvider

__all__ = ["KeyringKeyProvider"]


class KeyringKeyProvider(KeyProvider):
    """Serves a :class:`Keyring`: new frames use the tenant's current version; every listed
    version decrypts. An unknown tenant raises ``UnknownTenantError``, a version it does not hold
    ``UnknownKeyVersionError`` (``RetiredKeyVersionError`` when newer ones are held).

    Built :meth:`from_file`, the keyring is re-read when the file changes (every
    ``reload_interval_s`` seconds at most, off the data path: see
    :mod:`lmserde.tenant_keys.keyring_watch`), so rotated, retired and forgotten keys take effect
    in running processes; :meth:`key_generation` changes with each new keyring. Tenants are
    isolated cryptographically: a server given only some tenants' keys cannot read the others.
    """

    def __init__(self, keyring: Keyring | KeyringWatch, *,
                 source: str = "in-memory keyring") -> None:
        self._watch = keyring if isinstance(keyring, KeyringWatch) else None
        self._static = keyring if isinstance(keyring, Keyring) else None
        self._source = self._watch.path if self._watch is not None else source

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, allow_insecure_permissions: bool = False,
        reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
    ) -> KeyringKeyProvider:
        """Read and validate the keyring file ``path`` (owner-only permissions required) and
        watch it for changes every ``reload_interval_s`` seconds (0: read once)."""
        return cls(KeyringWatch(path, reload_interval_s=reload_interval_s,
                                allow_insecure_permissions=allow_insecure_permissions))

    @property
    def keyring(self) -> Keyring:
        """The keyring in use now (the last good one read from the file)."""
        if self._watch is not None:
            return self._watch.current()
        assert self._static is not None
        return self._static

    @property
    def watch(self) -> KeyringWatch | None:
        """The file watch behind this provider (``None`` for an in-memory keyring)."""
        return self._watch

    def current_version(self, tenant: str) -> int:
        """The tenant's current version in the keyring in use."""
        return self.keyring.tenant(tenant).current

    def root_secret(self, tenant: str, version: int) -> bytes:
        """The tenant's secret at ``version`` in the keyring in use."""
        return self.keyring.secret(tenant, version)

    def key_generation(self) -> int:
        """Grows by one with every change of the keyring file's contents."""
        if self._watch is None:
            return 0
        self._watch.current()  # a due check starts here too
        return self._watch.generation

    def describe(self) -> str:
        """Source, tenant count and, while the file cannot be reloaded, that it is stale."""
        stale = ""
        if self._watch is not None and self._watch.reload_error is not None:
            stale = " (reload failing: last good keyring in use)"
        return (f"KeyringKeyProvider source={self._source!r} "
                f"tenants={len(self.keyring.tenants)}{stale}")
