"""The classroom's questions: what a lesson step may ``ask``, the lesson validator, and the
grade of a student's answer against what the step's burst did.

A question belongs to the classroom, not the engine: the engine measures a burst
(:func:`labs.engine.expect.observe`) and carries a step's ``ask`` unread. Pure Python."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from labs.engine.expect import CHOICE_MEASURES, MAX_NUMBER, NUMBER_MEASURES
from labs.engine.validate import STEP_ACTIONS, Problem, validate_scenario

__all__ = ["ASK_MEASURES", "grade_answer", "validate_ask", "validate_lesson"]

#: The measures a question may ask about: a choice (the breaker's state) or a number.
ASK_MEASURES = (*CHOICE_MEASURES, *NUMBER_MEASURES)
_ASK_KEYS = ("question", "measure", "tolerance", "explanation")
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
        if measure in CHOICE_MEASURES:
            problems.append((f"{path}.tolerance", f"a choice ({measure}) takes no tolerance"))
        elif not _number(tolerance) or not 0 <= tolerance <= MAX_NUMBER:
            problems.append((f"{path}.tolerance", f"must be a number between 0 and {MAX_NUMBER}"))
    return problems


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


def grade_answer(ask: Mapping[str, Any], answer: Any, observed: Mapping[str, Any]) -> bool:
    """Whether ``answer`` (a number, or a breaker state for a choice) is right for the
    observation (:func:`labs.engine.expect.observe`), within the question's tolerance."""
    measure = ask["measure"]
    value = observed[measure]
    if measure in CHOICE_MEASURES:
        return answer == value
    return _number(answer) and abs(answer - value) <= float(ask.get("tolerance", 0)) + 1e-9
