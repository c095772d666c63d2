"""lmserde-aesgcm: AES-GCM encryption at rest for KV-cache L2 tiers.

Frame version 1 is byte-identical to LMCache's aesgcm frame; frame version 2 (the default for new
writes) binds each frame to its object key with associated data and names the key version. Keys
come from a master key file (``hkdf``), a per-tenant versioned keyring (``keyring``), or a key
provider another plugin contributes through the ``lmserde_aesgcm_key_provider`` hook.
"""

from __future__ import annotations

from lmserde_aesgcm.cipher_cache import CipherCache
from lmserde_aesgcm.errors import (
    FrameAuthenticationError,
    FrameFormatError,
    KeyFileError,
    KeyProviderError,
    KeyringError,
    UnknownKeyVersionError,
    UnknownTenantError,
)
from lmserde_aesgcm.hkdf_provider import HKDF_KEY_VERSION, HkdfKeyProvider
from lmserde_aesgcm.key_derivation import INFO_PREFIX, derive_key
from lmserde_aesgcm.key_file import read_master_key_file
from lmserde_aesgcm.key_provider import KeyProvider
from lmserde_aesgcm.keygen import add_keyring_version, set_keyring_current, write_master_key
from lmserde_aesgcm.keyring import Keyring, TenantKeys, parse_keyring
from lmserde_aesgcm.keyring_provider import KeyringKeyProvider
from lmserde_aesgcm.provider_hooks import KeyProviderHookSpecs, provider_names
from lmserde_aesgcm.serde import (
    DEFAULT_FRAME_VERSION,
    AesGcmDeserializer,
    AesGcmSerializer,
    frame_overhead,
)
from lmserde_aesgcm.spec import AESGCM_SPEC, OPTIONS, build_key_provider, create_aesgcm_processor

__version__ = "0.1.0"

__all__ = [
    "AESGCM_SPEC",
    "OPTIONS",
    "DEFAULT_FRAME_VERSION",
    "AesGcmSerializer",
    "AesGcmDeserializer",
    "frame_overhead",
    "create_aesgcm_processor",
    "build_key_provider",
    "KeyProvider",
    "HkdfKeyProvider",
    "HKDF_KEY_VERSION",
    "KeyringKeyProvider",
    "Keyring",
    "TenantKeys",
    "parse_keyring",
    "CipherCache",
    "derive_key",
    "INFO_PREFIX",
    "read_master_key_file",
    "write_master_key",
    "add_keyring_version",
    "set_keyring_current",
    "KeyProviderHookSpecs",
    "provider_names",
    "FrameAuthenticationError",
    "FrameFormatError",
    "KeyFileError",
    "KeyProviderError",
    "KeyringError",
    "UnknownKeyVersionError",
    "UnknownTenantError",
    "__version__",
]
