"""The ``hkdf`` key provider: one master key for every tenant (LMCache's scheme)."""

from __future__ import annotations

from lmserde.tenant_keys import MASTER_KEY_VERSION, MasterKeyProvider

__all__ = ["HKDF_KEY_VERSION", "HkdfKeyProvider"]

HKDF_KEY_VERSION = MASTER_KEY_VERSION


class HkdfKeyProvider(MasterKeyProvider):
    """Every tenant's root secret is the master key; its only key version is 0.

    Per-tenant AES keys come from HKDF over the master key with the tenant in the info string, so
    tenants get distinct keys, but any holder of the master key can decrypt every tenant.
    """

    def __init__(self, master_key: bytes, *, source: str = "in-memory key") -> None:
        super().__init__(master_key, source=source, name="hkdf")
