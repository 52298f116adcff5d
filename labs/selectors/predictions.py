"""Predictions, attempts and step progress."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from labs.grading import CLASS_MEASURES, recovery_observed
from labs.live import runtime
from labs.models import (
    Classroom,
    JournalEvent,
    LabSession,
    Prediction,
    StepProgress,
)
from labs.presenters.storm import BASELINE_SECONDS, RUN_GAP_S, storm_headline
from labs.presenters.text import actor_name

# --- predictions ---------------------------------------------------------------------------


def session_attempt(session: LabSession) -> int:
    """The session's attempt at its scenario: 1, and one more after each reset of the lab
    (counted from the journal's ``session_reset`` rows, the record of each reset)."""
    return 1 + JournalEvent.objects.filter(session=session, kind="session_reset").count()


def session_steps(session: LabSession, steps: list[dict]) -> list[dict]:
    """The scenario's ``steps`` (as :func:`labs.presenters.lessons.scenario_steps` gives
    them) in the session's current attempt: each with ``done`` (stored on the server) and,
    for a question, the prediction (None until answered)."""
    attempt = session_attempt(session)
    done = set(
        StepProgress.objects.filter(session=session, attempt=attempt).values_list("step", flat=True)
    )
    by_step = {}
    if any("ask" in step for step in steps):
        by_step = {
            p.step: p
            for p in Prediction.objects.filter(session=session, attempt=attempt).select_related(
                "burst"
            )
        }
    for step in steps:
        step["done"] = step["index"] in done
        if "ask" in step:
            step["prediction"] = prediction = by_step.get(step["index"])
            graded = prediction is not None and prediction.correct is not None
            step["explaining"] = explaining_rows(prediction) if graded else []
            step["wait"] = recovery_wait(prediction, step["ask"])
    return steps


def recovery_wait(prediction: Prediction | None, ask: dict) -> dict[str, Any] | None:
    """For a recovery question fixed and not graded yet, where it stands
    (:func:`recovery_check`); else None."""
    if (
        prediction is None
        or prediction.measure not in CLASS_MEASURES
        or prediction.ran_at is None
        or prediction.correct is not None
        or not ask.get("within_s")
    ):
        return None
    return recovery_check(prediction.session, prediction.ran_at, int(ask["within_s"]))


def session_prediction(session: LabSession, step: int) -> Prediction | None:
    """The session's prediction for step ``step`` in the current attempt, or None."""
    return (
        Prediction.objects.filter(session=session, attempt=session_attempt(session), step=step)
        .select_related("burst")
        .first()
    )


def class_predictions(classroom: Classroom):
    """Every prediction made in ``classroom`` by a real student (simulated ones left out):
    student, scenario, step, answer, observation."""
    return (
        Prediction.objects.filter(session__classroom=classroom)
        .people()
        .select_related("owner", "session__scenario")
        .order_by(
            "session__scenario__position",
            "session__scenario_id",
            "step",
            "owner__username",
            "attempt",
        )
    )


#: The journal rows that explain each measure's value in a graded step.
EXPLAINING_KINDS = {
    "breaker_after": ("transition",),
    "fast_failed": ("transition", "rejected", "call_result"),
    "backoff_ms_total": ("sleep",),
    "dependency_hits": ("attempt", "transition"),
    "leaf_hits": ("call_result",),
    "attempts_total": ("call_result", "budget_exhausted", "deadline_exceeded", "transition"),
}
EXPLAINING_ROWS = 20


def explaining_rows(prediction: Prediction) -> list[dict]:
    """Up to 20 journal rows of the prediction's burst that show where its measure came from
    (for attempts: each call's result; for waiting time: the sleeps; ...), oldest first."""
    if prediction.burst_id is None or prediction.measure in CLASS_MEASURES:
        return []  # a recovery question is about the class's trigger, not the step's burst
    kinds = EXPLAINING_KINDS.get(prediction.measure, ("call_result", "transition"))
    rows = JournalEvent.objects.filter(burst_id=prediction.burst_id, kind__in=kinds)
    return [
        {"seq": r.seq, "kind": r.kind, "message": r.message}
        for r in rows.order_by("seq")[:EXPLAINING_ROWS]
    ]


def class_progress(classroom: Classroom) -> list[dict]:
    """Each student's session in ``classroom``: the current attempt, the steps done in it (of
    the scenario's), the questions answered and right in it, and the earlier attempts.
    Simulated students (bots) are left out: they answer nothing."""
    return _progress_rows(LabSession.objects.filter(classroom=classroom).people())


def session_progress(session_id: int) -> dict | None:
    """One session's :func:`class_progress` row (None when the session is gone): what a
    ``class.progress`` push makes the dashboards show."""
    rows = _progress_rows(LabSession.objects.filter(pk=session_id))
    return rows[0] if rows else None


def script_step_counts(script: Any) -> tuple[int, int]:
    """(steps, steps with a question) of a scenario script (stored JSON, maybe as text)."""
    import json

    if isinstance(script, str):
        script = json.loads(script)
    steps = (script.get("steps") or []) if isinstance(script, dict) else []
    return len(steps), sum(1 for st in steps if isinstance(st, dict) and "ask" in st)


def progress_fields(row: dict) -> dict[str, int]:
    """A :func:`class_progress` row's numbers only (what a push and a snapshot carry)."""
    return {k: row[k] for k in ("attempt", "done", "steps", "questions", "answered", "right")}


def _progress_rows(sessions_qs) -> list[dict]:
    from django.db.models import Count, Q

    sessions = list(
        sessions_qs.select_related("owner", "scenario")
        .annotate(resets=Count("journal", filter=Q(journal__kind="session_reset")))
        .order_by("owner__username", "scenario__position", "scenario_id")
    )
    done = Counter(
        (row["session_id"], row["attempt"])
        for row in StepProgress.objects.filter(session__in=sessions).values("session_id", "attempt")
    )
    answered: Counter = Counter()
    right: Counter = Counter()
    for p in Prediction.objects.filter(session__in=sessions).values(
        "session_id", "attempt", "correct"
    ):
        answered[(p["session_id"], p["attempt"])] += 1
        right[(p["session_id"], p["attempt"])] += int(bool(p["correct"]))
    rows = []
    for s in sessions:
        attempt = 1 + s.resets
        key = (s.pk, attempt)
        steps, questions = script_step_counts(s.scenario.script)
        rows.append(
            {
                "session": s,
                "student": actor_name(s.owner),
                "scenario": s.scenario.title,
                "attempt": attempt,
                "done": done[key],
                "steps": steps,
                "questions": questions,
                "answered": answered[key],
                "right": right[key],
            }
        )
    return rows


def class_predictions_page(classroom: Classroom) -> dict[str, Any]:
    """What the instructor's predictions page shows, for the page and for each websocket
    update alike: every prediction and each student's progress (the histograms per question
    are :func:`labs.presenters.predictions.predictions_page`'s)."""
    rows = list(class_predictions(classroom).select_related("burst"))
    return {
        "classroom": classroom,
        "progress": class_progress(classroom),
        "predictions": rows,
    }


# --- a question about the class's shared dependency: the recovery clock after a trigger -----

#: Seconds of counters read before a trigger: its baseline and the run it belongs to.
_BEFORE_TRIGGER_S = BASELINE_SECONDS + 2 * RUN_GAP_S


def _trigger_of(row: JournalEvent) -> dict[str, Any]:
    """A ``shared_trigger`` row's trigger as the recovery clock takes it (``kind``,
    ``from_s``, ``until_s``): its span as the Redis model stamped it (``data.span``), else,
    for a row written before spans were journaled, the row's time and the trigger's length."""
    data = row.data or {}
    trigger = data.get("trigger") or {}
    span = data.get("span")
    if span:
        start, until = span["from_us"] / 1e6, span["until_us"] / 1e6
    else:
        start = row.created_at.timestamp()
        until = start + int(trigger.get("duration_ms", 0)) / 1000
    return {"kind": trigger.get("kind", "down"), "from_s": start, "until_s": until}


def recovery_check(
    session: LabSession, since: datetime, within_s: int, reads: dict | None = None
) -> dict[str, Any]:
    """Where a recovery question answered (fixed) at ``since`` stands, by the storm panel's
    recovery clock (:func:`labs.presenters.storm.storm_headline`) over the class's counters
    recorded in Redis, for the first trigger the class's journal shows after ``since``:

    - ``no_trigger``: none fired since;
    - ``running``: it runs (``left_s``);
    - ``waiting``: it ended ``since_s`` ago and the dependency is not back, with
      ``within_s`` seconds to do so;
    - ``observed``: ``observed`` (:func:`labs.grading.recovery_observed`), to grade;
    - ``missed``: nothing to grade, ``reason`` says why (``no_traffic``: the class had no
      traffic through the trigger and after it; ``next_trigger``: another trigger fired
      before the seconds were up).

    The clock is read at the end of the window (``within_s`` complete seconds after the
    trigger's end) or now if earlier; a recovery seen earlier is final, so ``yes`` comes as
    soon as the clock says recovered. Two journal rows and two Redis round trips; ``reads``,
    a dict kept across calls, shares one read of the same seconds among a class's students
    (the worker's sweep grades them together)."""
    rows = list(
        JournalEvent.objects.filter(
            session=session, kind="shared_trigger", created_at__gte=since
        ).order_by("seq")[:2]
    )
    if not rows:
        return {"stage": "no_trigger", "within_s": within_s}
    trigger = _trigger_of(rows[0])
    start, until = trigger["from_s"], trigger["until_s"]
    due = int(until) + within_s + 1
    after = _trigger_of(rows[1]) if len(rows) > 1 else None
    if after is not None:
        due = min(due, int(after["from_s"]))
    span = (session.classroom_id, int(start) - _BEFORE_TRIGGER_S, due - 1)
    recorded = reads.get(span) if reads is not None else None
    if recorded is None:
        recorded = runtime.shared_seconds(*span)
        if reads is not None:
            reads[span] = recorded
    now = recorded["now"]
    base = {"trigger": trigger, "within_s": within_s}
    if now < until and (after is None or after["from_s"] > now):
        return {**base, "stage": "running", "left_s": max(0, round(until - now))}
    at = min(now, due)
    headline = storm_headline(recorded["seconds"], trigger, at)
    observed = recovery_observed(headline, within_s) if at > until else None
    if observed is not None:
        return {**base, "stage": "observed", "observed": {**observed, "trigger": trigger}}
    if headline["state"] in ("no_traffic", "healthy") and at >= until + 1:
        return {**base, "stage": "missed", "reason": "no_traffic"}
    if at == due and after is not None:
        return {**base, "stage": "missed", "reason": "next_trigger"}
    return {**base, "stage": "waiting", "since_s": max(0, round(at - until))}
