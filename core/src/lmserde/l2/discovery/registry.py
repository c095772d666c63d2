"""L2 adapter types: programmatic registration plus lazily discovered ``lmcache.l2_adapter`` plugins.

Entry-point metadata is scanned once, on first use; an adapter module is imported only when a
spec names its type. A broken plugin is reported by name, distribution and version and never
affects the other types.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmserde.install_hints import L2_ADAPTER_GROUP
from lmserde.l2.discovery.spec import L2AdapterFactory, L2AdapterSpec
from lmserde.plugin_registry import PluginInfo
from lmserde.registries import L2_ADAPTERS

__all__ = [
    "L2_ADAPTER_GROUP",
    "L2_ADAPTERS",
    "L2AdapterInfo",
    "register_l2_adapter_type",
    "unregister_l2_adapter_type",
    "get_l2_adapter_spec",
    "get_registered_l2_adapter_types",
    "list_l2_adapters",
    "rescan_l2_adapter_plugins",
    "describe_l2_adapter_origin",
]

@dataclass(frozen=True)
class L2AdapterInfo(PluginInfo):
    """One adapter type as listed for users (whether it reports stored sizes, once loaded)."""

    reports_object_sizes: bool | None = None


def register_l2_adapter_type(
    name: str,
    factory: L2AdapterFactory | L2AdapterSpec,
    *,
    description: str = "",
    reports_object_sizes: bool | None = None,
) -> None:
    """Register an adapter type programmatically; a name already known raises ``ValueError``.

    ``factory`` is a :class:`L2AdapterSpec` or a ``factory(options, l1_manager)`` callable (which
    then receives the options untouched).
    """
    if isinstance(factory, L2AdapterSpec):
        spec = factory
    elif callable(factory):
        spec = L2AdapterSpec(factory=factory, description=description, options=None,
                             reports_object_sizes=reports_object_sizes)
    else:
        raise TypeError(f"L2 adapter factory for '{name}' must be callable or an L2AdapterSpec")
    L2_ADAPTERS.register(name, spec)


#: Remove a programmatically registered type (plugins cannot be unregistered).
unregister_l2_adapter_type = L2_ADAPTERS.unregister
#: Forget the entry-point scan; the next lookup reads installed metadata again.
rescan_l2_adapter_plugins = L2_ADAPTERS.rescan
#: Every known adapter type: discovered plugins (metadata order), then programmatic ones.
get_registered_l2_adapter_types = L2_ADAPTERS.names
#: The spec of an adapter type, importing its plugin if needed: ``ValueError`` for an unknown
#: type (with an install hint for the adapters of this repository),
#: :class:`~lmserde.PluginLoadError` (a ``ValueError``) when the plugin cannot be imported.
get_l2_adapter_spec = L2_ADAPTERS.get
#: Where a type comes from: ``"from distribution NAME VERSION"``, ``"registered
#: programmatically"`` or ``"of unknown origin"``.
describe_l2_adapter_origin = L2_ADAPTERS.origin


def list_l2_adapters(*, load: bool = False) -> list[L2AdapterInfo]:
    """Every known adapter type with its origin; with ``load`` each plugin is imported.

    Never raises for a broken plugin: its failure is reported in the entry.
    """
    return [L2AdapterInfo(e.name, e.distribution, e.version, e.status, e.description, e.error,
                          e.spec.reports_object_sizes if e.spec is not None else None)
            for e in L2_ADAPTERS.entries(load=load)]
