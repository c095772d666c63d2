"""The random-sign Walsh-Hadamard rotation: seeded sign vectors and the fast transform.

The rotation of a vector ``x`` of power-of-two length ``D`` is ``H_D (s * x) / sqrt(D)``, with
``H_D`` the Sylvester Hadamard matrix (``[[H, H], [H, -H]]`` doubling of ``[[1]]``) and ``s`` a
vector of random signs. ``H_D / sqrt(D)`` is orthonormal and symmetric, so the inverse is
``s * (H_D y) / sqrt(D)``. The signs come from torch's CPU generator seeded with
``42 + 1337 * layer`` (absolute layer index), exactly as LMCache draws them.

:func:`fwht` computes ``x @ H_D`` in ``O(D log D)`` by butterflies ``(a, b) -> (a + b, a - b)``
over pair distances ``h = 1, 2, 4, ..., D/2`` in that order, one float32 rounding per addition.
This fixed operation order is part of the format definition: the native kernel performs the same
operations, so both produce identical bits.
"""

from __future__ import annotations

from functools import lru_cache

import torch

__all__ = [
    "SEED_BASE",
    "SEED_STRIDE",
    "fwht",
    "hadamard_matrix",
    "is_power_of_two",
    "layer_seed",
    "rotation_signs",
]

SEED_BASE = 42
SEED_STRIDE = 1337


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return n > 0 and n & (n - 1) == 0


def layer_seed(layer_idx: int) -> int:
    """The generator seed of absolute layer ``layer_idx``."""
    return SEED_BASE + layer_idx * SEED_STRIDE


@lru_cache(maxsize=1024)
def rotation_signs(head_dim: int, layer_idx: int) -> torch.Tensor:
    """The float32 CPU vector of +-1 signs of layer ``layer_idx`` (cached; do not modify)."""
    if not is_power_of_two(head_dim):
        raise ValueError(
            f"TurboQuant WHT rotation requires head_dim to be a power of two, got {head_dim}"
        )
    if layer_idx < 0:
        raise ValueError(f"layer index must be >= 0, got {layer_idx}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(layer_seed(layer_idx))
    bits = torch.randint(0, 2, (head_dim,), generator=gen, device="cpu")
    return bits.to(torch.float32) * 2 - 1


def hadamard_matrix(head_dim: int) -> torch.Tensor:
    """The dense, unnormalized float32 Sylvester Hadamard matrix (a reference for tests)."""
    if not is_power_of_two(head_dim):
        raise ValueError(f"Hadamard matrix needs a power-of-two size, got {head_dim}")
    h = torch.ones(1, 1, dtype=torch.float32)
    while h.shape[0] < head_dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalized fast Walsh-Hadamard transform of the rows of a float32 ``[N, D]`` tensor.

    Returns a new tensor equal to ``x @ hadamard_matrix(D)`` (up to float32 rounding, with the
    rounding fixed by the butterfly order described in the module docstring); ``x`` is unchanged.
    """
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError(f"fwht expects a float32 [N, D] tensor, got {x.dtype} {tuple(x.shape)}")
    n, d = x.shape
    if not is_power_of_two(d):
        raise ValueError(f"fwht needs a power-of-two row length, got {d}")
    cur = x
    bufs = (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))
    h = 1
    step = 0
    while h < d:
        out = bufs[step % 2]
        src = cur.reshape(n, d // (2 * h), 2, h)
        dst = out.view(n, d // (2 * h), 2, h)
        torch.add(src[:, :, 0], src[:, :, 1], out=dst[:, :, 0])
        torch.sub(src[:, :, 0], src[:, :, 1], out=dst[:, :, 1])
        cur = out
        h *= 2
        step += 1
    return cur if cur is not x else x.clone()
