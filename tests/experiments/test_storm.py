"""Retry storm: jitter cuts the burst factor at least 3x and the peak at least 2x."""

from __future__ import annotations

import dataclasses

import pytest

from labs.experiments import get
from labs.experiments.storm import StormParams

EXPERIMENT = get("storm")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(StormParams())


def test_defaults_are_the_issues():
    params = StormParams()
    assert (params.clients, params.retries, params.bin_ms) == (200, 4, 20)


def test_every_client_retries_every_time_in_both_modes(result):
    assert result.metrics["none"]["arrivals"] == 800
    assert result.metrics["full"]["arrivals"] == 800


def test_without_jitter_the_waves_are_synchronised(result):
    none = result.metrics["none"]
    assert none["peak"] == 200  # every client in the same bin
    assert none["duration_ms"] == 1700  # 4 x 50 ms latency + 100 + 200 + 400 + 800
    waves = [r for r in result.rows if r["mode"] == "no jitter"]
    assert [w["first_ms"] for w in waves] == [150, 400, 850, 1700]
    assert all(w["spread_ms"] == 0 for w in waves)


def test_jitter_cuts_burst_factor_at_least_3x_and_peak_at_least_2x(result):
    none, jittered = result.metrics["none"], result.metrics["full"]
    assert none["burst"] >= 3 * jittered["burst"]
    assert none["peak"] >= 2 * jittered["peak"]
    assert result.metrics["burst_cut"] >= 3
    assert result.metrics["peak_cut"] >= 2


def test_pinned_default_figures(result):
    assert result.figure("burst_none").text == "21.5x"
    assert result.figure("burst_jitter").text == "5.3x"
    assert result.figure("peak_jitter").value == 52


@pytest.mark.parametrize("seed", range(10))
def test_the_cut_holds_for_other_seeds(seed):
    metrics = EXPERIMENT.run(StormParams(seed=seed)).metrics
    assert metrics["burst_cut"] >= 3
    assert metrics["peak_cut"] >= 2


def test_same_seed_same_numbers_other_seed_other_numbers(result):
    assert EXPERIMENT.run(StormParams()).to_dict() == result.to_dict()
    assert EXPERIMENT.run(StormParams(seed=8)).checksum() != result.checksum()


def test_arrivals_per_bin_chart_sums_to_the_arrivals(result):
    (chart,) = result.charts
    assert [s.name for s in chart.series] == ["no jitter", "full jitter"]
    assert sum(chart.series[0].values) == 800
    assert sum(chart.series[1].values) == 800
    assert chart.x[1] - chart.x[0] == 20


@pytest.mark.parametrize("jitter", ["equal", "decorrelated", "proportional"])
def test_other_jitters_run(jitter):
    result = EXPERIMENT.run(dataclasses.replace(StormParams(), jitter=jitter, clients=50))
    assert result.metrics[jitter]["arrivals"] == 200


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"clients": 100000}, "clients: must be between 1 and 1000 (got 100000)"),
        ({"clients": 0}, "clients: must be between 1 and 1000 (got 0)"),
        ({"retries": 11}, "retries: must be between 1 and 10 (got 11)"),
        ({"base_ms": -1}, "base_ms: must be between 1 and 1000 ms (got -1)"),
        (
            {"jitter": "none"},
            "jitter: must be one of full, equal, decorrelated, proportional (got 'none')",
        ),
        (
            {"base_ms": 500, "cap_ms": 100},
            "cap_ms: must be between base_ms (500) and 10000 ms (got 100)",
        ),
    ],
)
def test_bad_input_is_refused(raw, message):
    params, problems = EXPERIMENT.parse(raw)
    assert params is None
    assert [str(p) for p in problems] == [message]


def test_too_many_bins_is_refused_naming_bin_ms_and_its_range():
    params, problems = EXPERIMENT.parse({"retries": 10, "cap_ms": 10000, "bin_ms": 1})
    assert params is None
    (problem,) = problems
    assert problem.field == "bin_ms"
    assert "must be between" in problem.message and "and 1000 ms for this run" in problem.message


def test_a_storm_too_large_is_refused_naming_retries_and_its_range():
    params, problems = EXPERIMENT.parse({"clients": 1000, "retries": 10})
    assert params is None
    assert [str(p) for p in problems] == [
        "retries: must be between 1 and 5 with 1000 clients (clients x retries is capped at "
        "5,000; got 10,000)"
    ]
    assert EXPERIMENT.parse({"clients": 1000, "retries": 5})[1] == []
