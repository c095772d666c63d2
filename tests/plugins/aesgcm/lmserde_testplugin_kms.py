"""A third-party hook plugin for the tests: key provider ``test-kms``, an in-process fake KMS.

Installed as its own distribution (entry-point group ``lmserde.hooks``) by
test_aesgcm_provider_hook.py, exactly as a real KMS or Vault plugin would be.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from lmserde import hookimpl
from lmserde_aesgcm import KeyProvider, UnknownKeyVersionError, UnknownTenantError

#: Every (tenant, version) the fake KMS was asked for, to show the serde caches derived keys.
FETCHES: list[tuple[str, int]] = []


class FakeKmsKeyProvider(KeyProvider):
    """Serves hex secrets per tenant at one fixed version, counting fetches."""

    def __init__(self, secrets: Mapping[str, bytes], version: int) -> None:
        self._secrets = dict(secrets)
        self._version = version
        self._lock = threading.Lock()

    def current_version(self, tenant: str) -> int:
        if tenant not in self._secrets:
            raise UnknownTenantError(f"test-kms has no key for tenant {tenant!r}")
        return self._version

    def root_secret(self, tenant: str, version: int) -> bytes:
        if version != self._version:
            raise UnknownKeyVersionError(f"test-kms has no version {version}")
        with self._lock:
            FETCHES.append((tenant, version))
        return self._secrets[tenant]

    def describe(self) -> str:
        return f"FakeKmsKeyProvider tenants={len(self._secrets)} version={self._version}"


@hookimpl
def lmserde_aesgcm_key_provider(name: str, options: Mapping[str, Any]) -> KeyProvider | None:
    if name != "test-kms":
        return None
    unknown = set(options) - {"tenants", "version"}
    if unknown:
        raise ValueError(f"unknown test-kms option(s): {', '.join(sorted(unknown))}")
    tenants = options.get("tenants")
    if not isinstance(tenants, Mapping) or not tenants:
        raise ValueError("test-kms needs 'tenants': a mapping of tenant -> hex secret")
    secrets = {str(t): bytes.fromhex(str(h)) for t, h in tenants.items()}
    return FakeKmsKeyProvider(secrets, int(options.get("version", 1)))


@hookimpl
def lmserde_aesgcm_key_provider_names() -> list[str]:
    return ["test-kms"]
