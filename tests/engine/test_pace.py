"""Lessons do not depend on how fast a person is: every shipped scenario, run by the engine's
CLI with a pause before each burst (a student reading the step and typing a prediction),
meets every expectation; a rate limit's window starts at its first attempt, not when it is
set; a step's ``situation`` says in words when the burst did not produce the lesson."""

from __future__ import annotations

import io
import json

import pytest

from labs.engine import run_scenario, validate_scenario
from labs.engine.cli import main
from labs.engine.expect import check_situation

from .helpers import SCENARIOS, load_scenario
from .test_dependency import dep

SHIPPED = sorted(p.stem for p in SCENARIOS.glob("*.json"))
#: Seconds of virtual time before every burst: none, a quick reader, a slow one, a coffee.
PAUSES = (0, 5, 20, 120)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), out=out, err=err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("pause", PAUSES)
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_meets_its_expectations_after_any_pause(name, pause):
    status, out, err = _cli(
        "run", str(SCENARIOS / f"{name}.json"), "--json", "--pause-before-burst", str(pause)
    )
    result = json.loads(out)
    failed = [c for c in result["checks"] if not c["ok"]]
    assert (status, failed, err) == (0, [], "")
    assert result["checks"], f"{name} checks nothing"


@pytest.mark.parametrize("name", SHIPPED)
def test_a_pause_before_one_burst_only_changes_no_expectation(name):
    """A pause before any single burst (the others at script speed), for every burst."""
    script = load_scenario(name)
    bursts = [i for i, step in enumerate(script["steps"]) if "burst" in step]
    for index in bursts:
        for pause_ms in (700, 3000, 15000):
            paused = load_scenario(name)
            paused["steps"].insert(index, {"wait_ms": pause_ms})
            failed = [c for c in run_scenario(paused)["checks"] if not c["ok"]]
            assert failed == [], (index, pause_ms)


def test_the_pause_is_virtual_time_added_before_each_burst():
    plain = run_scenario(load_scenario("tour"))
    paused = run_scenario(load_scenario("tour"), pause_before_burst_ms=20_000)
    assert paused["total_ms"] == pytest.approx(plain["total_ms"] + 3 * 20_000)
    assert [b["attempts"] for b in paused["bursts"]] == [b["attempts"] for b in plain["bursts"]]


def test_a_bad_pause_is_refused_by_name():
    status, _, err = _cli("run", str(SCENARIOS / "tour.json"), "--pause-before-burst", "-1")
    assert status == 2
    assert err.strip() == "--pause-before-burst: must be between 0 and 3600 seconds"


# -- the rate limit's window -------------------------------------------------------------------


def test_a_rate_limit_starts_at_its_first_attempt_not_when_it_is_set(store):
    d, clock = dep(store=store, mode="rate_limited", retry_after_ms=300, latency_ms=5)
    d.arm()
    clock.advance(60.0)  # a student reads the step for a minute
    first = d.attempt()
    assert (first.ok, first.error, first.retry_after_ms) == (False, "429", 295)
    clock.advance(0.2)
    assert d.attempt().retry_after_ms == pytest.approx(90)
    clock.advance(0.1)
    assert d.attempt().ok


def test_a_rate_limit_that_ran_out_stays_over_until_it_is_set_again(store):
    d, clock = dep(store=store, mode="rate_limited", retry_after_ms=300, latency_ms=5)
    d.arm()
    assert not d.attempt().ok
    clock.advance(1.0)
    assert d.attempt().ok
    d.arm()  # set again: a fresh window at the next attempt
    clock.advance(10.0)
    assert d.attempt().error == "429"


def test_an_outage_still_starts_when_it_is_set(store):
    d, clock = dep(store=store, mode="outage", down_for_ms=100, latency_ms=5)
    d.arm()
    clock.advance(1.0)
    assert d.attempt().ok


# -- situations --------------------------------------------------------------------------------


def test_a_missed_situation_is_a_failed_check_with_its_sentence():
    script = load_scenario("rate_limited_retry_after")
    # the student ran the last burst twice: the second meets no 429
    script["steps"].insert(2, {"burst": 1})
    result = run_scenario(script)
    [situation] = [c for c in result["checks"] if c["measure"] == "situation"]
    assert not situation["ok"]
    assert situation["observed"].startswith("The dependency answered without a 429")
    [observed] = [o for o in result["observed"] if o["step"] == 3]
    assert observed["missed"] == situation["observed"]


def test_the_fallback_lesson_says_when_the_cache_was_still_fresh():
    script = load_scenario("fallback_cached")
    script["steps"][3] = {"wait_ms": 1000}  # the student did not wait 3.5 s
    result = run_scenario(script)
    [situation] = [c for c in result["checks"] if c["measure"] == "situation" and c["step"] == 4]
    assert not situation["ok"]
    assert "still under 3 s old" in situation["observed"]


def test_check_situation_reads_min_and_max():
    situation = {"needs": {"throttled": {"min": 1}, "errors": {"max": 2}}, "missed": "No."}
    assert check_situation(situation, {"throttled": 1, "errors": 2}) == ""
    assert check_situation(situation, {"throttled": 0, "errors": 0}) == "No."
    assert check_situation(situation, {"throttled": 3, "errors": 3}) == "No."
    assert check_situation(None, {}) == ""


@pytest.mark.parametrize(
    ("situation", "problem"),
    [
        ({"needs": {"throttled": {"min": 1}}}, "steps[0].situation.missed: is required"),
        ({"needs": {"throttled": {"min": 3, "max": 1}}, "missed": "x"}, "min must be at most max"),
        ({"needs": {"speed": 1}, "missed": "x"}, "steps[0].situation.needs.speed: unknown measure"),
        ({"needs": {"throttled": 1}, "missed": "x", "why": 1}, "situation.why: unknown field"),
        ("later", 'steps[0].situation: must be an object {"needs"'),
    ],
)
def test_a_bad_situation_is_named_with_what_is_allowed(situation, problem):
    script = {"name": "s", "steps": [{"burst": 1, "situation": situation}]}
    assert any(problem in str(p) for p in validate_scenario(script)), validate_scenario(script)


def test_a_rate_limit_not_yet_started_survives_an_export_and_starts_on_replay(store):
    """A burst's start state (what the what-if replays from) keeps "not started yet"."""
    from labs.engine import MemoryStore

    d, _clock = dep(store=store, mode="rate_limited", retry_after_ms=300, latency_ms=5)
    d.arm()
    state = store.export_state()
    assert state["dependency"]["armed_at_us"] == -1
    copy = MemoryStore()
    copy.import_state(state)
    again, later = dep(store=copy, mode="rate_limited", retry_after_ms=300, latency_ms=5)
    later.advance(30.0)
    assert again.attempt().retry_after_ms == 295
