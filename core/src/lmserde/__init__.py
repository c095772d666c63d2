"""lmserde: pluggable KV-cache byte transforms (serdes) for LLM serving.

The public API is re-exported here lazily, so that ``import lmserde`` (and ``lmserde plugins``)
does not import torch. The names and the module each comes from are listed once, in
``__init__.pyi``; ``lazy_loader`` reads that stub at import time and imports a name's module on
first access, and type checkers read the same stub. Plugins use only these names and the public
submodules ``lmserde.testing``, ``lmserde.l1``, ``lmserde.l2`` and ``lmserde.bench``.
"""

from __future__ import annotations

import lazy_loader

from lmserde._version import __version__

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
