"""The storm panel's class-wide traffic: start or stop steady traffic in every session of a
class that calls the shared dependency.

Each session's run goes through :func:`labs.services.traffic.traffic_start` (journaled in
that session, enqueued on the worker), so a class-wide start is exactly what each student
could have started. The settings are validated once, with the same validator and messages,
before any session is touched: a refusal names the field and its range and starts nothing.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from labs.engine import Problem
from labs.models import Classroom, LabSession
from labs.services.classroom import ClassActionResult
from labs.services.traffic import (
    TrafficInvalid,
    TrafficRefused,
    traffic_start,
    traffic_stop,
    validate_traffic,
)


def check_teaches(*, user, classroom: Classroom) -> None:
    """PermissionDenied unless ``user`` teaches ``classroom``."""
    if not Classroom.objects.for_instructor(user).filter(pk=classroom.pk).exists():
        raise PermissionDenied("You do not teach this class.")


def shared_sessions(classroom: Classroom) -> list[LabSession]:
    """The class's sessions on its shared dependency, in the order they joined (what the
    panel's traffic starts and stops, and what a chain of students is made of)."""
    return list(
        LabSession.objects.filter(classroom=classroom, dependency__mode="shared")
        .select_related("owner")
        .order_by("pk")
    )


def classroom_traffic_start(
    *, classroom: Classroom, user, rate: object, duration_s: object, arrivals: object = "poisson"
) -> ClassActionResult:
    """Start ``rate`` calls/s for ``duration_s`` s in every shared-mode session of the class;
    while the class is a chain of students, in its front tier's only (the others answer
    them: labs.services.chain).

    Raises TrafficInvalid (fields and ranges named, nothing started) for bad settings or a
    class with no session on the shared dependency, PermissionDenied unless ``user`` teaches
    the class. A session whose own traffic is already running is skipped and said so.
    """
    check_teaches(user=user, classroom=classroom)
    problems = validate_traffic(rate, duration_s, arrivals)
    if problems:
        raise TrafficInvalid(problems)
    sessions = shared_sessions(classroom)
    if not sessions:
        raise TrafficInvalid(
            [Problem("sessions", "no session of the class calls the shared dependency yet")]
        )
    if any(s.tier for s in sessions):
        sessions = [s for s in sessions if s.tier == 1]
    result = ClassActionResult()
    for session in sessions:
        try:
            traffic_start(
                session=session, user=user, rate=rate, duration_s=duration_s, arrivals=arrivals
            )
        except TrafficRefused as exc:
            result.skipped[session.pk] = str(exc)
        else:
            result.changed.append(session.pk)
    return result


def classroom_traffic_stop(*, classroom: Classroom, user) -> ClassActionResult:
    """Stop the active traffic of every shared-mode session of the class (calls in flight
    finish); sessions with none running are skipped."""
    check_teaches(user=user, classroom=classroom)
    result = ClassActionResult()
    for session in shared_sessions(classroom):
        if traffic_stop(session=session, user=user) is None:
            result.skipped[session.pk] = "no traffic running"
        else:
            result.changed.append(session.pk)
    return result
