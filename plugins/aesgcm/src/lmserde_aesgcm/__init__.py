"""lmserde-aesgcm: AES-GCM encryption at rest for KV-cache L2 tiers.

Frame version 1 is byte-identical to LMCache's aesgcm frame; frame version 2 binds each frame to
its object key with associated data and names the key version; frame version 3 (the default for
new writes) adds the key id of the key that wrote it, so that a reader holding other keys treats
the object as someone else's (a miss, kept) instead of as damaged. Keys
come from a master key file (``hkdf``), a per-tenant versioned keyring (``keyring``), or a key
provider another plugin contributes through the ``lmserde_aesgcm_key_provider`` hook.

The names below are loaded lazily (listed once, in ``__init__.pyi``): ``import lmserde_aesgcm``
and the hook module ``lmserde_aesgcm.cli`` import neither the serde nor ``cryptography``.
"""

from __future__ import annotations

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
