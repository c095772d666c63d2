"""The serde registry: programmatic factories plus lazily discovered ``lmcache.serde`` plugins.

Metadata is scanned once, on first use; a plugin module is imported only when a config names its
type (or when asked for details). One broken plugin never affects the others.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.containment import describe_exception, must_propagate
from lmserde.plugin_discovery import EntryPointGroup, PluginLoadError, PluginRecord
from lmserde.spec import SerdeFactory, SerdeSizeContract, SerdeSpec

if TYPE_CHECKING:
    from lmserde.base import SerdeConfig, SerdeProcessor

__all__ = [
    "SERDE_GROUP",
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

SERDE_GROUP = "lmcache.serde"

#: Serde types shipped as separate distributions of this repository: a pip hint for unknown types.
_KNOWN_DISTRIBUTIONS = {
    "fp8": "lmserde-fp8",
    "aesgcm": "lmserde-aesgcm",
    "turboquant": "lmserde-turboquant",
    "asym_k16_v8": "lmserde-asym-k16-v8",
    "asym_k16_v8_v_only": "lmserde-asym-k16-v8",
    "zstd": "lmserde-zstd",
}

_lock = threading.RLock()
_group = EntryPointGroup(SERDE_GROUP)
_programmatic: dict[str, SerdeSpec] = {}


@dataclass(frozen=True)
class SerdeInfo:
    """What ``lmserde plugins`` lists for one serde type."""

    name: str
    distribution: str
    version: str
    status: str
    description: str
    error: str | None = None
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
    if not isinstance(name, str) or not name:
        raise ValueError(f"serde type name must be a non-empty str, got {name!r}")
    if isinstance(factory, SerdeSpec):
        spec = factory
    else:
        if not callable(factory):
            raise TypeError(f"serde factory for '{name}' must be callable or a SerdeSpec")
        spec = SerdeSpec.from_entry_object(factory)
        spec = SerdeSpec(factory=spec.factory, description=spec.description, options=None,
                         size_contract=size_contract, lossy=spec.lossy)
    with _lock:
        record = _group.get(name)
        if name in _programmatic or (record is not None and not record.disabled):
            raise ValueError(f"Serde type already registered: '{name}'")
        _programmatic[name] = spec


def unregister_serde_factory(name: str) -> None:
    """Remove a programmatically registered serde (plugins cannot be unregistered)."""
    with _lock:
        if name not in _programmatic:
            raise ValueError(f"Serde type '{name}' was not registered programmatically")
        del _programmatic[name]


def rescan_serde_plugins() -> None:
    """Forget the entry-point scan; the next lookup reads installed metadata again."""
    with _lock:
        _group.rescan()


def get_registered_serde_types() -> list[str]:
    """Every known serde type: discovered plugins (metadata order), then programmatic ones."""
    with _lock:
        names = [n for n, r in _group.records().items() if not r.disabled]
        names += [n for n in _programmatic if n not in names]
        return names


def _unknown_type_error(serde_type: str) -> ValueError:
    names = sorted(get_registered_serde_types())
    listing = ", ".join(names) if names else "(none)"
    message = f"Unknown serde type '{serde_type}'. Registered: {listing}"
    record = _group.get(serde_type)
    if record is not None and record.disabled:
        message += f" ('{serde_type}' is installed but disabled by LMSERDE_DISABLE_PLUGINS)"
    elif serde_type in _KNOWN_DISTRIBUTIONS:
        dist = _KNOWN_DISTRIBUTIONS[serde_type]
        message += (f". Install it with: pip install --find-links DIR {dist} (DIR: wheels built by "
                    f"`nox -s build` in the lmserde repository), or pip install ./plugins/<dir> "
                    "from a checkout")
    return ValueError(message)


def _record_for(serde_type: str) -> PluginRecord | None:
    record = _group.get(serde_type)
    if record is None or record.disabled:
        return None
    return record


def get_serde_spec(serde_type: str) -> SerdeSpec:
    """The spec of ``serde_type``, importing its plugin if needed.

    Raises ``ValueError`` for an unknown type and :class:`PluginLoadError` (a ``ValueError``)
    when the plugin cannot be imported.
    """
    with _lock:
        if serde_type in _programmatic:
            return _programmatic[serde_type]
        record = _record_for(serde_type)
    if record is None:
        raise _unknown_type_error(serde_type)
    obj = record.load()
    try:
        return SerdeSpec.from_entry_object(obj)
    except TypeError as exc:
        record.error = exc
        raise PluginLoadError(
            f"plugin '{serde_type}' from distribution {record.describe_origin()} is invalid: {exc}"
        ) from exc


def get_serde_size_contract(serde_type: str) -> SerdeSizeContract:
    """The size contract ``serde_type`` declares (``UPPER_BOUND`` unless it says ``EXACT``)."""
    return get_serde_spec(serde_type).size_contract


def _origin(serde_type: str) -> str:
    record = _record_for(serde_type)
    if record is None:
        return "registered programmatically"
    return f"from distribution {record.describe_origin()}"


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
    if isinstance(config, Mapping):
        if "type" not in config or not isinstance(config["type"], str):
            raise ValueError("'serde' dict must include a 'type' field")
        serde_type = config["type"]
        kwargs = {k: v for k, v in config.items() if k != "type"}
    else:
        serde_type, kwargs = config.type, dict(config.kwargs)
    spec = get_serde_spec(serde_type)
    validated = spec.validate(serde_type, kwargs)
    try:
        processor = spec.factory(validated)
    except BaseException as exc:  # plugin code: SystemExit etc. are contained too
        if must_propagate(exc):
            raise
        raise PluginLoadError(
            f"serde '{serde_type}' ({_origin(serde_type)}) failed to build: "
            f"{describe_exception(exc)}"
        ) from exc
    _attach_config(processor, serde_type, spec, validated)
    return processor


def _attach_config(
    processor: Any, serde_type: str, spec: SerdeSpec, validated: Mapping[str, Any]
) -> None:
    """Give ``processor`` its identity config (closing it if that fails)."""
    from lmserde.base import SerdeProcessor

    if not isinstance(processor, SerdeProcessor):
        return  # a duck-typed upstream processor: it has no get_config to answer with
    try:
        processor.set_config(spec.identity_config(serde_type, validated))
    except BaseException:
        processor.close()
        raise


def list_serdes(*, load: bool = False) -> list[SerdeInfo]:
    """Every known serde with its origin and status; with ``load`` each plugin is imported.

    Never raises for a broken plugin: its failure is reported in the entry.
    """
    infos: list[SerdeInfo] = []
    with _lock:
        records = list(_group.records().values())
        programmatic = dict(_programmatic)
    for record in records:
        description, error, contract, lossy = record.summary, None, None, None
        native: dict[str, Any] | None = None
        if record.conflict_with:
            error = "also claimed by " + ", ".join(record.conflict_with)
        elif load and not record.disabled:
            try:
                spec = get_serde_spec(record.name)
                description = spec.description or description
                contract, lossy = spec.size_contract.value, spec.lossy
                native = spec.describe_native()
            except Exception as exc:
                error = f"{type(exc.__cause__ or exc).__name__}: {exc.__cause__ or exc}"
        elif record.error is not None:
            error = f"{type(record.error).__name__}: {record.error}"
        infos.append(SerdeInfo(record.name, record.distribution, record.version, record.status,
                               description, error, contract, lossy, native))
    for name, spec in programmatic.items():
        infos.append(SerdeInfo(name, "(programmatic)", "", "registered", spec.description, None,
                               spec.size_contract.value, spec.lossy, spec.describe_native()))
    return infos
