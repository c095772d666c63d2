"""Exceptions raised by the aesgcm serde.

Every error is a ``ValueError`` (bad input, per the project's convention). An authentication
failure is additionally a ``cryptography.exceptions.InvalidTag``, so code written against LMCache's
aesgcm serde (which lets ``InvalidTag`` escape) keeps working. No message ever contains key
material.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag

__all__ = [
    "FrameFormatError",
    "FrameAuthenticationError",
    "KeyFileError",
    "KeyringError",
    "UnknownTenantError",
    "UnknownKeyVersionError",
    "KeyProviderError",
]


class FrameFormatError(ValueError):
    """A frame is empty, truncated, of an unknown version or suite, or does not fit its buffers."""


class FrameAuthenticationError(InvalidTag, ValueError):
    """A frame failed AES-GCM authentication: wrong key or tenant, tampered bytes, or (frame
    version 2) a frame moved to another object key."""


class KeyFileError(ValueError):
    """A master key file is unusable: missing, too short, too large or readable by others."""


class KeyringError(ValueError):
    """A keyring file is malformed or unusable."""


class UnknownTenantError(KeyringError):
    """The key provider holds no key for the requested tenant (``cache_salt``)."""


class UnknownKeyVersionError(KeyringError):
    """A frame names a key version the provider does not hold for that tenant."""


class KeyProviderError(ValueError):
    """A key provider is unknown, misconfigured or returned something unusable."""
