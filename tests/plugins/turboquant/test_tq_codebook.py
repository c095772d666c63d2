"""Lloyd-Max codebooks: golden values, structure, LMCache's solver and caching."""

from __future__ import annotations

import math

import pytest
import torch
from lmserde_turboquant.codebook import lloyd_max_codebook, solve_exact, solve_lmcache

# centroids * sqrt(D), positive half: the Lloyd-Max quantizer of the unit Gaussian.
GOLDEN = {
    2: [0.4528, 1.5104],
    3: [0.2451, 0.7560, 1.3439, 2.1519],
    4: [0.1284, 0.3880, 0.6568, 0.9423, 1.2562, 1.6180, 2.0690, 2.7326],
}

# LMCache's numerical solver (trapezoid rule, 200 iterations) stops short of the fixed point at
# the outer centroids; these are its float32 outputs for D = 128, pinned.
LMCACHE_GOLDEN = {
    2: [0.45257, 1.50956],
    3: [0.24498, 0.75565, 1.34318, 2.15035],
    4: [0.12843, 0.38814, 0.65688, 0.94245, 1.25626, 1.61788, 2.06845, 2.73092],
}


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_exact_codebook_matches_golden_values(bits: int, head_dim: int) -> None:
    cb = lloyd_max_codebook(head_dim, bits, "exact")
    scaled = (cb.centroids.double() * math.sqrt(head_dim)).tolist()
    half = 2 ** (bits - 1)
    assert scaled[half:] == pytest.approx(GOLDEN[bits], abs=1e-3)
    assert scaled[:half] == pytest.approx([-c for c in reversed(GOLDEN[bits])], abs=1e-3)


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_lmcache_solver_values_are_pinned(bits: int) -> None:
    cb = lloyd_max_codebook(128, bits, "lmcache")
    scaled = (cb.centroids.double() * math.sqrt(128)).tolist()
    assert scaled[2 ** (bits - 1):] == pytest.approx(LMCACHE_GOLDEN[bits], abs=1e-5)
    # and it is close to, but not at, the fixed point (the reason for two solvers)
    assert scaled[-1] == pytest.approx(GOLDEN[bits][-1], abs=2.5e-3)


@pytest.mark.parametrize("solver", ["exact", "lmcache"])
@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_codebook_structure(solver: str, bits: int) -> None:
    cb = lloyd_max_codebook(128, bits, solver)  # type: ignore[arg-type]
    c, b = cb.centroids, cb.boundaries
    assert c.dtype == b.dtype == torch.float32
    assert c.shape == (2**bits,) and b.shape == (2**bits - 1,)
    assert bool((c[1:] > c[:-1]).all()) and bool((b[1:] >= b[:-1]).all())
    assert bool((b > c[:-1]).all()) and bool((b < c[1:]).all())
    mids = ((c[:-1].double() + c[1:].double()) / 2).float()
    assert torch.allclose(b, mids, rtol=0, atol=1e-7)
    assert torch.allclose(c, -c.flip(0), atol=1e-6)  # symmetric around zero


def test_exact_solver_is_a_fixed_point() -> None:
    # centroid = conditional mean of the Gaussian over its cell, in double precision
    centroids, boundaries = solve_exact(1, 3)
    edges = [-math.inf, *boundaries, math.inf]
    for i, c in enumerate(centroids):
        a, b = edges[i], edges[i + 1]
        pdf = [0.0 if math.isinf(x) else math.exp(-x * x / 2) / math.sqrt(2 * math.pi) for x in (a, b)]
        mass = 0.5 * (math.erf(b / math.sqrt(2)) - math.erf(a / math.sqrt(2)))
        assert c == pytest.approx((pdf[0] - pdf[1]) / mass, abs=1e-9)


def test_lmcache_solver_keeps_the_centroids_before_the_converged_step() -> None:
    # 1 bit converges quickly: the returned centroids are the pre-update ones (LMCache's loop)
    centroids, boundaries = solve_lmcache(128, 1)
    assert len(centroids) == 2 and len(boundaries) == 1
    assert centroids[1] * math.sqrt(128) == pytest.approx(0.7979, abs=1e-3)


def test_codebooks_are_cached() -> None:
    assert lloyd_max_codebook(128, 3, "exact") is lloyd_max_codebook(128, 3, "exact")
    assert lloyd_max_codebook(128, 3, "exact") is not lloyd_max_codebook(128, 3, "lmcache")


def test_invalid_codebook_arguments() -> None:
    with pytest.raises(ValueError, match="bits"):
        lloyd_max_codebook(128, 0)
    with pytest.raises(ValueError, match="solver"):
        lloyd_max_codebook(128, 2, "bogus")  # type: ignore[arg-type]
