"""Breaker versus no breaker: calls into the dead dependency and waiting each cut at least
in half; immediate rejections reported."""

from __future__ import annotations

import dataclasses

import pytest

from labs.experiments import get
from labs.experiments.breaker import BreakerParams

EXPERIMENT = get("breaker")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(BreakerParams())


def test_defaults_are_the_issues():
    params = BreakerParams()
    assert (params.dead_ms, params.hang_ms) == (5000, 300)


def test_without_a_breaker_every_call_waits_for_its_503(result):
    none = result.metrics["none"]
    assert none["sick_calls"] == 17  # seed 004: 17
    assert none["waiting_ms"] == 17 * 300
    assert none["rejected"] == 0


def test_breaker_cuts_calls_into_the_dependency_and_waiting_at_least_in_half(result):
    none, brk = result.metrics["none"], result.metrics["breaker"]
    assert brk["sick_calls"] * 2 <= none["sick_calls"]
    assert brk["waiting_ms"] * 2 <= none["waiting_ms"]


def test_pinned_breaker_figures(result):
    brk = result.metrics["breaker"]
    # 5 failures open it; one probe at 3.54 s fails; the probe at 5.84 s finds it healthy.
    assert brk["sick_calls"] == 6
    assert brk["waiting_ms"] == 1800
    assert brk["rejected"] == 398  # seed 004: 407
    assert brk["first_success_ms"] > result.metrics["none"]["first_success_ms"]


def test_everything_succeeds_after_the_recovery(result):
    for mode in ("none", "breaker"):
        m = result.metrics[mode]
        assert m["calls"] == m["failed"] + m["rejected"] + m["succeeded"]


def test_waiting_chart_ends_at_the_total_waiting(result):
    (chart,) = result.charts
    assert chart.series[0].values[-1] == result.metrics["none"]["waiting_ms"]
    assert chart.series[1].values[-1] == result.metrics["breaker"]["waiting_ms"]


def test_deterministic_and_sensitive_to_parameters(result):
    assert EXPERIMENT.run(BreakerParams()).to_dict() == result.to_dict()
    shorter = EXPERIMENT.run(dataclasses.replace(BreakerParams(), cooldown_ms=1000))
    assert shorter.charts[0].checksum() != result.charts[0].checksum()


def test_several_callers():
    result = EXPERIMENT.run(BreakerParams(callers=5))
    assert result.metrics["breaker"]["sick_calls"] * 2 <= result.metrics["none"]["sick_calls"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"hang_ms": -300}, "hang_ms: must be between 1 and 5000 ms (got -300)"),
        ({"dead_ms": -1}, "dead_ms: must be between 0 and 60000 ms (got -1)"),
        ({"callers": 0}, "callers: must be between 1 and 20 (got 0)"),
        ({"cooldown_ms": 50}, "cooldown_ms: must be between 100 and 60000 ms (got 50)"),
        (
            {"failure_threshold": "x"},
            "failure_threshold: must be a whole number between 1 and 20 (got 'x')",
        ),
    ],
)
def test_bad_input_is_refused(raw, message):
    params, problems = EXPERIMENT.parse(raw)
    assert params is None
    assert [str(p) for p in problems] == [message]


def test_a_run_too_long_is_refused_naming_duration_and_its_range():
    params, problems = EXPERIMENT.parse({"callers": 20, "think_ms": 1, "duration_ms": 60000})
    assert params is None
    (problem,) = problems
    assert str(problem).startswith("duration_ms: must be between 100 and 500 ms with 20 caller(s)")
