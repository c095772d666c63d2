"""Exceptions raised by the aesgcm serde.

Every error about bytes or configuration is a ``ValueError`` (bad input, per the project's
convention). An authentication failure is additionally a ``cryptography.exceptions.InvalidTag``,
so code written against LMCache's aesgcm serde (which lets ``InvalidTag`` escape) keeps working.
The one exception is :class:`KeyUnavailableError`: a decode that could not get its key says
nothing about the bytes, so it is deliberately *not* a ``ValueError`` (the serde wrapper deletes
an object only when its decode raises a ``ValueError``). No message ever contains key material.
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
    "KeyUnavailableError",
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


class KeyUnavailableError(RuntimeError):
    """A decode could not get the key it needs from the key provider: the provider raised
    anything but an :class:`UnknownKeyVersionError` for a version a frame names (a KMS that
    cannot be reached, a cancelled request, a garbled answer, no key for the object's tenant,
    which comes from the object key and not from the stored bytes) or returned something
    unusable; or (frame version 1, which names no version) it could not give its current version.

    The stored bytes were not examined, so this is not a ``ValueError``: behind the stored-object
    frame (the default) the serde wrapper reports a miss and *keeps* the object, which decodes
    again once the provider is back. (Without the frame, ``"serde_frame": false``, nothing vouches
    for the bytes and every failed decode deletes the object.) A version-2 frame naming a key
    version the provider answers with :class:`UnknownKeyVersionError` raises that error: the
    version is read from the bytes, and an object whose key version is gone can never be decoded
    again, so it is deleted and rewritten. The provider's own exception is the ``__cause__``.
    """
