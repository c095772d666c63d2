"""Bit packing of small unsigned indices into bytes.

Indices of ``bits`` bits form a little-endian bit stream: index ``j`` of a row occupies bits
``j*bits .. j*bits + bits - 1``, bit 0 being the least significant bit of byte 0. For 4 bits this
is "element 2i in the low nibble, 2i+1 in the high nibble"; for 3 bits "eight indices per three
bytes, a little-endian 24-bit word with element j at bits 3j..3j+2" (LMCache's layouts); for
2 bits "four indices per byte, element j at bits 2j".
"""

from __future__ import annotations

import math

import torch

__all__ = ["pack_indices", "packed_size", "unpack_indices"]


def _group(bits: int) -> tuple[int, int]:
    """(indices, bytes) of the smallest whole-byte group for ``bits``."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bit width must be in 1..8, got {bits}")
    g_bits = math.lcm(bits, 8)
    return g_bits // bits, g_bits // 8


def packed_size(n_indices: int, bits: int) -> int:
    """Bytes taken by ``n_indices`` packed indices: ``ceil(n_indices * bits / 8)``."""
    return (n_indices * bits + 7) // 8


def pack_indices(idx: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integer indices ``[N, D]`` (each ``< 2**bits``) into uint8 ``[N, packed_size(D)]``.

    ``D * bits`` must be a multiple of 8 (true for the power-of-two head sizes >= 8 used here).
    """
    n, d = idx.shape
    per_group, group_bytes = _group(bits)
    if (d * bits) % 8:
        raise ValueError(f"cannot pack {d} indices of {bits} bits into whole bytes")
    if bits == 8:
        return idx.to(torch.uint8)
    if d % per_group:
        # Fewer indices than one group: pad with zeros (the padding bits stay zero).
        pad = per_group - d % per_group
        idx = torch.nn.functional.pad(idx, (0, pad))
    groups = idx.to(torch.int32).view(n, idx.shape[1] // per_group, per_group)
    shifts = torch.arange(per_group, dtype=torch.int32, device=idx.device) * bits
    word = (groups << shifts).sum(dim=2, dtype=torch.int32)
    if group_bytes == 1:
        return word.to(torch.uint8)[:, : packed_size(d, bits)]
    parts = [((word >> (8 * k)) & 0xFF) for k in range(group_bytes)]
    out = torch.stack(parts, dim=2).to(torch.uint8).view(n, groups.shape[1] * group_bytes)
    return out[:, : packed_size(d, bits)]


def unpack_indices(packed: torch.Tensor, bits: int, d: int) -> torch.Tensor:
    """Inverse of :func:`pack_indices`: uint8 ``[N, >= packed_size(d)]`` to int64 ``[N, d]``."""
    n = packed.shape[0]
    per_group, group_bytes = _group(bits)
    nbytes = packed_size(d, bits)
    if packed.shape[1] < nbytes:
        raise ValueError(f"need {nbytes} packed bytes per row, got {packed.shape[1]}")
    if bits == 8:
        return packed[:, :d].to(torch.int64)
    n_groups = -(-d // per_group)
    raw = packed[:, :nbytes].to(torch.int64)
    if n_groups * group_bytes > nbytes:
        raw = torch.nn.functional.pad(raw, (0, n_groups * group_bytes - nbytes))
    raw = raw.view(n, n_groups, group_bytes)
    word = raw[:, :, 0].clone()
    for k in range(1, group_bytes):
        word |= raw[:, :, k] << (8 * k)
    shifts = torch.arange(per_group, dtype=torch.int64, device=packed.device) * bits
    idx = (word.unsqueeze(2) >> shifts) & ((1 << bits) - 1)
    return idx.view(n, n_groups * per_group)[:, :d]
