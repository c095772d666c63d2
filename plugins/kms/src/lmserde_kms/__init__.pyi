"""The public API of ``lmserde_kms`` (lazily loaded; see ``__init__.py``)."""

from .client import KmsCaller as KmsCaller
from .client import KmsDeadlineError as KmsDeadlineError
from .client import build_client as build_client
from .hooks import PROVIDER_NAME as PROVIDER_NAME
from .hooks import build_provider as build_provider
from .provider import DATA_KEY_SPEC as DATA_KEY_SPEC
from .provider import AwsKmsKeyProvider as AwsKmsKeyProvider
from .provider import KmsUnavailableError as KmsUnavailableError
from .provider import encryption_context as encryption_context
from .settings import KmsSettings as KmsSettings
from .settings import parse_settings as parse_settings
from .wrapped_keys import add_wrapped_version as add_wrapped_version
