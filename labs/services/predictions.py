"""Predictions: a student's answer to a step's question, fixed once the step runs, graded
against what the step's burst did according to the journal, or, for a question about the
class's shared dependency (``recovered``), against the storm panel's recovery clock after the
first trigger fired once the answer was fixed.

An answer is journaled in its transaction; every change an instructor's page shows is
announced after the commit as one ``class.progress`` message carrying no count (the consumer
reads progress fresh). :func:`prediction_grade` measures the burst's events, read back from
the journal, with the engine's :func:`~labs.engine.expect.observe` and grades the answer with
:func:`labs.grading.grade_answer`, so the scenario never holds the answer; it grades nothing
when the step's ``situation`` did not happen (docs/predictions.md). A recovery question is
graded by :func:`recovery_grade` from the counters Redis recorded
(:func:`labs.selectors.predictions.recovery_check`), by the student's page while it waits and
by the worker's sweeper (:func:`recovery_predictions_grade`) when no page is open.
"""

from __future__ import annotations

import math
from typing import Any

from django.db import transaction
from django.utils import timezone

from labs.engine.breaker import STATES
from labs.engine.events import EVENT_KINDS
from labs.engine.expect import check_situation, observe
from labs.grading import CLASS_MEASURES, RECOVERY_ANSWERS, grade_answer
from labs.journal import broadcast
from labs.journal import store as journal
from labs.models import Burst, JournalEvent, LabSession, Prediction, StepProgress
from labs.presenters.text import actor_name
from labs.selectors.predictions import recovery_check, session_attempt
from labs.services.lti import lti_grade_queue
from labs.services.scenario_runner import event_from_row

#: The largest answer that makes sense per measure (20 calls of at most 5 attempts, sleeps of
#: at most 2 s each); anything larger is a typo.
ANSWER_MAX = {
    "calls": 20,
    "succeeded": 20,
    "failed": 20,
    "fast_failed": 20,
    "attempts_total": 100,
    "dependency_hits": 100,
    "leaf_hits": 100_000,
    "backoff_ms_total": 200_000,
    "errors": 20,
    "wait_ms_total": 200_000,
    "degraded": 20,
    "a_succeeded": 20,
    "b_succeeded": 20,
}


class PredictionRefused(Exception):
    """The answer is not taken; ``field`` and ``message`` say why."""

    status = 400

    def __init__(self, message: str, field: str = "answer") -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class PredictionLocked(PredictionRefused):
    """The step already ran: its prediction cannot change (HTTP 409)."""

    status = 409


#: What a number answer counts, as the journal row says it.
PREDICTED_WORDS = {
    "calls": "calls",
    "succeeded": "calls succeeded",
    "failed": "calls failed",
    "fast_failed": "calls fast-failed",
    "attempts_total": "attempts",
    "dependency_hits": "dependency hits",
    "leaf_hits": "hits on the shared dependency",
    "backoff_ms_total": "ms of backoff",
    "errors": "calls answered with an error",
    "degraded": "calls degraded",
    "effects_applied": "side effects applied",
    "transition_count": "breaker transitions",
    "a_succeeded": "calls to A succeeded",
    "b_succeeded": "calls to B succeeded",
}


def _announce(session: LabSession) -> None:
    """After the commit, tell the class's dashboards that ``session``'s progress changed."""
    pushes = [broadcast.progress_push(session.classroom_id, session.pk)]
    transaction.on_commit(lambda: broadcast.send_all(pushes))


def _predicted_words(measure: str, answer: str, step: int, ask: dict | None = None) -> str:
    """The journal's words for an answer: ``predicted 12 attempts for step 3``."""
    if measure in CLASS_MEASURES:
        within = (ask or {}).get("within_s")
        back = "comes back" if answer == "yes" else "stays down"
        return (
            f"predicted the shared dependency {back} within {within} s of the end of the "
            f"next trigger (step {step})"
        )
    if measure == "breaker_after":
        return f"predicted the breaker {answer.replace('_', '-')} after step {step}"
    return f"predicted {answer} {PREDICTED_WORDS.get(measure, measure)} for step {step}"


def _step(session: LabSession, step: int) -> dict[str, Any]:
    """The session scenario's step number ``step`` (from 1), or {}."""
    script = session.scenario.script if isinstance(session.scenario.script, dict) else {}
    steps = script.get("steps") or []
    if not 1 <= step <= len(steps) or not isinstance(steps[step - 1], dict):
        return {}
    return steps[step - 1]


def step_question(session: LabSession, step: int) -> dict[str, Any] | None:
    """The ``ask`` of the session scenario's step number ``step`` (from 1), or None."""
    found = _step(session, step)
    ask = found.get("ask")
    return ask if isinstance(ask, dict) and "burst" in found else None


def parse_answer(measure: str, raw: Any) -> str:
    """The answer as stored (a number in its shortest form, or a breaker state). Raises
    PredictionRefused naming the allowed forms."""
    text = str(raw if raw is not None else "").strip()
    if measure in CLASS_MEASURES:
        allowed = [value for value, _ in RECOVERY_ANSWERS]
        if text not in allowed:
            raise PredictionRefused(f"Choose one of: {', '.join(allowed)}.")
        return text
    if measure == "breaker_after":
        if text not in STATES:
            raise PredictionRefused(f"Choose one of: {', '.join(STATES)}.")
        return text
    top = ANSWER_MAX.get(measure, 100)
    try:
        value = float(text)
    except ValueError:
        raise PredictionRefused(f"Enter a number between 0 and {top}.") from None
    if not math.isfinite(value) or not 0 <= value <= top:
        raise PredictionRefused(f"Enter a number between 0 and {top} (got {text}).")
    return f"{value:g}"


def prediction_submit(*, session: LabSession, user, step: int, answer: Any) -> Prediction:
    """Store (or change) ``user``'s answer to step ``step``'s question. Raises
    PredictionRefused for a step without a question or a bad answer, PredictionLocked once the
    step ran. Nothing changes on refusal."""
    ask = step_question(session, step)
    if ask is None:
        raise PredictionRefused(f"Step {step} asks no question.", field="step")
    value = parse_answer(ask["measure"], answer)
    with transaction.atomic():
        LabSession.objects.select_for_update().get(pk=session.pk)
        attempt = session_attempt(session)
        prediction = Prediction.objects.filter(session=session, attempt=attempt, step=step).first()
        if prediction is not None and prediction.ran_at is not None:
            raise PredictionLocked(
                f"Step {step} already ran: the prediction ({prediction.answer}) is final."
            )
        changed = prediction is not None
        if prediction is None:
            prediction = Prediction(session=session, owner=user, attempt=attempt, step=step)
        prediction.measure = ask["measure"]
        prediction.answer = value
        prediction.save()
        words = _predicted_words(ask["measure"], value, step, ask)
        journal.record(
            [
                journal.entry(
                    session,
                    "prediction_submitted",
                    f"{actor_name(user)} {'changed the prediction: ' if changed else ''}{words}",
                    user=user,
                    data={
                        "step": step,
                        "attempt": attempt,
                        "measure": ask["measure"],
                        "answer": value,
                    },
                )
            ]
        )
        _announce(session)
    return prediction


def prediction_attach(*, session: LabSession, step: Any, burst: Burst) -> Prediction | None:
    """Mark step ``step``'s prediction as run by ``burst`` (the step's Do it started it):
    from now on the answer is fixed. No prediction, or one already run, is left alone."""
    try:
        number = int(step)
    except (TypeError, ValueError):
        return None
    with transaction.atomic():
        prediction = (
            Prediction.objects.select_for_update()
            .filter(
                session=session, attempt=session_attempt(session), step=number, ran_at__isnull=True
            )
            .first()
        )
        if prediction is None:
            return None
        prediction.burst = burst
        prediction.ran_at = timezone.now()
        prediction.save(update_fields=["burst", "ran_at", "updated_at"])
        _announce(session)
    return prediction


def _breaker_before(burst: Burst) -> str:
    """The breaker state when ``burst`` began: the state the session's last journal row with a
    state before it set (a transition, a reset, an instructor's forced state), else closed."""
    first = JournalEvent.objects.filter(burst=burst).order_by("seq").values_list("seq", flat=True)
    start = first.first()
    last = (
        JournalEvent.objects.filter(session_id=burst.session_id, seq__lt=start or 0)
        .exclude(state_to="")
        .order_by("-seq")
        .values_list("state_to", flat=True)
        .first()
    )
    return last or "closed"


def burst_observation(burst: Burst) -> dict[str, Any]:
    """Every measure of ``burst`` (see :func:`labs.engine.expect.observe`), from its journal rows."""
    rows = (
        JournalEvent.objects.filter(burst=burst, kind__in=EVENT_KINDS)
        .select_related("burst")
        .order_by("seq")
    )
    return observe([event_from_row(row) for row in rows], _breaker_before(burst))


def prediction_grade(*, prediction: Prediction) -> Prediction:
    """Grade ``prediction`` once its burst is done and the journal holds its end (a recovery
    question: once the recovery clock can tell, :func:`recovery_grade`); until then (or once
    graded) it is returned unchanged."""
    if prediction.correct is not None:
        return prediction
    if prediction.measure in CLASS_MEASURES:
        return recovery_grade(prediction=prediction)
    if prediction.burst_id is None:
        return prediction
    burst = prediction.burst
    if burst.status != Burst.Status.DONE:
        return prediction
    if not JournalEvent.objects.filter(burst=burst, kind="burst_end").exists():
        return prediction
    ask = step_question(prediction.session, prediction.step) or {"measure": prediction.measure}
    observed = burst_observation(burst)
    situation = _step(prediction.session, prediction.step).get("situation")
    missed = check_situation(situation if isinstance(situation, dict) else None, observed)
    if missed:
        return _release(prediction, {"missed": missed, "missed_burst": burst.number}, burst=burst)
    answer: Any = prediction.answer
    if prediction.measure != "breaker_after":
        answer = float(answer)
    return _grade(prediction, ask, answer, observed)


def _grade(
    prediction: Prediction, ask: dict[str, Any], answer: Any, observed: dict[str, Any]
) -> Prediction:
    """Store ``observed`` and whether ``answer`` is right for it, once (conditional on the
    prediction being ungraded, so the worker and the polling page grade it once), and tell
    the instructor's page and the course's gradebook."""
    with transaction.atomic():
        updated = Prediction.objects.filter(pk=prediction.pk, correct__isnull=True).update(
            observed=observed,
            correct=grade_answer({**ask, "measure": prediction.measure}, answer, observed),
        )
        if updated:
            _announce(prediction.session)
            lti_grade_queue(session=prediction.session)  # to the LMS gradebook, if launched
    if updated:
        prediction.refresh_from_db()
    return prediction


def _release(prediction: Prediction, observed: dict[str, Any], **still: Any) -> Prediction:
    """The step's situation did not happen (a rate limit already over, a cache already stale,
    no traffic through the trigger): grade nothing, keep ``observed`` (the ``missed``
    sentence and which burst or trigger) for the page, and free the step to run again
    (``ran_at`` and ``burst`` cleared, the answer may change). Conditional on the prediction
    still being ungraded and as ``still`` says (this burst's, or fixed at this time), so the
    worker and the polling page release it once."""
    with transaction.atomic():
        updated = Prediction.objects.filter(pk=prediction.pk, correct__isnull=True, **still).update(
            observed=observed, burst=None, ran_at=None, updated_at=timezone.now()
        )
        if updated:
            _announce(prediction.session)
    prediction.refresh_from_db()
    return prediction


#: Why a recovery question graded nothing, by :func:`recovery_check`'s reason.
RECOVERY_MISSED = {
    "no_traffic": (
        "The class had no steady traffic through the trigger and the {within} s after it, so "
        "the storm panel's recovery clock measured nothing: the question's situation did not "
        "happen. Once the class's traffic runs, press Do it again before the next trigger."
    ),
    "next_trigger": (
        "Another trigger fired before the dependency was back and before the {within} s were "
        "up, so this trigger's recovery was never measured to its end. Press Do it again "
        "before the next trigger."
    ),
}


def recovery_grade(*, prediction: Prediction, reads: dict | None = None) -> Prediction:
    """Grade a recovery question (``recovered``) once the storm panel's recovery clock can
    tell, for the first trigger fired after the answer was fixed (``ran_at``): ``yes`` when
    the shared dependency came back within the question's ``within_s`` seconds of the
    trigger's end, ``no`` when it had not by then. Until then it is returned unchanged
    (not graded yet). When the clock measured nothing (no traffic through the trigger, or
    another trigger cut it short) nothing is graded: the reason is kept for the page and the
    step is freed to run again, as a burst step whose situation did not happen."""
    if prediction.correct is not None or prediction.ran_at is None:
        return prediction
    ask = step_question(prediction.session, prediction.step) or {}
    within = int(ask.get("within_s") or 0)
    if not within:
        return prediction
    check = recovery_check(prediction.session, prediction.ran_at, within, reads)
    if check["stage"] == "missed":
        sentence = RECOVERY_MISSED[check["reason"]].format(within=within)
        observed = {"missed": sentence, "missed_trigger": check["trigger"]}
        return _release(prediction, observed, ran_at=prediction.ran_at)
    if check["stage"] != "observed":
        return prediction
    return _grade(prediction, ask, prediction.answer, check["observed"])


def recovery_predictions_grade() -> int:
    """Grade every recovery question that is fixed and waiting for its trigger's outcome
    (the worker's sweeper runs it, so a grade reaches the instructor's page even when the
    student's page is closed). Returns how many were graded now."""
    pending = Prediction.objects.filter(
        measure__in=CLASS_MEASURES, correct__isnull=True, ran_at__isnull=False
    ).select_related("session__scenario")
    graded = 0
    reads: dict = {}  # one read of a trigger's seconds for all the class's students
    for prediction in pending:
        graded += recovery_grade(prediction=prediction, reads=reads).correct is not None
    return graded


def burst_predictions_grade(*, burst_id: int) -> int:
    """Grade the predictions the (ended) burst ``burst_id`` ran: the worker calls it once the
    burst's rows are committed, so a grade reaches the instructor's page even when the
    student's page is closed. Returns how many were graded now."""
    graded = 0
    pending = Prediction.objects.filter(burst_id=burst_id, correct__isnull=True)
    # Most bursts ran no question: asking whether any is pending costs a third of loading
    # the (empty) list of them, and the worker asks after every burst.
    if not pending.exists():
        return 0
    for prediction in pending:
        graded += prediction_grade(prediction=prediction).correct is not None
    return graded


def step_mark(*, session: LabSession, step: int, done: bool) -> bool:
    """Mark step ``step`` done (or not) in the session's current attempt; returns ``done``.
    Raises PredictionRefused for a step the scenario does not have. A change is announced to
    the class's dashboards."""
    script = session.scenario.script if isinstance(session.scenario.script, dict) else {}
    count = len(script.get("steps") or [])
    if not 1 <= step <= count:
        raise PredictionRefused(f"must be a step of this scenario, 1 to {count}", field="step")
    attempt = session_attempt(session)
    rows = StepProgress.objects.filter(session=session, attempt=attempt, step=step)
    with transaction.atomic():
        if done:
            _, changed = StepProgress.objects.get_or_create(
                session=session, attempt=attempt, step=step
            )
        else:
            changed = rows.delete()[0] > 0
        if changed:
            _announce(session)
            lti_grade_queue(session=session)  # to the LMS gradebook, if launched from there
    return done
