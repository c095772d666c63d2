"""lmserde-kms: the ``aws-kms`` key provider of the aesgcm serde (envelope encryption with AWS KMS
or any KMS-compatible service).

Per-tenant data keys come from ``GenerateDataKey`` under a customer master key and are stored only
wrapped (a wrapped keyring file); they are unwrapped with ``Decrypt`` and kept in memory for a
TTL. Configured as ``{"type": "aesgcm", "key_provider": "aws-kms", "key_provider_options":
{"key_id": "alias/kv-cache", "wrapped_keyring_path": "/etc/lmcache/wrapped.json"}}``.

The names below are loaded lazily (listed once, in ``__init__.pyi``): the hook module
``lmserde_kms.hooks`` imports neither boto3 nor the provider.
"""

from __future__ import annotations

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
