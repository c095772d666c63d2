"""Bit packing of codebook indices: layouts pinned against LMCache's, round trips."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_turboquant.bitpack import pack_indices, packed_size, unpack_indices


def test_four_bit_low_nibble_first() -> None:
    idx = torch.tensor([[1, 2, 3, 4, 15, 0]])
    assert pack_indices(idx, 4).tolist() == [[0x21, 0x43, 0x0F]]


def test_three_bit_little_endian_24_bit_words() -> None:
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 0, 7, 7, 7, 7, 7, 7, 7, 7]])
    packed = pack_indices(idx, 3)
    assert packed.shape == (1, 6)
    word = int(packed[0, 0]) | int(packed[0, 1]) << 8 | int(packed[0, 2]) << 16
    assert [(word >> (3 * j)) & 7 for j in range(8)] == [1, 2, 3, 4, 5, 6, 7, 0]
    assert packed[0, 3:].tolist() == [0xFF, 0xFF, 0xFF]


def test_two_bit_four_per_byte() -> None:
    idx = torch.tensor([[1, 2, 3, 0, 3, 3, 3, 3]])
    assert pack_indices(idx, 2).tolist() == [[0b00111001, 0xFF]]


@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from([1, 2, 3, 4, 8]), groups=st.integers(1, 6), rows=st.integers(0, 4),
       seed=st.integers(0, 2**31 - 1))
def test_round_trip(bits: int, groups: int, rows: int, seed: int) -> None:
    d = 8 * groups
    idx = torch.randint(0, 2**bits, (rows, d), generator=torch.Generator().manual_seed(seed))
    packed = pack_indices(idx, bits)
    assert packed.dtype == torch.uint8 and packed.shape == (rows, packed_size(d, bits))
    assert torch.equal(unpack_indices(packed, bits, d), idx)


def test_packed_sizes() -> None:
    assert [packed_size(128, b) for b in (2, 3, 4, 8)] == [32, 48, 64, 128]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="bit width"):
        pack_indices(torch.zeros(1, 8, dtype=torch.int64), 9)
    with pytest.raises(ValueError, match="whole bytes"):
        pack_indices(torch.zeros(1, 3, dtype=torch.int64), 3)
    with pytest.raises(ValueError, match="packed bytes"):
        unpack_indices(torch.zeros(1, 2, dtype=torch.uint8), 4, 8)
