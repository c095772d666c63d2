"""``lmserde bench``: which serde should an L2 tier use?

Runs serdes through the real data path (L1 -> serde wrapper -> L2 adapter -> L1) on realistic KV
chunks and reports size, speed, quality and break-even storage bandwidth. Programmatic use::

    from lmserde.bench import BenchOptions, run_bench
    report = run_bench(BenchOptions(serdes=[{"type": "identity"}], model="tiny", chunks=2))
    print(report.to_json()["results"][0]["compression_ratio"])

See ``docs/bench.md`` for the method and every reported field. Names are exported lazily, so
importing a light submodule (``model_shapes``, ``breakeven``) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "DEFAULT_TIERS": "lmserde.bench.breakeven",
    "Tier": "lmserde.bench.breakeven",
    "break_even_bandwidth": "lmserde.bench.breakeven",
    "load_seconds": "lmserde.bench.breakeven",
    "KVChunk": "lmserde.bench.kv_chunk",
    "KVFileSource": "lmserde.bench.kv_files",
    "SyntheticKVGenerator": "lmserde.bench.kv_generators",
    "BUILTIN_MODELS": "lmserde.bench.model_shapes",
    "DEFAULT_MODEL": "lmserde.bench.model_shapes",
    "ModelShape": "lmserde.bench.model_shapes",
    "get_model_shape": "lmserde.bench.model_shapes",
    "QualityAccumulator": "lmserde.bench.quality",
    "QualityMetrics": "lmserde.bench.quality",
    "TensorError": "lmserde.bench.quality",
    "DEFAULT_MAX_ATTN_ERROR": "lmserde.bench.recommend",
    "recommend": "lmserde.bench.recommend",
    "BenchReport": "lmserde.bench.report",
    "Recommendation": "lmserde.bench.report",
    "SerdeResult": "lmserde.bench.report",
    "BenchOptions": "lmserde.bench.runner",
    "run_bench": "lmserde.bench.runner",
    "BenchInputError": "lmserde.bench.serde_selection",
    "default_serdes": "lmserde.bench.serde_selection",
    "parse_serde_arg": "lmserde.bench.serde_selection",
}

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_MAX_ATTN_ERROR",
    "DEFAULT_MODEL",
    "DEFAULT_TIERS",
    "BenchInputError",
    "BenchOptions",
    "BenchReport",
    "KVChunk",
    "KVFileSource",
    "ModelShape",
    "QualityAccumulator",
    "QualityMetrics",
    "Recommendation",
    "SerdeResult",
    "SyntheticKVGenerator",
    "TensorError",
    "Tier",
    "break_even_bandwidth",
    "default_serdes",
    "get_model_shape",
    "load_seconds",
    "parse_serde_arg",
    "recommend",
    "run_bench",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lmserde.bench' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # static view of the lazy exports
    from lmserde.bench.breakeven import DEFAULT_TIERS, Tier, break_even_bandwidth, load_seconds
    from lmserde.bench.kv_chunk import KVChunk
    from lmserde.bench.kv_files import KVFileSource
    from lmserde.bench.kv_generators import SyntheticKVGenerator
    from lmserde.bench.model_shapes import BUILTIN_MODELS, DEFAULT_MODEL, ModelShape, get_model_shape
    from lmserde.bench.quality import QualityAccumulator, QualityMetrics, TensorError
    from lmserde.bench.recommend import DEFAULT_MAX_ATTN_ERROR, recommend
    from lmserde.bench.report import BenchReport, Recommendation, SerdeResult
    from lmserde.bench.runner import BenchOptions, run_bench
    from lmserde.bench.serde_selection import BenchInputError, default_serdes, parse_serde_arg
