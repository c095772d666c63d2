"""Lloyd-Max scalar codebooks for the coordinates of a randomly rotated unit vector.

After a random rotation each coordinate of a unit vector in ``D`` dimensions is close to
``N(0, 1/D)``; the codebook is the Lloyd-Max (MSE-optimal) scalar quantizer of that Gaussian.

Two solvers exist, and each preset names the one it uses:

* ``"exact"``: the Lloyd-Max fixed point computed with closed-form Gaussian cell moments
  (``erf``), iterated to convergence. Used by our own ``tq*`` presets.
* ``"lmcache"``: a replica of LMCache's numerical solver (trapezoid rule with 200 steps, outer
  cell edges at +-10.5 sigma, at most 200 iterations). Its float32 boundaries decide the stored
  indices, so the LMCache-compatible presets use it to produce LMCache's bytes. It is up to
  ~2e-3 (in units of sigma) away from the exact fixed point at 3 and 4 bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import torch

__all__ = ["Codebook", "CodebookSolver", "lloyd_max_codebook", "solve_exact", "solve_lmcache"]

CodebookSolver = Literal["exact", "lmcache"]

# LMCache solver settings.
_LMC_MAX_ITER = 200
_LMC_TOL = 1e-10
_LMC_STEPS = 200
_LMC_INIT_HALF_WIDTH = 3.5  # initial centroids span +-3.5 sigma
_LMC_EDGE_FACTOR = 3.0  # outer cell edges at +-3 * 3.5 sigma
_LMC_MIN_CELL_MASS = 1e-15

# Exact solver settings (unit Gaussian; scaled by sigma afterwards).
_EXACT_MAX_ITER = 100_000
_EXACT_TOL = 1e-13


@dataclass(frozen=True)
class Codebook:
    """A scalar quantizer: ``2**bits`` increasing float32 centroids and the midpoints between them.

    A value ``y`` maps to index ``count(boundaries <= y)``; index ``i`` decodes to
    ``centroids[i]``. Treat the tensors as read-only: codebooks are cached and shared.
    """

    head_dim: int
    bits: int
    solver: CodebookSolver
    centroids: torch.Tensor
    boundaries: torch.Tensor


def _check_args(head_dim: int, bits: int) -> None:
    if head_dim < 1 or not 1 <= bits <= 8:
        raise ValueError(f"codebook needs head_dim >= 1 and 1 <= bits <= 8, got {head_dim}, {bits}")


def _midpoints(centroids: list[float]) -> list[float]:
    return [(centroids[i] + centroids[i + 1]) / 2.0 for i in range(len(centroids) - 1)]


def solve_lmcache(head_dim: int, bits: int) -> tuple[list[float], list[float]]:
    """LMCache's Lloyd-Max solver for ``N(0, 1/head_dim)``, reproduced operation for operation.

    Centroids start uniform over +-3.5 sigma. Each iteration takes the cell edges at the centroid
    midpoints (outer edges +-10.5 sigma) and moves each centroid to its cell's conditional mean,
    both integrals by the trapezoid rule on 200 sub-intervals summed left to right (a cell with
    mass <= 1e-15 keeps its centroid). It stops once no centroid would move by 1e-10 or more
    (keeping the centroids *before* that last update) or after 200 iterations.
    Returns ``(centroids, boundaries)`` in double precision.
    """
    _check_args(head_dim, bits)
    n_levels = 2**bits
    sigma2 = 1.0 / head_dim
    sigma = math.sqrt(sigma2)
    coeff = 1.0 / math.sqrt(2 * math.pi * sigma2)
    two_sigma2 = 2 * sigma2

    def cell_moments(a: float, b: float) -> tuple[float, float]:
        # Both trapezoid sums share the pdf samples; each sum keeps LMCache's order.
        h = (b - a) / _LMC_STEPS
        pa = coeff * math.exp(-a * a / two_sigma2)
        pb = coeff * math.exp(-b * b / two_sigma2)
        mass = 0.5 * (pa + pb)
        moment = 0.5 * (a * pa + b * pb)
        for i in range(1, _LMC_STEPS):
            x = a + i * h
            p = coeff * math.exp(-x * x / two_sigma2)
            mass += p
            moment += x * p
        return moment * h, mass * h

    lo, hi = -_LMC_INIT_HALF_WIDTH * sigma, _LMC_INIT_HALF_WIDTH * sigma
    centroids = [lo + (hi - lo) * (i + 0.5) / n_levels for i in range(n_levels)]
    for _ in range(_LMC_MAX_ITER):
        edges = [lo * _LMC_EDGE_FACTOR, *_midpoints(centroids), hi * _LMC_EDGE_FACTOR]
        updated = []
        for i in range(n_levels):
            moment, mass = cell_moments(edges[i], edges[i + 1])
            updated.append(moment / mass if mass > _LMC_MIN_CELL_MASS else centroids[i])
        if max(abs(u - c) for u, c in zip(updated, centroids)) < _LMC_TOL:
            break
        centroids = updated
    return centroids, _midpoints(centroids)


def solve_exact(head_dim: int, bits: int) -> tuple[list[float], list[float]]:
    """The Lloyd-Max fixed point for ``N(0, 1/head_dim)`` from closed-form cell moments.

    For the unit Gaussian a cell ``[a, b]`` has mass ``Phi(b) - Phi(a)`` and first moment
    ``phi(a) - phi(b)``; iterate centroid = moment / mass (outer edges at infinity) until no
    centroid moves by 1e-13, then scale by ``sigma = 1/sqrt(head_dim)``. The result is
    symmetric by construction (the positive half is solved, the negative half mirrored).
    """
    _check_args(head_dim, bits)
    n_levels = 2**bits
    half = n_levels // 2

    def phi(x: float) -> float:
        return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)

    def cdf(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2.0))

    # Positive half only: centroids c_0 < ... < c_{half-1} start uniform over (0, 4), edge at 0.
    pos = [(i + 0.5) * 4.0 / half for i in range(half)]
    for _ in range(_EXACT_MAX_ITER):
        edges = [0.0, *[(pos[i] + pos[i + 1]) / 2.0 for i in range(half - 1)], math.inf]
        updated = []
        for i in range(half):
            a, b = edges[i], edges[i + 1]
            mass = cdf(b) - cdf(a) if b != math.inf else 0.5 * math.erfc(a / math.sqrt(2.0))
            moment = phi(a) - (phi(b) if b != math.inf else 0.0)
            updated.append(moment / mass)
        moved = max(abs(u - c) for u, c in zip(updated, pos))
        pos = updated
        if moved < _EXACT_TOL:
            break
    sigma = 1.0 / math.sqrt(head_dim)
    centroids = [-c * sigma for c in reversed(pos)] + [c * sigma for c in pos]
    return centroids, _midpoints(centroids)


@lru_cache(maxsize=64)
def lloyd_max_codebook(head_dim: int, bits: int, solver: CodebookSolver = "exact") -> Codebook:
    """The cached float32 codebook for ``head_dim``, ``bits`` and ``solver``."""
    if solver == "exact":
        centroids, boundaries = solve_exact(head_dim, bits)
    elif solver == "lmcache":
        centroids, boundaries = solve_lmcache(head_dim, bits)
    else:
        raise ValueError(f"unknown codebook solver {solver!r}; expected 'exact' or 'lmcache'")
    return Codebook(
        head_dim=head_dim,
        bits=bits,
        solver=solver,
        centroids=torch.tensor(centroids, dtype=torch.float32),
        boundaries=torch.tensor(boundaries, dtype=torch.float32),
    )
