"""The serde registry: programmatic factories plus lazily discovered ``lmcache.serde`` plugins.

Metadata is scanned once, on first use; a plugin module is imported only when a config names its
type (or when asked for details). One broken plugin never affects the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.install_hints import SERDE_GROUP
from lmserde.plugin_discovery import PluginLoadError
from lmserde.plugin_registry import PluginInfo
from lmserde.registries import SERDES
from lmserde.spec import SerdeFactory, SerdeSizeContract, SerdeSpec

if TYPE_CHECKING:
    from lmserde.base import SerdeConfig, SerdeProcessor

__all__ = [
    "SERDE_GROUP",
    "SERDES",
    "SerdeInfo",
    "register_serde_factory",
    "unregister_serde_factory",
    "create_serde_processor",
    "get_registered_serde_types",
    "get_serde_size_contract",
    "get_serde_spec",
    "list_serdes",
    "rescan_serde_plugins",
    "PluginLoadError",
]

@dataclass(frozen=True)
class SerdeInfo(PluginInfo):
    """What ``lmserde plugins`` lists for one serde type (its size contract and lossiness once
    loaded, or for core's own serdes)."""

    size_contract: str | None = None
    lossy: bool | None = None
    #: :meth:`SerdeSpec.describe_native` when the plugin was loaded (``None`` otherwise, and for
    #: serdes without native code).
    native: dict[str, Any] | None = None


def register_serde_factory(
    name: str,
    factory: SerdeFactory | SerdeSpec,
    *,
    size_contract: SerdeSizeContract = SerdeSizeContract.UPPER_BOUND,
) -> None:
    """Register a serde programmatically; a name already known raises ``ValueError``.

    ``factory`` is an upstream-style ``factory(kwargs) -> SerdeProcessor`` (it receives the config
    kwargs untouched) or a :class:`SerdeSpec`.
    """
    if isinstance(factory, SerdeSpec):
        spec = factory
    else:
        if not callable(factory):
            raise TypeError(f"serde factory for '{name}' must be callable or a SerdeSpec")
        spec = SerdeSpec.from_entry_object(factory)
        spec = SerdeSpec(factory=spec.factory, description=spec.description, options=None,
                         size_contract=size_contract, lossy=spec.lossy)
    SERDES.register(name, spec)


#: Remove a programmatically registered serde (plugins cannot be unregistered).
unregister_serde_factory = SERDES.unregister
#: Forget the entry-point scan; the next lookup reads installed metadata again.
rescan_serde_plugins = SERDES.rescan
#: Every known serde type: discovered plugins (metadata order), then programmatic ones.
get_registered_serde_types = SERDES.names
#: The spec of a serde type, importing its plugin if needed: ``ValueError`` for an unknown type
#: (with an install hint for the serdes of this repository), :class:`PluginLoadError` (a
#: ``ValueError``) when the plugin cannot be imported.
get_serde_spec = SERDES.get


def get_serde_size_contract(serde_type: str) -> SerdeSizeContract:
    """The size contract ``serde_type`` declares (``UPPER_BOUND`` unless it says ``EXACT``)."""
    return get_serde_spec(serde_type).size_contract


def create_serde_processor(config: SerdeConfig | Mapping[str, Any]) -> SerdeProcessor:
    """Build the processor a config names; one call per wrapped adapter.

    ``config`` is a :class:`SerdeConfig` or a dict with ``type`` and the options. Declared options
    are validated first (``ValueError`` naming an unknown option and the accepted ones); a factory
    that raises anything (``SystemExit`` and every other ``BaseException``; only a
    ``KeyboardInterrupt`` on the main thread propagates) is reported as a
    :class:`PluginLoadError` naming the plugin, its distribution and version, exception chained.
    The processor gets its identity config (:meth:`~lmserde.SerdeProcessor.get_config`):
    type, the spec's ``format_version`` and the identity options.
    """
    from lmserde.serde_build import resolve_serde

    return resolve_serde(config).build_processor()


def list_serdes(*, load: bool = False) -> list[SerdeInfo]:
    """Every known serde with its origin and status; with ``load`` each plugin is imported.

    Never raises for a broken plugin: its failure is reported in the entry.
    """
    infos: list[SerdeInfo] = []
    for entry in SERDES.entries(load=load):
        contract, lossy, native = None, None, None
        if entry.spec is not None:
            contract, lossy = entry.spec.size_contract.value, entry.spec.lossy
            native = entry.spec.describe_native()
        elif entry.builtin is not None:
            contract, lossy = entry.builtin.size_contract, entry.builtin.lossy
        infos.append(SerdeInfo(entry.name, entry.distribution, entry.version, entry.status,
                               entry.description, entry.error, contract, lossy, native))
    return infos
