"""Object names of object keys: safe for any key content, reversible, tenant salt hashed.

A key is stored as ``<prefix><tenant>/<model>@<kv_rank hex>@<object_group_id hex>@<chunk_hash hex>``:

* ``<tenant>`` is ``shared`` for an empty ``cache_salt`` and ``t-`` followed by the first 128 bits
  (32 hex digits) of a personalized BLAKE2b of the salt otherwise. The salt never appears in a
  name (bucket listings, access logs, inventories show only its hash). A plain hash does not hide
  a guessable salt from someone who can list the bucket and hash candidates; salts that must stay
  secret should be unguessable. Every tenant has its own prefix, so a lifecycle rule, an IAM policy
  or a bulk delete can target one tenant.
* ``<model>`` is percent-encoded for every UTF-8 byte outside ``[A-Za-z0-9._-]``, so no key
  content can add a ``/``, form ``..`` as a path segment, or an ambiguous ``@``.
* The clear salt travels in the object's user metadata (``x-amz-meta-lmserde-salt``,
  percent-encoded ASCII), readable only with read access to the object; :meth:`key_of` maps a
  name back given the salt of its tenant hash.

A name longer than S3's 1024-byte limit cannot be stored: :meth:`name_of` raises ``ValueError``
(the adapter turns it into a failed store / a miss for that key).
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass

from lmserde import ObjectKey

__all__ = ["ObjectNamer", "ParsedName", "salt_tag", "escape", "unescape", "MAX_NAME_BYTES",
           "SALT_METADATA", "encode_salt_metadata", "decode_salt_metadata"]

#: S3's limit on an object key, in UTF-8 bytes.
MAX_NAME_BYTES = 1024
#: User-metadata field (without ``x-amz-meta-``) holding the percent-encoded cache salt.
SALT_METADATA = "lmserde-salt"
SHARED_TENANT = "shared"
_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
_HEX = re.compile(r"[0-9a-f]*\Z")
_RANK = re.compile(r"-?[0-9a-f]+\Z")
_TENANT = re.compile(r"(shared|t-[0-9a-f]{32})\Z")


def escape(text: str) -> str:
    """Percent-encode every UTF-8 byte outside ``[A-Za-z0-9._-]`` (lone surrogates kept)."""
    if all(ch in _SAFE for ch in text):
        return text
    out: list[str] = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def unescape(text: str) -> str:
    """Invert :func:`escape`; ``ValueError`` for malformed escapes or unescaped characters."""
    raw = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            digits = text[i + 1 : i + 3]
            if len(digits) != 2 or not all(c in string.hexdigits for c in digits):
                raise ValueError(f"bad percent escape in {text!r}")
            raw.append(int(digits, 16))
            i += 3
            continue
        if ch not in _SAFE:
            raise ValueError(f"unescaped character {ch!r} in {text!r}")
        raw.append(ord(ch))
        i += 1
    return raw.decode("utf-8", "surrogatepass")


def salt_tag(cache_salt: str) -> str:
    """The tenant part of names: ``shared`` or ``t-<32 hex digits of BLAKE2b(salt)>``."""
    if not cache_salt:
        return SHARED_TENANT
    digest = hashlib.blake2b(cache_salt.encode("utf-8", "surrogatepass"), digest_size=16,
                             person=b"lmserde-s3-salt")
    return "t-" + digest.hexdigest()


@dataclass(frozen=True)
class ParsedName:
    """A name split into its fields; the salt is known only through its tag."""

    tenant: str
    model_name: str
    kv_rank: int
    object_group_id: int
    chunk_hash: bytes

    def key(self, cache_salt: str) -> ObjectKey:
        """The object key, given the salt whose :func:`salt_tag` is ``tenant``."""
        if salt_tag(cache_salt) != self.tenant:
            raise ValueError(f"salt does not match tenant tag {self.tenant!r}")
        return ObjectKey(self.chunk_hash, self.model_name, self.kv_rank, self.object_group_id,
                         cache_salt)


class ObjectNamer:
    """Maps keys to object names under one ``prefix`` (``""`` or ending in ``/``) and back.

    :meth:`parse` accepts exactly the names :meth:`name_of` gives. Prefixes are isolated, the
    empty one included: after its prefix a name holds one ``/`` (after the tenant, which is
    ``shared`` or ``t-<32 hex>``) and none in its escaped model, so a name of prefix ``p/`` is no
    name of prefix ``""`` (its first segment ``p`` is no tenant, or its model holds a ``/``)."""

    def __init__(self, prefix: str) -> None:
        if prefix and not prefix.endswith("/"):
            raise ValueError(f"object name prefix must be empty or end with '/', got {prefix!r}")
        self.prefix = prefix

    def name_of(self, key: ObjectKey) -> str:
        """The object name of ``key``; ``ValueError`` if it exceeds :data:`MAX_NAME_BYTES`."""
        name = (f"{self.prefix}{salt_tag(key.cache_salt)}/{escape(key.model_name)}"
                f"@{key.kv_rank:x}@{key.object_group_id:x}@{key.chunk_hash.hex()}")
        if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise ValueError(f"object name of key for model {key.model_name[:40]!r}... is longer "
                             f"than S3's {MAX_NAME_BYTES} bytes")
        return name

    def parse(self, name: str) -> ParsedName:
        """Split a name of this prefix; ``ValueError`` if it is not an object-key name."""
        if not name.startswith(self.prefix):
            raise ValueError(f"object {name!r} is outside prefix {self.prefix!r}")
        tenant, sep, rest = name[len(self.prefix):].partition("/")
        if not sep or not _TENANT.match(tenant):
            raise ValueError(f"object {name!r} has no tenant part")
        parts = rest.split("@")
        if len(parts) != 4:
            raise ValueError(f"object {name!r} is not an lmserde object-key name")
        model, rank, group, chunk = parts
        if not (_RANK.match(rank) and _HEX.match(group) and group and _HEX.match(chunk)
                and len(chunk) % 2 == 0):
            raise ValueError(f"object {name!r} has malformed hex fields")
        parsed = ParsedName(tenant, unescape(model), int(rank, 16), int(group, 16),
                            bytes.fromhex(chunk))
        # only the exact name this prefix gives a key is one of its names (no leading zeros, no
        # lower-case escapes): two spellings never list as one key twice
        canonical = (f"{tenant}/{escape(parsed.model_name)}@{parsed.kv_rank:x}"
                     f"@{parsed.object_group_id:x}@{parsed.chunk_hash.hex()}")
        if canonical != name[len(self.prefix):]:
            raise ValueError(f"object {name!r} is not the name this prefix gives its key")
        return parsed


def encode_salt_metadata(cache_salt: str) -> str:
    """The ASCII metadata value carrying ``cache_salt``."""
    return escape(cache_salt)


def decode_salt_metadata(value: str) -> str:
    return unescape(value)
