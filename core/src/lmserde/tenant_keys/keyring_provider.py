"""The ``keyring`` key provider: per-tenant root secrets with versions, from a keyring file."""

from __future__ import annotations

import os

from lmserde.tenant_keys.keyring import Keyring, parse_keyring
from lmserde.tenant_keys.provider import KeyProvider
from lmserde.tenant_keys.secret_file import read_secret_file

__all__ = ["KeyringKeyProvider"]


class KeyringKeyProvider(KeyProvider):
    """Serves a :class:`Keyring`: new frames use the tenant's current version; every listed
    version decrypts. An unknown tenant raises ``UnknownTenantError``.

    The keyring is read once; a rotated file takes effect when the serde is built again (for
    example on restart). Tenants are isolated cryptographically: a server given only some
    tenants' keys cannot read the others.
    """

    def __init__(self, keyring: Keyring, *, source: str = "in-memory keyring") -> None:
        self._keyring = keyring
        self._source = source

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, allow_insecure_permissions: bool = False
    ) -> KeyringKeyProvider:
        """Read and validate the keyring file ``path`` (owner-only permissions required)."""
        data = read_secret_file(
            path, what="keyring file", allow_insecure_permissions=allow_insecure_permissions
        )
        source = os.fspath(path)
        return cls(parse_keyring(data, source=source), source=source)

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    def current_version(self, tenant: str) -> int:
        return self._keyring.tenant(tenant).current

    def root_secret(self, tenant: str, version: int) -> bytes:
        return self._keyring.secret(tenant, version)

    def describe(self) -> str:
        return f"KeyringKeyProvider source={self._source!r} tenants={len(self._keyring.tenants)}"
