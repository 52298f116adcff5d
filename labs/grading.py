"""The classroom's questions: what a lesson step may ``ask``, the lesson validator, and the
grade of a student's answer against what the step's burst did, or, for a question about the
class's shared dependency, against the storm panel's recovery clock after the next trigger.

A question belongs to the classroom, not the engine: the engine measures a burst
(:func:`labs.engine.expect.observe`) and carries a step's ``ask`` unread. Pure Python."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from labs.engine.expect import CHOICE_MEASURES, MAX_NUMBER, NUMBER_MEASURES
from labs.engine.validate import STEP_ACTIONS, Problem, validate_scenario

__all__ = [
    "ASK_MEASURES", "CLASS_MEASURES", "RECOVERY_ANSWERS", "WITHIN_S", "grade_answer",
    "recovery_observed", "validate_ask", "validate_lesson",
]  # fmt: skip

#: Measures of the class's shared dependency rather than of the step's burst: ``recovered``
#: asks whether the dependency comes back within ``within_s`` seconds of the end of the
#: first trigger fired after the answer is fixed, by the storm panel's recovery clock.
CLASS_MEASURES = ("recovered",)
#: The answers to ``recovered``, with the words a page shows for them.
RECOVERY_ANSWERS = (("yes", "Yes, it comes back"), ("no", "No, it stays down"))
#: ``within_s``'s range: the seconds after the trigger's end the dependency has to come back
#: (the storm panel shows the last 300 s; two minutes keeps a lesson moving).
WITHIN_S = (1, 120)
#: The measures a question may ask about: a choice (the breaker's state, whether the class's
#: dependency comes back) or a number.
ASK_MEASURES = (*CHOICE_MEASURES, *NUMBER_MEASURES, *CLASS_MEASURES)
_ASK_KEYS = ("question", "measure", "tolerance", "explanation", "within_s")
_MAX_TEXT = {"question": 300, "explanation": 2000}
_STEP_PATH = re.compile(r"steps\[(\d+)\]")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate_ask(value: Any, path: str) -> list[tuple[str, str]]:
    """Problems with a step's ``ask`` object, as (field, message) pairs."""
    if not isinstance(value, Mapping):
        return [(path, 'must be an object {"question": text, "measure": name}')]
    problems = [
        (f"{path}.{key}", f"unknown field (allowed: {', '.join(_ASK_KEYS)})")
        for key in value
        if key not in _ASK_KEYS
    ]
    for key in ("question", "explanation"):
        text = value.get(key, "")
        if key == "question" and (not isinstance(text, str) or not text.strip()):
            problems.append((f"{path}.question", "is required: a non-empty string"))
        elif not isinstance(text, str) or len(text) > _MAX_TEXT[key]:
            problems.append(
                (f"{path}.{key}", f"must be a string of at most {_MAX_TEXT[key]} characters")
            )
    measure = value.get("measure")
    if measure not in ASK_MEASURES:
        problems.append(
            (f"{path}.measure", f"must be one of {', '.join(ASK_MEASURES)} (got {measure!r})")
        )
    if "tolerance" in value:
        tolerance = value["tolerance"]
        if measure in (*CHOICE_MEASURES, *CLASS_MEASURES):
            problems.append((f"{path}.tolerance", f"a choice ({measure}) takes no tolerance"))
        elif not _number(tolerance) or not 0 <= tolerance <= MAX_NUMBER:
            problems.append((f"{path}.tolerance", f"must be a number between 0 and {MAX_NUMBER}"))
    problems += _within_problems(value, measure, path)
    return problems


def _within_problems(value: Mapping[str, Any], measure: Any, path: str) -> list[tuple[str, str]]:
    """Problems with ``within_s``: required by a ``recovered`` question (the seconds after the
    trigger's end the dependency has to come back), a whole number in :data:`WITHIN_S`, and
    refused on any other question."""
    low, high = WITHIN_S
    words = "the seconds the dependency has to come back after the trigger ends"
    if measure not in CLASS_MEASURES:
        if "within_s" in value:
            return [(f"{path}.within_s", "only a question whether the dependency comes back "
                                         "(measure recovered) takes seconds to come back")]  # fmt: skip
        return []
    within = value.get("within_s")
    if "within_s" not in value:
        return [(f"{path}.within_s", f"is required: {words}, a whole number from {low} to {high}")]
    if isinstance(within, bool) or not isinstance(within, int) or not low <= within <= high:
        return [
            (f"{path}.within_s", f"{words}: must be a whole number from {low} to {high} "
                                 f"(got {within!r})")
        ]  # fmt: skip
    return []


def validate_lesson(script: Any) -> list[Problem]:
    """Problems with a lesson's scenario script: the engine's (:func:`validate_scenario`)
    and those of every burst step's ``ask``, each step's problems together, steps in order.

    A question is checked where the engine checks the rest of a burst step: on a step whose
    one action is ``burst``, once the steps form a list the engine reads (elsewhere the
    engine already names the step or its ``ask`` field)."""
    problems = validate_scenario(script)
    if not isinstance(script, Mapping) or any(p.field == "steps" for p in problems):
        return problems
    asked = [
        Problem(field, message)
        for i, step in enumerate(script["steps"])
        if isinstance(step, Mapping)
        and "ask" in step
        and [a for a in STEP_ACTIONS if a in step] == ["burst"]
        for field, message in validate_ask(step["ask"], f"steps[{i}].ask")
    ]
    if not asked:
        return problems

    def step_of(problem: Problem) -> int:
        match = _STEP_PATH.match(problem.field)
        return int(match.group(1)) if match else -1

    return sorted(problems + asked, key=step_of)


def recovery_observed(headline: Mapping[str, Any], within_s: int) -> dict[str, Any] | None:
    """The ``recovered`` measure from the storm panel's recovery clock
    (``labs.presenters.storm.storm_headline``) read at the end of a trigger's window or
    earlier: ``yes`` once the clock says recovered within ``within_s`` seconds of the
    trigger's end, ``no`` once it says not recovered after ``within_s`` seconds; None while
    the clock cannot tell yet (the trigger runs, the seconds are not up) or measures nothing
    (no traffic through the trigger). ``recovery_s`` is the clock's figure."""
    state, seconds = headline.get("state"), headline.get("recovery_s")
    if state == "recovered" and seconds is not None and seconds <= within_s:
        return {"recovered": "yes", "recovery_s": seconds, "within_s": within_s}
    if state in ("recovered", "not_recovered") and seconds is not None and seconds >= within_s:
        return {"recovered": "no", "recovery_s": seconds, "within_s": within_s}
    return None


def grade_answer(ask: Mapping[str, Any], answer: Any, observed: Mapping[str, Any]) -> bool:
    """Whether ``answer`` (a number, a breaker state or ``yes``/``no`` for a choice) is right
    for the observation (:func:`labs.engine.expect.observe`, or :func:`recovery_observed`),
    within the question's tolerance."""
    measure = ask["measure"]
    value = observed[measure]
    if measure in (*CHOICE_MEASURES, *CLASS_MEASURES):
        return answer == value
    return _number(answer) and abs(answer - value) <= float(ask.get("tolerance", 0)) + 1e-9
