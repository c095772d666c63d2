"""The ``fp8`` serde as published under the ``lmcache.serde`` entry point: options and factory."""

from __future__ import annotations

from typing import Any

from lmserde import DataKind, SerdeOption, SerdePair, SerdeSizeContract, SerdeSpec, processor_options

from lmserde_fp8 import kernel
from lmserde_fp8.formats import check_fp8_dtype_name, resolve_fp8_dtype
from lmserde_fp8.scaling import ScalingMode
from lmserde_fp8.serde import Fp8QuantizationDeserializer, Fp8QuantizationSerializer

__all__ = ["FP8_OPTIONS", "FP8_SPEC", "create_fp8_pair", "create_fp8_processor"]

FP8_OPTIONS: tuple[SerdeOption, ...] = (
    SerdeOption(
        "fp8_dtype",
        str,
        "float8_e4m3fn",
        "fp8 format: float8_e4m3fn (range +-448, 3 mantissa bits) or float8_e5m2 "
        "(range +-57344, 2 mantissa bits)",
        check=check_fp8_dtype_name,
    ),
    SerdeOption(
        "scaling",
        str,
        ScalingMode.NONE.value,
        "none: LMCache's headerless cast; per_tensor / per_token: a power-of-two scale per object "
        "or per token row, kept in a small versioned header (avoids saturation and underflow)",
        choices=tuple(m.value for m in ScalingMode),
    ),
    *processor_options(max_workers=1),
)


def create_fp8_pair(kwargs: dict[str, Any]) -> SerdePair:
    """The serializer/deserializer pair for validated kwargs (every option present)."""
    fp8_dtype = resolve_fp8_dtype(kwargs["fp8_dtype"])
    scaling = ScalingMode(kwargs["scaling"])
    kernel.log_fallback_once()
    return SerdePair(Fp8QuantizationSerializer(fp8_dtype, scaling),
                     Fp8QuantizationDeserializer(fp8_dtype, scaling))


FP8_SPEC = SerdeSpec(
    pair_factory=create_fp8_pair,
    description="fp8 cast (LMCache-compatible bytes), fast CPU codec, optional scaling",
    options=FP8_OPTIONS,
    size_contract=SerdeSizeContract.EXACT,
    lossy=True,
    consumes=frozenset({DataKind.KV_TENSORS}),
    produces=DataKind.BYTES,
    consumes_hint="fp8 quantizes KV tensors (it reads their dtype); put it first in a chain, "
    "e.g. [fp8, aesgcm].",
    format_version=1,
    native_status=kernel.native_status,
)

#: The processor core builds from :func:`create_fp8_pair` for validated kwargs.
create_fp8_processor = FP8_SPEC.processor_factory("fp8")
