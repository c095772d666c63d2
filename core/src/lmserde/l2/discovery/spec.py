"""``L2AdapterSpec``: what an adapter type publishes under the ``lmcache.l2_adapter`` group.

The class lives in :mod:`lmserde.adapter_spec` (below the registry instances, which coerce entry
points into it); this module re-exports it with the factory type spelled out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lmserde.adapter_spec import L2AdapterSpec

if TYPE_CHECKING:
    from lmserde.l1.manager import L1Manager
    from lmserde.l2.contract.interface import L2AdapterInterface

__all__ = ["L2AdapterSpec", "L2AdapterFactory"]

L2AdapterFactory = Callable[[dict[str, Any], "L1Manager | None"], "L2AdapterInterface"]
