"""Reads that grow beyond one line (HackSoft style: selectors read, services write)."""

from __future__ import annotations

from dataclasses import dataclass, field

from labs.engine import FAST_FAIL_OUTCOMES, state_label
from labs.models import Classroom, LabSession, Membership, Scenario


@dataclass
class ScenarioRun:
    """A scenario run in virtual time: the engine's result, or the problems that stopped it."""

    scenario: Scenario
    result: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def calls(self) -> list[dict]:
        return self.result.get("calls", [])

    @property
    def bursts(self) -> list[dict]:
        return self.result.get("bursts", [])

    @property
    def transitions(self) -> list[dict]:
        return self.result.get("transitions", [])


def scenario_run_virtual(*, scenario: Scenario) -> ScenarioRun:
    """Run ``scenario``'s script with the engine in virtual time (no Redis, no sleeps).

    Never raises for a bad script: the engine's problems are returned for display.
    """
    from labs.engine import ValidationError as ScriptError
    from labs.engine import parse_scenario, run_scenario

    try:
        result = run_scenario(parse_scenario(scenario.script))
    except ScriptError as exc:
        return ScenarioRun(scenario=scenario, problems=[str(p) for p in exc.problems])
    return ScenarioRun(scenario=scenario, result=result)


@dataclass
class StudentScenario:
    scenario: Scenario
    session: LabSession | None


@dataclass
class StudentClass:
    classroom: Classroom
    scenarios: list[StudentScenario]


def student_classes(*, user) -> list[StudentClass]:
    """The classes ``user`` studies in, each with its active assigned scenarios and the
    user's lab session for each (None until opened)."""
    classrooms = list(
        Classroom.objects.for_student(user).prefetch_related("scenarios").order_by("name", "pk")
    )
    sessions = {
        (s.classroom_id, s.scenario_id): s
        for s in LabSession.objects.filter(owner=user, classroom__in=classrooms)
    }
    result = []
    for classroom in classrooms:
        scenarios = sorted(
            (s for s in classroom.scenarios.all() if s.is_active),
            key=lambda s: (s.position, s.title, s.pk),
        )
        result.append(
            StudentClass(
                classroom=classroom,
                scenarios=[
                    StudentScenario(scenario=s, session=sessions.get((classroom.pk, s.pk)))
                    for s in scenarios
                ],
            )
        )
    return result


def instructor_classes(*, user) -> list[Classroom]:
    """The classes ``user`` teaches (every class for a superuser), with student counts."""
    from django.db.models import Count, Q

    # pk__in, not a join: a join on memberships here would also narrow the Count below.
    return list(
        Classroom.objects.filter(pk__in=Classroom.objects.for_instructor(user).values("pk"))
        .annotate(
            student_count=Count(
                "memberships",
                filter=Q(memberships__role=Membership.Role.STUDENT),
                distinct=True,
            )
        )
        .prefetch_related("scenarios")
        .order_by("name", "pk")
    )


# --- Class dashboard (instructor view) --------------------------------------------------------


@dataclass
class DashboardRow:
    """One student session as the class dashboard shows it (the JSON form is :meth:`as_dict`)."""

    session_id: int
    student: str
    username: str
    scenario: str
    scenario_id: int
    mode: str
    state: str
    bursting: bool
    calls: int
    attempts: int
    fast_fails: int
    successes: int
    last_seq: int
    last_summary: dict | None

    @property
    def activity(self) -> str:
        return "bursting" if self.bursting else "idle"

    @property
    def state_label(self) -> str:
        return state_label(self.state).lower()  # "half-open", as the live dashboard writes it

    @property
    def mode_label(self) -> str:
        return self.mode.replace("_", " ")

    @property
    def summary_text(self) -> str:
        """The last burst in one line (the page's JS writes the same words)."""
        s = self.last_summary
        if not s:
            return ""
        return (
            f"{s.get('succeeded', 0)}/{s.get('calls', 0)} ok, {s.get('fast_failed', 0)} "
            f"fast-failed, {s.get('attempts_total', 0)} attempts, {round(s.get('wall_ms', 0))} ms"
        )

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
            "attempts": self.attempts,
            "fast_fails": self.fast_fails,
            "successes": self.successes,
            "last_seq": self.last_seq,
            "burst_summary": self.last_summary,
        }


def _dashboard_queryset(classroom_id: int):
    from django.db.models import Count, Exists, IntegerField, Max, OuterRef, Subquery
    from django.db.models.fields.json import KT, JSONField

    from labs.models import Burst, JournalEvent

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

    active = Burst.objects.filter(session=OuterRef("pk"), status__in=Burst.ACTIVE_STATUSES)
    last_done = (
        Burst.objects.filter(session=OuterRef("pk"), status=Burst.Status.DONE)
        .order_by("-number")
        .values("summary")[:1]
    )
    return (
        LabSession.objects.filter(classroom_id=classroom_id)
        .values(
            "pk",
            "owner__username",
            "owner__first_name",
            "owner__last_name",
            "scenario_id",
            "scenario__title",
        )
        .annotate(
            mode=KT("dependency__mode"),
            state=KT("breaker_snapshot__state"),
            bursting=Exists(active),
            last_summary=Subquery(last_done, output_field=JSONField()),
            calls=journal_total(Count("*"), kind="call_result"),
            attempts=journal_total(Count("*"), kind="attempt"),
            fast_fails=journal_total(
                Count("*"), kind="call_result", outcome__in=FAST_FAIL_OUTCOMES
            ),
            successes=journal_total(Count("*"), kind="call_result", outcome="success"),
            last_seq=journal_total(Max("seq")),
        )
        .order_by("owner__username", "scenario__position", "pk")
    )


def class_dashboard_rows(*, classroom_id: int) -> list[DashboardRow]:
    """Every lab session of a class with its live-ish state and journal totals, one query.

    Totals (calls, attempts, fast-fails, successes) are counted from the journal, the source
    of truth, so they agree with the exports. ``last_seq`` is the newest journal row the totals
    include: the page applies a pushed delta only if it is newer, which makes the render and
    the live updates add up exactly. The breaker state is the database snapshot (written with
    every transition), not a Redis round trip per session.
    """
    import json

    rows = []
    for r in _dashboard_queryset(classroom_id):
        summary = r["last_summary"]
        if isinstance(summary, str):  # some backends hand a JSON subquery back as text
            summary = json.loads(summary)
        full_name = f"{r['owner__first_name']} {r['owner__last_name']}".strip()
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
                attempts=r["attempts"] or 0,
                fast_fails=r["fast_fails"] or 0,
                successes=r["successes"] or 0,
                last_seq=r["last_seq"] or 0,
                last_summary=summary or None,
            )
        )
    return rows


def state_counts(rows: list[DashboardRow]) -> dict[str, int]:
    """How many sessions are in each breaker state (every state present, zeros included)."""
    counts = {"closed": 0, "open": 0, "half_open": 0}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    return counts
