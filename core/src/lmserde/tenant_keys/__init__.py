"""Per-tenant key material shared by every keyed feature of lmserde.

One place for: reading secret files safely (:func:`read_secret_file`, :func:`read_master_key_file`),
the key-provider contract (:class:`KeyProvider`: root secrets per tenant and key version), the two
built-in providers (one master key for every tenant, :class:`MasterKeyProvider`; a versioned
per-tenant keyring, :class:`KeyringKeyProvider`), the keyring file format (:class:`Keyring`) and
creating and editing key files (:func:`write_master_key`, :func:`add_keyring_version`,
:func:`set_keyring_current`, :func:`retire_key_versions`, :func:`forget_tenant`), and watching a
keyring file so running processes pick up its changes (:class:`KeyringWatch`). A *tenant* is an
object key's ``cache_salt``.

Users: the ``aesgcm`` serde plugin (which re-exports these names) and the stored-object frame's
keyed authentication. Nothing here imports ``cryptography``: deriving keys from root secrets is the
user's business.

Its names are exported lazily, as in every lmserde package: listed once, in ``__init__.pyi``.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
