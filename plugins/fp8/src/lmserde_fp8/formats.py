"""The two fp8 formats and the float dtypes the codec reads and writes.

Everything numeric the rest of the package needs about a format lives here: its largest finite
value, which codes are NaN (and inf), and the bit patterns NaN codes decode to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "Fp8Format",
    "FP8_FORMATS",
    "FLOAT_KINDS",
    "fp8_format",
    "fp8_format_from_wire",
    "resolve_fp8_dtype",
    "float_kind",
    "check_fp8_dtype_name",
]

#: Kernel ids of the source/destination float dtypes (see csrc/fastcodec.c).
FLOAT_KINDS: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@dataclass(frozen=True)
class Fp8Format:
    """One fp8 format. ``kernel_id`` is its id in the C kernels; ``wire_id`` its id in frame headers."""

    dtype: torch.dtype
    name: str
    kernel_id: int
    wire_id: int
    max_finite: float
    exponent_bits: int
    mantissa_bits: int

    @property
    def nan_codes(self) -> frozenset[int]:
        """The codes that are NaN."""
        if self.dtype == torch.float8_e4m3fn:
            return frozenset((0x7F, 0xFF))
        return frozenset((0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF))

    def is_nan(self, codes: torch.Tensor) -> torch.Tensor:
        """Mask of NaN codes in a uint8 tensor."""
        magnitude = codes & 0x7F
        return magnitude == 0x7F if self.dtype == torch.float8_e4m3fn else magnitude > 0x7C


FP8_FORMATS: dict[torch.dtype, Fp8Format] = {
    torch.float8_e4m3fn: Fp8Format(torch.float8_e4m3fn, "float8_e4m3fn", 0, 1, 448.0, 4, 3),
    torch.float8_e5m2: Fp8Format(torch.float8_e5m2, "float8_e5m2", 1, 2, 57344.0, 5, 2),
}

_BY_NAME = {f.name: f for f in FP8_FORMATS.values()}
_BY_WIRE_ID = {f.wire_id: f for f in FP8_FORMATS.values()}


def fp8_format(dtype: torch.dtype) -> Fp8Format:
    """The format of ``dtype``; ``ValueError`` for anything but float8_e4m3fn / float8_e5m2."""
    fmt = FP8_FORMATS.get(dtype)
    if fmt is None:
        raise ValueError(
            f"fp8 dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {dtype!r}"
        )
    return fmt


def fp8_format_from_wire(wire_id: int) -> Fp8Format:
    """The format stored as ``wire_id`` in a frame header; ``ValueError`` if unknown."""
    fmt = _BY_WIRE_ID.get(wire_id)
    if fmt is None:
        raise ValueError(f"fp8 frame names an unknown fp8 dtype id {wire_id}")
    return fmt


def check_fp8_dtype_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is 'float8_e4m3fn' or 'float8_e5m2'.

    Unknown torch attributes keep LMCache's message ("Unknown torch dtype: 'x'"); known dtypes that
    are not one of the two fp8 formats are rejected here, at config validation, instead of failing
    at the first serialize as upstream does.
    """
    if name in _BY_NAME:
        return
    accepted = "'float8_e4m3fn' or 'float8_e5m2'"
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"Unknown torch dtype: '{name}' (fp8_dtype must be {accepted})")
    raise ValueError(f"fp8_dtype must be {accepted}; '{name}' is not a supported fp8 dtype")


def resolve_fp8_dtype(name: str) -> torch.dtype:
    """The torch dtype named ``name`` (validated with :func:`check_fp8_dtype_name`)."""
    check_fp8_dtype_name(name)
    return _BY_NAME[name].dtype


def float_kind(dtype: torch.dtype) -> int:
    """Kernel id of a source/destination float dtype; ``ValueError`` for unsupported dtypes."""
    kind = FLOAT_KINDS.get(dtype)
    if kind is None:
        raise ValueError(
            f"fp8 codec reads and writes torch.float32, torch.bfloat16 and torch.float16; "
            f"got {dtype!r}"
        )
    return kind
