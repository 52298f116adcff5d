"""Minimal lab session views (platform placeholder; the lab engineer replaces them with the
live page)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from labs.models import Classroom, LabSession, Scenario
from labs.services.lab import session_open as session_open_service


@require_POST
@login_required
def session_open(request: HttpRequest, classroom_id: int, scenario_id: int) -> HttpResponse:
    classroom = get_object_or_404(Classroom, pk=classroom_id)
    scenario = get_object_or_404(Scenario, pk=scenario_id)
    session = session_open_service(user=request.user, classroom=classroom, scenario=scenario)
    return redirect(session)


@login_required
def session_detail(request: HttpRequest, pk: int) -> HttpResponse:
    session = get_object_or_404(
        LabSession.objects.visible_to(request.user).select_related(
            "scenario", "classroom", "owner"
        ),
        pk=pk,
    )
    return render(request, "labs/session.html", {"session": session})
