"""Observability events emitted through the pluggy hooks (plain data, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SerdeTaskEvent", "WrapperTaskEvent", "PolicyChangeEvent"]


@dataclass(frozen=True)
class SerdeTaskEvent:
    """One finished processor task.

    ``direction`` is ``"serialize"`` or ``"deserialize"``; ``bytes_in``/``bytes_out`` are logical
    sizes of sources and destinations of successful items; ``failed_items`` are batch indices;
    ``error_class`` names the first failure's exception class (``None`` when ``ok``).
    """

    serde_type: str
    direction: str
    task_id: int
    num_objects: int
    bytes_in: int
    bytes_out: int
    seconds: float
    ok: bool
    error_class: str | None = None
    failed_items: tuple[int, ...] = ()


@dataclass(frozen=True)
class WrapperTaskEvent:
    """One finished store or load task of a serde-wrapped L2 adapter.

    ``operation`` is ``"store"`` or ``"load"``; ``stage_seconds`` maps stage names (``serialize``,
    ``inner_store``, ``inner_load``, ``deserialize``) to their duration; ``failed_stage`` names the
    stage where a store failed; ``hits`` counts keys loaded; ``rejected`` counts, by reason, the
    keys of a load whose stored object was refused (``format``, ``length``, ``config``, ``key``,
    ``layout``, ``checksum``, ``decode``) — each is a miss, and was deleted from the adapter.
    """

    serde_type: str
    operation: str
    task_id: int
    num_keys: int
    ok: bool
    hits: int = 0
    bytes_kv: int = 0
    bytes_serialized: int = 0
    failed_stage: str | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyChangeEvent:
    """The ``auto`` policy (:class:`lmserde.adaptive.AutoPolicy`) changed the candidate it stores
    new objects with.

    ``policy`` names the policy (its owner's name, e.g. the adapter); ``previous`` is ``None`` for
    the first choice (``reason`` ``"initial"``), else the candidate used until now (``reason``
    ``"measured"``: the measurements favoured ``current``). ``decisions`` counts the objects
    decided so far; ``expected_seconds_per_gib`` is each measured candidate's expected store +
    load time of 1 GiB of raw KV bytes at the moment of the change; ``store_bytes_per_second`` /
    ``load_bytes_per_second`` are the adapter's measured throughputs (``None``: not measured yet).
    """

    policy: str
    previous: str | None
    current: str
    reason: str
    decisions: int
    expected_seconds_per_gib: dict[str, float] = field(default_factory=dict)
    store_bytes_per_second: float | None = None
    load_bytes_per_second: float | None = None
