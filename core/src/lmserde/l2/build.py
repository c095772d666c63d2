"""Adapter specs: ``{"type": "fs", "base_path": ..., "serde": {...}}`` to a ready adapter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from lmserde.adaptive import AutoPolicy, Candidate, PolicySettings, admit_candidates
from lmserde.base import SerdeConfig, SerdeProcessor
from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.discovery.registry import (
    L2_ADAPTERS,
    get_l2_adapter_spec,
    get_registered_l2_adapter_types,
)
from lmserde.l2.serde.frame_keys import FRAME_KEY_OPTIONS, FrameKeyOptions, parse_frame_key_options
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.serde_build import ResolvedSerde, as_serde_config, resolve_serde
from lmserde.spec import SerdeSizeContract

if TYPE_CHECKING:
    from lmserde.l1.manager import L1Manager

__all__ = [
    "L2AdapterConfig",
    "parse_serde_config",
    "parse_read_also",
    "parse_l2_adapter_spec",
    "create_serde_for_config",
    "resolve_serde_value",
    "build_resolved_serde",
    "create_l2_adapter",
    "check_serde_config",
    "AutoSerdeConfig",
    "AUTO_SERDE_TYPE",
    "AUTO_OPTIONS",
]

#: The serde type that chooses among candidate serde configs per store (``docs/adaptive.md``).
AUTO_SERDE_TYPE = "auto"
#: The options of ``auto`` that are the policy's settings (:class:`~lmserde.adaptive.PolicySettings`).
_POLICY_OPTIONS = tuple(f.name for f in fields(PolicySettings))
#: Every option of serde ``auto`` (``lmserde info auto`` lists them).
AUTO_OPTIONS = ("candidates", "attention_errors", *_POLICY_OPTIONS)


@dataclass(frozen=True)
class AutoSerdeConfig:
    """A parsed ``{"type": "auto", ...}`` serde config.

    ``candidates``: each a serde config or a chain, in order (named by their serde types, a
    chain's joined by ``+``: ``fp8+zstd``); ``settings``: the policy's settings, the quality
    bound ``max_attention_error`` among them; ``attention_errors``: the declared
    attention-weight error of lossy candidates, by name (``lmserde bench`` measures it).
    """

    candidates: tuple[SerdeConfig | list[SerdeConfig], ...]
    settings: PolicySettings
    attention_errors: dict[str, float]

    @property
    def names(self) -> list[str]:
        """Each candidate's name (its serde type; a chain's stage types joined by ``+``)."""
        return [("+".join(c.type for c in item) if isinstance(item, list) else item.type)
                for item in self.candidates]


SerdeConfigValue = SerdeConfig | list[SerdeConfig] | AutoSerdeConfig
#: Spec keys read by the serde wrapper, never passed to the adapter itself.
_WRAPPER_KEYS = ("type", "serde", "serde_frame", "read_also", *FRAME_KEY_OPTIONS)


@dataclass
class L2AdapterConfig:
    """A parsed adapter spec: ``type``, the adapter's own ``options`` and the ``serde_config``.

    ``serde_config`` is ``None`` (unwrapped), one :class:`~lmserde.SerdeConfig`, or a list of
    them (a chain, applied in order on store and in reverse on load). ``serde_frame`` (spec key
    ``"serde_frame"``, default true) says whether the serde wrapper frames stored objects; false
    stores raw serde bytes, for an L2 shared with LMCache processes. ``read_also`` (spec key
    ``"read_also"``) lists earlier serde configs (each one config or a chain) whose objects the
    wrapper still loads, as hits; new objects are written with ``serde_config`` alone.
    ``frame_key`` (spec keys ``"frame_key_path"`` or ``"frame_keyring_path"``) makes the frame
    authenticated (a keyed MAC per tenant, :mod:`lmserde.l2.serde.authenticated_frame`).
    """

    type: str
    options: dict[str, Any] = field(default_factory=dict)
    serde_config: SerdeConfigValue | None = None
    serde_frame: bool = True
    read_also: list[SerdeConfigValue] = field(default_factory=list)
    frame_key: FrameKeyOptions | None = None


def parse_serde_config(value: Any) -> SerdeConfigValue:
    """Parse the value of a spec's ``serde`` key (upstream error texts for bad dicts).

    A dict gives one :class:`~lmserde.SerdeConfig` (``type`` plus every other key as kwargs); a
    list of dicts gives a chain (a one-element list is the same as its element). Type ``auto``
    gives an :class:`AutoSerdeConfig` (it cannot be a chain's stage).
    """
    if isinstance(value, AutoSerdeConfig):
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("'serde' chain must name at least one serde")
        configs = [as_serde_config(v) for v in value]
        if any(c.type == AUTO_SERDE_TYPE for c in configs) and len(configs) > 1:
            raise ValueError("serde 'auto' cannot be a stage of a chain: list chains among its "
                             "'candidates' instead")
        return parse_serde_config(configs[0]) if len(configs) == 1 else configs
    config = as_serde_config(value)
    return _parse_auto(config.kwargs) if config.type == AUTO_SERDE_TYPE else config


def _parse_auto(options: Mapping[str, Any]) -> AutoSerdeConfig:
    """The options of serde ``auto`` (see :class:`AutoSerdeConfig`); ``ValueError`` naming the
    accepted options for an unknown one, and for candidates that are missing, nested ``auto``
    or repeated names, or errors declared for no candidate."""
    unknown = sorted(set(options) - set(AUTO_OPTIONS))
    if unknown:
        raise ValueError(f"serde 'auto': unknown option(s) {', '.join(unknown)}; accepted: "
                         f"{', '.join(AUTO_OPTIONS)}")
    raw = options.get("candidates")
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError("serde 'auto' needs 'candidates': a non-empty list of serde configs "
                         "(each a dict, or a list of dicts for a chain)")
    candidates: list[SerdeConfig | list[SerdeConfig]] = []
    for i, item in enumerate(raw):
        try:
            parsed = parse_serde_config(item)
        except ValueError as exc:
            raise ValueError(f"serde 'auto': candidate {i}: {exc}") from exc
        if isinstance(parsed, AutoSerdeConfig):
            raise ValueError(f"serde 'auto': candidate {i} is 'auto' itself")
        candidates.append(parsed)
    settings = PolicySettings(**{k: options[k] for k in _POLICY_OPTIONS if k in options})
    errors = options.get("attention_errors") or {}
    if not isinstance(errors, Mapping):
        raise ValueError("serde 'auto': 'attention_errors' maps candidate names to their "
                         f"attention-weight error, got {type(errors).__name__}")
    config = AutoSerdeConfig(tuple(candidates), settings, dict(errors))
    names = config.names
    strays = sorted(set(errors) - set(names))
    if strays:
        raise ValueError(f"serde 'auto': 'attention_errors' names no candidate: "
                         f"{', '.join(strays)}; candidates: {', '.join(names)}")
    return config


def parse_read_also(value: Any) -> list[SerdeConfigValue]:
    """Parse the value of a spec's ``read_also`` key: a list whose items are each a serde config
    (a dict) or a chain (a list of dicts), as ``serde`` takes them; one dict is a list of one.
    ``ValueError`` naming the item for anything else."""
    if isinstance(value, (Mapping, SerdeConfig)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"'read_also' must be a list of serde configs (each a dict, or a list of "
                         f"dicts for a chain), got {type(value).__name__}")
    configs: list[SerdeConfigValue] = []
    for i, item in enumerate(value):
        try:
            configs.append(parse_serde_config(item))
        except ValueError as exc:
            raise ValueError(f"'read_also' item {i}: {exc}") from exc
    return configs


def parse_l2_adapter_spec(spec: Mapping[str, Any]) -> L2AdapterConfig:
    """Split a spec dict into type, adapter options and serde config (nothing is built)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"an L2 adapter spec must be a dict, got {type(spec).__name__}")
    adapter_type = spec.get("type")
    if not isinstance(adapter_type, str) or not adapter_type:
        known = ", ".join(sorted(get_registered_l2_adapter_types())) or "(none)"
        raise ValueError(
            f"an L2 adapter spec must include a 'type' field naming the adapter; known types: "
            f"{known}"
        )
    options = {k: v for k, v in spec.items() if k not in _WRAPPER_KEYS}
    serde_config = parse_serde_config(spec["serde"]) if "serde" in spec else None
    frame = spec.get("serde_frame", True)
    if not isinstance(frame, bool):
        raise ValueError(f"'serde_frame' must be true or false, got {frame!r}")
    if "serde_frame" in spec and serde_config is None:
        raise ValueError("'serde_frame' only applies to an adapter with a 'serde'")
    read_also = parse_read_also(spec["read_also"]) if "read_also" in spec else []
    if isinstance(serde_config, AutoSerdeConfig) and not frame:
        raise ValueError("serde 'auto' needs framed objects (the frame names the candidate that "
                         "wrote each object): remove 'serde_frame: false'")
    if read_also and serde_config is None:
        raise ValueError("'read_also' only applies to an adapter with a 'serde' (the config new "
                         "objects are written with)")
    if read_also and not frame:
        raise ValueError("'read_also' needs framed objects (the frame names the serde config "
                         "that wrote each object): remove 'serde_frame: false'")
    frame_key = parse_frame_key_options(spec)
    if frame_key is not None and (serde_config is None or not frame):
        raise ValueError("'frame_key_path' / 'frame_keyring_path' authenticate the stored-object "
                         "frame: they need a 'serde' and a framed adapter ('serde_frame' true)")
    return L2AdapterConfig(adapter_type, options, serde_config, frame, read_also, frame_key)


@dataclass(frozen=True)
class ResolvedAuto:
    """An ``auto`` config with every candidate looked up and validated, and the policy's
    candidates (name, lossy, declared error) the quality bound admitted."""

    config: AutoSerdeConfig
    candidates: list[ResolvedSerde | list[ResolvedSerde]]
    policy_candidates: list[Candidate]

    def policy(self) -> AutoPolicy:
        """A fresh decision policy over the candidates."""
        return AutoPolicy(self.policy_candidates, self.config.settings, name=AUTO_SERDE_TYPE)


def resolve_serde_value(serde_config: SerdeConfigValue
                        ) -> ResolvedSerde | list[ResolvedSerde] | ResolvedAuto:
    """Look up and validate a serde config or chain once (see :func:`~lmserde.serde_build.resolve_serde`
    and :func:`~lmserde.serde_chain.resolve_chain`); nothing is built. An ``auto`` config
    resolves each candidate, and its quality bound refuses lossy candidates here
    (``ValueError`` when it refuses them all; see :func:`~lmserde.adaptive.admit_candidates`)."""
    from lmserde.serde_chain import resolve_chain

    if isinstance(serde_config, AutoSerdeConfig):
        resolved = [resolve_serde_value(c) for c in serde_config.candidates]
        candidates = []
        for name, item in zip(serde_config.names, resolved):
            stages = item if isinstance(item, list) else [item]
            assert not isinstance(stages, ResolvedAuto)
            candidates.append(Candidate(name, lossy=any(s.spec.lossy for s in stages),
                                        attention_error=serde_config.attention_errors.get(name)))
        admit_candidates(candidates, serde_config.settings.max_attention_error)
        return ResolvedAuto(serde_config, resolved, candidates)  # type: ignore[arg-type]
    if isinstance(serde_config, list):
        return resolve_chain(serde_config)
    return resolve_serde(serde_config)


def build_resolved_serde(
    resolved: ResolvedSerde | list[ResolvedSerde] | ResolvedAuto,
) -> tuple[SerdeProcessor, str, SerdeSizeContract]:
    """The processor, type name and size contract of a resolved serde or chain; ``ValueError``
    for ``auto`` (its candidates are built by :func:`create_l2_adapter` into a serde wrapper)."""
    from lmserde.serde_chain import build_serde_chain

    if isinstance(resolved, ResolvedAuto):
        raise ValueError("serde 'auto' is not one processor: it runs inside an L2 adapter's serde "
                         "wrapper (create_l2_adapter)")
    if isinstance(resolved, list):
        chain = build_serde_chain(resolved)
        return chain, chain.serde_type, chain.size_contract
    return resolved.build_processor(), resolved.serde_type, resolved.size_contract


def create_serde_for_config(
    serde_config: SerdeConfigValue,
) -> tuple[SerdeProcessor, str, SerdeSizeContract]:
    """The processor, type name and size contract for a serde config or chain (one lookup)."""
    return build_resolved_serde(resolve_serde_value(serde_config))


def _build_adapter(
    adapter_type: str, factory: Any, options: dict[str, Any], l1_manager: L1Manager | None
) -> L2AdapterInterface:
    """Run an adapter factory, containing what it raises beyond ``Exception``.

    An ``Exception`` keeps its type (it is the factory's own error report); anything else
    (``SystemExit``, ``asyncio.CancelledError``, ...) becomes a :class:`PluginLoadError` naming
    the adapter type and its distribution. A main-thread ``KeyboardInterrupt`` propagates.
    """
    return L2_ADAPTERS.build(adapter_type, lambda: factory(options, l1_manager),
                             keep_exceptions=True)


def check_serde_config(serde_config: SerdeConfigValue) -> None:
    """Validate a serde config or chain without building anything.

    Every stage's type and options are checked against its spec (``ValueError`` naming the bad
    option) and a chain's stages must compose (``ValueError`` naming the stage; see
    :func:`~lmserde.serde_chain.check_chain_configs`).
    """
    resolve_serde_value(serde_config)


def create_l2_adapter(
    spec: Mapping[str, Any] | L2AdapterConfig, l1_manager: L1Manager | None = None,
    *, repair: bool = True,
) -> L2AdapterInterface:
    """Build the adapter a spec names, wrapped in a serde wrapper when it has a ``serde``.

    Unknown adapter types raise ``ValueError`` listing the known ones; adapter options are
    validated against the type's declared options, and the ``serde`` config (a chain's stages must
    compose) before the adapter is built. A ``serde`` needs ``l1_manager`` (its temporary buffers
    live there). An adapter factory that raises a ``BaseException`` other than ``Exception``
    gives a :class:`~lmserde.PluginLoadError` naming the adapter and its distribution. An
    ``UPPER_BOUND`` serde on an adapter that cannot report stored sizes is refused here. The
    serde's declared placement (:attr:`~lmserde.SerdeSpec.placement`) alone chooses what wraps
    the adapter: ``KV_TOGETHER`` a :class:`~lmserde.l2.serde.wrapper.SerdeL2AdapterWrapper`,
    ``KV_SPLIT_TIER`` a :class:`~lmserde.l2.split.adapter.SplitTierL2Adapter` (K kept in
    ``l1_manager``, V stored through the serde). ``SplitTierConfigError`` is raised here when the
    serde's slot mapping does not match its declaration, for a split-tier serde in a chain, and
    for the split tier's other startup rules. Nothing is leaked when
    building fails. ``repair=False`` makes the serde wrapper leave refused objects in place (for
    tools that only inspect, like scrub). Each ``read_also`` config is validated like ``serde``
    and built into its own processor, owned by the wrapper; a split-tier serde, as ``serde`` or
    in ``read_also``, refuses ``read_also`` (``ValueError``); an ``auto`` config listed in
    ``read_also`` reads every one of its candidates. Serde ``auto`` builds one processor per
    candidate into one wrapper (:class:`~lmserde.l2.serde.auto_writes.AutoWrites`): its quality
    bound refused lossy candidates before anything was built.
    """
    config = spec if isinstance(spec, L2AdapterConfig) else parse_l2_adapter_spec(spec)
    if config.serde_config is not None and l1_manager is None:
        raise ValueError(
            f"L2 adapter '{config.type}' has a 'serde', which needs an L1Manager for its "
            "temporary buffers: pass l1_manager to create_l2_adapter"
        )
    adapter_spec = get_l2_adapter_spec(config.type)
    options = adapter_spec.validate(config.type, config.options)
    # the serde is looked up and validated, and the frame key read, before the adapter opens
    # anything
    resolved = resolve_serde_value(config.serde_config) if config.serde_config is not None else None
    resolved_read_also = [r for c in config.read_also for r in _read_configs(resolve_serde_value(c))]
    frame_keys = config.frame_key.open() if config.frame_key is not None else None
    hidden_names = (NameHider(frame_keys.names_key())
                    if frame_keys is not None and config.frame_key.hide_names else None)
    adapter = _build_adapter(config.type, adapter_spec.factory, options, l1_manager)
    if resolved is None:
        return adapter
    from lmserde.l2.serde.wrapper import AutoWrites, SerdeL2AdapterWrapper
    from lmserde.l2.split.placement import (
        StoragePlacementMode,
        check_whole_object_slots,
        declared_placement,
    )

    processor: SerdeProcessor | None = None
    read_also: list[tuple[SerdeProcessor, str, SerdeSizeContract]] = []
    candidates: list[tuple[SerdeProcessor, str, SerdeSizeContract]] = []
    try:
        for read_resolved in resolved_read_also:
            if declared_placement(read_resolved) is StoragePlacementMode.KV_SPLIT_TIER:
                raise ValueError("'read_also' cannot list a split-tier serde: its objects hold V "
                                 "alone")
            read_also.append(build_resolved_serde(read_resolved))
        assert l1_manager is not None
        if isinstance(resolved, ResolvedAuto):
            for item in resolved.candidates:
                if declared_placement(item) is StoragePlacementMode.KV_SPLIT_TIER:
                    raise ValueError("serde 'auto' cannot choose a split-tier serde: its K half "
                                     "stays in L1")
                candidates.append(build_resolved_serde(item))
                check_whole_object_slots(candidates[-1][0], candidates[-1][1])
            (processor, serde_type, contract), *others = candidates
            return SerdeL2AdapterWrapper(
                adapter, processor, l1_manager, serde_type=serde_type, size_contract=contract,
                frame=config.serde_frame, repair=repair, read_also=read_also,
                frame_keys=frame_keys, hidden_names=hidden_names,
                auto=AutoWrites(tuple(others), resolved.policy()))
        placement = declared_placement(resolved)  # the one decider: the serde spec's declaration
        processor, serde_type, contract = build_resolved_serde(resolved)
        if placement is StoragePlacementMode.KV_SPLIT_TIER:
            from lmserde.l2.split.adapter import create_split_tier_adapter

            if read_also:
                raise ValueError(f"'read_also' is not supported with a split-tier serde "
                                 f"('{serde_type}'): its V objects are read by the split tier")
            if hidden_names is not None:
                raise ValueError("option 'hide_names' is not supported on a split-tier serde "
                                 "yet (its K side keeps real keys)")

            return create_split_tier_adapter(adapter, processor, l1_manager, serde_type=serde_type,
                                             size_contract=contract, frame=config.serde_frame,
                                             repair=repair, frame_keys=frame_keys)
        check_whole_object_slots(processor, serde_type)
        return SerdeL2AdapterWrapper(adapter, processor, l1_manager, serde_type=serde_type,
                                     size_contract=contract, frame=config.serde_frame,
                                     repair=repair, read_also=read_also, frame_keys=frame_keys,
                                     hidden_names=hidden_names)
    except BaseException:
        owned = {id(p): p for p, _, _ in [*candidates, *read_also]}
        if processor is not None:
            owned[id(processor)] = processor
        for serde in owned.values():
            serde.close()
        adapter.close()
        raise


def _read_configs(resolved: ResolvedSerde | list[ResolvedSerde] | ResolvedAuto
                  ) -> list[ResolvedSerde | list[ResolvedSerde]]:
    """What one ``read_also`` item reads: itself, or every candidate of an ``auto`` config."""
    return list(resolved.candidates) if isinstance(resolved, ResolvedAuto) else [resolved]
