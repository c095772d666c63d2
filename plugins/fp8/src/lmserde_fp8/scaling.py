"""Scaled modes: which rows share a scale, and the power-of-two scales themselves.

A scale is ``2**k`` with ``k`` an int8: dividing by it and multiplying by it are exact in float32
(barring float32 underflow), so a scaled round trip adds no rounding of its own, and the native
encoder may multiply by ``2**-k`` instead of dividing. ``k`` is the smallest exponent with
``amax / 2**k <= fmax`` (the largest finite ``|x|`` then maps into ``(fmax/2, fmax]``), limited so
that ``fmax * 2**k`` stays finite in the source dtype.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable, Sequence

import torch

from lmserde_fp8.formats import Fp8Format

__all__ = [
    "ScalingMode",
    "MIN_EXPONENT",
    "MAX_EXPONENT",
    "group_rows",
    "exponent_cap",
    "exponent_for",
    "scale_exponents",
    "exponents_to_scales",
]

#: Smallest stored exponent: 2**-126, the smallest normal float32.
MIN_EXPONENT = -126
#: Largest stored exponent.
MAX_EXPONENT = 126


class ScalingMode(str, enum.Enum):
    """How an object is scaled before the cast (the ``scaling`` option)."""

    NONE = "none"
    PER_TENSOR = "per_tensor"
    PER_TOKEN = "per_token"

    @property
    def wire_id(self) -> int:
        return {ScalingMode.PER_TENSOR: 1, ScalingMode.PER_TOKEN: 2}[self]

    @classmethod
    def from_wire(cls, wire_id: int) -> ScalingMode:
        for mode in (cls.PER_TENSOR, cls.PER_TOKEN):
            if mode.wire_id == wire_id:
                return mode
        raise ValueError(f"fp8 frame names an unknown scaling mode id {wire_id}")


def group_rows(shape: Sequence[int]) -> int:
    """Token rows of a group: the group split along its last dimension (a 0-d group is one row)."""
    numel = math.prod(shape)
    if numel == 0:
        return 0
    return numel // shape[-1] if len(shape) else 1


@functools.cache
def _dtype_cap(fmt: Fp8Format, dtype: torch.dtype) -> int:
    limit = torch.finfo(dtype).max
    k = 0
    while k < MAX_EXPONENT and fmt.max_finite * 2.0 ** (k + 1) <= limit:
        k += 1
    return k


def exponent_cap(fmt: Fp8Format, dtypes: Iterable[torch.dtype]) -> int:
    """Largest k with ``fmt.max_finite * 2**k`` finite in every dtype of ``dtypes``."""
    return min((_dtype_cap(fmt, d) for d in dtypes), default=MAX_EXPONENT)


def exponent_for(amax: float, fmt: Fp8Format, cap: int) -> int:
    """The exponent for one largest finite magnitude ``amax`` (scalar :func:`scale_exponents`)."""
    if amax <= 0.0:
        return 0
    mantissa, exponent = math.frexp(amax)
    fmax_mantissa, fmax_exponent = math.frexp(fmt.max_finite)
    k = exponent - fmax_exponent + (1 if mantissa > fmax_mantissa else 0)
    return max(MIN_EXPONENT, min(k, cap))


def scale_exponents(amax: torch.Tensor, fmt: Fp8Format, cap: int) -> torch.Tensor:
    """int8 exponents ``k`` for the largest finite magnitudes ``amax`` (float32, one per scale).

    ``cap``: the largest allowed ``k`` (:func:`exponent_cap` of the source dtypes). A zero
    ``amax`` (all zeros, or no finite value) gives ``k = 0``. The native kernels compute the same
    exponents (tested).
    """
    mantissa, exponent = torch.frexp(amax.to(torch.float32))
    fmax_mantissa, fmax_exponent = math.frexp(fmt.max_finite)
    k = exponent.to(torch.int32) - fmax_exponent + (mantissa > fmax_mantissa).to(torch.int32)
    k = torch.where(amax > 0, k, torch.zeros_like(k))
    return k.clamp(MIN_EXPONENT, cap).to(torch.int8)


def exponents_to_scales(exponents: torch.Tensor) -> torch.Tensor:
    """``2.0**k`` as a contiguous float32 tensor; ``ValueError`` for exponents out of range."""
    k = exponents.to(torch.int32)
    if k.numel() and (int(k.min()) < MIN_EXPONENT or int(k.max()) > MAX_EXPONENT):
        raise ValueError(
            f"fp8 frame holds a scale exponent outside [{MIN_EXPONENT}, {MAX_EXPONENT}]"
        )
    return torch.ldexp(torch.ones(k.numel(), dtype=torch.float32), k).contiguous()
