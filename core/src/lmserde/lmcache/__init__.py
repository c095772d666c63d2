"""Use lmserde serde plugins inside LMCache (imported only on demand; LMCache stays optional).

    from lmserde.lmcache import register_lmserde_serdes
    registration = register_lmserde_serdes()      # before LMCache builds its storage manager
    registration.lmcache_name("fp8")              # -> "lmserde_fp8" (LMCache has its own "fp8")

LMCache's built-in serdes keep their names; lmserde serdes are added under their own name, or
under ``lmserde_<name>`` when LMCache already has that name. Inside LMCache every lmserde serde
runs behind :class:`LMCacheProcessorBridge`, which converts keys and layouts, splits whole
objects into slots for multi serdes, and pads upper-bound output so it loads on any LMCache
adapter. Importing this package does not import LMCache; registering does.
"""

from lmserde.lmcache.conversion import (
    as_lmserde_key,
    as_lmserde_layout,
    as_slot_group,
    as_slot_layouts,
)
from lmserde.lmcache.processor_bridge import LMCacheProcessorBridge
from lmserde.lmcache.registration import (
    DEFAULT_PREFIX,
    LMCacheRegistration,
    lmcache_serde_registry,
    register_lmserde_serdes,
)

__all__ = [
    "DEFAULT_PREFIX",
    "LMCacheProcessorBridge",
    "LMCacheRegistration",
    "as_lmserde_key",
    "as_lmserde_layout",
    "as_slot_group",
    "as_slot_layouts",
    "lmcache_serde_registry",
    "register_lmserde_serdes",
]
