"""The public API of ``lmserde.tenant_keys`` (lazily loaded; see ``__init__.py``)."""

from .errors import KeyFileError as KeyFileError
from .errors import KeyringError as KeyringError
from .errors import UnknownKeyVersionError as UnknownKeyVersionError
from .errors import UnknownTenantError as UnknownTenantError
from .key_files import MASTER_KEY_BYTES as MASTER_KEY_BYTES
from .key_files import add_keyring_version as add_keyring_version
from .key_files import set_keyring_current as set_keyring_current
from .key_files import write_master_key as write_master_key
from .keyring import KEYRING_FORMAT_VERSION as KEYRING_FORMAT_VERSION
from .keyring import Keyring as Keyring
from .keyring import TenantKeys as TenantKeys
from .keyring import check_tenant_name as check_tenant_name
from .keyring import parse_keyring as parse_keyring
from .keyring_provider import KeyringKeyProvider as KeyringKeyProvider
from .master_key_provider import MASTER_KEY_VERSION as MASTER_KEY_VERSION
from .master_key_provider import MasterKeyProvider as MasterKeyProvider
from .provider import MAX_KEY_VERSION as MAX_KEY_VERSION
from .provider import KeyProvider as KeyProvider
from .secret_file import MAX_SECRET_FILE_BYTES as MAX_SECRET_FILE_BYTES
from .secret_file import MIN_MASTER_KEY_BYTES as MIN_MASTER_KEY_BYTES
from .secret_file import read_master_key_file as read_master_key_file
from .secret_file import read_secret_file as read_secret_file
