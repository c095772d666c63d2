"""File names of the ``fs`` adapter: one name per key, and the way back from a name to its key.

A key's *readable name* is
``<model>@<kv_rank hex>@<object_group_id hex>@<chunk_hash hex>[@<cache_salt>].data`` with model
and salt percent-encoded (every UTF-8 byte outside ``[A-Za-z0-9._-]``), so no key content adds a
path separator, ``..`` or a NUL. Readable names longer than :data:`MAX_READABLE_NAME` are stored
as ``h-<blake2b-256 of the readable name>.data``; such a *hashed name* cannot be reversed, so the
adapter keeps the readable name in a *sidecar* ``h-<same digest>.key`` next to it.

:func:`parse_readable_name` accepts exactly the names :func:`readable_name` produces (it rebuilds
the name from the parsed key and compares), so a foreign or hand-edited file never maps to a key.

:func:`lmcache_file_name` / :func:`parse_lmcache_name` are the names LMCache 0.5.6's ``fs`` adapter
uses (``naming: lmcache``, for a directory shared with LMCache processes):
``<model, "/" as "-SEP->@<kv_rank as 0x%08x>@<object_group_id hex>@<chunk_hash hex>[@<salt>].data``.
They are not escaped (a model name holding ``-SEP-``, or one that makes the name longer than the
file system allows, cannot be stored that way), which is why they are not the default.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from lmserde.keys import ObjectKey

__all__ = [
    "DATA_SUFFIX",
    "MAX_READABLE_NAME",
    "SIDECAR_SUFFIX",
    "hashed_name_of",
    "is_hashed_name",
    "key_file_name",
    "lmcache_file_name",
    "parse_lmcache_name",
    "parse_readable_name",
    "readable_name",
    "sidecar_name",
]

_SAFE_CHARS = frozenset(string.ascii_letters + string.digits + "-_.")
#: Longest readable file name; longer names are replaced by a digest of the readable name.
MAX_READABLE_NAME = 200
#: Suffix of every data file.
DATA_SUFFIX = ".data"
#: Suffix of the sidecar holding the readable name of a hashed data file.
SIDECAR_SUFFIX = ".key"
_HASHED = re.compile(r"h-[0-9a-f]{64}\.data")


def _escape(text: str) -> str:
    """Percent-encode every UTF-8 byte outside ``[A-Za-z0-9._-]`` (``@``, ``/``, ``%`` included).

    Lone surrogates (possible in a Python ``str``) are encoded like any other code point.
    """
    if all(ch in _SAFE_CHARS for ch in text):
        return text
    out = []
    for ch in text:
        if ch in _SAFE_CHARS:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def _unescape(text: str) -> str:
    """Inverse of :func:`_escape` (lenient: the caller checks the result re-encodes to ``text``)."""
    return unquote_to_bytes(text).decode("utf-8", "surrogatepass")


def readable_name(key: ObjectKey) -> str:
    """The reversible name of ``key`` (ASCII, no ``/``; may exceed :data:`MAX_READABLE_NAME`)."""
    parts = [_escape(key.model_name), f"{key.kv_rank:x}", f"{key.object_group_id:x}",
             key.chunk_hash.hex()]
    if key.cache_salt:
        parts.append(_escape(key.cache_salt))
    return "@".join(parts) + DATA_SUFFIX


def hashed_name_of(readable: str) -> str:
    """``h-<blake2b-256 of readable>.data``."""
    return "h-" + hashlib.blake2b(readable.encode("ascii"), digest_size=32).hexdigest() + DATA_SUFFIX


def key_file_name(key: ObjectKey) -> str:
    """The file name of ``key``: injective, a single path component, at most 255 bytes.

    The readable name when it has at most :data:`MAX_READABLE_NAME` characters, else its hashed
    name (see the module docstring).
    """
    name = readable_name(key)
    return name if len(name) <= MAX_READABLE_NAME else hashed_name_of(name)


def is_hashed_name(name: str) -> bool:
    """Whether ``name`` has the form of a hashed data-file name."""
    return _HASHED.fullmatch(name) is not None


def sidecar_name(hashed: str) -> str:
    """The sidecar of the hashed data-file name ``hashed``."""
    return hashed[: -len(DATA_SUFFIX)] + SIDECAR_SUFFIX


def _parse_name(name: str, *, model: Callable[[str], str], salt: Callable[[str], str],
                encode: Callable[[ObjectKey], str]) -> ObjectKey | None:
    """The key that ``encode`` names exactly ``name``, its model and salt parts read back with
    ``model`` and ``salt``; ``None`` for anything else (never raises)."""
    if not name.endswith(DATA_SUFFIX):
        return None
    parts = name[: -len(DATA_SUFFIX)].split("@")
    if len(parts) not in (4, 5):
        return None
    try:
        key = ObjectKey(
            chunk_hash=bytes.fromhex(parts[3]),
            model_name=model(parts[0]),
            kv_rank=int(parts[1], 16),
            object_group_id=int(parts[2], 16),
            cache_salt=salt(parts[4]) if len(parts) == 5 else "",
        )
        return key if encode(key) == name else None
    except (ValueError, TypeError, UnicodeDecodeError):
        return None


def parse_readable_name(name: str) -> ObjectKey | None:
    """The key whose readable name is exactly ``name``, else ``None`` (never raises)."""
    if not name.isascii():
        return None
    return _parse_name(name, model=_unescape, salt=_unescape, encode=readable_name)


_LMCACHE_SLASH = "-SEP-"


def lmcache_file_name(key: ObjectKey) -> str:
    """LMCache 0.5.6's ``fs`` file name of ``key``; ``ValueError`` when it cannot hold the key."""
    if _LMCACHE_SLASH in key.model_name:
        raise ValueError(f"model name {key.model_name!r} contains {_LMCACHE_SLASH!r}: LMCache's "
                         "file names cannot hold it")
    parts = [key.model_name.replace("/", _LMCACHE_SLASH), f"{key.kv_rank:#010x}",
             f"{key.object_group_id:x}", key.chunk_hash.hex()]
    if key.cache_salt:
        parts.append(key.cache_salt)
    name = "@".join(parts) + DATA_SUFFIX
    if name in (".", "..") or "\0" in name or len(name.encode("utf-8", "surrogatepass")) > 255:
        raise ValueError(f"key {key!r} has no LMCache file name (too long or not a path component)")
    return name


def parse_lmcache_name(name: str) -> ObjectKey | None:
    """The key whose LMCache file name is exactly ``name``, else ``None`` (never raises)."""
    return _parse_name(name, model=lambda part: part.replace(_LMCACHE_SLASH, "/"),
                       salt=str, encode=lmcache_file_name)
