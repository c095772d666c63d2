"""The ``aws-kms`` key provider: envelope encryption with per-tenant data keys wrapped by KMS.

Each tenant's root secrets are KMS *data keys*: 32 random bytes made by ``GenerateDataKey`` under
a customer master key (``lmserde kms rotate`` asks for one), of which only the wrapped form (the
``CiphertextBlob``) is ever stored, in a *wrapped keyring* file: the keyring layout of
:mod:`lmserde.tenant_keys` under ``"lmserde_wrapped_keyring": 1``, versions and all. Each data key
is wrapped under the encryption context ``{"lmserde_tenant": TENANT, "lmserde_key_version": N}``,
so a wrapped key copied to another tenant or version does not unwrap.

* ``current_version`` reads the wrapped keyring only (no network): a tenant it does not list is
  ``UnknownTenantError``, as with a plain keyring.
* ``root_secret`` unwraps with ``Decrypt`` (naming the master key, so a blob of another key is
  refused) and keeps the plaintext in memory for ``cache_ttl_s`` seconds; then it asks KMS
  again, so disabling the master key or revoking the grant takes effect within the TTL. Unwraps
  run on the provider's own threads with an overall deadline (``request_deadline_s``); the
  caller (the aesgcm serde's worker thread, never the thread that called the L2 adapter) gets an
  error when it passes.
* A KMS that cannot be reached, refuses, or answers garbage raises :class:`KmsUnavailableError`
  (not a ``ValueError``): the aesgcm serde turns it into an outage: stores fail, loads miss, and
  every object is kept. Nothing here ever deletes anything.
* :meth:`key_generation` changes when the wrapped keyring file changes (``lmserde tenant
  forget``, ``lmserde keys retire``, ``lmserde kms rotate``, re-read every
  ``reload_interval_s``) and when cached keys expire, so the serde's derived keys never outlive
  either.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from lmserde.tenant_keys import (
    WRAPPED_KEYRING_FORMAT_FIELD,
    KeyProvider,
    KeyringWatch,
)

from lmserde_kms.client import KmsCaller
from lmserde_kms.settings import KmsSettings

__all__ = ["KmsUnavailableError", "AwsKmsKeyProvider", "encryption_context", "DATA_KEY_SPEC"]

#: The data keys asked of ``GenerateDataKey``: 32 random bytes.
DATA_KEY_SPEC = "AES_256"


class KmsUnavailableError(RuntimeError):
    """KMS could not unwrap a data key: unreachable, too slow, refused (a disabled or deleted
    master key, missing permission, a blob it does not accept) or a garbled answer. Never a
    ``ValueError``: the bytes of the objects are not in question."""


def encryption_context(tenant: str, version: int) -> dict[str, str]:
    """The KMS encryption context a tenant's data key at ``version`` is wrapped under."""
    return {"lmserde_tenant": tenant, "lmserde_key_version": str(version)}


class AwsKmsKeyProvider(KeyProvider):
    """Root secrets are KMS data keys from a wrapped keyring; see the module docstring.

    ``caller`` runs the KMS calls (:class:`~lmserde_kms.client.KmsCaller` around a boto3 KMS
    client); ``clock`` is ``time.monotonic`` (tests may pass another).
    """

    def __init__(self, settings: KmsSettings, caller: KmsCaller, *,
                 clock: Any = time.monotonic) -> None:
        self._settings = settings
        self._caller = caller
        self._clock = clock
        self._watch = KeyringWatch(
            settings.wrapped_keyring_path, reload_interval_s=settings.reload_interval_s,
            formats=(WRAPPED_KEYRING_FORMAT_FIELD,),
            allow_insecure_permissions=settings.allow_insecure_key_permissions)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int, bytes], tuple[bytes, float]] = {}
        self._next_expiry = float("inf")
        self._expirations = 0
        self.decrypt_calls = 0  # KMS Decrypt requests made (observability; tests count them)

    @property
    def settings(self) -> KmsSettings:
        """The options this provider was built from."""
        return self._settings

    def current_version(self, tenant: str) -> int:
        """The tenant's current version in the wrapped keyring (no network)."""
        return self._watch.current().tenant(tenant).current

    def root_secret(self, tenant: str, version: int) -> bytes:
        """The data key of ``tenant`` at ``version``: from the cache while fresh, else unwrapped
        by KMS (``KmsUnavailableError`` when that fails or passes its deadline)."""
        blob = self._watch.current().secret(tenant, version)
        entry_key = (tenant, version, blob)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(entry_key)
            if cached is not None and cached[1] > now:
                return cached[0]
        plaintext = self._unwrap(tenant, version, blob)
        expires = self._clock() + self._settings.cache_ttl_s
        with self._lock:
            self._cache[entry_key] = (plaintext, expires)
            self._next_expiry = min(self._next_expiry, expires)
        return plaintext

    def _unwrap(self, tenant: str, version: int, blob: bytes) -> bytes:
        def decrypt(client: Any) -> Any:
            with self._lock:
                self.decrypt_calls += 1
            return client.decrypt(
                CiphertextBlob=blob, KeyId=self._settings.key_id,
                EncryptionContext=encryption_context(tenant, version))

        try:
            answer = self._caller.call((tenant, version, blob), decrypt)
            plaintext = answer["Plaintext"]
        except Exception as exc:
            raise KmsUnavailableError(
                f"aws-kms: cannot unwrap the data key of tenant {tenant!r} version {version} "
                f"under {self._settings.key_id!r}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(plaintext, bytes) or len(plaintext) < 16:
            raise KmsUnavailableError(
                f"aws-kms: KMS answered an unusable data key for tenant {tenant!r} version "
                f"{version} ({type(plaintext).__name__})")
        return plaintext

    def key_generation(self) -> int:
        """Changes when the wrapped keyring changes or cached data keys expire."""
        self._watch.current()  # a due file check starts here
        if self._clock() >= self._next_expiry:
            self._expire()
        return self._watch.generation + self._expirations

    def _expire(self) -> None:
        now = self._clock()
        with self._lock:
            if now < self._next_expiry:
                return
            self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
            self._next_expiry = min((v[1] for v in self._cache.values()), default=float("inf"))
            self._expirations += 1

    def describe(self) -> str:
        """Master key, wrapped keyring and endpoint (never a key)."""
        endpoint = self._settings.endpoint_url or "default endpoint"
        stale = " (wrapped keyring reload failing)" if self._watch.reload_error else ""
        return (f"AwsKmsKeyProvider key_id={self._settings.key_id!r} "
                f"wrapped_keyring={self._settings.wrapped_keyring_path!r} "
                f"endpoint={endpoint!r}{stale}")

    def close(self) -> None:
        """Stop the KMS threads and forget every unwrapped key."""
        self._caller.close()
        with self._lock:
            self._cache.clear()
