"""The ``turboquant`` serde as published under the ``lmcache.serde`` entry-point group."""

from __future__ import annotations

from typing import Any

from lmserde import DataKind, SerdeOption, SerdePair, SerdeSizeContract, SerdeSpec, processor_options

from lmserde_turboquant import codec_native
from lmserde_turboquant.config import (
    BACKENDS,
    MAX_BLOCK_SIZE,
    MAX_SKIPPED_LAYERS,
    TurboQuantConfig,
)
from lmserde_turboquant.presets import PRESETS
from lmserde_turboquant.serde import TurboQuantDeserializer, TurboQuantSerializer

__all__ = ["TURBOQUANT_SPEC", "create_turboquant_pair", "create_turboquant_processor"]

_CONFIG_FIELDS = ("preset", "head_dim", "block_size", "skip_first_layers", "skip_last_layers",
                  "backend")


def _check_field(name: str) -> Any:
    """A ``check`` for one option: build a default config with that field to validate it."""

    def check(value: Any) -> None:
        TurboQuantConfig(**{name: value})

    return check


def create_turboquant_pair(kwargs: dict[str, Any]) -> SerdePair:
    """The serializer/deserializer pair for validated kwargs (every declared option present)."""
    config = TurboQuantConfig(**{name: kwargs[name] for name in _CONFIG_FIELDS if name in kwargs})
    if config.backend == "auto":
        codec_native.log_fallback_once()
    return SerdePair(TurboQuantSerializer(config), TurboQuantDeserializer(config))


TURBOQUANT_SPEC = SerdeSpec(
    pair_factory=create_turboquant_pair,
    description="TurboQuant KV quantization (LMCache presets, TurboQuant-MSE values); CPU or GPU",
    options=(
        SerdeOption("preset", str, "turboquant_k8v4",
                    "compression preset: " + ", ".join(PRESETS),
                    check=_check_field("preset")),
        SerdeOption("head_dim", int, 128, "per-head size D (power of two, 8..1024)",
                    check=_check_field("head_dim")),
        SerdeOption("block_size", int, 16, "tokens per block of the compressed layout",
                    minimum=1, maximum=MAX_BLOCK_SIZE),
        SerdeOption("skip_first_layers", int, 2, "leading layers stored raw (bit-exact)",
                    minimum=0, maximum=MAX_SKIPPED_LAYERS),
        SerdeOption("skip_last_layers", int, 2, "trailing layers stored raw (bit-exact)",
                    minimum=0, maximum=MAX_SKIPPED_LAYERS),
        SerdeOption("backend", str, "auto",
                    "codec backend: auto (native C when built, for CPU tensors), native, torch "
                    "(all write identical bytes); formerly 'implementation'",
                    choices=BACKENDS, check=_check_field("backend"),
                    identity=False, deprecated_names=("implementation",)),
        *processor_options(max_workers=1),
    ),
    size_contract=SerdeSizeContract.EXACT,
    lossy=True,
    consumes=frozenset({DataKind.KV_TENSORS}),
    produces=DataKind.BYTES,
    consumes_hint="turboquant quantizes KV tensors (it reads their layers, heads and dtype); "
    "put it first in a chain, e.g. [turboquant, aesgcm].",
    format_version=1,
    native_status=codec_native.native_status,
)

#: The processor core builds from :func:`create_turboquant_pair` for validated kwargs.
create_turboquant_processor = TURBOQUANT_SPEC.processor_factory("turboquant")
