"""The bench's results: one :class:`SerdeResult` per serde, a :class:`BenchReport` per run, and their
JSON form (``lmserde bench --json``; every field is documented in ``docs/bench.md``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lmserde.bench.quality import QualityMetrics

__all__ = ["SerdeResult", "BenchReport", "Recommendation", "JSON_SCHEMA_VERSION", "to_jsonable"]

#: Bumped when a JSON field changes meaning or disappears.
JSON_SCHEMA_VERSION = 1

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_SKIPPED = "skipped"


@dataclass
class SerdeResult:
    """What the bench measured for one serde configuration.

    Sizes are per chunk (mean over chunks); throughputs are GB/s (1e9 B/s) of raw KV bytes,
    medians over ``codec_rounds`` timed rounds; latencies are per chunk in milliseconds (median
    of every chunk of every repeat). ``status`` is ``ok``, ``error`` (it failed; ``error`` says
    why) or ``skipped`` (it cannot run in this bench; ``error`` says why). ``warnings`` are the
    distinct Python warnings raised while it ran. A split-tier serde (``placement``
    ``kv_split_tier``) stores only V: ``stored_bytes_per_chunk`` is what went to L2 and
    ``l1_bytes_per_chunk`` what stayed in L1 (K).
    """

    label: str
    config: Any
    status: str = STATUS_OK
    error: str | None = None
    lossy: bool | None = None
    size_contract: str | None = None
    chunk_form: str | None = None
    raw_bytes_per_chunk: int = 0
    stored_bytes_per_chunk: float = 0.0
    compression_ratio: float = 0.0
    encode_gbps: float = 0.0
    decode_gbps: float = 0.0
    encode_ms_per_chunk: float = 0.0
    decode_ms_per_chunk: float = 0.0
    codec_rounds: int = 0
    encode_ms_rounds: list[float] = field(default_factory=list)
    decode_ms_rounds: list[float] = field(default_factory=list)
    store_ms_p50: float = 0.0
    load_ms_p50: float = 0.0
    wrapper_stage_ms_p50: dict[str, float] = field(default_factory=dict)
    quality: QualityMetrics | None = None
    acceptable: bool = False
    break_even_gbps: float | None = None
    tier_load_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    placement: str = "kv_together"
    l1_bytes_per_chunk: float = 0.0
    #: its codec rounds were timed interleaved with those of the run's other serdes
    #: (:mod:`~lmserde.bench.codec_phase`): round ``i`` of two such results were timed in the
    #: same pass, so :mod:`~lmserde.bench.recommend` compares them on paired rounds
    codec_interleaved: bool = False

    @property
    def split_tier(self) -> bool:
        """Whether the serde ran in split-tier placement (K kept in L1, only V stored)."""
        return self.placement == "kv_split_tier"

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


@dataclass(frozen=True)
class Recommendation:
    """The serde to use on one tier (``serde`` is ``None``: store raw bytes, no serde)."""

    tier: str
    gbps: float
    serde: str | None
    load_ms: float
    raw_load_ms: float
    speedup_vs_raw: float
    text: str
    #: the labels of the other serdes whose modelled load time on this tier is within
    #: measurement noise of the recommended one's (of raw bytes' when ``serde`` is ``None``)
    within_noise: tuple[str, ...] = ()


@dataclass
class BenchReport:
    """A whole run: data source, settings, per-serde results, recommendations and notes."""

    lmserde_version: str
    source: dict[str, Any]
    settings: dict[str, Any]
    machine: dict[str, Any]
    tiers: list[dict[str, Any]]
    results: list[SerdeResult]
    recommendations: list[Recommendation]
    notes: list[str]
    elapsed_seconds: float
    #: the stored-object frame's cost (:func:`~lmserde.bench.frame_overhead.measure_frame_overhead`),
    #: ``None`` when not measured (unframed adapter spec, or an error)
    frame: dict[str, Any] | None = None
    #: the ``--adapter``'s bandwidth measured on raw chunk bytes
    #: (:meth:`~lmserde.bench.adapter_bandwidth.AdapterBandwidth.to_json`), ``None`` without one
    adapter_bandwidth: dict[str, Any] | None = None
    #: the ``auto`` policy replayed at ``--policy`` bandwidths and the measured one
    #: (:class:`~lmserde.bench.policy_replay.PolicyReplay`)
    policy: list[Any] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict: non-finite floats become ``null``."""
        data = {"schema_version": JSON_SCHEMA_VERSION, **asdict(self)}
        for row, result in zip(data["results"], self.results):
            row["ok"] = result.ok
            if result.quality is not None:
                row["quality"]["bit_exact"] = result.quality.bit_exact
        return to_jsonable(data)


def to_jsonable(value: Any) -> Any:
    """``value`` with non-finite floats replaced by ``None`` (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value
