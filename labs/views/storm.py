"""The storm panel: a class's shared dependency, live and projector-ready, for its instructors.

Every view starts from :func:`labs.views.instructor.taught_classroom`: a class the user does
not teach (a student included) is a 404, like a missing one. The page is kept live by the
``ws/classes/<id>/storm/`` websocket (:mod:`labs.consumers.storm`), which pushes one point a
second; nothing polls. The trigger form posts to the dashboard's trigger view (one service,
one validation); the traffic form starts or stops steady traffic in every session of the
class on the shared dependency (:mod:`labs.services.storm`). The exports give the per-second
series and the per-student table as CSV.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from labs.forms import shared as shared_forms
from labs.models import Classroom
from labs.presenters.exports import csv_lines
from labs.presenters.storm import student_rows
from labs.selectors.storm import STORM_WINDOW_S, storm_now, storm_sessions
from labs.services import storm as storm_services
from labs.services.traffic import TrafficInvalid
from labs.views import HtmxHttpRequest
from labs.views.instructor import _filename, _streaming, storm_context, taught_classroom

TEMPLATE = "labs/storm.html"

SECONDS_COLUMNS = [
    "second", "offered", "ok", "error", "shed", "skipped", "timeout", "wasted_ms",
    "calls", "calls_ok", "retries", "wait_p50_ms", "wait_p99_ms",
]  # fmt: skip
STUDENT_COLUMNS = [
    "second", "session", "student", "scenario", "mode", "breaker_state", "attempts_in_window",
    "retries_in_window", "refused_in_window", "attempts_per_s", "retry_ratio", "share",
]  # fmt: skip


@login_required
@require_GET
def storm_panel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The full-screen storm panel of a class the user teaches (or how to configure one)."""
    classroom = taught_classroom(request.user, pk)
    context: dict[str, Any] = {
        "classroom": classroom,
        "trigger_fields": shared_forms.fields(shared_forms.TRIGGER_PARAMS),
        **storm_context(classroom),
    }
    return render(request, TEMPLATE, context)


def _whole(raw: str) -> Any:
    """Plain digits as an int; anything else as posted, for the validator to name."""
    raw = raw.strip()
    return int(raw) if raw.isascii() and raw.isdigit() else raw


def _answer(
    request: HtmxHttpRequest, classroom: Classroom, message: str, problems: list[str], status: int
) -> HttpResponse:
    if request.htmx:
        context = {"classroom": classroom, "message": message, "problems": problems}
        return render(request, "labs/dashboard.html#action-result", context, status=status)
    if problems:
        for problem in problems:
            messages.error(request, problem)
    else:
        messages.success(request, message)
    return redirect("labs:storm_panel", pk=classroom.pk)


@login_required
@require_POST
def storm_traffic(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Start (``action=start``: rate, duration_s, arrivals) or stop the class's traffic."""
    classroom = taught_classroom(request.user, pk)
    if request.POST.get("action") == "stop":
        result = storm_services.classroom_traffic_stop(classroom=classroom, user=request.user)
        return _answer(request, classroom, result.describe("traffic stopped in"), [], 200)
    try:
        result = storm_services.classroom_traffic_start(
            classroom=classroom,
            user=request.user,
            rate=_whole(request.POST.get("rate", "")),
            duration_s=_whole(request.POST.get("duration_s", "")),
            arrivals=request.POST.get("arrivals", "").strip(),
        )
    except TrafficInvalid as exc:
        return _answer(request, classroom, "", [str(p) for p in exc.problems], 422)
    return _answer(request, classroom, result.describe("traffic started in"), [], 200)


@login_required
@require_GET
def storm_export_seconds(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The shared dependency's per-second counters over the panel's window, as CSV."""
    classroom = taught_classroom(request.user, pk)
    seconds = storm_now(classroom.pk, STORM_WINDOW_S - 1)["seconds"]

    def cells() -> Iterator[list[Any]]:
        for s in seconds:
            row = {**s, "wasted_ms": s["wasted_us"] / 1000}
            yield ["" if row[c] is None else row[c] for c in SECONDS_COLUMNS]

    return _streaming(
        csv_lines(SECONDS_COLUMNS, cells()),
        "text/csv; charset=utf-8",
        _filename(classroom, "storm-seconds", "csv"),
    )


@login_required
@require_GET
def storm_export_students(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The per-student table as the panel shows it now (the sessions' own counters over the
    last complete seconds, ``second`` being the one the figures run up to), as CSV."""
    classroom = taught_classroom(request.user, pk)
    sessions = storm_sessions(classroom.pk)
    read_now = storm_now(classroom.pk, 0, [s["session"] for s in sessions])
    rows = student_rows(sessions, read_now["window"], read_now["now"])

    def cells() -> Iterator[list[Any]]:
        for r in rows:
            yield [
                r["now"], r["session"], r["student"], r["scenario"], r["mode"], r["state"],
                r["attempts"], r["retries"], r["fast"], r["attempts_per_s"], r["retry_ratio"],
                r["share"],
            ]  # fmt: skip

    return _streaming(
        csv_lines(STUDENT_COLUMNS, cells()),
        "text/csv; charset=utf-8",
        _filename(classroom, "storm-students", "csv"),
    )
