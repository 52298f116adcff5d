"""The classroom's questions (labs/grading.py): a bad question is named with its field path
and the allowed values, checked where the engine checks the rest of a burst step and nowhere
else; the engine carries a question unread; an answer is graded against what the run
observed, within the question's tolerance."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from labs.engine import parse_scenario, run_scenario, validate_scenario
from labs.engine.expect import EXPECT_MEASURES
from labs.grading import (
    ASK_MEASURES,
    CLASS_MEASURES,
    grade_answer,
    recovery_observed,
    validate_lesson,
)
from labs.models import validate_scenario_script

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SHIPPED = sorted(p.stem for p in SCENARIOS.glob("*.json"))


def _load(name: str) -> dict:
    return json.loads((SCENARIOS / f"{name}.json").read_text())


def _tour_asking(ask) -> dict:
    script = _load("tour")
    script["steps"][2] = {"burst": 6, "ask": ask}
    return script


@pytest.mark.parametrize(
    ("ask", "field", "words"),
    [
        ({"question": "?", "measure": "luck"}, "steps[2].ask.measure", list(ASK_MEASURES)),
        ({"measure": "fast_failed"}, "steps[2].ask.question", ["required"]),
        ({"question": "?", "measure": "breaker_after", "tolerance": 1}, "steps[2].ask.tolerance", ["no tolerance"]),
        ({"question": "?", "measure": "failed", "answer": 3}, "steps[2].ask.answer", ["unknown field"]),
        ({"question": "?", "measure": "failed", "tolerance": -1}, "steps[2].ask.tolerance", ["between 0 and 1000000"]),
        ({"question": "x" * 301, "measure": "failed"}, "steps[2].ask.question", ["at most 300 characters"]),
        ({"question": "?", "measure": "failed", "explanation": 7}, "steps[2].ask.explanation", ["at most 2000"]),
        ("how many?", "steps[2].ask", ['"question": text, "measure": name']),
    ],
)  # fmt: skip
def test_bad_questions_are_named_with_the_allowed_values(ask, field, words):
    (problem,) = validate_lesson(_tour_asking(ask))
    assert problem.field == field
    assert all(w in problem.message for w in words), problem.message


def test_an_unknown_measure_reads_as_before_the_move():
    (problem,) = validate_lesson(_tour_asking({"question": "?", "measure": "luck"}))
    assert str(problem) == (
        f"steps[2].ask.measure: must be one of {', '.join(ASK_MEASURES)} (got 'luck')"
    )


def test_a_question_asks_a_choice_or_a_number_never_a_list():
    assert ASK_MEASURES[0] == "breaker_after"
    burst_measures = set(ASK_MEASURES) - set(CLASS_MEASURES)
    assert burst_measures == set(EXPECT_MEASURES) - {"attempts", "transitions"}
    assert CLASS_MEASURES == ("recovered",)
    for measure in ("attempts", "transitions"):
        assert validate_lesson(_tour_asking({"question": "?", "measure": measure}))


def test_the_engine_carries_a_question_unread():
    script = _tour_asking({"question": "?", "measure": "luck", "answer": 3})
    assert validate_scenario(script) == []
    assert parse_scenario(script).to_dict()["steps"][2]["ask"] == script["steps"][2]["ask"]
    assert [p.field for p in validate_lesson(script)] == [
        "steps[2].ask.answer",
        "steps[2].ask.measure",
    ]


def test_a_question_on_a_wait_step_is_refused_once_by_the_engine():
    script = _load("tour")
    script["steps"][4] = {"wait_ms": 2000, "ask": {"measure": "luck"}}
    (problem,) = validate_lesson(script)
    assert problem.field == "steps[4].ask" and "unknown field" in problem.message


def test_a_question_on_a_step_with_two_actions_is_not_checked_twice():
    script = _load("tour")
    script["steps"][2] = {"burst": 6, "wait_ms": 5, "ask": {"measure": "luck"}}
    (problem,) = validate_lesson(script)
    assert problem.field == "steps[2]" and "exactly one of" in problem.message


def test_each_steps_problems_stay_together_in_step_order():
    script = _load("tour")
    script["name"] = ""
    script["steps"][0] = {"burst": 6, "ask": {"question": "?", "measure": "luck"}}
    script["steps"][2] = {"burst": 99, "expect": {"calls": -1}, "ask": {"measure": "calls"}}
    script["steps"][4] = {"wait_ms": -1}
    assert [p.field for p in validate_lesson(script)] == [
        "name",
        "steps[0].ask.measure",
        "steps[2].expect.calls",
        "steps[2].burst",
        "steps[2].ask.question",
        "steps[4].wait_ms",
    ]


def test_steps_that_are_not_a_list_are_named_once():
    script = {**_load("tour"), "steps": {"burst": 6, "ask": {}}}
    (problem,) = validate_lesson(script)
    assert problem.field == "steps"
    assert [p.field for p in validate_lesson([])] == ["scenario"]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_is_a_valid_lesson(name):
    assert validate_lesson(_load(name)) == []


def test_the_tour_and_three_more_ask_questions_the_lesson_validator_accepts():
    asking = [n for n in SHIPPED if any("ask" in s for s in _load(n)["steps"])]
    assert "tour" in asking and len(asking) >= 4
    measures = {s["ask"]["measure"] for n in asking for s in _load(n)["steps"] if "ask" in s}
    assert measures <= set(ASK_MEASURES)


def test_answers_are_graded_against_the_observation():
    script = _load("tour")
    script["steps"][2]["expect"] = {"calls": 6}
    observed = run_scenario(script)["observed"][1]
    assert observed["step"] == 2 and observed["dependency_hits"] == 12
    ask = {"question": "?", "measure": "dependency_hits"}
    assert grade_answer(ask, 12, observed) and not grade_answer(ask, 24, observed)
    assert grade_answer({**ask, "tolerance": 2}, 14, observed)
    assert not grade_answer({**ask, "tolerance": 2}, 15, observed)
    state = {"question": "?", "measure": "breaker_after"}
    assert grade_answer(state, "open", observed) and not grade_answer(state, "closed", observed)


@pytest.mark.parametrize("answer", ["12", True, math.nan, math.inf, None])
def test_a_number_question_grades_only_a_finite_number(answer):
    ask = {"question": "?", "measure": "calls", "tolerance": 1_000_000}
    assert not grade_answer(ask, answer, {"calls": 1})


def test_the_scenario_field_validator_refuses_a_bad_question_by_its_path():
    validate_scenario_script(_load("tour"))
    with pytest.raises(ValidationError) as refused:
        validate_scenario_script(_tour_asking({"question": "?", "measure": "luck"}))
    (message,) = refused.value.messages
    assert message.startswith("steps[2].ask.measure: must be one of breaker_after, calls")


def test_grading_imports_no_django():
    code = "import sys, labs.grading\nassert 'django' not in sys.modules\nprint('ok')\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


# --- a question about the class's shared dependency: does it come back after the trigger? ----


def _edge_asking(ask) -> dict:
    script = _load("find_the_edge")
    script["steps"][1] = {"burst": 1, "ask": ask}
    return script


_RECOVERED = {"question": "Back within 20 s?", "measure": "recovered"}
_WORDS = "the seconds the dependency has to come back after the trigger ends"


@pytest.mark.parametrize(
    ("ask", "words"),
    [
        ({**_RECOVERED, "within_s": 0}, [_WORDS, "whole number from 1 to 120", "(got 0)"]),
        ({**_RECOVERED, "within_s": 121}, [_WORDS, "from 1 to 120", "(got 121)"]),
        ({**_RECOVERED, "within_s": 2.5}, [_WORDS, "whole number", "(got 2.5)"]),
        ({**_RECOVERED, "within_s": "20"}, [_WORDS, "(got '20')"]),
        ({**_RECOVERED, "within_s": True}, [_WORDS, "(got True)"]),
        (_RECOVERED, ["is required", _WORDS, "from 1 to 120"]),
        ({"question": "?", "measure": "calls", "within_s": 20}, ["only a question whether the dependency comes back"]),
    ],
)  # fmt: skip
def test_a_bad_seconds_to_come_back_is_named_with_its_range(ask, words):
    (problem,) = validate_lesson(_edge_asking(ask))
    assert problem.field == "steps[1].ask.within_s"
    assert all(w in problem.message for w in words), problem.message


def test_a_recovery_question_is_a_choice_and_takes_no_tolerance():
    (problem,) = validate_lesson(_edge_asking({**_RECOVERED, "within_s": 20, "tolerance": 1}))
    assert problem.field == "steps[1].ask.tolerance" and "no tolerance" in problem.message


def test_a_bad_recovery_question_refuses_the_file_and_changes_nothing(tmp_path):
    script = _edge_asking({**_RECOVERED, "within_s": 0})
    with pytest.raises(ValidationError) as refused:
        validate_scenario_script(script)
    assert "steps[1].ask.within_s" in str(refused.value) and "1 to 120" in str(refused.value)
    assert _load("find_the_edge")["steps"][1]["ask"]["within_s"] == 20


def test_the_shipped_edge_lesson_asks_before_each_trigger_at_a_rising_load():
    script = _load("find_the_edge")
    assert validate_lesson(script) == []
    asks = [step["ask"] for step in script["steps"]]
    assert len(asks) == 3 and all("burst" in step for step in script["steps"])
    assert {(a["measure"], a["within_s"]) for a in asks} == {("recovered", 20)}
    assert script["dependency"] == {"mode": "shared"}
    assert script["policy"]["max_attempts"] == 4 and script["policy"]["retry_budget"] is None


@pytest.mark.parametrize(
    ("headline", "observed"),
    [
        ({"state": "recovered", "recovery_s": 3}, ("yes", 3)),
        ({"state": "recovered", "recovery_s": 20}, ("yes", 20)),
        ({"state": "recovered", "recovery_s": 21}, ("no", 21)),
        ({"state": "not_recovered", "recovery_s": 20}, ("no", 20)),
        ({"state": "not_recovered", "recovery_s": 19}, None),
        ({"state": "triggered", "recovery_s": None}, None),
        ({"state": "no_traffic", "recovery_s": None}, None),
        ({"state": "healthy", "recovery_s": None}, None),
    ],
)  # fmt: skip
def test_the_recovery_clock_decides_yes_no_or_not_yet(headline, observed):
    got = recovery_observed(headline, 20)
    if observed is None:
        assert got is None
    else:
        assert (got["recovered"], got["recovery_s"]) == observed and got["within_s"] == 20
        ask = {**_RECOVERED, "within_s": 20}
        assert grade_answer(ask, observed[0], got)
        assert not grade_answer(ask, "no" if observed[0] == "yes" else "yes", got)
