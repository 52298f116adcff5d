"""Every shipped scenario runs and tells the story its description promises."""

from __future__ import annotations

import pytest

from labs.engine import run_scenario

from .helpers import SCENARIOS, load_scenario


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_every_scenario_runs(name):
    out = run_scenario(load_scenario(name))
    assert out["calls"] and out["bursts"]


def test_success_threshold_closes_after_three_probes():
    out = run_scenario(load_scenario("success_threshold"))
    assert out["bursts"][1]["attempts"] == [1, 1, 1, 1]
    assert [c["probe"] for c in out["calls"][5:]] == [True, True, True, False]
    assert out["transitions"][-1]["reason"] == "3 probe successes (last: probe call #8)"


def test_rolling_ratio_opens_on_the_ratio():
    out = run_scenario(load_scenario("rolling_ratio"))
    assert out["transitions"][0]["reason"].startswith("failure ratio 50% >= 50%")
    assert out["transitions"][-1]["to"] == "closed"


def test_retry_budget_caps_retries():
    out = run_scenario(load_scenario("retry_budget"))
    assert out["bursts"][0]["attempts"] == [4, 1, 1, 1, 1, 2, 1, 1, 1, 1]


def test_deadline_stops_the_first_call_after_three_attempts():
    out = run_scenario(load_scenario("deadline"))
    assert [(c["attempts"], c["outcome"]) for c in out["calls"]] == [
        (3, "deadline_exceeded"),
        (2, "success"),
        (1, "success"),
    ]


def test_retry_after_is_honoured_then_capped():
    out = run_scenario(load_scenario("rate_limited_retry_after"))
    assert out["calls"][0]["backoff_ms"] == 295
    assert out["calls"][2]["attempts"] == 4 and out["calls"][2]["backoff_ms"] == 1485


def test_retry_outside_opens_inside_the_first_call():
    out = run_scenario(load_scenario("retry_outside"))
    assert out["bursts"][0]["attempts"] == [3, 0, 0, 0, 0, 0]
    assert out["transitions"][0]["call"] == 1
