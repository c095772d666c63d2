"""The L2 tier: adapter contract, built-in adapters, the serde wrapper and adapter specs.

``create_l2_adapter({"type": "fs", "base_path": "/data/kv", "serde": {"type": "fp8"}}, l1)``
builds an adapter by name (types are discovered from the ``lmcache.l2_adapter`` entry-point group)
and wraps it in a :class:`SerdeL2AdapterWrapper` when a ``serde`` (or a list of serdes, a chain)
is given, or in a :class:`SplitTierL2Adapter` for a serde whose spec declares split-tier
placement (``asym_k16_v8_v_only``: K stays in L1, V goes to L2).

Its names are exported lazily, as in every lmserde package: listed once, in
``__init__.pyi``, which ``lazy_loader`` reads at import (a name's module is imported on first
access) and type checkers read too.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
