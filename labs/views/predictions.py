"""A step's question on the lab page: show it, take the student's answer, show the grade.

``GET`` renders the step's prediction partial (grading it first once the step's burst has
ended: the page polls while the burst runs); ``POST`` stores the answer: 422 with the message
beside the field for a bad answer, 409 once the step ran (the answer is final). Only the
session's owner answers; anyone who may watch the session sees the partial.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from labs.presenters.exports import csv_lines
from labs.presenters.lessons import scenario_steps, step_question
from labs.presenters.predictions import PREDICTION_COLUMNS, prediction_row, predictions_page
from labs.selectors import predictions as prediction_reads
from labs.selectors.access import visible_session
from labs.selectors.predictions import (
    class_predictions_page,
    explaining_rows,
    recovery_wait,
    session_prediction,
)
from labs.services import predictions as prediction_services
from labs.views.instructor import taught_classroom
from labs.views.lab import is_read_only, writable_session

TEMPLATE = "labs/step_prediction.html"


def _render(request, session, step: int, ask: dict, *, status: int = 200, error: str = "",
            answer: str = "") -> HttpResponse:  # fmt: skip
    prediction = session_prediction(session, step)
    if prediction is not None:
        prediction = prediction_services.prediction_grade(prediction=prediction)
    context = {
        "session": session,
        "read_only": is_read_only(request.user, session),
        "step": {"index": step, "ask": step_question(ask), "prediction": prediction,
                 "vals": _vals(session, step),
                 "explaining": explaining_rows(prediction) if prediction else [],
                 "wait": recovery_wait(prediction, ask)},
        "error": error,
        "answer": answer,

    }  # fmt: skip
    return render(request, TEMPLATE, context, status=status)


def _vals(session, step: int) -> str:
    for item in scenario_steps(session.scenario):
        if item["index"] == step:
            return item.get("vals", "{}")
    return "{}"


@require_http_methods(["GET", "POST"])
@login_required
def step_prediction(request, pk: int, step: int) -> HttpResponse:
    """The step's question, answer and grade (GET), or a new answer (POST)."""
    if request.method == "POST":
        session = writable_session(request, pk)
    else:
        session = visible_session(request.user, pk)
    ask = prediction_services.step_question(session, step)
    if ask is None:
        raise Http404("This step asks no question.")
    if request.method == "GET":
        return _render(request, session, step, ask)
    answer = request.POST.get("answer", "")
    try:
        prediction_services.prediction_submit(
            session=session, user=request.user, step=step, answer=answer
        )
    except prediction_services.PredictionRefused as exc:
        status = 409 if isinstance(exc, prediction_services.PredictionLocked) else 422
        return _render(request, session, step, ask, status=status, error=exc.message,
                       answer=str(answer)[:32])  # fmt: skip
    return _render(request, session, step, ask)


@require_http_methods(["POST"])
@login_required
def step_done(request, pk: int, step: int) -> HttpResponse:
    """Mark a step done (``done=1``) or not (``done=0``) in the session's current attempt:
    204, or 422 naming the allowed steps."""
    session = writable_session(request, pk)
    try:
        prediction_services.step_mark(
            session=session, step=step, done=request.POST.get("done", "1") not in ("0", "false")
        )
    except prediction_services.PredictionRefused as exc:
        return HttpResponse(f"step: {exc.message}", status=422, content_type="text/plain")
    return HttpResponse(status=204)


# --- the instructor's view of a class's predictions ------------------------------------------


@require_http_methods(["GET"])
@login_required
def class_predictions(request, pk: int) -> HttpResponse:
    """Every question of the class with its answers as a histogram beside the observed
    values, and each student's answer. The page stays live over the class dashboard's
    websocket (``ws/classes/<id>/?view=predictions``): every answer, run, grade or ticked step
    pushes the live part again, rendered from the same partial."""
    classroom = taught_classroom(request.user, pk)
    context = predictions_page(class_predictions_page(classroom))
    context["ws_path"] = f"/ws/classes/{classroom.pk}/?view=predictions"
    return render(request, "labs/class_predictions.html", context)


@require_http_methods(["GET"])
@login_required
def class_predictions_csv(request, pk: int) -> HttpResponse:
    """Every prediction of the class with its observation, as CSV."""
    classroom = taught_classroom(request.user, pk)
    rows = prediction_reads.class_predictions(classroom).select_related("burst")
    response = StreamingHttpResponse(
        csv_lines(PREDICTION_COLUMNS, map(prediction_row, rows)),
        content_type="text/csv; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="predictions-class-{classroom.pk}.csv"'
    return response
