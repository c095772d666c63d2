"""The sign-test interval of a median and its "within noise" verdict, on made-up numbers."""

from __future__ import annotations

import random

import pytest
from lmserde.bench.median_interval import median_interval


def test_twenty_samples_give_the_sixth_smallest_to_the_sixth_largest() -> None:
    # n = 20: P(6 <= B <= 14) = 0.9586 >= 0.95, P(7 <= B <= 13) = 0.8847 < 0.95
    values = list(range(1, 21))
    random.Random(7).shuffle(values)
    found = median_interval(values)
    assert (found.low, found.high, found.median, found.samples) == (6.0, 15.0, 10.5, 20)
    assert found.coverage == pytest.approx(0.958610, abs=1e-6)
    assert not found.includes_zero


def test_too_few_samples_give_the_whole_sample_and_say_what_it_covers() -> None:
    found = median_interval([3.0, 1.0, 2.0])
    assert (found.low, found.high) == (1.0, 3.0)
    assert found.coverage == pytest.approx(1 - 2 / 2**3)  # 0.75: below the 95 % asked for


def test_a_lower_confidence_narrows_the_interval() -> None:
    values = [float(v) for v in range(1, 21)]
    assert median_interval(values, 0.8).low == 7.0  # P(7 <= B <= 13) = 0.885 >= 0.8


def test_differences_around_zero_are_within_noise_and_a_steady_one_is_not() -> None:
    rng = random.Random(11)
    noisy = [rng.gauss(0.3, 3.0) for _ in range(20)]  # the noise swamps a 0.3 ms effect
    assert median_interval(noisy).includes_zero
    steady = [2.0 + rng.gauss(0.0, 0.2) for _ in range(20)]
    assert not median_interval(steady).includes_zero


@pytest.mark.parametrize("values,confidence", [([], 0.95), ([1.0], 0.0), ([1.0], 1.0)])
def test_bad_input_is_refused(values: list[float], confidence: float) -> None:
    with pytest.raises(ValueError):
        median_interval(values, confidence)
