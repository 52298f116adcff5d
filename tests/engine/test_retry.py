"""Backoff and jitter formulas, Retry-After, the retry budget arithmetic."""

from __future__ import annotations

import random

import pytest

from labs.engine import MemoryStore
from labs.engine.config import RetryBudgetConfig
from labs.engine.retry import (
    RetryBudget,
    backoff_ms,
    counts_against_dependency,
    is_retryable,
    jitter_bounds_ms,
    jittered_backoff_ms,
    retry_delay,
)


def test_backoff_doubles_from_base_and_is_capped():
    assert [backoff_ms(n, 25, 500) for n in range(1, 8)] == [25, 50, 100, 200, 400, 500, 500]
    assert backoff_ms(1000, 25, 500) == 500
    with pytest.raises(ValueError):
        backoff_ms(0, 25, 500)


@pytest.mark.parametrize(
    ("jitter", "n", "previous", "bounds"),
    [
        ("none", 2, None, (50, 50)),
        ("full", 2, None, (0, 50)),
        ("equal", 2, None, (25, 50)),
        ("decorrelated", 2, None, (25, 75)),
        ("decorrelated", 2, 300, (25, 500)),
        ("proportional", 2, None, (40, 60)),
        ("proportional", 6, None, (400, 500)),
    ],
)
def test_jitter_bounds(jitter, n, previous, bounds):
    assert jitter_bounds_ms(jitter, n, 25, 500, previous) == pytest.approx(bounds)


def test_jitter_draws_stay_in_bounds_and_are_seeded():
    for jitter in ["none", "full", "equal", "decorrelated", "proportional"]:
        a = [jittered_backoff_ms(jitter, n, 25, 500, random.Random(3)) for n in range(1, 7)]
        b = [jittered_backoff_ms(jitter, n, 25, 500, random.Random(3)) for n in range(1, 7)]
        assert a == b
        for n, value in enumerate(a, start=1):
            lo, hi = jitter_bounds_ms(jitter, n, 25, 500)
            assert lo <= value <= hi <= 500


def test_unknown_jitter_is_refused():
    with pytest.raises(ValueError):
        jittered_backoff_ms("wobbly", 1, 25, 500, random.Random())


def test_retry_after_is_honoured_up_to_the_cap():
    rng = random.Random(0)
    assert retry_delay("none", 1, 25, 500, rng, retry_after_ms=300).ms == 300
    capped = retry_delay("none", 1, 25, 500, rng, retry_after_ms=1500)
    assert capped.ms == 500
    assert capped.formula == "Retry-After 1500 ms capped at 500 (backoff alone: 25 ms)"
    assert retry_delay("none", 3, 25, 500, rng, retry_after_ms=10).ms == 100  # backoff is longer


def test_delay_formula_explains_the_arithmetic():
    assert retry_delay("none", 2, 25, 500, random.Random()).formula == "min(500, 25 x 2^1)"
    assert "full jitter" in retry_delay("full", 2, 25, 500, random.Random()).formula


def test_classification():
    assert all(
        is_retryable(e) and counts_against_dependency(e) for e in ["503", "500", "timeout", "429"]
    )
    assert not is_retryable("400") and not counts_against_dependency("400")


def test_budget_starts_full_deposits_ratio_and_withdraws_whole_tokens():
    budget = RetryBudget(RetryBudgetConfig(token_ratio=0.25, max_tokens=2), store=MemoryStore())
    assert budget.deposit() == 2  # full, capped
    assert budget.try_withdraw() == (True, 1)
    assert budget.try_withdraw() == (True, 0)
    assert budget.try_withdraw() == (False, 0)
    for expected in [0.25, 0.5, 0.75, 1.0]:
        assert budget.deposit() == expected
    assert budget.try_withdraw() == (True, 0)
