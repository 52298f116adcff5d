"""The class dashboard's rows, counts and LMS status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labs.journal.kinds import count_filter
from labs.models import (
    Burst,
    JournalEvent,
    LabSession,
    LtiCourseLink,
    LtiGradePost,
    Membership,
    Prediction,
    StepProgress,
)
from labs.selectors.predictions import script_step_counts

# --- Class dashboard (instructor view) --------------------------------------------------------


@dataclass
class DashboardRow:
    """One student session as the class dashboard shows it (its data as JSON:
    :meth:`as_dict`; with its words and HTML: :mod:`labs.presenters.dashboard`)."""

    session_id: int
    student: str
    username: str
    scenario: str
    scenario_id: int
    mode: str
    state: str
    bursting: bool
    calls: int
    attempts_total: int
    fast_failed: int
    succeeded: int
    last_seq: int
    last_summary: dict | None
    #: :func:`progress_fields` of the session (steps done, questions answered and right).
    progress: dict = field(default_factory=dict)

    @property
    def activity(self) -> str:
        return "bursting" if self.bursting else "idle"

    def as_dict(self) -> dict:
        return {
            "session": self.session_id,
            "student": self.student,
            "username": self.username,
            "scenario": self.scenario,
            "scenario_id": self.scenario_id,
            "mode": self.mode,
            "state": self.state,
            "activity": self.activity,
            "calls": self.calls,
            "attempts_total": self.attempts_total,
            "fast_failed": self.fast_failed,
            "succeeded": self.succeeded,
            "last_seq": self.last_seq,
            "burst_summary": self.last_summary,
            "progress": self.progress,
        }


def _dashboard_queryset(classroom_id: int):
    from django.db.models import Count, Exists, IntegerField, Max, OuterRef, Subquery
    from django.db.models.fields.json import KT, JSONField
    from django.db.models.functions import Coalesce

    def journal_total(aggregate, **conditions):
        # A correlated subquery per total, not a JOIN + GROUP BY: each one is a range count on
        # the (session, kind, outcome) index, so no journal row is read, only index entries.
        rows = (
            JournalEvent.objects.filter(session=OuterRef("pk"), **conditions)
            .order_by()
            .values("session")
            .annotate(total=aggregate)
            .values("total")
        )
        return Subquery(rows, output_field=IntegerField())

    def attempt_total(model, **conditions):
        # Rows of the session's current attempt (steps done, predictions): the attempt is the
        # outer row's annotation, one more than its resets.
        rows = (
            model.objects.filter(session=OuterRef("pk"), attempt=OuterRef("attempt"), **conditions)
            .order_by()
            .values("session")
            .annotate(total=Count("*"))
            .values("total")
        )
        return Subquery(rows, output_field=IntegerField())

    active = Burst.objects.filter(session=OuterRef("pk"), status__in=Burst.ACTIVE_STATUSES)
    last_done = (
        Burst.objects.filter(session=OuterRef("pk"), status=Burst.Status.DONE)
        .order_by("-number")
        .values("summary")[:1]
    )
    return (
        LabSession.objects.filter(classroom_id=classroom_id)
        .people()  # simulated students are counted apart (simulated_count)
        .values(
            "pk",
            "owner__username",
            "owner__first_name",
            "owner__last_name",
            "scenario_id",
            "scenario__title",
            "scenario__script",
        )
        .annotate(
            attempt=Coalesce(journal_total(Count("*"), kind="session_reset"), 0) + 1,
        )
        .annotate(
            done=attempt_total(StepProgress),
            answered=attempt_total(Prediction),
            right=attempt_total(Prediction, correct=True),
            mode=KT("dependency__mode"),
            state=KT("breaker_snapshot__state"),
            bursting=Exists(active),
            last_summary=Subquery(last_done, output_field=JSONField()),
            **{
                name: journal_total(Count("*"), **count_filter(name))
                for name in ("calls", "attempts_total", "fast_failed", "succeeded")
            },
            last_seq=journal_total(Max("seq")),
        )
        .order_by("owner__username", "scenario__position", "pk")
    )


def class_dashboard_rows(*, classroom_id: int) -> list[DashboardRow]:
    """Every lab session of a class with its live-ish state and journal totals, one query.

    Totals (calls, attempts, fast-fails, succeeded: labs.journal.kinds) are counted from the journal, the source
    of truth, so they agree with the exports. ``last_seq`` is the newest journal row the totals
    include: the page applies a pushed delta only if it is newer, which makes the render and
    the live updates add up exactly. The breaker state is the database snapshot (written with
    every transition), not a Redis round trip per session.
    """
    import json

    rows = []
    steps_of: dict[int, tuple[int, int]] = {}
    for r in _dashboard_queryset(classroom_id):
        summary = r["last_summary"]
        if isinstance(summary, str):  # some backends hand a JSON subquery back as text
            summary = json.loads(summary)
        full_name = f"{r['owner__first_name']} {r['owner__last_name']}".strip()
        if r["scenario_id"] not in steps_of:
            steps_of[r["scenario_id"]] = script_step_counts(r["scenario__script"])
        steps = steps_of[r["scenario_id"]]
        state = r["state"] if r["state"] in ("closed", "open", "half_open") else "closed"
        rows.append(
            DashboardRow(
                session_id=r["pk"],
                student=full_name or r["owner__username"],
                username=r["owner__username"],
                scenario=r["scenario__title"],
                scenario_id=r["scenario_id"],
                mode=r["mode"] or "healthy",
                state=state,
                bursting=bool(r["bursting"]),
                calls=r["calls"] or 0,
                attempts_total=r["attempts_total"] or 0,
                fast_failed=r["fast_failed"] or 0,
                succeeded=r["succeeded"] or 0,
                last_seq=r["last_seq"] or 0,
                last_summary=summary or None,
                progress={
                    "attempt": r["attempt"],
                    "done": r["done"] or 0,
                    "steps": steps[0],
                    "questions": steps[1],
                    "answered": r["answered"] or 0,
                    "right": r["right"] or 0,
                },
            )
        )
    return rows


def simulated_count(classroom_id: int) -> int:
    """How many simulated students (bots of ``simulate_class``) the class has: the dashboard
    names them apart instead of listing them."""
    return Membership.objects.filter(classroom_id=classroom_id).simulated().count()


def simulated_session_ids(classroom_id: int) -> set[int]:
    """The class's sessions of simulated students, which the dashboard leaves out."""
    return set(
        LabSession.objects.filter(classroom_id=classroom_id)
        .simulated()
        .values_list("pk", flat=True)
    )


def state_counts(rows: list[DashboardRow]) -> dict[str, int]:
    """How many sessions are in each breaker state (every state present, zeros included)."""
    counts = {"closed": 0, "open": 0, "half_open": 0}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return counts


def lti_class_status(classroom_id: int) -> dict[str, Any]:
    """For a class's dashboard: whether it is linked to an LMS course, and the scores not yet
    in the course's gradebook (how many, and the last error of one that failed)."""
    waiting = LtiGradePost.objects.filter(
        session__classroom_id=classroom_id, status=LtiGradePost.Status.PENDING
    )
    failed = waiting.filter(attempts__gt=0).order_by("-updated_at").first()
    return {
        "linked": LtiCourseLink.objects.filter(classroom_id=classroom_id).exists(),
        "waiting": waiting.count(),
        "failed": failed,
    }
