"""Key material this serde shares with the rest of lmserde, re-exported from :mod:`lmserde.tenant_keys`.

Key files, keyrings and key providers moved to the core so that every keyed feature (this serde,
the stored-object frame's authentication) reads the same files the same way; their names stay
importable from ``lmserde_aesgcm`` through this module.
"""

from __future__ import annotations

from lmserde.tenant_keys import (
    KeyProvider,
    Keyring,
    KeyringKeyProvider,
    TenantKeys,
    add_keyring_version,
    parse_keyring,
    read_master_key_file,
    set_keyring_current,
    write_master_key,
)

__all__ = [
    "Keyring",
    "KeyringKeyProvider",
    "KeyProvider",
    "TenantKeys",
    "add_keyring_version",
    "parse_keyring",
    "read_master_key_file",
    "set_keyring_current",
    "write_master_key",
]
