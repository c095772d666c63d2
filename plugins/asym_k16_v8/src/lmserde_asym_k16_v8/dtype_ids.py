"""Dtype ids of the EncodedKV header (LMCache's ``DTYPE_TO_INT`` numbering).

Id 0 stands for "no dtype" (``None``); id 1 is unassigned. ``torch.half`` is ``torch.float16``, so
the alias needs no entry of its own.
"""

from __future__ import annotations

import torch

__all__ = ["DTYPE_TO_ID", "ID_TO_DTYPE", "dtype_from_id", "dtype_to_id"]

DTYPE_TO_ID: dict[torch.dtype | None, int] = {
    None: 0,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.float32: 4,
    torch.float64: 5,
    torch.uint8: 6,
    torch.float8_e4m3fn: 7,
    torch.float8_e5m2: 8,
}

ID_TO_DTYPE: dict[int, torch.dtype | None] = {v: k for k, v in DTYPE_TO_ID.items()}


def dtype_to_id(dtype: torch.dtype | None) -> int:
    """The header id of ``dtype``; ``ValueError`` for a dtype the format cannot name."""
    try:
        return DTYPE_TO_ID[dtype]
    except KeyError:
        names = ", ".join(str(d).removeprefix("torch.") for d in DTYPE_TO_ID if d is not None)
        raise ValueError(
            f"dtype {dtype} has no EncodedKV dtype id; the format names: {names}"
        ) from None


def dtype_from_id(dtype_id: int) -> torch.dtype | None:
    """The dtype behind header id ``dtype_id``; ``ValueError`` for an unknown id."""
    try:
        return ID_TO_DTYPE[dtype_id]
    except KeyError:
        known = ", ".join(str(i) for i in sorted(ID_TO_DTYPE))
        raise ValueError(f"unknown EncodedKV dtype id {dtype_id} (known ids: {known})") from None
