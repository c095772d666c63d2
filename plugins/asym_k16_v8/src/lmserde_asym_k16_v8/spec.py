"""The published serdes: ``asym_k16_v8`` and ``asym_k16_v8_v_only`` (entry points in ``lmcache.serde``).

Both are ``UPPER_BOUND`` (the header allowance is larger than a real header), so they run only on
L2 adapters that report stored object sizes (``fs``). ``max_workers`` defaults to 4: LMCache found
a single worker caused a 20x p99 regression for these serdes. ``asym_k16_v8_v_only`` declares
split-tier placement (``StoragePlacementMode.KV_SPLIT_TIER``): an adapter configured with it keeps
K in L1 and stores V alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from lmserde import (
    DataKind,
    SerdeOption,
    SerdePair,
    SerdeSizeContract,
    SerdeSpec,
    StoragePlacementMode,
    processor_options,
)
from lmserde_fp8 import log_fallback_once, native_status

from lmserde_asym_k16_v8.codec import AsymCodec
from lmserde_asym_k16_v8.dtype_ids import DTYPE_TO_ID
from lmserde_asym_k16_v8.quantization import SUPPORTED_FP8_DTYPES, SUPPORTED_SCALE_DTYPES
from lmserde_asym_k16_v8.scale_scope import parse_scale_scope
from lmserde_asym_k16_v8.serdes import (
    AsymK16V8MultiDeserializer,
    AsymK16V8MultiSerializer,
    AsymK16V8VOnlyMultiDeserializer,
    AsymK16V8VOnlyMultiSerializer,
)

__all__ = [
    "ASYM_K16_V8_SPEC",
    "ASYM_K16_V8_V_ONLY_SPEC",
    "DEFAULT_MAX_WORKERS",
    "create_asym_k16_v8",
    "create_asym_k16_v8_v_only",
    "resolve_dtype",
]

DEFAULT_MAX_WORKERS = 4


def resolve_dtype(name: str, option: str, allowed: tuple[torch.dtype, ...]) -> torch.dtype:
    """``torch.<name>`` if it is one of ``allowed``; ``ValueError`` otherwise.

    An attribute that is not a torch dtype raises ``"Unknown torch dtype: 'x'"`` (LMCache's text).
    """
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"Unknown torch dtype: {name!r}")
    if dtype not in allowed:
        supported = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise ValueError(f"{option} {name!r} is not supported by asym_k16_v8; supported: {supported}")
    return dtype


_K_TAG_DTYPES = tuple(d for d in DTYPE_TO_ID if d is not None)


def _check_fp8(name: str) -> None:
    resolve_dtype(name, "fp8_dtype", SUPPORTED_FP8_DTYPES)


def _check_scale_dtype(name: str) -> None:
    resolve_dtype(name, "scale_dtype", SUPPORTED_SCALE_DTYPES)


def _check_k_tag(name: str) -> None:
    resolve_dtype(name, "k_dtype_tag", _K_TAG_DTYPES)


def _check_scope(name: str) -> None:
    parse_scale_scope(name)


_COMMON_OPTIONS: tuple[SerdeOption, ...] = (
    SerdeOption("fp8_dtype", str, "float8_e4m3fn", "torch fp8 dtype of the V codes",
                check=_check_fp8),
    SerdeOption("scale_scope", str, "PER_TENSOR", "V scale granularity (ScaleScope name)",
                check=_check_scope),
    SerdeOption("scale_dtype", str, "float32", "dtype of the stored V scale",
                check=_check_scale_dtype),
    *processor_options(max_workers=DEFAULT_MAX_WORKERS),
)


_KV_HINT = ("asym_k16_v8 reads the K and V groups of a KV object; put it first in a chain, e.g. "
            "[asym_k16_v8, aesgcm].")


def _codec(kwargs: dict[str, Any], k_dtype_tag: str = "bfloat16") -> AsymCodec:
    return AsymCodec(
        fp8_dtype=resolve_dtype(str(kwargs.get("fp8_dtype", "float8_e4m3fn")), "fp8_dtype",
                                SUPPORTED_FP8_DTYPES),
        scale_dtype=resolve_dtype(str(kwargs.get("scale_dtype", "float32")), "scale_dtype",
                                  SUPPORTED_SCALE_DTYPES),
        scale_scope=parse_scale_scope(str(kwargs.get("scale_scope", "PER_TENSOR"))),
        k_dtype_tag=resolve_dtype(k_dtype_tag, "k_dtype_tag", _K_TAG_DTYPES),
    )


def _asym_pair(kwargs: dict[str, Any]) -> SerdePair:
    """The pair of ``asym_k16_v8`` (storage-only: K bit-exact, V fp8)."""
    codec = _codec(kwargs)
    log_fallback_once()
    return SerdePair(AsymK16V8MultiSerializer(codec), AsymK16V8MultiDeserializer(codec))


def _asym_v_only_pair(kwargs: dict[str, Any]) -> SerdePair:
    """The pair of ``asym_k16_v8_v_only`` (V alone as fp8; K stays elsewhere)."""
    codec = _codec(kwargs, str(kwargs.get("k_dtype_tag", "bfloat16")))
    log_fallback_once()
    return SerdePair(AsymK16V8VOnlyMultiSerializer(codec), AsymK16V8VOnlyMultiDeserializer(codec))


ASYM_K16_V8_SPEC = SerdeSpec(
    pair_factory=_asym_pair,
    description="K stored bit-exact, V as fp8 with a per-tensor scale (LMCache EncodedKV v1)",
    options=_COMMON_OPTIONS,
    size_contract=SerdeSizeContract.UPPER_BOUND,
    lossy=True,
    consumes=frozenset({DataKind.KV_TENSORS}),
    produces=DataKind.BYTES,
    consumes_hint=_KV_HINT,
    format_version=1,
    native_status=native_status,  # the fp8 codec of lmserde-fp8 does the elementwise work
)

#: The same contract as ``asym_k16_v8`` (size, kinds, format, native code); its own pair and the
#: ``k_dtype_tag`` option.
ASYM_K16_V8_V_ONLY_SPEC = replace(
    ASYM_K16_V8_SPEC,
    pair_factory=_asym_v_only_pair,
    description="V alone as fp8 with a per-tensor scale, K slot absent (LMCache EncodedKV v1)",
    options=(
        *_COMMON_OPTIONS,
        SerdeOption("k_dtype_tag", str, "bfloat16",
                    "K dtype id written in the header (informational; no K bytes are stored)",
                    check=_check_k_tag),
    ),
    placement=StoragePlacementMode.KV_SPLIT_TIER,  # K stays in L1; V alone goes to L2
)

#: The ``asym_k16_v8`` processor core builds from its pair (``max_workers`` default 4).
create_asym_k16_v8 = ASYM_K16_V8_SPEC.processor_factory("asym_k16_v8")
#: The ``asym_k16_v8_v_only`` processor core builds from its pair.
create_asym_k16_v8_v_only = ASYM_K16_V8_V_ONLY_SPEC.processor_factory("asym_k16_v8_v_only")
