"""Hidden object names (adapter option ``hide_names: true``): the storage sees keyed hashes only.

An object key's fields (model, rank, group, chunk hash, tenant) make up an object's name on every
adapter (``fs`` file names, redis and s3 keys), so whoever can list the storage learns every
tenant, which prefixes tenants share, and can confirm a guessed prompt by hashing it. With
``hide_names`` the serde wrapper stores each object under a *hidden key*::

    hidden chunk hash = HMAC-SHA256(names_key, "lmserde hidden name v1" || key bytes)
    hidden key        = ObjectKey(hidden chunk hash, "lmserde-hidden", 0, 0, "")
    names_key         = HKDF-SHA256(ikm = the frame key file, salt = none,
                                    info = "lmserde hidden names v1", length = 32)

(key bytes: every field of the real key, length-prefixed; ``stored_frame.key_bytes``). The name is
the same on every host holding the same frame key and reveals nothing without it. The real key
travels inside the authenticated frame as an encrypted *key record* (:meth:`NameHider.seal_record`:
AES-256-GCM under a per-object key ``HMAC-SHA256(names_key, "lmserde key record v1" || object
salt)``, the hidden chunk hash as associated data), covered by the frame's MAC too, so that key
holders can still list the tier (``list_l2_keys``: names this process stored or loaded are
remembered, the others are read back from their records), scrub it, and hear eviction events.

The names key comes from a single frame key file: a keyring has no tenant-independent secret to
hash names with, so ``hide_names`` with ``frame_keyring_path`` is refused at config time.
"""

from __future__ import annotations

import hmac
import struct
import threading
from collections import OrderedDict

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lmserde.keys import ObjectKey
from lmserde.l2.serde.stored_frame import key_bytes

__all__ = ["HIDDEN_MODEL_NAME", "NameHider", "names_key_from_root", "parse_key_bytes"]

HIDDEN_MODEL_NAME = "lmserde-hidden"
_NAMES_INFO = b"lmserde hidden names v1"
_NAME_LABEL = b"lmserde hidden name v1"
_RECORD_LABEL = b"lmserde key record v1"
_NONCE = bytes(12)
_HIDDEN_HASH_BYTES = 32
#: How many hidden -> real names one process remembers (older ones are read back from records).
_REMEMBERED = 1 << 20


def names_key_from_root(root: bytes) -> bytes:
    """The 32-byte names key of a frame key file's contents."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_NAMES_INFO).derive(root)


def parse_key_bytes(data: bytes) -> ObjectKey:
    """Inverse of :func:`~lmserde.l2.serde.stored_frame.key_bytes`; ``ValueError`` for bytes
    that are not one key's encoding."""
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise ValueError("key record ends inside a field")
        out = data[pos:pos + n]
        pos += n
        return out

    def sized() -> bytes:
        (n,) = struct.unpack("<I", take(4))
        return take(n)

    chunk_hash = sized()
    model = sized().decode("utf-8", "surrogatepass")
    kv_rank, group = struct.unpack("<qQ", take(16))
    salt = sized().decode("utf-8", "surrogatepass")
    if pos != len(data):
        raise ValueError("bytes after the key record")
    return ObjectKey(chunk_hash, model, kv_rank, group, salt)


class NameHider:
    """Hidden keys and key records under one names key (see the module docstring). Remembers
    the hidden names it made or read (bounded), so that listings and listener events of keys
    this process knows need no storage read. Thread-safe."""

    def __init__(self, names_key: bytes) -> None:
        if len(names_key) != 32:
            raise ValueError("the names key must be 32 bytes")
        self._key = bytes(names_key)
        self._real: OrderedDict[ObjectKey, ObjectKey] = OrderedDict()
        self._lock = threading.Lock()

    def hidden(self, key: ObjectKey) -> ObjectKey:
        """The hidden key ``key`` is stored under (remembered for :meth:`real`)."""
        digest = hmac.digest(self._key, _NAME_LABEL + key_bytes(key), "sha256")
        hidden = ObjectKey(digest[:_HIDDEN_HASH_BYTES], HIDDEN_MODEL_NAME, 0, 0, "")
        self._remember(hidden, key)
        return hidden

    def hide(self, keys: list[ObjectKey]) -> list[ObjectKey]:
        """:meth:`hidden` of each key."""
        return [self.hidden(key) for key in keys]

    def real(self, hidden: ObjectKey) -> ObjectKey | None:
        """The real key of ``hidden`` when this process made or read it, else ``None``."""
        with self._lock:
            return self._real.get(hidden)

    def _remember(self, hidden: ObjectKey, key: ObjectKey) -> None:
        with self._lock:
            self._real[hidden] = key
            self._real.move_to_end(hidden)
            while len(self._real) > _REMEMBERED:
                self._real.popitem(last=False)

    def _record_cipher(self, salt: bytes) -> AESGCM:
        return AESGCM(hmac.digest(self._key, _RECORD_LABEL + salt, "sha256"))

    def seal_record(self, key: ObjectKey, salt: bytes) -> bytes:
        """The encrypted key record of ``key`` for the object whose frame carries ``salt``."""
        return self._record_cipher(salt).encrypt(_NONCE, key_bytes(key),
                                                 self.hidden(key).chunk_hash)

    def open_record(self, record: bytes, salt: bytes, hidden: ObjectKey) -> ObjectKey:
        """The real key in ``record``, which must be stored under ``hidden``; ``ValueError``
        when it does not decrypt under this names key or names another key."""
        try:
            plain = self._record_cipher(salt).decrypt(_NONCE, record, hidden.chunk_hash)
        except InvalidTag:
            raise ValueError("the key record does not decrypt under this names key") from None
        key = parse_key_bytes(plain)
        if self.hidden(key) != hidden:
            raise ValueError("the key record names another key than the name it is stored under")
        return key
