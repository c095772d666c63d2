"""The registry instances: one :class:`~lmserde.plugin_registry.SpecRegistry` per spec group.

Kept apart from :mod:`lmserde.registry` and :mod:`lmserde.l2.discovery.registry` (their public
faces) so that listing plugins imports neither torch nor the ``lmserde.l2`` package: both spec
types (:mod:`lmserde.spec`, :mod:`lmserde.adapter_spec`) are below this module.
"""

from __future__ import annotations

from typing import Any

from lmserde.adapter_spec import L2AdapterSpec
from lmserde.hung_calls import set_origin_resolver
from lmserde.install_hints import L2_ADAPTER_GROUP, SERDE_GROUP
from lmserde.plugin_registry import SpecRegistry
from lmserde.spec import SerdeSpec

__all__ = ["SERDES", "L2_ADAPTERS"]


def _description(spec: Any) -> str:
    return str(spec.description)


#: Serdes (``lmcache.serde``).
SERDES: SpecRegistry[SerdeSpec] = SpecRegistry(
    SERDE_GROUP, "serde", SerdeSpec.from_entry_object, _description)
set_origin_resolver(SERDES.origin)  # hung serde calls name their distribution

#: L2 adapter types (``lmcache.l2_adapter``).
L2_ADAPTERS: SpecRegistry[L2AdapterSpec] = SpecRegistry(
    L2_ADAPTER_GROUP, "L2 adapter", L2AdapterSpec.from_entry_object, _description)
