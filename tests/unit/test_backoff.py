"""The one backoff formula: capped exponential growth, jitter within [0.5, 1.0) of nominal."""

from __future__ import annotations

import random

import pytest

from sunk.base.backoff import Backoff, delay


@pytest.mark.parametrize(("attempt", "rand", "expected"), [
    (0, 0.0, 0.05),  # half the initial delay at the lowest draw
    (0, 0.5, 0.075),
    (1, 0.0, 0.1),
    (3, 0.0, 0.4),
    (4, 0.0, 0.5),  # capped at 1.0 nominal, so 0.5 at the lowest draw
    (10, 0.0, 0.5),
])
def test_delay_doubles_then_caps(attempt, rand, expected):
    assert delay(attempt, 0.1, 1.0, rand) == pytest.approx(expected)


def test_delay_never_exceeds_the_cap_nor_falls_below_half_of_nominal():
    rng = random.Random(7)
    for attempt in range(40):
        nominal = min(2.0, 0.1 * 2**attempt)
        d = delay(attempt, 0.1, 2.0, rng.random())
        assert nominal / 2 <= d < nominal <= 2.0


def test_a_huge_attempt_count_does_not_overflow():
    assert delay(10**6, 0.5, 30.0, 0.0) == 15.0


def test_backoff_grows_per_failure_and_reset_starts_over():
    b = Backoff(0.5, 30.0, rand=lambda: 0.0)
    assert [b.next() for _ in range(8)] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    b.reset()
    assert b.next() == 0.25


def test_backoff_uses_its_random_source_for_jitter():
    draws = iter([0.0, 0.999])
    b = Backoff(1.0, 10.0, rand=lambda: next(draws))
    assert b.next() == 0.5
    assert b.next() == pytest.approx(2.0 * (0.5 + 0.999 / 2))
