"""L2 adapter types: programmatic registration plus lazily discovered ``lmcache.l2_adapter`` plugins.

Entry-point metadata is scanned once, on first use; an adapter module is imported only when a
spec names its type. A broken plugin is reported by name, distribution and version and never
affects the other types.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lmserde.l2.adapter_spec import L2AdapterFactory, L2AdapterSpec
from lmserde.plugin_discovery import EntryPointGroup, PluginLoadError

__all__ = [
    "L2_ADAPTER_GROUP",
    "L2AdapterInfo",
    "register_l2_adapter_type",
    "unregister_l2_adapter_type",
    "get_l2_adapter_spec",
    "get_registered_l2_adapter_types",
    "list_l2_adapters",
    "rescan_l2_adapter_plugins",
    "describe_l2_adapter_origin",
]

L2_ADAPTER_GROUP = "lmcache.l2_adapter"

_lock = threading.RLock()
_group = EntryPointGroup(L2_ADAPTER_GROUP)
_programmatic: dict[str, L2AdapterSpec] = {}


@dataclass(frozen=True)
class L2AdapterInfo:
    """One adapter type as listed for users."""

    name: str
    distribution: str
    version: str
    status: str
    description: str
    reports_object_sizes: bool | None = None
    error: str | None = None


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
    if not isinstance(name, str) or not name:
        raise ValueError(f"L2 adapter type name must be a non-empty str, got {name!r}")
    if isinstance(factory, L2AdapterSpec):
        spec = factory
    elif callable(factory):
        spec = L2AdapterSpec(factory=factory, description=description, options=None,
                             reports_object_sizes=reports_object_sizes)
    else:
        raise TypeError(f"L2 adapter factory for '{name}' must be callable or an L2AdapterSpec")
    with _lock:
        record = _group.get(name)
        if name in _programmatic or (record is not None and not record.disabled):
            raise ValueError(f"L2 adapter type already registered: '{name}'")
        _programmatic[name] = spec


def unregister_l2_adapter_type(name: str) -> None:
    """Remove a programmatically registered type (plugins cannot be unregistered)."""
    with _lock:
        if name not in _programmatic:
            raise ValueError(f"L2 adapter type '{name}' was not registered programmatically")
        del _programmatic[name]


def rescan_l2_adapter_plugins() -> None:
    """Forget the entry-point scan; the next lookup reads installed metadata again."""
    with _lock:
        _group.rescan()


def get_registered_l2_adapter_types() -> list[str]:
    """Every known adapter type: discovered plugins (metadata order), then programmatic ones."""
    with _lock:
        names = [n for n, r in _group.records().items() if not r.disabled]
        names += [n for n in _programmatic if n not in names]
        return names


def get_l2_adapter_spec(adapter_type: str) -> L2AdapterSpec:
    """The spec of ``adapter_type``, importing its plugin if needed.

    Unknown types raise ``ValueError`` listing the known ones; a plugin that cannot be imported
    raises :class:`~lmserde.PluginLoadError` (a ``ValueError``).
    """
    with _lock:
        if adapter_type in _programmatic:
            return _programmatic[adapter_type]
        record = _group.get(adapter_type)
    if record is None or record.disabled:
        known = ", ".join(sorted(get_registered_l2_adapter_types())) or "(none)"
        hint = ""
        if record is not None:
            hint = f" ('{adapter_type}' is installed but disabled by LMSERDE_DISABLE_PLUGINS)"
        raise ValueError(f"Unknown L2 adapter type '{adapter_type}'. Known types: {known}{hint}")
    obj = record.load()
    try:
        return L2AdapterSpec.from_entry_object(obj)
    except TypeError as exc:
        record.error = exc
        raise PluginLoadError(
            f"L2 adapter plugin '{adapter_type}' from distribution {record.describe_origin()} "
            f"is invalid: {exc}"
        ) from exc


def describe_l2_adapter_origin(adapter_type: str) -> str:
    """Where ``adapter_type`` comes from: ``"from distribution NAME VERSION"`` or
    ``"registered programmatically"``."""
    with _lock:
        if adapter_type in _programmatic:
            return "registered programmatically"
        record = _group.get(adapter_type)
    if record is None:
        return "of unknown origin"
    return f"from distribution {record.describe_origin()}"


def list_l2_adapters(*, load: bool = False) -> list[L2AdapterInfo]:
    """Every known adapter type with its origin; with ``load`` each plugin is imported.

    Never raises for a broken plugin: its failure is reported in the entry.
    """
    infos: list[L2AdapterInfo] = []
    with _lock:
        records = list(_group.records().values())
        programmatic = dict(_programmatic)
    for record in records:
        description, sizes, error = record.summary, None, None
        if load and not record.disabled:
            try:
                spec = get_l2_adapter_spec(record.name)
                description, sizes = spec.description or description, spec.reports_object_sizes
            except Exception as exc:  # listing never breaks
                error = f"{type(exc.__cause__ or exc).__name__}: {exc.__cause__ or exc}"
        elif record.error is not None:
            error = f"{type(record.error).__name__}: {record.error}"
        infos.append(L2AdapterInfo(record.name, record.distribution, record.version,
                                   record.status, description, sizes, error))
    for name, spec in programmatic.items():
        infos.append(L2AdapterInfo(name, "(programmatic)", "", "registered", spec.description,
                                   spec.reports_object_sizes))
    return infos
