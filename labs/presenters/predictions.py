"""Predictions per class: histograms and export rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labs.presenters.lessons import measure_value
from labs.presenters.text import actor_name

# --- predictions, per class ------------------------------------------------------------------

PREDICTION_COLUMNS = (
    "student", "username", "scenario", "attempt", "step", "question", "measure", "answer",
    "predicted_at",
    "burst", "observed", "correct",
)  # fmt: skip


def _bars(counts: dict[str, int]) -> list[dict[str, Any]]:
    """Histogram bars in value order (numbers numerically), each with its count and the
    tallest count (for ``<meter max>``)."""

    def key(value: str) -> tuple[int, float, str]:
        try:
            return (0, float(value), value)
        except ValueError:
            return (1, 0.0, value)

    top = max(counts.values(), default=0)
    return [{"value": v, "count": counts[v], "max": top} for v in sorted(counts, key=key)]


def prediction_histograms(predictions: Iterable[Any]) -> list[dict[str, Any]]:
    """One entry per question (scenario and step): the question, the class's answers as a
    histogram beside the observed values, and how many were right."""
    questions: dict[tuple[int, int], dict[str, Any]] = {}
    for p in predictions:
        scenario = p.session.scenario
        steps = (
            (scenario.script or {}).get("steps") or [] if isinstance(scenario.script, dict) else []
        )
        ask = steps[p.step - 1].get("ask", {}) if 0 < p.step <= len(steps) else {}
        entry = questions.setdefault(
            (scenario.pk, p.step),
            {
                "scenario": scenario.title,
                "step": p.step,
                "question": ask.get("question", ""),
                "measure": p.measure,
                "answers": {},
                "observed": {},
                "right": 0,
                "graded": 0,
                "total": 0,
            },
        )
        entry["total"] += 1
        entry["answers"][p.answer] = entry["answers"].get(p.answer, 0) + 1
        if p.correct is not None:
            entry["graded"] += 1
            entry["right"] += int(p.correct)
            seen = measure_value(p.observed_value)
            entry["observed"][seen] = entry["observed"].get(seen, 0) + 1
    result = []
    for entry in questions.values():
        entry["answer_bars"] = _bars(entry.pop("answers"))
        entry["observed_bars"] = _bars(entry.pop("observed"))
        result.append(entry)
    return result


def prediction_row(p: Any) -> list[Any]:
    """A prediction as a CSV row (:data:`PREDICTION_COLUMNS`)."""
    scenario = p.session.scenario
    steps = (scenario.script or {}).get("steps") or [] if isinstance(scenario.script, dict) else []
    ask = steps[p.step - 1].get("ask", {}) if 0 < p.step <= len(steps) else {}
    return [
        actor_name(p.owner), p.owner.username, scenario.title, p.attempt, p.step,
        ask.get("question", ""),
        p.measure, p.answer, p.created_at.isoformat(), p.burst.number if p.burst else "",
        "" if p.correct is None else measure_value(p.observed_value),
        "" if p.correct is None else ("right" if p.correct else "wrong"),
    ]  # fmt: skip


def predictions_page(page: dict[str, Any]) -> dict[str, Any]:
    """The instructor's predictions page (``class_predictions_page``'s data) with the
    histograms per question of its predictions."""
    return {**page, "questions": prediction_histograms(page["predictions"])}
