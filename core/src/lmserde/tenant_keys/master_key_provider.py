"""One master key for every tenant: the key provider behind ``master_key_path`` options."""

from __future__ import annotations

import os

from lmserde.tenant_keys.errors import KeyFileError, UnknownKeyVersionError
from lmserde.tenant_keys.provider import KeyProvider
from lmserde.tenant_keys.secret_file import MIN_MASTER_KEY_BYTES, read_master_key_file

__all__ = ["MASTER_KEY_VERSION", "MasterKeyProvider"]

#: The one key version a master key has.
MASTER_KEY_VERSION = 0


class MasterKeyProvider(KeyProvider):
    """Every tenant's root secret is the master key; its only key version is 0.

    Users derive per-tenant keys from the master key with the tenant in the derivation (as the
    ``aesgcm`` serde's ``hkdf`` provider does), so tenants get distinct keys, but any holder of the
    master key can derive every tenant's. ``name`` is what messages call the provider.
    """

    def __init__(
        self, master_key: bytes, *, source: str = "in-memory key", name: str = "master-key"
    ) -> None:
        if len(master_key) < MIN_MASTER_KEY_BYTES:
            raise KeyFileError(
                f"master key ({source}) holds {len(master_key)} bytes; at least "
                f"{MIN_MASTER_KEY_BYTES} are required"
            )
        self._master_key = bytes(master_key)
        self._source = source
        self._name = name

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, allow_insecure_permissions: bool = False
    ) -> MasterKeyProvider:
        """Read the master key file ``path`` (see ``read_master_key_file`` for the checks)."""
        key = read_master_key_file(path, allow_insecure_permissions=allow_insecure_permissions)
        return cls(key, source=os.fspath(path))

    def current_version(self, tenant: str) -> int:
        """Always :data:`MASTER_KEY_VERSION`."""
        return MASTER_KEY_VERSION

    def root_secret(self, tenant: str, version: int) -> bytes:
        """The master key; ``UnknownKeyVersionError`` for any version but 0."""
        if version != MASTER_KEY_VERSION:
            raise UnknownKeyVersionError(
                f"the frame names key version {version} but the {self._name!r} provider has a "
                f"single master key (version {MASTER_KEY_VERSION}); it was written with another "
                "key provider (a keyring?)"
            )
        return self._master_key

    def describe(self) -> str:
        """Class, source path and key length (never the key)."""
        return f"{type(self).__name__} source={self._source!r} key_bytes={len(self._master_key)}"
