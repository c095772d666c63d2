"""Bitmap, L2StoreResult and AdapterUsage: the small result types of the L2 contract."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lmserde.l2 import AdapterUsage, Bitmap, L2StoreResult


def test_bitmap_basics() -> None:
    b = Bitmap(5)
    assert b.to_list() == [False] * 5 and len(b) == 5
    b.set(0)
    b.set(1)
    b.set(3)
    assert b.test(3) and not b.test(2)
    assert b.count() == 3 and b.count_leading_ones() == 2
    b.clear(1)
    assert b.count_leading_ones() == 1
    assert b.set_indices() == [0, 3]
    assert b.gather([3, 2, 0]).to_list() == [True, False, True]
    assert b == Bitmap.from_bools([True, False, False, True, False])
    assert repr(b) == "Bitmap(10010)"
    assert (b & Bitmap.full(5)) == b
    assert Bitmap.full(3).count_leading_ones() == 3 and Bitmap(0).count_leading_ones() == 0


def test_bitmap_rejects_bad_indices_and_sizes() -> None:
    with pytest.raises(IndexError, match="bit 5 out of range"):
        Bitmap(5).set(5)
    with pytest.raises(IndexError):
        Bitmap(2).test(-1)
    with pytest.raises(ValueError, match="size"):
        Bitmap(-1)
    with pytest.raises(ValueError, match="combine"):
        _ = Bitmap(2) & Bitmap(3)


@given(st.lists(st.booleans(), max_size=200))
def test_bitmap_matches_a_list(flags: list[bool]) -> None:
    b = Bitmap.from_bools(flags)
    assert b.to_list() == flags
    assert b.count() == sum(flags)
    lead = next((i for i, f in enumerate(flags) if not f), len(flags))
    assert b.count_leading_ones() == lead


def test_store_result() -> None:
    ok = L2StoreResult(True, 123)
    assert ok == 123 and ok.is_successful() and ok.bytes_transferred() == 123
    bad = L2StoreResult(False, 99)
    assert bad == -1 and not bad.is_successful() and bad.bytes_transferred() == 0
    assert L2StoreResult(True, 0).is_successful()
    assert repr(bad) == "L2StoreResult(False, 0)" and repr(ok) == "L2StoreResult(True, 123)"
    with pytest.raises(ValueError, match=">= 0"):
        L2StoreResult(True, -1)


def test_usage_fraction() -> None:
    assert AdapterUsage(50, 200, MappingProxyType({})).usage_fraction == 0.25
    assert AdapterUsage(50, 0, MappingProxyType({})).usage_fraction == -1.0
