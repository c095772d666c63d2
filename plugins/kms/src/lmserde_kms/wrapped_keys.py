"""Adding a tenant's next data key to a wrapped keyring: ``GenerateDataKey``, keep only the blob."""

from __future__ import annotations

import os
from typing import Any

from lmserde.tenant_keys import (
    WRAPPED_KEYRING_FORMAT_FIELD,
    Keyring,
    KeyringError,
    edit_keyring_file,
)

from lmserde_kms.client import KmsCaller
from lmserde_kms.provider import DATA_KEY_SPEC, KmsUnavailableError, encryption_context

__all__ = ["add_wrapped_version"]


def add_wrapped_version(path: str | os.PathLike[str], tenant: str, *, key_id: str,
                        caller: KmsCaller, activate: bool = True) -> int:
    """Ask KMS for a new data key of ``tenant`` under the master key ``key_id`` and add its
    wrapped form as the tenant's next version in the wrapped keyring ``path`` (created if
    missing; replaced atomically, mode 0600); return the version. The plaintext data key is
    dropped at once: it never reaches a file. ``KmsUnavailableError`` if KMS fails (the file is
    left as it was)."""

    def edit(keyring: Keyring) -> Keyring:
        if not keyring.wrapped:
            raise KeyringError(
                f"{path} is a keyring of plain secrets (key_provider: keyring); a wrapped data "
                "key does not belong in it. Use a separate wrapped keyring file.")
        held = keyring.tenants.get(tenant)
        version = 1 if held is None else max(held.secrets) + 1
        try:
            answer: Any = caller.call(("generate", tenant, version), lambda client: client
                                      .generate_data_key(
                                          KeyId=key_id, KeySpec=DATA_KEY_SPEC,
                                          EncryptionContext=encryption_context(tenant, version)))
            blob = answer["CiphertextBlob"]
        except Exception as exc:
            raise KmsUnavailableError(
                f"aws-kms: GenerateDataKey under {key_id!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return keyring.with_new_version(tenant, bytes(blob), activate=activate)

    updated = edit_keyring_file(path, edit, create=WRAPPED_KEYRING_FORMAT_FIELD)
    return max(updated.tenant(tenant).secrets)
