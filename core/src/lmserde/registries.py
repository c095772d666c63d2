"""The registry instances: one :class:`~lmserde.plugin_registry.SpecRegistry` per spec group.

Kept apart from :mod:`lmserde.registry` and :mod:`lmserde.l2.discovery.registry` (their public
faces) so that listing plugins imports neither torch nor the ``lmserde.l2`` package: the L2
adapter spec type is imported only when an adapter plugin is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lmserde.install_hints import L2_ADAPTER_GROUP, SERDE_GROUP
from lmserde.plugin_registry import SpecRegistry
from lmserde.spec import SerdeSpec

if TYPE_CHECKING:
    from lmserde.l2.discovery.spec import L2AdapterSpec

__all__ = ["SERDES", "L2_ADAPTERS"]


def _description(spec: Any) -> str:
    return str(spec.description)


def _coerce_l2_adapter_spec(obj: Any) -> L2AdapterSpec:
    from lmserde.l2.discovery.spec import L2AdapterSpec

    return L2AdapterSpec.from_entry_object(obj)


#: Serdes (``lmcache.serde``).
SERDES: SpecRegistry[SerdeSpec] = SpecRegistry(
    SERDE_GROUP, "serde", SerdeSpec.from_entry_object, _description)

#: L2 adapter types (``lmcache.l2_adapter``).
L2_ADAPTERS: SpecRegistry[L2AdapterSpec] = SpecRegistry(
    L2_ADAPTER_GROUP, "L2 adapter", _coerce_l2_adapter_spec, _description)
