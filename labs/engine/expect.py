"""Expectations and situations on a scenario's burst steps: what a step is observed to do.

``expect`` states facts the script's author checks after the run, and ``situation`` what must
have happened for the step's lesson to be there (else the lab grades nothing and says why).
Both name *measures*, which :func:`observe` computes from one burst's engine events, so the
CLI, the real worker and the lab page measure the same numbers. A step's ``ask``, the
lesson's question to a student, is the classroom's to check and grade (``labs.grading``),
against these same measures. docs/engine.md, "Expectations and questions", lists the
measures and the forms a value may take."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from labs.engine.breaker import STATES
from labs.engine.events import Event

__all__ = [
    "BREAKER_STATES",
    "CHOICE_MEASURES",
    "EXPECT_MEASURES",
    "MAX_NUMBER",
    "NUMBER_MEASURES",
    "check_expectations",
    "check_situation",
    "observe",
    "validate_expect",
    "validate_situation",
]

BREAKER_STATES = STATES
NUMBER_MEASURES = (
    "calls",
    "succeeded",
    "failed",
    "fast_failed",
    "attempts_total",
    "dependency_hits",
    "leaf_hits",
    "backoff_ms_total",
    "degraded",
    "transition_count",
    "effects_applied",
    "a_succeeded",
    "b_succeeded",
    "rejected_bulkhead",
    "pool_timeout",
    "wait_ms_total",
    "errors",
    "throttled",
    "fallback_expired",
)
CHOICE_MEASURES = ("breaker_after",)
LIST_MEASURES = ("attempts", "transitions")
EXPECT_MEASURES = (*CHOICE_MEASURES, *NUMBER_MEASURES, *LIST_MEASURES)
_TRANSITION_KEYS = ("from", "to", "call")
#: The largest number an expectation (or a tolerance) may state.
MAX_NUMBER = 1_000_000
_MAX_MISSED = 2000


def observe(events: Iterable[Event], breaker_before: str = "closed") -> dict[str, Any]:
    """Every measure of one burst from its events (``burst_start`` ... ``burst_end`` and
    what lies between). ``breaker_before`` is the state in force when the burst began: with
    no transition in the burst it is also the state after. ``breaker_after`` follows the
    dependency-wide breaker of A (a host's or B's transitions are counted in
    ``transition_count`` and listed in ``transitions``, but do not move it)."""
    calls: list[tuple[int, int]] = []
    transitions: list[dict[str, Any]] = []
    hits = 0
    effects = 0
    throttled = 0
    expired = 0
    state = breaker_before
    summary: dict[str, Any] = {}
    for e in events:
        if e.kind == "attempt":
            hits += 1
            effects += e.data.get("effect") == "applied"
            throttled += e.error == "429"
        elif e.kind == "call_result":
            calls.append((e.call or 0, int(e.data.get("attempts", e.attempt or 0))))
            expired += "fallback_expired_ms" in e.data
        elif e.kind == "transition":
            transitions.append({"from": e.state_from, "to": e.state_to, "call": e.call})
            if "host" not in e.data and e.data.get("dependency") != "b":
                state = e.state_to or state
        elif e.kind == "burst_end":
            summary = dict(e.data)
    calls.sort()
    by = summary.get("by_dependency") or {}
    return {
        "breaker_after": state,
        "calls": len(calls),
        "succeeded": summary.get("succeeded", 0),
        "failed": summary.get("failed", 0),
        "fast_failed": summary.get("fast_failed", 0),
        "attempts_total": sum(a for _, a in calls),
        "dependency_hits": hits,
        # In a chain of students: the attempts that reached the shared dependency at the back.
        "leaf_hits": summary.get("leaf_hits", hits),
        "backoff_ms_total": round(float(summary.get("backoff_ms_total", 0.0)), 3),
        "degraded": summary.get("degraded", 0),
        "transition_count": len(transitions),
        "effects_applied": effects,
        "a_succeeded": by.get("a", {}).get("succeeded", summary.get("succeeded", 0)),
        "b_succeeded": by.get("b", {}).get("succeeded", 0),
        "rejected_bulkhead": summary.get("rejected_bulkhead", 0),
        "pool_timeout": summary.get("pool_timeout", 0),
        "wait_ms_total": round(float(summary.get("wait_ms_total", 0.0)), 3),
        "errors": len(calls) - summary.get("succeeded", 0) - summary.get("degraded", 0),
        "throttled": throttled,
        "fallback_expired": expired,
        "attempts": [a for _, a in calls],
        "transitions": transitions,
    }


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid expected number, or None."""
    if isinstance(value, Mapping) and "value" not in value and ({"min", "max"} & set(value)):
        unknown = [k for k in value if k not in ("min", "max")]
        if unknown:
            return f"unknown key {unknown[0]!r} (allowed: min, max)"
        ends = [value[k] for k in ("min", "max") if k in value]
        if not all(_number(v) and 0 <= v <= MAX_NUMBER for v in ends):
            return f"min and max must be numbers between 0 and {MAX_NUMBER}"
        if value.get("min", 0) > value.get("max", MAX_NUMBER):
            return "min must be at most max"
        return None
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in ("value", "tolerance")]
        if unknown:
            return f"unknown key {unknown[0]!r} (allowed: value, tolerance, or min, max)"
        if "value" not in value:
            return "needs value (a number) and optionally tolerance"
        tolerance = value.get("tolerance", 0)
        if not _number(tolerance) or not 0 <= tolerance <= MAX_NUMBER:
            return f"tolerance must be a number between 0 and {MAX_NUMBER}"
        value = value["value"]
    if not _number(value) or not 0 <= value <= MAX_NUMBER:
        return (
            f"must be a number between 0 and {MAX_NUMBER}, or "
            '{"value": number, "tolerance": number}'
        )
    return None


def _transitions_problem(value: Any) -> str | None:
    allowed = ", ".join(BREAKER_STATES)
    if not isinstance(value, list) or len(value) > 100:
        return 'must be a list of up to 100 {"from": state, "to": state, "call": n}'
    for i, t in enumerate(value):
        if not isinstance(t, Mapping) or "to" not in t:
            return f'[{i}] must be an object with "to" (and optionally "from", "call")'
        unknown = [k for k in t if k not in _TRANSITION_KEYS]
        if unknown:
            return f"[{i}] has unknown key {unknown[0]!r} (allowed: from, to, call)"
        for key in ("from", "to"):
            if key in t and t[key] not in BREAKER_STATES:
                return f"[{i}].{key} must be one of {allowed}"
        call = t.get("call")
        if call is not None and (not isinstance(call, int) or isinstance(call, bool) or call < 1):
            return f"[{i}].call must be a call number (1 or more) or null"
    return None


def validate_expect(value: Any, path: str) -> list[tuple[str, str]]:
    """Problems with a step's ``expect`` object, as (field, message) pairs."""
    if not isinstance(value, Mapping) or not value:
        return [(path, "must be an object of measure: expected value, with at least one measure")]
    problems = []
    for measure, expected in value.items():
        field = f"{path}.{measure}"
        if measure not in EXPECT_MEASURES:
            problems.append((field, f"unknown measure (allowed: {', '.join(EXPECT_MEASURES)})"))
            continue
        if measure in CHOICE_MEASURES:
            if expected not in BREAKER_STATES:
                problems.append((field, f"must be one of {', '.join(BREAKER_STATES)}"))
        elif measure == "attempts":
            if not isinstance(expected, list) or not all(
                isinstance(a, int) and not isinstance(a, bool) and 0 <= a <= 100 for a in expected
            ):
                problems.append((field, "must be a list of attempts per call (integers 0 to 100)"))
        elif measure == "transitions":
            message = _transitions_problem(expected)
            if message:
                problems.append((field, message))
        else:
            message = _number_problem(expected)
            if message:
                problems.append((field, message))
    return problems


def _matches_transitions(expected: list[Mapping[str, Any]], observed: list[dict]) -> bool:
    if len(expected) != len(observed):
        return False
    return all(
        all(o[key] == e[key] for key in _TRANSITION_KEYS if key in e)
        for e, o in zip(expected, observed, strict=True)
    )


def _compare(measure: str, expected: Any, observed: Any) -> tuple[bool, Any, float]:
    """(ok, expected value shown, tolerance)."""
    if measure in NUMBER_MEASURES:
        tolerance = 0.0
        if isinstance(expected, Mapping) and "value" not in expected:
            low, high = expected.get("min", 0), expected.get("max", math.inf)
            return low <= observed <= high, dict(expected), 0.0
        if isinstance(expected, Mapping):
            tolerance = float(expected.get("tolerance", 0))
            expected = expected["value"]
        return abs(observed - expected) <= tolerance + 1e-9, expected, tolerance
    if measure == "transitions":
        return _matches_transitions(expected, observed), expected, 0.0
    return observed == expected, expected, 0.0


_SITUATION_KEYS = ("needs", "missed")


def validate_situation(value: Any, path: str) -> list[tuple[str, str]]:
    """Problems with a step's ``situation`` object, as (field, message) pairs."""
    if not isinstance(value, Mapping):
        return [(path, 'must be an object {"needs": {measure: expected}, "missed": text}')]
    problems = [
        (f"{path}.{key}", "unknown field (allowed: needs, missed)")
        for key in value
        if key not in _SITUATION_KEYS
    ]
    problems += validate_expect(value.get("needs"), f"{path}.needs")
    missed = value.get("missed")
    if not isinstance(missed, str) or not missed.strip() or len(missed) > _MAX_MISSED:
        problems.append(
            (
                f"{path}.missed",
                f"is required: what went wrong and what to do, at most {_MAX_MISSED} characters",
            )
        )
    return problems


def check_situation(situation: Mapping[str, Any] | None, observed: Mapping[str, Any]) -> str:
    """The step's ``missed`` sentence when the burst did not produce the step's situation
    (one of its ``needs`` does not hold), else ``""``."""
    if not situation:
        return ""
    for measure, expected in (situation.get("needs") or {}).items():
        ok, _, _ = _compare(measure, expected, observed[measure])
        if not ok:
            return str(situation.get("missed") or "The step's situation did not happen.")
    return ""


def check_expectations(
    expect: Mapping[str, Any], observed: Mapping[str, Any], *, step: int, burst: int | None
) -> list[dict[str, Any]]:
    """One check per expected measure: step index, burst number, measure, expected,
    observed, tolerance and ``ok``."""
    checks = []
    for measure, expected in expect.items():
        value = observed[measure]
        ok, shown, tolerance = _compare(measure, expected, value)
        checks.append(
            {
                "step": step,
                "burst": burst,
                "measure": measure,
                "expected": shown,
                "observed": value,
                "tolerance": tolerance,
                "ok": ok,
            }
        )
    return checks
