"""The random-sign Walsh-Hadamard rotation: seeded signs and the fast transform."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_turboquant.rotation import (
    fwht,
    hadamard_matrix,
    is_power_of_two,
    layer_seed,
    rotation_signs,
)

# Signs of the first 32 coordinates at D = 128, from torch's CPU generator seeded 42 + 1337 * l.
PINNED_SIGNS = {
    0: "-+---+---+----+-+++-+-++++++++--",
    1: "+------+-++---+++-++++--+++-+--+",
    31: "+---+++-++--+++-+--+-+++-+-+++-+",
}


@pytest.mark.parametrize("d", [1, 2, 8, 64, 128, 256, 1024])
def test_fwht_equals_dense_hadamard_product(d: int) -> None:
    x = torch.randn(33, d, generator=torch.Generator().manual_seed(d))
    expected = x.double() @ hadamard_matrix(d).double()
    got = fwht(x)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-5 * math.sqrt(d))


@settings(max_examples=30, deadline=None)
@given(log_d=st.integers(0, 9), rows=st.integers(1, 5), seed=st.integers(0, 2**31 - 1))
def test_fwht_is_the_dense_product_for_any_rows(log_d: int, rows: int, seed: int) -> None:
    d = 2**log_d
    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(seed))
    dense = x.double() @ hadamard_matrix(d).double()
    assert torch.allclose(fwht(x).double(), dense, rtol=1e-5, atol=1e-4 * math.sqrt(d))
    # H H = D I: the transform is its own inverse up to the factor D
    assert torch.allclose(fwht(fwht(x)).double() / d, x.double(), atol=1e-5)


def test_fwht_leaves_its_input_unchanged_and_is_exact_on_small_integers() -> None:
    x = torch.arange(16, dtype=torch.float32).reshape(2, 8)
    before = x.clone()
    y = fwht(x)
    assert torch.equal(x, before)
    assert torch.equal(y, (x.double() @ hadamard_matrix(8).double()).float())


def test_fwht_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(torch.zeros(2, 6))
    with pytest.raises(ValueError, match="float32"):
        fwht(torch.zeros(2, 8, dtype=torch.float64))


def test_hadamard_matrix_is_sylvester_and_orthogonal() -> None:
    h = hadamard_matrix(4)
    assert h.tolist() == [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    h128 = hadamard_matrix(128).double()
    assert torch.equal(h128 @ h128.T, 128 * torch.eye(128, dtype=torch.float64))
    with pytest.raises(ValueError, match="power-of-two"):
        hadamard_matrix(12)


@pytest.mark.parametrize("layer", sorted(PINNED_SIGNS))
def test_signs_are_pinned_per_layer(layer: int) -> None:
    signs = rotation_signs(128, layer)
    assert layer_seed(layer) == 42 + 1337 * layer
    assert "".join("+" if s > 0 else "-" for s in signs[:32].tolist()) == PINNED_SIGNS[layer]


def test_signs_come_from_torchs_cpu_generator() -> None:
    gen = torch.Generator().manual_seed(42 + 1337 * 5)
    bits = torch.randint(0, 2, (64,), generator=gen)
    assert torch.equal(rotation_signs(64, 5), bits.float() * 2 - 1)


def test_signs_are_plus_minus_one_and_differ_between_layers() -> None:
    a, b = rotation_signs(128, 3), rotation_signs(128, 4)
    assert a.dtype == torch.float32 and set(a.tolist()) == {-1.0, 1.0}
    assert not torch.equal(a, b)
    assert rotation_signs(128, 3) is a  # cached


def test_rotation_is_orthonormal() -> None:
    s = rotation_signs(128, 7)
    rot = torch.diag(s.double()) @ hadamard_matrix(128).double() / math.sqrt(128)
    assert torch.allclose(rot @ rot.T, torch.eye(128, dtype=torch.float64), atol=1e-12)


def test_sign_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="power of two"):
        rotation_signs(96, 0)
    with pytest.raises(ValueError, match="layer index"):
        rotation_signs(128, -1)
    assert is_power_of_two(1) and is_power_of_two(1024)
    assert not is_power_of_two(0) and not is_power_of_two(-2) and not is_power_of_two(6)
