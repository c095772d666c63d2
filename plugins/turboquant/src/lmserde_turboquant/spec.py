"""The ``turboquant`` serde as published under the ``lmcache.serde`` entry-point group."""

from __future__ import annotations

from typing import Any

from lmserde import (
    AsyncSerdeProcessor,
    SerdeOption,
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    max_workers_option,
)

from lmserde_turboquant.config import IMPLEMENTATIONS, TurboQuantConfig
from lmserde_turboquant.presets import PRESETS
from lmserde_turboquant.serde import TurboQuantDeserializer, TurboQuantSerializer

__all__ = ["TURBOQUANT_SPEC", "create_turboquant_processor"]

_CONFIG_FIELDS = ("preset", "head_dim", "block_size", "skip_first_layers", "skip_last_layers",
                  "implementation")


def _check_field(name: str) -> Any:
    """A ``check`` for one option: build a default config with that field to validate it."""

    def check(value: Any) -> None:
        TurboQuantConfig(**{name: value})

    return check


def create_turboquant_processor(kwargs: dict[str, Any]) -> SerdeProcessor:
    """Factory: a processor from validated kwargs (every declared option present)."""
    config = TurboQuantConfig(**{name: kwargs[name] for name in _CONFIG_FIELDS if name in kwargs})
    return AsyncSerdeProcessor(
        TurboQuantSerializer(config),
        TurboQuantDeserializer(config),
        kwargs.get("max_workers", 1),
        serde_type="turboquant",
    )


TURBOQUANT_SPEC = SerdeSpec(
    factory=create_turboquant_processor,
    description="TurboQuant KV quantization (LMCache presets, TurboQuant-MSE values); CPU or GPU",
    options=(
        SerdeOption("preset", str, "turboquant_k8v4",
                    "compression preset: " + ", ".join(PRESETS),
                    check=_check_field("preset")),
        SerdeOption("head_dim", int, 128, "per-head size D (power of two, 8..1024)",
                    check=_check_field("head_dim")),
        SerdeOption("block_size", int, 16, "tokens per block of the compressed layout",
                    minimum=1),
        SerdeOption("skip_first_layers", int, 2, "leading layers stored raw (bit-exact)",
                    minimum=0),
        SerdeOption("skip_last_layers", int, 2, "trailing layers stored raw (bit-exact)",
                    minimum=0),
        SerdeOption("implementation", str, "auto",
                    "codec: auto (native C when built, for CPU tensors), native, torch",
                    choices=IMPLEMENTATIONS, check=_check_field("implementation")),
        max_workers_option(1),
    ),
    size_contract=SerdeSizeContract.EXACT,
    lossy=True,
)
