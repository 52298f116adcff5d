"""Backoff strategies under contention: at 100 clients full and equal jitter need at most half
the calls of no backoff and of plain exponential, and plain exponential takes the longest."""

from __future__ import annotations

import random

import pytest

from labs.experiments import get
from labs.experiments.contention import STRATEGIES, STUDY_CALLS_AT_100, ContentionParams, simulate

EXPERIMENT = get("contention")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(ContentionParams())


def test_defaults_sweep_n_from_10_to_200_with_the_headline_at_100():
    params = ContentionParams()
    assert min(params.clients) == 10 and max(params.clients) == 200
    assert params.focus == 100


def test_jitter_halves_the_calls_at_100_clients(result):
    calls = result.metrics["focus_calls"]
    for jittered in ("full", "equal"):
        assert calls[jittered] * 2 <= calls["none"]
        assert calls[jittered] * 2 <= calls["exponential"]


def test_plain_exponential_takes_the_longest_at_100_clients(result):
    times = result.metrics["focus_times"]
    assert result.metrics["slowest"] == "exponential"
    assert all(times["exponential"] > times[s] for s in STRATEGIES if s != "exponential")


def test_calls_are_close_to_the_study_rerun(result):
    # One seeded trial per point; the study averaged 100. Within 10 % of its figures.
    for strategy, expected in STUDY_CALLS_AT_100.items():
        assert result.metrics["focus_calls"][strategy] == pytest.approx(expected, rel=0.10)


def test_pinned_default_calls(result):
    assert result.metrics["focus_calls"] == {
        "none": 2436,
        "exponential": 1849,
        "full": 798,
        "equal": 803,
        "decorrelated": 991,
    }


@pytest.mark.parametrize("seed", range(5))
def test_the_conclusion_holds_for_other_seeds(seed):
    metrics = EXPERIMENT.run(ContentionParams(clients=(100,), seed=seed)).metrics
    calls = metrics["focus_calls"]
    assert max(calls["full"], calls["equal"]) * 2 <= min(calls["none"], calls["exponential"])
    assert metrics["slowest"] == "exponential"


def test_two_line_charts_over_every_n(result):
    calls_chart, time_chart = result.charts
    assert calls_chart.kind == time_chart.kind == "line"
    assert calls_chart.x == (10, 20, 50, 100, 150, 200)
    assert [s.name for s in calls_chart.series] == [
        "no backoff",
        "exponential",
        "full jitter",
        "equal jitter",
        "decorrelated jitter",
    ]
    assert len(result.rows) == 6 * 5


def test_focus_outside_the_list_is_run_too():
    result = EXPERIMENT.run(ContentionParams(clients=(10, 20), focus=30))
    assert result.charts[0].x == (10, 20, 30)


def test_every_client_writes_exactly_once_so_calls_are_at_least_n():
    for strategy in STRATEGIES:
        calls, completion = simulate(20, strategy, random.Random(1))
        assert calls >= 20
        assert completion > 0


def test_one_client_never_conflicts():
    assert simulate(1, "none", random.Random(1))[0] == 1


def test_same_seed_same_numbers(result):
    assert EXPERIMENT.run(ContentionParams()).to_dict() == result.to_dict()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"clients": "1"},
            "clients: must be 1 to 12 whole numbers separated by commas, each between 2 and 500 (got 1)",
        ),
        (
            {"clients": 5},
            "clients: must be 1 to 12 whole numbers separated by commas, each between 2 and 500 (got 5)",
        ),
        (
            {"clients": "10,x"},
            "clients: must be 1 to 12 whole numbers separated by commas, each between 2 and 500 (got '10,x')",
        ),
        ({"focus": 1000}, "focus: must be between 2 and 500 (got 1000)"),
        ({"trials": 0}, "trials: must be between 1 and 20 (got 0)"),
        ({"net_sd_ms": -2}, "net_sd_ms: must be between 0 and 1000 ms (got -2)"),
        (
            {"base_ms": 100, "cap_ms": 10},
            "cap_ms: must be between base_ms (100) and 60000 ms (got 10)",
        ),
    ],
)
def test_bad_input_is_refused(raw, message):
    params, problems = EXPERIMENT.parse(raw)
    assert params is None
    assert [str(p) for p in problems] == [message]


def test_a_sweep_too_large_is_refused():
    params, problems = EXPERIMENT.parse({"clients": "400,500", "trials": 2})
    assert params is None
    assert str(problems[0]).startswith("clients: too large a sweep")
