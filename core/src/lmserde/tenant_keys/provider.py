"""The key-provider contract: root secrets per tenant and key version."""

from __future__ import annotations

from abc import ABC, abstractmethod

from lmserde.tenant_keys.errors import RetiredKeyVersionError, UnknownTenantError

__all__ = ["KeyProvider", "MAX_KEY_VERSION", "key_withdrawn"]

#: Key versions are integers in ``[0, MAX_KEY_VERSION]`` (they travel in frames as 32 bits).
MAX_KEY_VERSION = 0xFFFF_FFFF


class KeyProvider(ABC):
    """Supplies root secrets; their user derives its keys from them (``aesgcm``: its AES keys).

    A *tenant* is an object key's ``cache_salt`` (``""`` is a tenant too). Each tenant has one
    *current* key version, used for new frames, and may hold older versions that still decrypt.
    Versions are integers in ``[0, 2**32 - 1]``.

    Implementations must be thread-safe and fast after warm-up: ``current_version`` is called for
    every frame written (users cache derived keys, not versions). Errors are ``ValueError``s
    (``UnknownTenantError``, ``UnknownKeyVersionError``) that never contain key material, and
    ``repr`` must not reveal it either. ``UnknownTenantError`` and ``UnknownKeyVersionError`` for
    the version a frame names mean "not a key I hold" (someone else's object: kept, a miss); any
    other failure is an outage (the object is kept and read again once the provider is back).
    Either way nothing is deleted. ``UnknownTenantError`` and ``RetiredKeyVersionError`` say more:
    the key material is not (or no longer) in the provider (a forgotten tenant, a retired version),
    which ``lmserde scrub --delete-unkeyed`` acts on.
    """

    @abstractmethod
    def current_version(self, tenant: str) -> int:
        """The key version new frames of ``tenant`` are written with."""

    @abstractmethod
    def root_secret(self, tenant: str, version: int) -> bytes:
        """The root secret of ``tenant`` at ``version`` (at least 16 bytes)."""

    def key_generation(self) -> int:
        """A number that changes whenever secrets this provider served may have changed or been
        withdrawn (a reloaded keyring, an expired KMS cache entry); ``0`` for a provider whose
        keys never change. Users that cache anything derived from root secrets drop it when the
        number changes, so a forgotten tenant or retired version stops decrypting. Called for
        every frame: cheap, never blocking."""
        return 0

    def describe(self) -> str:
        """A one-line, secret-free description for reprs and logs."""
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.describe()}>"


def key_withdrawn(exc: BaseException) -> bool:
    """Whether a provider's error says the key material is not, or no longer, in the provider: a
    tenant it holds no key for (forgotten, or never given) or a retired version. Objects written
    with such keys can never be read with this provider; ``scrub --delete-unkeyed`` removes them.
    (A version newer than every one held is not withdrawn: it may not have arrived yet.)"""
    return isinstance(exc, UnknownTenantError | RetiredKeyVersionError)
