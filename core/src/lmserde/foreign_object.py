"""``ForeignObjectError``: a deserializer's "these bytes are not mine to read".

A stored object a reader cannot read is not evidence that the object is damaged: another fleet
may have written it with other key material (another master key, a key version this reader does
not hold, another tenant's key), and that fleet still reads it. A deserializer raises
:class:`ForeignObjectError` when it can tell that case apart from damage; the serde wrapper then
counts a miss under reason ``foreign`` and leaves the object in place. Raising ``ValueError`` says
the opposite ("these bytes are bad"): with the stored-object frame vouching for the config and the
key, the wrapper deletes such an object.
"""

from __future__ import annotations

__all__ = ["ForeignObjectError", "UnkeyedObjectError"]


class ForeignObjectError(Exception):
    """The stored bytes may well be intact, but were written with key material (or another
    identity) this reader does not hold: a miss, never a deletion.

    Deliberately not a ``ValueError``: a ``ValueError`` from a deserializer condemns the bytes.
    """


class UnkeyedObjectError(ForeignObjectError):
    """A :class:`ForeignObjectError` whose key material is not, or no longer, in the reader's key
    provider: its tenant was forgotten (or never given to it) or its key version retired. The
    wrapper reports it under reason ``unkeyed``: a miss, kept like any foreign object; only
    ``lmserde scrub --delete-unkeyed``, run with the authoritative keyring, deletes it.
    """
