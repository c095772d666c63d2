"""AEAD objects and key ids cached per derived key, shared by a serializer and its deserializer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde.tenant_keys import KeyProvider

from lmserde_aesgcm.errors import KeyProviderError
from lmserde_aesgcm.frame_v2 import MAX_KEY_VERSION
from lmserde_aesgcm.key_derivation import derive_key
from lmserde_aesgcm.key_identity import key_id

__all__ = ["DEFAULT_CAPACITY", "CipherEntry", "CipherCache"]

DEFAULT_CAPACITY = 4096

_CacheKey = tuple[str, int, int]


@dataclass(frozen=True)
class CipherEntry:
    """The AEAD of one derived key and the key id of the root secret it came from."""

    aead: AESGCM
    key_id: bytes  # key_identity.key_id(root secret, tenant, version): public, one-way

    def __repr__(self) -> str:
        return f"CipherEntry(key_id={self.key_id.hex()})"


class CipherCache:
    """``(tenant, key version, key length) -> (AESGCM, key id)``, least recently used evicted
    first.

    The provider is asked for a root secret only on a miss; the AES key is derived with HKDF
    (see ``key_derivation``) and the key id computed (``key_identity``) once, with it, so
    neither costs anything per frame. Thread-safe; the provider is called outside the lock.

    Every lookup compares the provider's :meth:`~lmserde.tenant_keys.KeyProvider.key_generation`
    with the one the entries were derived under and drops them all when it changed (a reloaded
    keyring, an expired KMS entry): a forgotten tenant or retired version stops decrypting here
    as soon as the provider stops serving it. An entry derived while the generation changed is
    used for that one frame and not kept.
    """

    def __init__(self, provider: KeyProvider, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"cipher cache capacity must be >= 1, got {capacity}")
        self._provider = provider
        self._capacity = capacity
        self._lock = threading.Lock()
        self._entries: OrderedDict[_CacheKey, CipherEntry] = OrderedDict()
        self._generation = provider.key_generation()

    @property
    def provider(self) -> KeyProvider:
        return self._provider

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"<CipherCache provider={self._provider.describe()} entries={len(self)}>"

    def current(self, tenant: str) -> int:
        """The provider's current key version for ``tenant``, range-checked."""
        version = self._provider.current_version(tenant)
        if isinstance(version, bool) or not isinstance(version, int) or not (
            0 <= version <= MAX_KEY_VERSION
        ):
            raise KeyProviderError(
                f"key provider {self._provider.describe()} returned key version {version!r} "
                f"for tenant {tenant!r}; versions are integers in [0, {MAX_KEY_VERSION}]"
            )
        return version

    def get(self, tenant: str, version: int, key_len: int) -> AESGCM:
        """The AEAD for ``tenant`` at ``version`` with a ``key_len``-byte key."""
        return self.entry(tenant, version, key_len).aead

    def entry(self, tenant: str, version: int, key_len: int) -> CipherEntry:
        """The AEAD and key id for ``tenant`` at ``version`` with a ``key_len``-byte key."""
        cache_key = (tenant, version, key_len)
        generation = self._provider.key_generation()
        with self._lock:
            if generation != self._generation:
                self._entries.clear()
                self._generation = generation
            entry = self._entries.get(cache_key)
            if entry is not None:
                self._entries.move_to_end(cache_key)
                return entry
        secret = self._provider.root_secret(tenant, version)
        if not isinstance(secret, bytes | bytearray) or len(secret) < 16:
            raise KeyProviderError(
                f"key provider {self._provider.describe()} returned an unusable root secret for "
                f"tenant {tenant!r} version {version} (need at least 16 bytes)"
            )
        secret = bytes(secret)
        entry = CipherEntry(AESGCM(derive_key(secret, tenant, key_len)),
                            key_id(secret, tenant, version))
        with self._lock:
            if self._generation != generation:  # the keys changed meanwhile: do not keep it
                return entry
            self._entries[cache_key] = entry
            self._entries.move_to_end(cache_key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return entry
