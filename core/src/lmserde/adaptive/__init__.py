"""The ``auto`` serde's decision policy: per object, the candidate serde with the least expected
store + load time on this adapter, from online measurements (``docs/adaptive.md``).

Its names are exported lazily, as in every lmserde package: listed once, in ``__init__.pyi``,
which ``lazy_loader`` reads at import (a name's module is imported on first access) and type
checkers read too.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
