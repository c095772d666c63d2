"""The ``hkdf`` key provider: one master key for every tenant (LMCache's scheme)."""

from __future__ import annotations

import os

from lmserde_aesgcm.errors import KeyFileError, UnknownKeyVersionError
from lmserde_aesgcm.key_file import MIN_MASTER_KEY_BYTES, read_master_key_file
from lmserde_aesgcm.key_provider import KeyProvider

__all__ = ["HKDF_KEY_VERSION", "HkdfKeyProvider"]

HKDF_KEY_VERSION = 0


class HkdfKeyProvider(KeyProvider):
    """Every tenant's root secret is the master key; its only key version is 0.

    Per-tenant AES keys come from HKDF over the master key with the tenant in the info string, so
    tenants get distinct keys, but any holder of the master key can decrypt every tenant.
    """

    def __init__(self, master_key: bytes, *, source: str = "in-memory key") -> None:
        if len(master_key) < MIN_MASTER_KEY_BYTES:
            raise KeyFileError(
                f"master key ({source}) holds {len(master_key)} bytes; at least "
                f"{MIN_MASTER_KEY_BYTES} are required"
            )
        self._master_key = bytes(master_key)
        self._source = source

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, allow_insecure_permissions: bool = False
    ) -> HkdfKeyProvider:
        """Read the master key file ``path`` (see ``read_master_key_file`` for the checks)."""
        key = read_master_key_file(path, allow_insecure_permissions=allow_insecure_permissions)
        return cls(key, source=os.fspath(path))

    def current_version(self, tenant: str) -> int:
        return HKDF_KEY_VERSION

    def root_secret(self, tenant: str, version: int) -> bytes:
        if version != HKDF_KEY_VERSION:
            raise UnknownKeyVersionError(
                f"the frame names key version {version} but the 'hkdf' provider has a single "
                f"master key (version {HKDF_KEY_VERSION}); it was written with another key "
                "provider (a keyring?)"
            )
        return self._master_key

    def describe(self) -> str:
        return f"HkdfKeyProvider source={self._source!r} key_bytes={len(self._master_key)}"
