"""Errors of per-tenant key material: key files, keyrings and key providers.

Every error is a ``ValueError`` (bad input or configuration, per the project's convention) and no
message ever contains key material.
"""

from __future__ import annotations

__all__ = ["KeyFileError", "KeyringError", "UnknownTenantError", "UnknownKeyVersionError",
           "RetiredKeyVersionError"]


class KeyFileError(ValueError):
    """A key file (master key, frame key, keyring) is unusable: missing, too short, too large,
    not a regular file, or readable by others."""


class KeyringError(ValueError):
    """A keyring file is malformed or unusable."""


class UnknownTenantError(KeyringError):
    """The key provider holds no key for the requested tenant (``cache_salt``)."""


class UnknownKeyVersionError(KeyringError):
    """The provider does not hold the requested key version for that tenant."""


class RetiredKeyVersionError(UnknownKeyVersionError):
    """The provider does not hold the requested key version but holds newer ones for that tenant:
    the version was retired (``lmserde keys retire``), not merely not yet distributed. Objects
    written with it can never be read again with this provider's keys."""
