"""Redis key names of object keys: readable, injective, reversible and cluster-friendly.

A key is stored under ``<namespace>:<model>@<kv_rank hex>@<object_group_id hex>@<chunk_hash hex>``
with ``@<cache_salt>`` appended for a non-empty salt. Model, salt and namespace are
percent-encoded for ``%``, ``{``, ``}``, ``:``, ``@``, whitespace and control characters, so
no content can form a Redis Cluster hash tag (every key hashes on its whole name and keys spread
over all shards) and a name always parses back to exactly one :class:`~lmserde.ObjectKey`.
Lone surrogates (which ``ObjectKey`` admits) are kept with UTF-8's ``surrogatepass``.
"""

from __future__ import annotations

import re

from lmserde import ObjectKey

__all__ = ["RedisKeyNamer", "escape_component"]

_ESCAPED = re.compile(r"[%{}:@\s\x00-\x1f\x7f]")
_HEX = re.compile(r"[0-9a-f]+\Z")
_RANK = re.compile(r"-?[0-9a-f]+\Z")


def escape_component(text: str) -> str:
    """Percent-encode the characters that would be ambiguous inside a key name."""
    return _ESCAPED.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8", "surrogatepass")), text)


def _unescape(text: str) -> str:
    raw = bytearray()
    i = 0
    data = text.encode("utf-8", "surrogatepass")
    while i < len(data):
        if data[i] == 0x25:  # '%'
            digits = data[i + 1 : i + 3]
            if len(digits) != 2 or not re.fullmatch(rb"[0-9A-Fa-f]{2}", digits):
                raise ValueError(f"bad percent escape in redis key component {text!r}")
            raw.append(int(digits, 16))
            i += 3
        else:
            raw.append(data[i])
            i += 1
    return raw.decode("utf-8", "surrogatepass")


class RedisKeyNamer:
    """Maps object keys to Redis key names under one ``namespace`` and back.

    Two adapters with different namespaces never see each other's keys; the namespace may be empty
    (no prefix, no separator). :meth:`key_of` accepts exactly the names :meth:`name_of` gives, so
    the empty namespace is a namespace of its own: every name of a non-empty namespace holds the
    unescaped ``:`` after its prefix, which no name of the empty namespace holds (each of its
    components escapes ``:``), so the names of every namespace, the empty one included, stay as
    they always were and none is read as another namespace's key.
    """

    def __init__(self, namespace: str) -> None:
        if not isinstance(namespace, str):
            raise ValueError(f"redis namespace must be a str, got {type(namespace).__name__}")
        self.namespace = namespace
        self._prefix = (escape_component(namespace) + ":") if namespace else ""

    @property
    def prefix(self) -> str:
        """The text every key name of this namespace starts with."""
        return self._prefix

    def name_of(self, key: ObjectKey) -> bytes:
        """The Redis key name of ``key`` (UTF-8 bytes)."""
        parts = [escape_component(key.model_name), f"{key.kv_rank:x}", f"{key.object_group_id:x}",
                 key.chunk_hash.hex()]
        if key.cache_salt:
            parts.append(escape_component(key.cache_salt))
        return (self._prefix + "@".join(parts)).encode("utf-8", "surrogatepass")

    def scan_pattern(self) -> bytes:
        """A ``SCAN MATCH`` pattern selecting this namespace's keys (glob characters escaped)."""
        escaped = re.sub(r"([\\*?\[\]])", r"\\\1", self._prefix)
        return (escaped + "*").encode("utf-8", "surrogatepass")

    def key_of(self, name: bytes | str) -> ObjectKey:
        """Parse a key name back; ``ValueError`` if it is not a name of this namespace."""
        text = name.decode("utf-8", "surrogatepass") if isinstance(name, bytes) else name
        if not text.startswith(self._prefix):
            raise ValueError(f"redis key {text!r} is outside namespace {self.namespace!r}")
        parts = text[len(self._prefix):].split("@")
        if len(parts) not in (4, 5):
            raise ValueError(f"redis key {text!r} is not an lmserde object key name")
        model, rank, group, chunk = parts[:4]
        if len(parts) == 5 and not parts[4]:
            raise ValueError(f"redis key {text!r} has an empty cache salt field")
        if not (_RANK.match(rank) and _HEX.match(group) and (chunk == "" or _HEX.match(chunk))):
            raise ValueError(f"redis key {text!r} has malformed hex fields")
        if len(chunk) % 2:
            raise ValueError(f"redis key {text!r} has an odd-length chunk hash")
        salt = _unescape(parts[4]) if len(parts) == 5 else ""
        key = ObjectKey(bytes.fromhex(chunk), _unescape(model), int(rank, 16), int(group, 16),
                        salt)
        # only the exact name this namespace gives the key is one of its names: a raw ':' (which
        # every escaped component lacks) marks another namespace's name, whose prefix the empty
        # namespace would otherwise read as part of the model name
        if self.name_of(key) != text.encode("utf-8", "surrogatepass"):
            raise ValueError(f"redis key {text!r} is not a name of namespace {self.namespace!r}")
        return key
