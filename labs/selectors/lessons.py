"""Scenarios and the classes a student or instructor sees."""

from __future__ import annotations

from dataclasses import dataclass, field

from labs.models import (
    Classroom,
    JournalEvent,
    LabSession,
    Membership,
    Scenario,
    StepProgress,
)

# --- scenarios -------------------------------------------------------------------------------


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

    @property
    def checks(self) -> list[dict]:
        return self.result.get("checks", [])

    @property
    def checks_failed(self) -> int:
        return sum(1 for c in self.checks if not c["ok"])


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
    #: Steps ticked in the session's current attempt, and the scenario's number of steps.
    steps_done: int = 0
    steps_total: int = 0


@dataclass
class StudentClass:
    classroom: Classroom
    scenarios: list[StudentScenario]


def _steps_done(sessions: list[LabSession]) -> dict[int, int]:
    """Steps ticked per session in its current attempt (1 + its resets), in two queries."""
    from django.db.models import Count

    resets = dict(
        JournalEvent.objects.filter(session__in=sessions, kind="session_reset")
        .values_list("session")
        .annotate(n=Count("pk"))
    )
    done: dict[int, int] = {}
    rows = StepProgress.objects.filter(session__in=sessions).values_list("session", "attempt")
    for session_id, attempt in rows:
        if attempt == 1 + resets.get(session_id, 0):
            done[session_id] = done.get(session_id, 0) + 1
    return done


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
    done = _steps_done(list(sessions.values()))
    result = []
    for classroom in classrooms:
        scenarios = sorted(
            (s for s in classroom.scenarios.all() if s.is_active),
            key=lambda s: (s.position, s.title, s.pk),
        )
        items = []
        for s in scenarios:
            session = sessions.get((classroom.pk, s.pk))
            steps = (s.script or {}).get("steps") if isinstance(s.script, dict) else None
            items.append(
                StudentScenario(
                    scenario=s,
                    session=session,
                    steps_done=done.get(session.pk, 0) if session else 0,
                    steps_total=sum(1 for step in steps or [] if isinstance(step, dict)),
                )
            )
        result.append(StudentClass(classroom=classroom, scenarios=items))
    return result


def instructor_classes(*, user) -> list[Classroom]:
    """The classes ``user`` teaches (every class for a superuser), with their counts of real
    students (``student_count``) and of simulated ones (``simulated_count``, bots)."""
    from django.db.models import Count, Q

    student = Q(memberships__role=Membership.Role.STUDENT)
    # pk__in, not a join: a join on memberships here would also narrow the Count below.
    return list(
        Classroom.objects.filter(pk__in=Classroom.objects.for_instructor(user).values("pk"))
        .annotate(
            student_count=Count(
                "memberships", filter=student & Q(memberships__simulated=False), distinct=True
            ),
            simulated_count=Count(
                "memberships", filter=student & Q(memberships__simulated=True), distinct=True
            ),
        )
        .prefetch_related("scenarios")
        .order_by("name", "pk")
    )
