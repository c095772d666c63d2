"""The public API of ``lmserde_aesgcm``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub``: each name is imported from its
module on first access, so importing a submodule (the CLI hook module ``lmserde_aesgcm.cli``,
which ``lmserde`` loads as a hook plugin) does not import the serde or ``cryptography``. Type
checkers read the same file.
"""

from .cipher_cache import CipherCache as CipherCache
from .cipher_cache import CipherEntry as CipherEntry
from .errors import ForeignKeyError as ForeignKeyError
from .errors import FrameAuthenticationError as FrameAuthenticationError
from .errors import FrameFormatError as FrameFormatError
from .errors import KeyFileError as KeyFileError
from .errors import KeyMismatchError as KeyMismatchError
from .errors import KeyProviderError as KeyProviderError
from .errors import KeyringError as KeyringError
from .errors import KeyUnavailableError as KeyUnavailableError
from .errors import UnattributedAuthenticationError as UnattributedAuthenticationError
from .errors import UnknownKeyVersionError as UnknownKeyVersionError
from .errors import UnknownTenantError as UnknownTenantError
from .errors import WithdrawnKeyError as WithdrawnKeyError
from .hkdf_provider import HKDF_KEY_VERSION as HKDF_KEY_VERSION
from .hkdf_provider import HkdfKeyProvider as HkdfKeyProvider
from .key_derivation import INFO_PREFIX as INFO_PREFIX
from .key_derivation import derive_key as derive_key
from .key_identity import KEY_ID_LEN as KEY_ID_LEN
from .key_identity import key_id as key_id
from .provider_hooks import KeyProviderHookSpecs as KeyProviderHookSpecs
from .provider_hooks import provider_names as provider_names
from .serde import DEFAULT_FRAME_VERSION as DEFAULT_FRAME_VERSION
from .serde import AesGcmDeserializer as AesGcmDeserializer
from .serde import AesGcmSerializer as AesGcmSerializer
from .serde import frame_overhead as frame_overhead
from .shared_keys import KeyProvider as KeyProvider
from .shared_keys import Keyring as Keyring
from .shared_keys import KeyringKeyProvider as KeyringKeyProvider
from .shared_keys import TenantKeys as TenantKeys
from .shared_keys import add_keyring_version as add_keyring_version
from .shared_keys import parse_keyring as parse_keyring
from .shared_keys import read_master_key_file as read_master_key_file
from .shared_keys import set_keyring_current as set_keyring_current
from .shared_keys import write_master_key as write_master_key
from .spec import AESGCM_SPEC as AESGCM_SPEC
from .spec import OPTIONS as OPTIONS
from .spec import build_key_provider as build_key_provider
from .spec import create_aesgcm_processor as create_aesgcm_processor
