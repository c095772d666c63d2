"""``MovingRatio``: the ratio of sums over the last ``size`` observations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lmserde.adaptive import MovingRatio

_finite = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)


@given(size=st.integers(1, 20), pairs=st.lists(st.tuples(_finite, _finite), max_size=200))
def test_value_is_the_ratio_of_the_sums_of_the_last_observations(
        size: int, pairs: list[tuple[float, float]]) -> None:
    window = MovingRatio(size)
    for num, den in pairs:
        window.add(num, den)
    last = pairs[-size:]
    assert window.count == len(last)
    num, den = math.fsum(p[0] for p in last), math.fsum(p[1] for p in last)
    value = window.value()
    if not last or num <= 0:
        assert value is None
    elif den <= 0:
        assert value == math.inf
    else:
        assert value == pytest.approx(num / den, rel=1e-9, abs=1e-300)


def test_old_observations_leave_the_window() -> None:
    window = MovingRatio(3)
    for _ in range(3):
        window.add(100.0, 1.0)
    assert window.value() == 100.0
    for _ in range(3):
        window.add(10.0, 1.0)
    assert window.value() == 10.0


@pytest.mark.parametrize("pair", [(-1.0, 1.0), (1.0, -1.0), (math.inf, 1.0), (1.0, math.nan)])
def test_bad_observations_are_refused(pair: tuple[float, float]) -> None:
    window = MovingRatio(2)
    with pytest.raises(ValueError):
        window.add(*pair)
    assert window.count == 0


@pytest.mark.parametrize("size", [0, -1, True, 2.5])
def test_a_window_holds_at_least_one_observation(size: object) -> None:
    with pytest.raises(ValueError):
        MovingRatio(size)  # type: ignore[arg-type]
