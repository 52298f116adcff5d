"""Retry amplification: 810 leaf hits exactly, and a per-tier budget cutting them 10x+."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labs.experiments import amplification, get
from labs.experiments.amplification import AmplificationParams

EXPERIMENT = get("amplification")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(AmplificationParams())


def test_defaults_are_the_issues():
    assert (
        AmplificationParams().tiers,
        AmplificationParams().attempts,
        AmplificationParams().requests,
    ) == (3, 3, 30)
    assert AmplificationParams().budget_pct == 10


def test_three_tiers_of_three_attempts_turn_30_requests_into_exactly_810_leaf_hits(result):
    assert result.metrics["leaf_hits"] == 810
    assert result.metrics["factor"] == 27
    assert result.figure("leaf_hits").text == "810"
    assert result.figure("factor").text == "27x"


def test_per_tier_retries_match_the_seed_table(result):
    tiers = result.metrics["runs"]["no_budget"]["tiers"]
    assert [t["received"] for t in tiers] == [30, 90, 270]
    assert [t["retries"] for t in tiers] == [60, 180, 540]
    assert [t["budget_denied"] for t in tiers] == [0, 0, 0]


def test_a_ten_percent_budget_per_tier_cuts_leaf_hits_at_least_tenfold(result):
    assert result.metrics["leaf_hits_budget"] * 10 <= 810
    assert result.metrics["fewer"] >= 10


def test_budget_arithmetic_as_documented(result):
    # Each tier: bucket starts at 10 tokens, +0.1 per call received, -1 per retry.
    tiers = result.metrics["runs"]["budget"]["tiers"]
    assert [t["received"] for t in tiers] == [30, 42, 56]
    assert [t["retries"] for t in tiers] == [12, 14, 15]
    assert result.metrics["leaf_hits_budget"] == 71
    for tier in tiers:
        assert tier["retries"] <= 10 + tier["received"] * 0.1
        assert tier["budget_denied"] > 0


def test_leaf_hits_are_requests_times_attempts_to_the_tiers():
    for tiers, attempts, requests in [(1, 1, 5), (2, 5, 7), (4, 3, 2), (6, 2, 3)]:
        params = AmplificationParams(tiers=tiers, attempts=attempts, requests=requests)
        assert EXPERIMENT.run(params).metrics["leaf_hits"] == requests * attempts**tiers


@settings(max_examples=25, deadline=None)
@given(
    tiers=st.integers(1, 4),
    attempts=st.integers(1, 4),
    requests=st.integers(1, 20),
    budget_pct=st.floats(0, 100),
    budget_tokens=st.floats(1, 100),
)
def test_the_budget_never_adds_hits_and_never_goes_below_one_attempt_per_call(
    tiers, attempts, requests, budget_pct, budget_tokens
):
    params = AmplificationParams(
        tiers=tiers,
        attempts=attempts,
        requests=requests,
        budget_pct=budget_pct,
        budget_tokens=budget_tokens,
    )
    metrics = EXPERIMENT.run(params).metrics
    assert metrics["leaf_hits"] == requests * attempts**tiers
    assert requests <= metrics["leaf_hits_budget"] <= metrics["leaf_hits"]
    for tier in metrics["runs"]["budget"]["tiers"]:
        assert tier["received"] <= tier["attempts"] <= tier["received"] * attempts
        assert tier["retries"] <= budget_tokens + tier["received"] * budget_pct / 100 + 1e-9


def test_same_parameters_same_numbers(result):
    again = EXPERIMENT.run(AmplificationParams())
    assert again.to_dict() == result.to_dict()


def test_chart_has_one_bar_per_tier_and_the_leaf(result):
    (chart,) = result.charts
    assert chart.x == ("tier 1", "tier 2", "tier 3", "leaf")
    assert chart.series[0].values == (30, 90, 270, 810)
    other = EXPERIMENT.run(dataclasses.replace(AmplificationParams(), tiers=4))
    assert other.charts[0].checksum() != chart.checksum()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tiers", 0, "tiers: must be between 1 and 6 (got 0)"),
        ("tiers", 7, "tiers: must be between 1 and 6 (got 7)"),
        ("attempts", 0, "attempts: must be between 1 and 5 (got 0)"),
        ("requests", 0, "requests: must be between 1 and 1000 (got 0)"),
        ("budget_pct", -1, "budget_pct: must be between 0 and 100 % (got -1)"),
        ("latency_ms", -5, "latency_ms: must be between 0 and 1000 ms (got -5)"),
    ],
)
def test_out_of_range_fields_are_refused_with_their_range(field, value, message):
    params, problems = EXPERIMENT.parse({field: value})
    assert params is None
    assert [str(p) for p in problems] == [message]


def test_a_run_too_large_is_refused_naming_requests_and_its_range():
    params, problems = EXPERIMENT.parse({"tiers": 6, "attempts": 5, "requests": 2})
    assert params is None
    (problem,) = problems
    assert problem.field == "requests"
    assert str(problem).startswith("requests: must be between 1 and 1 with 6 tiers of 5 attempts")
    assert amplification.validate(AmplificationParams(tiers=6, attempts=4, requests=2)) == []
