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
from labs.grading import ASK_MEASURES, grade_answer, validate_lesson
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
    assert set(ASK_MEASURES) == set(EXPECT_MEASURES) - {"attempts", "transitions"}
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
