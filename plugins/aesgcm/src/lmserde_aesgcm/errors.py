"""Exceptions raised by the aesgcm serde.

Every error about bytes or configuration is a ``ValueError`` (bad input, per the project's
convention). An authentication failure is additionally a ``cryptography.exceptions.InvalidTag``,
so code written against LMCache's aesgcm serde (which lets ``InvalidTag`` escape) keeps working.

Two families are deliberately *not* ``ValueError``s, because the serde wrapper deletes an object
only when its decode raises a ``ValueError`` ("these bytes are bad"):

* :class:`KeyUnavailableError`: a decode could not get its key (an outage): nothing is known
  about the bytes.
* :class:`ForeignKeyError` (an :class:`lmserde.ForeignObjectError`): the bytes were written with
  key material this reader does not hold (another master key, a key version or tenant it lacks):
  they are someone else's, a miss, never a deletion.

The key-file and keyring errors are :mod:`lmserde.tenant_keys`'s own (re-exported here).

No message ever contains key material (key ids are one-way fingerprints, see ``key_identity``).
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag
from lmserde import ForeignObjectError, UnkeyedObjectError
from lmserde.tenant_keys import (
    KeyFileError,
    KeyringError,
    UnknownKeyVersionError,
    UnknownTenantError,
)

__all__ = [
    "FrameFormatError",
    "FrameAuthenticationError",
    "KeyFileError",
    "KeyringError",
    "UnknownTenantError",
    "UnknownKeyVersionError",
    "KeyProviderError",
    "KeyUnavailableError",
    "ForeignKeyError",
    "KeyMismatchError",
    "UnattributedAuthenticationError",
    "WithdrawnKeyError",
]


class FrameFormatError(ValueError):
    """A frame is empty, truncated, of an unknown version or suite, or does not fit its buffers."""


class FrameAuthenticationError(InvalidTag, ValueError):
    """A version-3 frame failed AES-GCM authentication although its key id is the reader's (the
    reader holds the key that wrote it): the bytes were damaged or tampered with, or the frame
    was moved to another object key."""






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
    for the bytes and every failed decode deletes the object.) A provider that answers
    :class:`UnknownTenantError`, or :class:`UnknownKeyVersionError` for the version a frame names,
    says "not a key I hold": that is :class:`ForeignKeyError`, not this. The provider's own
    exception is the ``__cause__``.
    """


class ForeignKeyError(ForeignObjectError):
    """The frame was written with key material this reader does not hold: a tenant the provider
    has no key for (:class:`UnknownTenantError` is the ``__cause__``), a key version it does not
    hold (:class:`UnknownKeyVersionError`), or one of the subclasses below.

    An :class:`lmserde.ForeignObjectError`, not a ``ValueError``: the bytes may well be intact
    and readable by the fleet that wrote them, so the serde wrapper counts a miss and leaves the
    object in place.
    """


class KeyMismatchError(ForeignKeyError, InvalidTag):
    """A version-3 frame's key id is not the id of this reader's key for the (tenant, key
    version) the frame names: another master key or keyring wrote it. Raised before any
    decryption. Also an ``InvalidTag`` (the frame does not decrypt under this reader's key)."""


class UnattributedAuthenticationError(ForeignKeyError, InvalidTag):
    """A frame that names no key identity (version 1 or 2) failed authentication. Another key and
    damaged bytes look the same to the serde, so this is a :class:`ForeignKeyError` (kept, a
    miss); for version 1 the stored-object frame's payload checksum, which the serde wrapper
    confirms first, is what catches damage. Also an ``InvalidTag``."""


class WithdrawnKeyError(ForeignKeyError, UnkeyedObjectError):
    """The key provider no longer holds (or never held) the key material of the frame: its tenant
    (``UnknownTenantError``: forgotten with ``lmserde tenant forget``, or never given to this
    reader) or its key version (``RetiredKeyVersionError``: retired with ``lmserde keys
    retire``). Kept and a miss like every :class:`ForeignKeyError`; the wrapper reports it under
    reason ``unkeyed``, which ``lmserde scrub --delete-unkeyed`` deletes."""
