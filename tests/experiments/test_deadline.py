"""Deadline propagation: 50,000 ms wasted with per-tier timeouts, at least 95 % less with an
absolute deadline passed down."""

from __future__ import annotations

import pytest

from labs.experiments import get
from labs.experiments.deadline import Deadline, DeadlineParams

EXPERIMENT = get("deadline")


@pytest.fixture(scope="module")
def result():
    return EXPERIMENT.run(DeadlineParams())


def test_defaults_are_the_issues():
    params = DeadlineParams()
    assert (params.requests, params.client_timeout_ms, params.server_work_ms) == (100, 100, 500)


def test_per_tier_timeouts_waste_50000_ms_on_100_responses_nobody_receives(result):
    tier = result.metrics["per_tier"]
    assert tier["wasted_ms"] == 50_000
    assert tier["unreceived"] == 100
    assert tier["client_timeouts"] == 100
    assert result.figure("wasted_per_tier").text == "50,000 ms"


def test_a_propagated_deadline_wastes_at_least_95_percent_less(result):
    assert result.metrics["deadline"]["wasted_ms"] <= 0.05 * 50_000
    assert result.metrics["saved_pct"] >= 95


def test_pinned_deadline_figures(result):
    dl = result.metrics["deadline"]
    assert dl == dl | {"wasted_ms": 400, "cancelled": 4, "dropped": 96, "unreceived": 0}
    assert dl["busy_until_ms"] == 100


def test_work_that_fits_the_timeout_is_answered_in_both_modes():
    result = EXPERIMENT.run(DeadlineParams(server_work_ms=50, workers=100))
    for mode in ("per_tier", "deadline"):
        assert result.metrics[mode]["answered"] == 100
        assert result.metrics[mode]["wasted_ms"] == 0


def test_the_saving_depends_on_server_capacity():
    # With a worker per request nothing queues: cancelling at the deadline saves 400 of 500 ms.
    result = EXPERIMENT.run(DeadlineParams(workers=100))
    assert result.metrics["deadline"]["wasted_ms"] == 100 * 100
    assert result.metrics["saved_pct"] == pytest.approx(80)


def test_deadline_edge_is_inclusive_like_the_engine():
    deadline = Deadline.after(1.0, 100)
    assert not deadline.expired(1.0999)
    assert deadline.expired(1.1)
    assert deadline.left_ms(1.05) == pytest.approx(50)
    assert deadline.left_ms(2.0) == 0


def test_chart_is_cumulative_waste(result):
    (chart,) = result.charts
    per_tier, deadline = chart.series
    assert per_tier.values[-1] == 50_000
    assert deadline.values[-1] == 400
    assert list(per_tier.values) == sorted(per_tier.values)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"requests": 0}, "requests: must be between 1 and 1000 (got 0)"),
        (
            {"client_timeout_ms": -100},
            "client_timeout_ms: must be between 1 and 10000 ms (got -100)",
        ),
        ({"server_work_ms": 0}, "server_work_ms: must be between 1 and 10000 ms (got 0)"),
        ({"workers": 101}, "workers: must be between 1 and 100 (got 101)"),
        ({"interval_ms": -1}, "interval_ms: must be between 0 and 1000 ms (got -1)"),
    ],
)
def test_bad_input_is_refused(raw, message):
    params, problems = EXPERIMENT.parse(raw)
    assert params is None
    assert [str(p) for p in problems] == [message]
