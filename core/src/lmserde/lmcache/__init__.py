"""Use lmserde serde plugins inside LMCache (imported only on demand; LMCache stays optional).

    from lmserde.lmcache import register_lmserde_serdes
    registration = register_lmserde_serdes()      # before LMCache builds its storage manager
    registration.lmcache_name("fp8")              # -> "lmserde_fp8" (LMCache has its own "fp8")

LMCache's built-in serdes keep their names; lmserde serdes are added under their own name, or
under ``lmserde_<name>`` when LMCache already has that name. Inside LMCache every lmserde serde
runs behind :class:`LMCacheProcessorBridge`, which converts keys and layouts, splits whole
objects into slots for multi serdes, and pads upper-bound output so it loads on any LMCache
adapter. Importing this package does not import LMCache; registering does.

Its names are exported lazily, as in every lmserde package: listed once, in
``__init__.pyi``, which ``lazy_loader`` reads at import (a name's module is imported on first
access) and type checkers read too.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
