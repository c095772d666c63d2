"""Storage placement: whether K and V of an object are stored together or split across tiers.

A serde declares its placement on its spec (:attr:`lmserde.SerdeSpec.placement`, a
:class:`~lmserde.StoragePlacementMode`); :func:`declared_placement` reads it, and the adapter
builder goes by that alone. ``KV_TOGETHER`` (the default): the serde writes one blob holding the
whole object to L2. ``KV_SPLIT_TIER`` (``asym_k16_v8_v_only``, or any serde declaring it): K stays
in L1 under its own child key, V is serialized to L2 under another;
:class:`~lmserde.l2.split.adapter.SplitTierL2Adapter` implements it. The slot mappings are a
startup check of the declaration, never a second decider: a split-tier serde must leave K out
(:func:`split_slots`), a whole-object serde must cover every group it is given
(:func:`check_whole_object_slots`); either mismatch is a :class:`SplitTierConfigError`.

The child keys of a logical key (:func:`derive_component_key`) keep its model name, rank, object
group and cache salt (so both halves are billed to the same tenant) and append a fixed marker to
its chunk hash, so :func:`parse_component_key` maps a child back to its logical key. The split
tier stores each V half under a key that also names its store's generation
(:mod:`lmserde.l2.split.generation`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.base import SerdeConfig, SerdeProcessor
from lmserde.keys import ObjectKey
from lmserde.l2.split.generation import parse_v_child_key
from lmserde.registry import get_registered_serde_types, get_serde_spec
from lmserde.storage_placement import StoragePlacementMode

if TYPE_CHECKING:
    from lmserde.serde_build import ResolvedSerde

__all__ = [
    "StoragePlacementMode",
    "SplitTierConfigError",
    "SplitSlots",
    "declared_placement",
    "derive_storage_placement_mode",
    "check_whole_object_slots",
    "split_slots",
    "derive_component_key",
    "parse_component_key",
    "check_split_tier_specs",
]

#: Appended to a logical chunk hash to form a child key's hash (never valid alone: it starts with
#: a NUL byte and names the component).
_COMPONENT_MARKERS = {"k": b"\x00lmserde:split:k", "v": b"\x00lmserde:split:v"}

_SPLIT = StoragePlacementMode.KV_SPLIT_TIER
#: How an error names the declaration a serde makes.
_DECLARED = "placement=StoragePlacementMode.KV_SPLIT_TIER in its SerdeSpec"


class SplitTierConfigError(ValueError):
    """A configuration outside what split-tier placement supports (the message says which rule)."""


def _serde_types(value: Any) -> list[str]:
    """Serde type names in a serde config value (a ``SerdeConfig``, a dict, a chain, ``None``)."""
    if value is None:
        return []
    if isinstance(value, SerdeConfig):
        return [value.type]
    if isinstance(value, Mapping):
        serde_type = value.get("type")
        return [serde_type] if isinstance(serde_type, str) else []
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _serde_types(item)]
    return []


def _config_serde(item: Any) -> Any:
    """The serde config value of one ``derive_storage_placement_mode`` item."""
    if isinstance(item, (SerdeConfig, list, tuple)) or item is None:
        return item
    if isinstance(item, Mapping):
        return item.get("serde", item if "type" in item and "serde" not in item else None)
    return getattr(item, "serde_config", None)


def derive_storage_placement_mode(configs: Iterable[Any]) -> StoragePlacementMode:
    """``KV_SPLIT_TIER`` if any config names a serde whose spec declares it, else ``KV_TOGETHER``.

    Each item is an adapter config with a ``serde_config`` attribute, an adapter spec dict (its
    ``serde`` key), a :class:`~lmserde.SerdeConfig`, a serde dict or a chain (list). Each named
    serde's spec is looked up (its plugin imported); a name that is no known serde type (an
    adapter spec without ``serde`` reads as one, naming the adapter) declares nothing — building
    such a config reports the unknown type.
    """
    known = set(get_registered_serde_types())
    for item in configs:
        names = [t for t in _serde_types(_config_serde(item)) if t in known]
        if any(get_serde_spec(t).placement is _SPLIT for t in names):
            return _SPLIT
    return StoragePlacementMode.KV_TOGETHER


def declared_placement(resolved: ResolvedSerde | Sequence[ResolvedSerde]) -> StoragePlacementMode:
    """The placement a resolved serde (or chain) declares on its spec; what the builder uses.

    A chain holding a ``KV_SPLIT_TIER`` serde raises :class:`SplitTierConfigError` (its K half
    stays in L1 and would skip the other stages).
    """
    if not isinstance(resolved, Sequence):
        return resolved.spec.placement
    split = [r.serde_type for r in resolved if r.spec.placement is _SPLIT]
    if split:
        names = ", ".join(r.serde_type for r in resolved)
        raise SplitTierConfigError(
            f"a split-tier serde ({', '.join(split)}) cannot be part of a chain ({names}): its K "
            "half stays in L1 and would skip the other stages; configure it alone"
        )
    return StoragePlacementMode.KV_TOGETHER


def check_whole_object_slots(processor: SerdeProcessor, serde_type: str) -> None:
    """Startup check of a ``KV_TOGETHER`` serde: its slot mapping must not leave a group out.

    A mapping whose present slots all name one group while others are absent (``(None, 1)``)
    stores V alone: through the serde wrapper a load would hand back a K group nobody wrote.
    Such a serde must declare ``KV_SPLIT_TIER``; :class:`SplitTierConfigError` says so. A
    mapping like ``(0, None, 1)`` still covers both groups and passes.
    """
    mapping = processor.input_slot_mapping()
    if mapping is None or all(g is not None for g in mapping):
        return
    if len({g for g in mapping if g is not None}) == 1:
        raise SplitTierConfigError(
            f"serde '{serde_type}': its slot mapping {tuple(mapping)} leaves a group of the KV "
            "object out (it stores V alone), but its spec declares placement KV_TOGETHER, so "
            "the L2 tier would store half an object and load the other half as garbage. A serde "
            f"that leaves K in L1 declares {_DECLARED} (the split tier)"
        )


@dataclass(frozen=True)
class SplitSlots:
    """Which group of a two-group object stays in L1 (K) and which the serde stores (V).

    ``v_mapping`` is the serde's slot mapping renumbered for a one-group object holding V alone
    (what the V half's serde wrapper sees), e.g. ``(None, 1)`` becomes ``(None, 0)``.
    """

    k_group: int
    v_group: int
    mapping: tuple[int | None, ...]
    v_mapping: tuple[int | None, ...]


def split_slots(processor: SerdeProcessor, serde_type: str) -> SplitSlots:
    """The K/V groups of a serde that declares split-tier placement: the startup check of that
    declaration (:class:`SplitTierConfigError` when its slot mappings do not leave K out).

    Rule: the serde has an input slot mapping with exactly one present slot naming parent group
    0 or 1 of a two-group (K, V) object, the other group being the one kept in L1, and its output
    slot mapping is the same.
    """
    mapping = processor.input_slot_mapping()
    out = processor.output_slot_mapping()
    if mapping is None:
        raise SplitTierConfigError(
            f"serde '{serde_type}' declares split-tier placement (KV_SPLIT_TIER in its SerdeSpec) "
            "but has no slot mapping; a split-tier serde is a multi serde that leaves the "
            "L1-resident slot absent, like (None, 1)"
        )
    mapping = tuple(mapping)
    present = [g for g in mapping if g is not None]
    if len(present) != 1 or present[0] not in (0, 1) or len(mapping) != 2:
        raise SplitTierConfigError(
            f"serde '{serde_type}' declares split-tier placement (KV_SPLIT_TIER in its "
            "SerdeSpec), which needs a two-slot mapping with exactly one present slot naming "
            f"group 0 or 1 of a (K, V) object (K left out, like (None, 1)); got {mapping}"
        )
    if out is None or tuple(out) != mapping:
        raise SplitTierConfigError(
            f"serde '{serde_type}': split-tier placement needs the same input and output slot "
            f"mappings, got {mapping} and {None if out is None else tuple(out)}"
        )
    v_group = present[0]
    v_mapping = tuple(None if g is None else 0 for g in mapping)
    return SplitSlots(k_group=1 - v_group, v_group=v_group, mapping=mapping, v_mapping=v_mapping)


def derive_component_key(logical: ObjectKey, component: str) -> ObjectKey:
    """The child key of ``logical`` for ``component`` (``"k"`` or ``"v"``).

    The children of one key are distinct from each other and from every logical key, and keep
    its ``model_name``, ``kv_rank``, ``object_group_id`` and ``cache_salt``.
    """
    marker = _COMPONENT_MARKERS.get(component)
    if marker is None:
        raise ValueError(f"component must be 'k' or 'v', got {component!r}")
    return ObjectKey(logical.chunk_hash + marker, logical.model_name, logical.kv_rank,
                     logical.object_group_id, logical.cache_salt)


def parse_component_key(key: ObjectKey) -> tuple[ObjectKey, str] | None:
    """``(logical key, component)`` of a child key, or ``None`` for any other key.

    V child keys that carry a store generation
    (:func:`~lmserde.l2.split.generation.derive_v_child_key`) are ``"v"`` children too.
    """
    generational = parse_v_child_key(key)
    if generational is not None:
        return generational[0], "v"
    for component, marker in _COMPONENT_MARKERS.items():
        if key.chunk_hash.endswith(marker):
            logical = ObjectKey(key.chunk_hash[: -len(marker)], key.model_name, key.kv_rank,
                                key.object_group_id, key.cache_salt)
            return logical, component
    return None


def _spec_is_split(spec: Mapping[str, Any]) -> bool:
    if derive_storage_placement_mode([spec]) is _SPLIT:
        return True
    inner = spec.get("inner")
    return isinstance(inner, Mapping) and _spec_is_split(inner)


def check_split_tier_specs(specs: Sequence[Mapping[str, Any]]) -> None:
    """Startup rule for a host that builds several L2 adapters from specs: a split-tier adapter
    must be the only L2 adapter (its K halves live in the one L1 and its manifest names one L2).

    Raises :class:`SplitTierConfigError` naming the offending adapters; the serdes named are
    looked up (:func:`derive_storage_placement_mode`).
    """
    split = [i for i, spec in enumerate(specs) if isinstance(spec, Mapping) and _spec_is_split(spec)]
    if split and len(specs) != 1:
        types = ", ".join(f"#{i} {specs[i].get('type')!r}" for i in split)
        raise SplitTierConfigError(
            "split-tier placement (a serde declaring KV_SPLIT_TIER) needs exactly one L2 "
            f"adapter, but {len(specs)} are configured (split-tier: {types}); keep the split-tier "
            "adapter alone or use a serde that stores K and V together (e.g. asym_k16_v8)"
        )
