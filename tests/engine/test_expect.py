"""Expectations on scenario steps: every measure passes and fails where it should, the
validator names bad measures and values with the allowed forms, and the CLI exits 1 on a
failed expectation with the expected and observed values. A step's question is the
classroom's: tests/labs/test_grading.py."""

from __future__ import annotations

import copy
import json

import pytest

from labs.engine import run_scenario, validate_scenario
from labs.engine.expect import EXPECT_MEASURES

from .helpers import SCENARIOS, load_scenario
from .test_cli import run_cli

SHIPPED = sorted(p.stem for p in SCENARIOS.glob("*.json"))

# The tour's second burst (dependency down), observed in virtual time.
RIGHT = {
    "breaker_after": "open",
    "calls": 6,
    "succeeded": 0,
    "failed": 3,
    "fast_failed": 3,
    "attempts_total": 12,
    "dependency_hits": 12,
    # no chain: the dependency is the leaf
    "leaf_hits": 12,
    "backoff_ms_total": 525,
    "attempts": [4, 4, 4, 0, 0, 0],
    "transitions": [{"from": "closed", "to": "open", "call": 9}],
    # the measures of hosts, B, bulkheads, fallbacks and side effects: none configured
    "degraded": 0,
    "transition_count": 1,
    "effects_applied": 0,
    "a_succeeded": 0,
    "b_succeeded": 0,
    "rejected_bulkhead": 0,
    "pool_timeout": 0,
    "wait_ms_total": 0,
    # what the user saw: 3 failed after trying and 3 refused by the breaker are 6 errors
    "errors": 6,
    "throttled": 0,
    "fallback_expired": 0,
}
WRONG = {
    "breaker_after": "closed",
    "calls": 5,
    "succeeded": 1,
    "failed": 6,
    "fast_failed": 0,
    "attempts_total": 24,
    "dependency_hits": 24,
    "leaf_hits": 24,
    "backoff_ms_total": 600,
    "attempts": [4, 4, 4, 4, 4, 4],
    "transitions": [{"from": "closed", "to": "open", "call": 10}],
    "degraded": 3,
    "transition_count": 2,
    "effects_applied": 6,
    "a_succeeded": 6,
    "b_succeeded": 1,
    "rejected_bulkhead": 2,
    "pool_timeout": 1,
    "wait_ms_total": 100,
    "errors": 3,
    "throttled": 1,
    "fallback_expired": 2,
}


def _tour_with(expect):
    script = load_scenario("tour")
    script["steps"][2]["expect"] = expect
    return script


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_carries_expectations_that_hold(name):
    out = run_scenario(load_scenario(name))
    assert out["checks"], f"{name} has no expectations"
    assert [c for c in out["checks"] if not c["ok"]] == []


@pytest.mark.parametrize("measure", EXPECT_MEASURES)
def test_each_measure_passes_when_right(measure):
    out = run_scenario(_tour_with({measure: RIGHT[measure]}))
    (check,) = [c for c in out["checks"] if c["step"] == 2]
    assert check["ok"], check
    assert check["observed"] == RIGHT[measure]


@pytest.mark.parametrize("measure", EXPECT_MEASURES)
def test_each_measure_fails_when_wrong(measure):
    out = run_scenario(_tour_with({measure: WRONG[measure]}))
    (check,) = [c for c in out["checks"] if c["step"] == 2]
    assert not check["ok"]
    assert check["expected"] == WRONG[measure] and check["observed"] == RIGHT[measure]


def test_a_tolerance_widens_a_number():
    inside = run_scenario(_tour_with({"backoff_ms_total": {"value": 500, "tolerance": 25}}))
    outside = run_scenario(_tour_with({"backoff_ms_total": {"value": 500, "tolerance": 24}}))
    assert [c["ok"] for c in inside["checks"] if c["step"] == 2] == [True]
    assert [c["ok"] for c in outside["checks"] if c["step"] == 2] == [False]


def test_transitions_may_leave_out_from_and_call():
    out = run_scenario(_tour_with({"transitions": [{"to": "open"}]}))
    assert [c["ok"] for c in out["checks"] if c["step"] == 2] == [True]


def test_a_wrong_expectation_makes_the_cli_exit_1_with_both_values(tmp_path):
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(_tour_with({"dependency_hits": 24})))
    done = run_cli("run", path)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("2 ")]
    assert line.split() == ["2", "2", "dependency_hits", "24", "12", "FAILED"]
    as_json = run_cli("run", path, "--json")
    assert as_json.returncode == 1
    (check,) = [c for c in json.loads(as_json.stdout)["checks"] if c["step"] == 2]
    assert (check["expected"], check["observed"], check["ok"]) == (24, 12, False)


def test_the_shipped_tour_exits_0_with_its_checks():
    done = run_cli("run", SCENARIOS / "tour.json")
    assert done.returncode == 0
    assert "15 of 15 expectations met" in done.stdout


@pytest.mark.parametrize(
    ("expect", "field", "words"),
    [
        ({"attempt_count": 3}, "steps[2].expect.attempt_count", ["unknown measure", "dependency_hits"]),
        ({"breaker_after": "ajar"}, "steps[2].expect.breaker_after", ["closed", "half_open"]),
        ({"failed": -1}, "steps[2].expect.failed", ["between 0 and"]),
        ({"failed": "three"}, "steps[2].expect.failed", ["tolerance"]),
        ({"backoff_ms_total": {"value": 5, "slack": 1}}, "steps[2].expect.backoff_ms_total", ["value, tolerance"]),
        ({"attempts": [4, "x"]}, "steps[2].expect.attempts", ["integers 0 to 100"]),
        ({"transitions": [{"to": "gone"}]}, "steps[2].expect.transitions", ["closed, open, half_open"]),
        ({}, "steps[2].expect", ["at least one measure"]),
    ],
)  # fmt: skip
def test_bad_expectations_are_named_with_the_allowed_forms(expect, field, words):
    problems = validate_scenario(_tour_with(expect))
    (problem,) = problems
    assert problem.field == field
    assert all(w in problem.message for w in words), problem.message


def test_expect_is_refused_on_a_wait_step():
    script = load_scenario("tour")
    script["steps"][4] = {"wait_ms": 2000, "expect": {"calls": 1}}
    (problem,) = validate_scenario(script)
    assert problem.field == "steps[4].expect" and "unknown field" in problem.message


def test_a_scenario_round_trips_its_expectations():
    from labs.engine import parse_scenario

    script = load_scenario("tour")
    again = parse_scenario(script).to_dict()
    assert [s.get("expect") for s in again["steps"]] == [
        s.get("expect") for s in copy.deepcopy(script)["steps"]
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_has_instructions_that_teach(name):
    text = load_scenario(name).get("instructions", "")
    for part in ("**What to do.**", "**What to watch.**", "**Why.**", "**Compare with the seeds"):
        assert part in text, f"{name}: no {part}"


def test_instructions_are_checked_as_text():
    script = load_scenario("tour")
    script["instructions"] = ["not", "text"]
    (problem,) = validate_scenario(script)
    assert problem.field == "instructions" and "20000 characters" in problem.message
